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

import contextlib
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, Protocol, TypeVar

import numpy as np
from pydantic import field_validator

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter, to_sql
from storebench.data.truth import distances, top_k
from storebench.stores.base import Capability, Collection, SearchResult, Store, StoreSpec
from storebench.stores.columns import batch_from_rows
from storebench.stores.config import FILE, InMemoryMode, StoreOptions
from storebench.stores.params import IndexParams, Order

SQL_TYPE = {"int": "INTEGER", "float": "REAL", "bool": "INTEGER", "str": "TEXT"}
_MAX_PARAMS = 900  # ids per IN (...) list, below every SQLite build's variable limit


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def chunks(ids: np.ndarray) -> Iterable[list[int]]:
    """The ids as lists short enough for one ``IN (?, ...)``."""
    ids = np.asarray(ids, np.int64)
    for start in range(0, len(ids), _MAX_PARAMS):
        yield ids[start : start + _MAX_PARAMS].tolist()


def where_sql(
    where: Filter | None, mark: str = "?", ident: Callable[[str], str] = quote
) -> tuple[str, list[Any]]:
    """`` WHERE <filter>`` (empty without a filter) and its parameters, in
    SQLite's dialect by default: another engine's gives its parameter
    marker (``%s``) and identifier quoting (MariaDB's backticks)."""
    if where is None:
        return "", []
    sql, params = to_sql(where, ident, mark)
    return f" WHERE {sql}", params


def has_table(db: Any, name: str) -> bool:
    """Whether the database (a sqlite3 or apsw connection) has this table."""
    row = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def create_table(db: Any, name: str, schema: Schema, extra: Iterable[str] = ()) -> None:
    """The collection's table (``id``, the schema's fields, ``extra``
    columns) and an index per ``Schema.indexed`` field, in the caller's
    transaction."""
    cols = [
        "id INTEGER PRIMARY KEY",
        *(f"{quote(f)} {SQL_TYPE[k]}" for f, k in schema.fields.items()),
        *extra,
    ]
    db.execute(f"CREATE TABLE {quote(name)} ({', '.join(cols)})")
    for f in schema.indexed:
        db.execute(f"CREATE INDEX {quote(name + '__' + f)} ON {quote(name)} ({quote(f)})")


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class PerThread(Generic[C]):
    """One connection per thread, opened by ``connect`` on the thread's
    first ``get``; ``close`` closes every one of them."""

    def __init__(self, connect: Callable[[], C]):
        self._connect = connect
        self._local = threading.local()
        self._all: list[C] = []
        self._lock = threading.Lock()

    def get(self) -> C:
        db: C | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connect()
            self._local.db = db
            with self._lock:
                self._all.append(db)
        return db

    def opened(self) -> list[C]:
        """Every connection open now (any thread's)."""
        with self._lock:
            return list(self._all)

    def close(self) -> None:
        with self._lock:
            for db in self._all:
                with contextlib.suppress(Exception):  # a dead server's connection
                    db.close()
            self._all.clear()
        self._local = threading.local()


def find_sql(
    where: Filter | None,
    order: Order,
    limit: int | None,
    mark: str = "?",
    ident: Callable[[str], str] = quote,
) -> tuple[str, list[Any]]:
    """The WHERE, ORDER BY and LIMIT clauses of a ``find``, with parameters
    (``mark`` and ``ident`` as for ``where_sql``)."""
    sql, params = where_sql(where, mark, ident)
    if order is not None:
        sql += f" ORDER BY {ident(order[0])} {'DESC' if order[1] else 'ASC'}"
    if limit is not None:
        sql += f" LIMIT {mark}"
        params.append(int(limit))
    return sql, params


