"""The SQLite store (standard library ``sqlite3``): a table per collection,
vectors as float32 blobs, exact search in numpy over the rows SQLite returns.

This is the study's SQLite store: no vector index, so every search reads all
(matching) vectors out of the database. Filters compile to SQL; fields listed
in ``Schema.indexed`` get a B-tree index. Each client thread has its own
connection; the file is in WAL mode so readers do not block the writer.

``url`` is the database file; without one, the store makes a private
temporary directory and removes it on close.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np

from storebench.data.batch import DocBatch, Schema
from storebench.data.truth import distances, top_k
from storebench.errors import UserError
from storebench.stores.base import Capability, Collection, SearchResult, Store, StoreSpec
from storebench.stores.filters import Filter, to_sql

_SQL_TYPE = {"int": "INTEGER", "float": "REAL", "bool": "INTEGER", "str": "TEXT"}
_NP_TYPE = {"int": np.int64, "float": np.float64, "bool": np.bool_, "str": object}
_MAX_PARAMS = 900  # ids per IN (...) list, below every SQLite build's variable limit


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _chunks(ids: np.ndarray) -> Iterable[list[int]]:
    for start in range(0, len(ids), _MAX_PARAMS):
        yield ids[start : start + _MAX_PARAMS].tolist()


class SQLiteCollection(Collection):
    store: SQLiteStore

    def __init__(self, store: SQLiteStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._t = quote(name)
        self._fields = list(schema.fields)
        self._cols = ", ".join(quote(f) for f in self._fields)
        self._vec = schema.dim is not None
        select = ["id", *map(quote, self._fields)] + (["vec"] if self._vec else [])
        self._select_all = ", ".join(select)
        self._select_scalars = ", ".join(["id", *map(quote, self._fields)])

    @property
    def _db(self) -> sqlite3.Connection:
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

    def _params(self, docs: DocBatch, fields: list[str]) -> Iterable[tuple]:
        columns: list[Iterable[Any]] = [docs.fields[f].tolist() for f in fields]
        if docs.vectors is not None:
            columns.append(map(np.ndarray.tobytes, docs.vectors))
        columns.append(docs.ids.tolist())
        return zip(*columns, strict=True)

    def insert(self, docs: DocBatch) -> None:
        names = self._fields + (["vec"] if self._vec else [])
        cols = ", ".join([*map(quote, names), "id"])
        marks = ", ".join("?" * (len(names) + 1))
        with self._db as db:  # one transaction per batch
            db.executemany(
                f"INSERT OR REPLACE INTO {self._t} ({cols}) VALUES ({marks})",
                self._params(docs, self._fields),
            )

    def get(self, ids: np.ndarray) -> DocBatch:
        db = self._db
        rows: list[tuple] = []
        for chunk in _chunks(ids):
            marks = ", ".join("?" * len(chunk))
            rows += db.execute(
                f"SELECT {self._select_all} FROM {self._t} WHERE id IN ({marks})", chunk
            ).fetchall()
        return self._rows_to_batch(rows, with_vectors=self._vec)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        sets = [f"{quote(f)} = ?" for f in fields] + (
            ["vec = ?"] if docs.vectors is not None else []
        )
        if not sets:
            return
        with self._db as db:
            db.executemany(
                f"UPDATE {self._t} SET {', '.join(sets)} WHERE id = ?", self._params(docs, fields)
            )

    def delete(self, ids: np.ndarray) -> None:
        with self._db as db:
            for chunk in _chunks(ids):
                marks = ", ".join("?" * len(chunk))
                db.execute(f"DELETE FROM {self._t} WHERE id IN ({marks})", chunk)

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
        rows = self._db.execute(
            f"SELECT {self._select_scalars} FROM {self._t}{sql}", params
        ).fetchall()
        return self._rows_to_batch(rows, with_vectors=False)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        sql, params = self._where(where)
        rows = self._db.execute(f"SELECT id, vec FROM {self._t}{sql}", params).fetchall()
        if rows:
            ids_col, blobs = zip(*rows, strict=True)
            ids = np.array(ids_col, np.int64)
            data = np.frombuffer(b"".join(blobs), np.float32).reshape(len(rows), -1)
        else:
            ids = np.empty(0, np.int64)
            data = np.empty((0, self.schema.dim or 0), np.float32)
        pos, dist = top_k(distances(vectors, data, self.schema.metric), k)
        return SearchResult(np.where(pos >= 0, ids[np.maximum(pos, 0)], -1), dist)

    def count(self) -> int:
        return int(self._db.execute(f"SELECT count(*) FROM {self._t}").fetchone()[0])

    def size_bytes(self) -> int:
        """Pages of this table and its indexes (dbstat), not the whole file."""
        db = self._db
        names = [self.name] + [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (self.name,)
            )
        ]
        marks = ", ".join("?" * len(names))
        try:
            row = db.execute(
                f"SELECT sum(pgsize) FROM dbstat WHERE name IN ({marks})", names
            ).fetchone()
        except sqlite3.OperationalError:  # SQLite built without dbstat: whole file
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
            return int(db.execute("PRAGMA page_count").fetchone()[0]) * int(page_size)
        return int(row[0] or 0)

    def compact(self) -> None:
        # VACUUM rewrites the file without changing any table's content.
        self._db.execute("VACUUM")

    def _drop(self) -> None:
        with self._db as db:
            db.execute(f"DROP TABLE IF EXISTS {self._t}")


class SQLiteStore(Store):
    """Options: ``mode`` (``file``, the default, or ``memory``: a shared-cache
    in-memory database, for this process's client threads only) and
    ``synchronous`` (SQLite's PRAGMA: OFF, NORMAL (default), FULL)."""

    engine = "sqlite"
    capabilities = frozenset(Capability) - {Capability.INDEX, Capability.SEARCH_PARAMS}
    exact = True
    option_names = ("mode", "synchronous")

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self._tmpdir: str | None = None
        mode = spec.options.get("mode", "file")
        sync = str(spec.options.get("synchronous", "NORMAL")).upper()
        if mode not in ("file", "memory") or sync not in ("OFF", "NORMAL", "FULL"):
            raise UserError(
                "mode must be file or memory, synchronous OFF, NORMAL or FULL",
                where="store sqlite options",
            )
        if mode == "memory":
            if spec.url is not None:
                raise UserError("an in-memory database takes no url", where="store sqlite")
            self.spec = spec.with_(
                url=f"file:storebench-{uuid.uuid4().hex}?mode=memory&cache=shared"
            )
            # this process's memory: other processes cannot open it
            self.capabilities = SQLiteStore.capabilities - {Capability.SHARED_ACROSS_PROCESSES}  # type: ignore[misc]
        elif spec.url is None:
            self._tmpdir = tempfile.mkdtemp(prefix="storebench-sqlite-")
            self.spec = spec.with_(url=os.path.join(self._tmpdir, "store.db"))
        else:
            path = spec.url.removeprefix("sqlite://")
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise UserError(f"directory {parent} does not exist", where="store sqlite url")
            self.spec = spec.with_(url=path)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self.connection()  # fail now, not in the first timed operation

    def connection(self) -> sqlite3.Connection:
        """This thread's connection."""
        db = getattr(self._local, "db", None)
        if db is None:
            url = self.spec.url or ""
            db = sqlite3.connect(
                url, check_same_thread=False, timeout=60.0, uri=url.startswith("file:")
            )
            if not url.startswith("file:"):  # WAL needs a file
                db.execute("PRAGMA journal_mode = WAL")
            db.execute(
                f"PRAGMA synchronous = {str(self.spec.options.get('synchronous', 'NORMAL')).upper()}"
            )
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
        cols = ["id INTEGER PRIMARY KEY"] + [
            f"{quote(f)} {_SQL_TYPE[k]}" for f, k in schema.fields.items()
        ]
        if schema.dim is not None:
            cols.append("vec BLOB")
        with self.connection() as db:
            db.execute(f"CREATE TABLE {quote(name)} ({', '.join(cols)})")
            for f in schema.indexed:
                db.execute(f"CREATE INDEX {quote(name + '__' + f)} ON {quote(name)} ({quote(f)})")
        return SQLiteCollection(self, name, schema)

    def _open(self, name: str, schema: Schema) -> Collection:
        if not self.has_collection(name):
            raise UserError(f"no table {name!r} in {self.spec.url}", where="store sqlite")
        return SQLiteCollection(self, name, schema)

    def versions(self) -> dict[str, str]:
        return {"engine": f"SQLite {sqlite3.sqlite_version}", "client": "python sqlite3"}

    def close(self) -> None:
        with self._all_lock:
            for db in self._all:
                db.close()
            self._all.clear()
        self._local = threading.local()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        super().close()
