"""The sqlite-vec store: SQLite (through ``apsw``, whose bundled SQLite can
load extensions, unlike this Python's ``sqlite3``) with the ``sqlite-vec``
extension. Exact search.

Per collection, two tables in one database file: ``<name>`` holds the id and
the scalar fields (B-tree indexes on ``Schema.indexed``), and the ``vec0``
virtual table ``<name>__vec`` holds the float32 vectors under the same rowid.
A vector search is vec0's own k-nearest query (``embedding MATCH ? AND k =
?``, a full scan over its chunked storage); a filtered search adds ``rowid
IN (SELECT id FROM <name> WHERE ...)``, which vec0 applies before ranking, so
results are exact under any filter. Filters compile to SQL (``filters.to_sql``).

vec0 offers l2 and cosine (1 - cos) distances; it has no inner product, so a
collection with metric ip is refused. There are no index or search
parameters: vec0 has no ANN index.

Each client thread has its own connection; the file is in WAL mode, so
another process can open the same file and work beside this one.

``url`` is the database file; without one, the store makes a private
temporary directory and removes it on close.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.errors import NotSupported
from storebench.stores.base import Collection, RamUse, SearchResult, StoreSpec
from storebench.stores.columns import batch_from_rows
from storebench.stores.params import IndexParams
from storebench.stores.sql.sqlite import (
    SQLiteFileCollection,
    SQLiteFileStore,
    Synchronous,
    chunks,
    create_table,
    quote,
    where_sql,
)

_VEC_METRIC = {"l2": "l2", "cosine": "cosine"}


def _one(cursor: Any) -> Any:
    """The first column of a query's single row."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]


class SQLiteVecCollection(SQLiteFileCollection):
    store: SQLiteVecStore

    def __init__(self, store: SQLiteVecStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._v = quote(name + "__vec")
        self._has_vec = schema.dim is not None

    def _scalar_rows(self, docs: DocBatch, fields: list[str]) -> Iterable[tuple]:
        columns: list[Iterable[Any]] = [docs.fields[f].tolist() for f in fields]
        columns.append(docs.ids.tolist())
        return zip(*columns, strict=True)

    def _vector_rows(self, docs: DocBatch) -> Iterable[tuple]:
        assert docs.vectors is not None
        vecs = np.ascontiguousarray(docs.vectors, np.float32)
        return zip(map(np.ndarray.tobytes, vecs), docs.ids.tolist(), strict=True)

    def insert(self, docs: DocBatch) -> None:
        cols = ", ".join([*map(quote, self._fields), "id"])
        marks = ", ".join("?" * (len(self._fields) + 1))
        db = self._db
        with db:  # one transaction per batch
            db.executemany(
                f"INSERT OR REPLACE INTO {self._t} ({cols}) VALUES ({marks})",
                self._scalar_rows(docs, self._fields),
            )
            if self._has_vec and docs.vectors is not None:
                # vec0 has no INSERT OR REPLACE: clear the ids, then insert
                for chunk in chunks(docs.ids):
                    db.execute(
                        f"DELETE FROM {self._v} WHERE rowid IN ({', '.join('?' * len(chunk))})",
                        chunk,
                    )
                db.executemany(
                    f"INSERT INTO {self._v} (embedding, rowid) VALUES (?, ?)",
                    self._vector_rows(docs),
                )

    def get(self, ids: np.ndarray) -> DocBatch:
        db = self._db
        rows: list[tuple] = []
        cols = ", ".join(["d.id", *(f"d.{quote(f)}" for f in self._fields)])
        for chunk in chunks(ids):
            marks = ", ".join("?" * len(chunk))
            if self._has_vec:
                sql = (
                    f"SELECT {cols}, v.embedding FROM {self._t} AS d "
                    f"JOIN {self._v} AS v ON v.rowid = d.id WHERE d.id IN ({marks})"
                )
            else:
                sql = f"SELECT {cols} FROM {self._t} AS d WHERE d.id IN ({marks})"
            rows += db.execute(sql, chunk).fetchall()
        return batch_from_rows(self.schema, rows, with_vectors=self._has_vec)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        db = self._db
        with db:
            if fields:
                sets = ", ".join(f"{quote(f)} = ?" for f in fields)
                db.executemany(
                    f"UPDATE {self._t} SET {sets} WHERE id = ?", self._scalar_rows(docs, fields)
                )
            if self._has_vec and docs.vectors is not None:
                db.executemany(
                    f"UPDATE {self._v} SET embedding = ? WHERE rowid = ?", self._vector_rows(docs)
                )

    def delete(self, ids: np.ndarray) -> None:
        db = self._db
        with db:
            for chunk in chunks(ids):
                marks = ", ".join("?" * len(chunk))
                db.execute(f"DELETE FROM {self._t} WHERE id IN ({marks})", chunk)
                if self._has_vec:
                    db.execute(f"DELETE FROM {self._v} WHERE rowid IN ({marks})", chunk)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        sql = f"SELECT rowid, distance FROM {self._v} WHERE embedding MATCH ? AND k = ?"
        extra: list[Any] = []
        if where is not None:
            cond, extra = where_sql(where)
            sql += f" AND rowid IN (SELECT id FROM {self._t}{cond})"
        sql += " ORDER BY distance"
        db = self._db
        queries = np.ascontiguousarray(vectors, np.float32)
        return SearchResult.from_rows(
            queries, k, lambda q: db.execute(sql, [q.tobytes(), int(k), *extra]).fetchall()
        )

    def size_bytes(self) -> int:
        """Pages of the scalar table, the vec0 shadow tables and their indexes."""
        prefix = self.name + "__vec_"
        total = _one(
            self._db.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master "
                "WHERE tbl_name = ? OR substr(tbl_name, 1, ?) = ?)",
                (self.name, len(prefix), prefix),
            )
        )
        return int(total or 0)

    def _drop(self) -> None:
        db = self._db
        with db:
            if self._has_vec:
                db.execute(f"DROP TABLE IF EXISTS {self._v}")
            db.execute(f"DROP TABLE IF EXISTS {self._t}")