class SQLiteFileCollection(Collection):
    """What the SQLite stores' collections share: a table ``_t`` with ``id``
    and the schema's fields (``_scalars``), on this thread's connection."""

    store: SQLiteFileStore

    def __init__(self, store: SQLiteFileStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._t = quote(name)
        self._fields = list(schema.fields)
        self._scalars = ", ".join(["id", *map(quote, self._fields)])

    @property
    def _db(self) -> Any:
        return self.store.connection()

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        sql, params = find_sql(where, order, limit)
        rows = self._db.execute(f"SELECT {self._scalars} FROM {self._t}{sql}", params).fetchall()
        return batch_from_rows(self.schema, rows, with_vectors=False)

    def count(self) -> int:
        return int(self._db.execute(f"SELECT count(*) FROM {self._t}").fetchone()[0])

    def compact(self) -> None:
        # VACUUM rewrites the file without changing any table's content.
        self._db.execute("VACUUM")


class SQLiteCollection(SQLiteFileCollection):
    store: SQLiteStore

    def __init__(self, store: SQLiteStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._cols = ", ".join(quote(f) for f in self._fields)
        self._vec = schema.dim is not None
        select = ["id", *map(quote, self._fields)] + (["vec"] if self._vec else [])
        self._select_all = ", ".join(select)

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
        for chunk in chunks(ids):
            marks = ", ".join("?" * len(chunk))
            rows += db.execute(
                f"SELECT {self._select_all} FROM {self._t} WHERE id IN ({marks})", chunk
            ).fetchall()
        return batch_from_rows(self.schema, rows, with_vectors=self._vec)

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
            for chunk in chunks(ids):
                marks = ", ".join("?" * len(chunk))
                db.execute(f"DELETE FROM {self._t} WHERE id IN ({marks})", chunk)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        sql, params = where_sql(where)
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

    def _drop(self) -> None:
        with self._db as db:
            db.execute(f"DROP TABLE IF EXISTS {self._t}")


class Synchronous(StoreOptions):
    """SQLite's ``PRAGMA synchronous``: OFF, NORMAL (the default) or FULL."""

    synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL"

    @field_validator("synchronous", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


class SQLiteFileStore(Store):
    """What the SQLite stores (sqlite, sqlite-vec) share: a database file
    whose tables are the collections (``collection``), exact search, a
    connection per thread (``_connect``, opened by ``_connections``)."""

    async_ops = "inline"
    capabilities = frozenset(Capability) - {
        Capability.INDEX,
        Capability.SEARCH_PARAMS,
        Capability.PIPELINE,
    }
    exact = True
    url_form = FILE
    handles = ("_conns",)

    def _connections(self) -> None:
        self._conns = PerThread(self._connect)
        self.connection()  # fail now, not in the first timed operation

    def _connect(self) -> Any:
        raise NotImplementedError

    def connection(self) -> Any:
        """This thread's connection."""
        return self._conns.get()

    def has_collection(self, name: str) -> bool:
        return has_table(self.connection(), name)


class SQLiteStore(SQLiteFileStore):
    """Options: ``mode`` (``file``, the default, or ``memory``: a shared-cache
    in-memory database, for this process's client threads only) and
    ``synchronous`` (SQLite's PRAGMA: OFF, NORMAL (default), FULL)."""

    engine = "sqlite"
    collection = SQLiteCollection

    class Options(Synchronous, InMemoryMode):
        pass

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        spec = self.spec
        if self.options.mode == "memory":
            self.spec = spec.with_(
                url=f"file:storebench-{uuid.uuid4().hex}?mode=memory&cache=shared"
            )
            # this process's memory: other processes cannot open it
            self.capabilities = SQLiteStore.capabilities - {Capability.SHARED_ACROSS_PROCESSES}  # type: ignore[misc]
        else:
            self.local_path("store.db")
        self._connections()

    def _connect(self) -> sqlite3.Connection:
        url = self.spec.url or ""
        db = sqlite3.connect(
            url, check_same_thread=False, timeout=60.0, uri=url.startswith("file:")
        )
        if not url.startswith("file:"):  # WAL needs a file
            db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {self.options.synchronous}")
        return db

    def size_unit(self, coll: Collection) -> object:
        """Without dbstat each collection's size is the whole file (see
        ``SQLiteCollection.size_bytes``): then the collections share one unit."""
        try:
            self.connection().execute("SELECT 1 FROM dbstat LIMIT 0")
        except sqlite3.OperationalError:
            return self.spec.url
        return coll.name

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        with self.connection() as db:
            create_table(db, name, schema, ["vec BLOB"] if schema.dim is not None else [])
        return SQLiteCollection(self, name, schema)

    @classmethod
    def memory_use(
        cls, spec: StoreSpec, index: IndexParams, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        # the data is in the file (page cache); a search reads every vector
        # into Python at once; mode memory keeps the database in RAM too
        per_doc = 8 * dim + 128
        if spec.options.get("mode") == "memory":
            per_doc += 4 * dim + field_bytes + 64
        return per_doc, 0

    def versions(self) -> dict[str, str]:
        return {"engine": f"SQLite {sqlite3.sqlite_version}", "client": "python sqlite3"}
