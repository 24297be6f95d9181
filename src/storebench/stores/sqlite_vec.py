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

import os
import shutil
import tempfile
import threading
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from storebench.data.batch import DocBatch, Schema
from storebench.errors import NotSupported, UserError
from storebench.stores.base import Capability, Collection, SearchResult, Store, StoreSpec
from storebench.stores.filters import Filter, to_sql

_SQL_TYPE = {"int": "INTEGER", "float": "REAL", "bool": "INTEGER", "str": "TEXT"}
_NP_TYPE = {"int": np.int64, "float": np.float64, "bool": np.bool_, "str": object}
_VEC_METRIC = {"l2": "l2", "cosine": "cosine"}
_MAX_PARAMS = 900  # ids per IN (...) list


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _one(cursor: Any) -> Any:
    """The first column of a query's single row."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]


def _chunks(ids: np.ndarray) -> Iterable[list[int]]:
    ids = np.asarray(ids, np.int64)
    for start in range(0, len(ids), _MAX_PARAMS):
        yield ids[start : start + _MAX_PARAMS].tolist()


class SQLiteVecCollection(Collection):
    store: SQLiteVecStore

    def __init__(self, store: SQLiteVecStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._t = quote(name)
        self._v = quote(name + "__vec")
        self._fields = list(schema.fields)
        self._scalars = ", ".join(["id", *map(quote, self._fields)])
        self._has_vec = schema.dim is not None

    @property
    def _db(self) -> apsw.Connection:
        return self.store.connection()

    def _rows_to_batch(self, rows: list[tuple], with_vectors: bool) -> DocBatch:
        if not rows:
            empty = DocBatch.empty(self.schema)
            return empty if with_vectors else empty.select(None, vectors=False)
        cols = list(zip(*rows, strict=True))
        fields: dict[str, np.ndarray] = {
            f: np.array(cols[i + 1], dtype=_NP_TYPE[self.schema.fields[f]])
            for i, f in enumerate(self._fields)
        }
        vecs = None
        if with_vectors:
            vecs = np.frombuffer(b"".join(cols[-1]), np.float32).reshape(len(rows), -1)
        return DocBatch(np.array(cols[0], np.int64), fields, vecs)

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
                for chunk in _chunks(docs.ids):
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
        for chunk in _chunks(ids):
            marks = ", ".join("?" * len(chunk))
            if self._has_vec:
                sql = (
                    f"SELECT {cols}, v.embedding FROM {self._t} AS d "
                    f"JOIN {self._v} AS v ON v.rowid = d.id WHERE d.id IN ({marks})"
                )
            else:
                sql = f"SELECT {cols} FROM {self._t} AS d WHERE d.id IN ({marks})"
            rows += db.execute(sql, chunk).fetchall()
        return self._rows_to_batch(rows, with_vectors=self._has_vec)

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
            for chunk in _chunks(ids):
                marks = ", ".join("?" * len(chunk))
                db.execute(f"DELETE FROM {self._t} WHERE id IN ({marks})", chunk)
                if self._has_vec:
                    db.execute(f"DELETE FROM {self._v} WHERE rowid IN ({marks})", chunk)

    def _where(self, where: Filter | None) -> tuple[str, list[Any]]:
        if where is None:
            return "", []
        sql, params = to_sql(where, quote)
        return f" WHERE {sql}", params

    def find(
        self,
        where: Filter | None = None,
        order: tuple[str, bool] | None = None,
        limit: int | None = None,
    ) -> DocBatch:
        sql, params = self._where(where)
        if order is not None:
            sql += f" ORDER BY {quote(order[0])} {'DESC' if order[1] else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        rows = self._db.execute(f"SELECT {self._scalars} FROM {self._t}{sql}", params).fetchall()
        return self._rows_to_batch(rows, with_vectors=False)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        nq = len(vectors)
        ids = np.full((nq, k), -1, np.int64)
        dist = np.full((nq, k), np.inf, np.float32)
        if k == 0:
            return SearchResult(ids, dist)
        sql = f"SELECT rowid, distance FROM {self._v} WHERE embedding MATCH ? AND k = ?"
        extra: list[Any] = []
        if where is not None:
            cond, extra = self._where(where)
            sql += f" AND rowid IN (SELECT id FROM {self._t}{cond})"
        sql += " ORDER BY distance"
        db = self._db
        queries = np.ascontiguousarray(vectors, np.float32)
        for i, q in enumerate(queries):
            rows = db.execute(sql, [q.tobytes(), int(k), *extra]).fetchall()
            if rows:
                found, d = zip(*rows, strict=True)
                ids[i, : len(rows)] = found
                dist[i, : len(rows)] = d
        return SearchResult(ids, dist)

    def count(self) -> int:
        return int(_one(self._db.execute(f"SELECT count(*) FROM {self._t}")))

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

    def compact(self) -> None:
        # VACUUM rewrites the file without changing any table's content.
        self._db.execute("VACUUM")

    def _drop(self) -> None:
        db = self._db
        with db:
            if self._has_vec:
                db.execute(f"DROP TABLE IF EXISTS {self._v}")
            db.execute(f"DROP TABLE IF EXISTS {self._t}")


class SQLiteVecStore(Store):
    engine = "sqlite-vec"
    capabilities = frozenset(Capability) - {Capability.INDEX, Capability.SEARCH_PARAMS}
    exact = True
    extra = "sqlite-vec"

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self._tmpdir: str | None = None
        if spec.url is None:
            self._tmpdir = tempfile.mkdtemp(prefix="storebench-sqlite-vec-")
            path = os.path.join(self._tmpdir, "store.db")
        else:
            path = os.path.abspath(spec.url.removeprefix("sqlite-vec://"))
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):
                raise UserError(f"directory {parent} does not exist", where="store sqlite-vec url")
        self.spec = spec.with_(url=path)
        self.path = path
        self._local = threading.local()
        self._all: list[apsw.Connection] = []
        self._all_lock = threading.Lock()
        self.connection()  # fail now, not in the first timed operation

    def connection(self) -> apsw.Connection:
        """This thread's connection, with sqlite-vec loaded."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = apsw.Connection(self.path)
            db.set_busy_timeout(60_000)
            db.enable_load_extension(True)
            db.load_extension(sqlite_vec.loadable_path())
            db.enable_load_extension(False)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {self.spec.options.get('synchronous', 'NORMAL')}")
            self._local.db = db
            with self._all_lock:
                self._all.append(db)
        return db

    def has_collection(self, name: str) -> bool:
        row = (
            self.connection()
            .execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
            .fetchone()
        )
        return row is not None

    def _create(self, name: str, schema: Schema) -> Collection:
        if schema.dim is not None and schema.metric not in _VEC_METRIC:
            raise NotSupported(self.engine, f"metric {schema.metric} (vec0 has l2 and cosine)")
        cols = ["id INTEGER PRIMARY KEY"] + [
            f"{quote(f)} {_SQL_TYPE[k]}" for f, k in schema.fields.items()
        ]
        db = self.connection()
        with db:
            db.execute(f"CREATE TABLE {quote(name)} ({', '.join(cols)})")
            for f in schema.indexed:
                db.execute(f"CREATE INDEX {quote(name + '__' + f)} ON {quote(name)} ({quote(f)})")
            if schema.dim is not None:
                db.execute(
                    f"CREATE VIRTUAL TABLE {quote(name + '__vec')} USING vec0("
                    f"embedding float[{int(schema.dim)}] "
                    f"distance_metric={_VEC_METRIC[schema.metric]})"
                )
        return SQLiteVecCollection(self, name, schema)

    def _open(self, name: str, schema: Schema) -> Collection:
        if not self.has_collection(name):
            raise UserError(f"no table {name!r} in {self.path}", where="store sqlite-vec")
        return SQLiteVecCollection(self, name, schema)

    def versions(self) -> dict[str, str]:
        db = self.connection()
        vec = _one(db.execute("SELECT vec_version()"))
        return {
            "engine": f"SQLite {apsw.sqlite_lib_version()} + sqlite-vec {vec}",
            "client": f"apsw {apsw.apsw_version()} ({_dist('sqlite-vec')})",
        }

    def close(self) -> None:
        with self._all_lock:
            for db in self._all:
                db.close()
            self._all.clear()
        self._local = threading.local()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


def _dist(name: str) -> str:
    try:
        return f"{name} {metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return name