class SQLiteVecStore(SQLiteFileStore):
    engine = "sqlite-vec"
    extra = "sqlite-vec"
    Options = Synchronous
    collection = SQLiteVecCollection
    # vectors stay in the file (page cache): vec0 scans them chunk by chunk
    ram = RamUse(vector=0, fields=0, overhead=0)

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.path = self.local_path("store.db")
        self._connections()

    def _connect(self) -> apsw.Connection:
        db = apsw.Connection(self.path)
        db.set_busy_timeout(60_000)
        db.enable_load_extension(True)
        db.load_extension(sqlite_vec.loadable_path())
        db.enable_load_extension(False)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {self.options.synchronous}")
        return db

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        if schema.dim is not None and schema.metric not in _VEC_METRIC:
            raise NotSupported(self.engine, f"metric {schema.metric} (vec0 has l2 and cosine)")
        db = self.connection()
        with db:
            create_table(db, name, schema)
            if schema.dim is not None:
                db.execute(
                    f"CREATE VIRTUAL TABLE {quote(name + '__vec')} USING vec0("
                    f"embedding float[{int(schema.dim)}] "
                    f"distance_metric={_VEC_METRIC[schema.metric]})"
                )
        return SQLiteVecCollection(self, name, schema)

    def versions(self) -> dict[str, str]:
        db = self.connection()
        vec = _one(db.execute("SELECT vec_version()"))
        return {
            "engine": f"SQLite {apsw.sqlite_lib_version()} + sqlite-vec {vec}",
            "client": f"apsw {apsw.apsw_version()} ({_dist('sqlite-vec')})",
        }


def _dist(name: str) -> str:
    try:
        return f"{name} {metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return name
