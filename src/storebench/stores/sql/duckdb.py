"""The DuckDB store (``duckdb``, in-process) with the ``vss`` extension's HNSW
index.

``vss`` is published for DuckDB 1.4.4 only (the ``duckdb-ext-vss`` wheel
carries the extension file, loaded from the wheel: no download), so the extra
pins both. Each collection is its own database file ``<url>/<name>.duckdb``
holding one table (``id BIGINT PRIMARY KEY``, the scalar fields, ``vec
FLOAT[dim]``), so its size on disk is exactly its own and dropping it removes
its files. Rows go in and out as Arrow tables (no Python object per
document).

Search is ``ORDER BY <distance>(vec, query) LIMIT k``: exact before
``build_index``, through the HNSW index after it (``array_distance``,
``array_cosine_distance`` and ``array_negative_inner_product`` match the
index metrics l2sq, cosine and ip, and are the contract's distances). vss
applies a WHERE clause *after* taking the index's top k (at 10% selectivity
it returns about one row per query), so a filtered search runs as an exact
scan over the matching rows instead. Filters compile to SQL
(``filters.to_sql``).

Parameters (neutral -> vss): index ``m`` -> ``M``, ``ef_construct`` ->
``ef_construction``; search ``ef`` -> the ``hnsw_ef_search`` setting, set on
each client thread's connection (vss defaults: M 16, ef_construction 128,
ef_search 64). A file-backed HNSW index needs
``hnsw_enable_experimental_persistence``: vss does not recover the index from
the WAL after a crash. Late materialization is turned off for the
collection's database: with it, DuckDB 1.4 joins the index's top k back to a
full scan of the table. ``compact`` runs ``hnsw_compact_index`` (drops deleted
entries from the graph) and ``CHECKPOINT``.

``url`` is the directory holding the collection files; without one, the
store makes a private temporary directory and removes it on close. One
process at a time can open a DuckDB file, so clients are threads.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from importlib import metadata
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.errors import UserError
from storebench.stores.base import Capability, Collection, RamUse, SearchResult, Store, StoreSpec
from storebench.stores.config import DIRECTORY
from storebench.stores.params import HnswIndex, HnswSearch, IndexParams, Order
from storebench.stores.sql.sqlite import find_sql, quote, where_sql

_SQL_TYPE = {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "str": "VARCHAR"}
_ARROW_TYPE = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
_DISTANCE = {
    "l2": "array_distance",
    "cosine": "array_cosine_distance",
    "ip": "array_negative_inner_product",
}
_HNSW_METRIC = {"l2": "l2sq", "cosine": "cosine", "ip": "ip"}
_MAX_IDS = 10_000  # ids per IN (...) list
_SUFFIX = ".duckdb"
_names = itertools.count()


def _one(con: duckdb.DuckDBPyConnection) -> Any:
    """The first column of a query's single row."""
    row = con.fetchone()
    assert row is not None
    return row[0]


def vss_extension_dir() -> str:
    """The extension directory inside the duckdb-ext-vss wheel."""
    try:
        files = metadata.files("duckdb-ext-vss") or []
    except metadata.PackageNotFoundError as exc:
        raise UserError(
            "the duckdb store needs duckdb-ext-vss: pip install 'storebench[duckdb]'",
            where="store duckdb",
        ) from exc
    for f in files:
        if f.name == "vss.duckdb_extension":
            # <dir>/v<version>/<platform>/vss.duckdb_extension
            return str(f.locate().parents[2])  # type: ignore[attr-defined]
    raise UserError("duckdb-ext-vss holds no vss extension file", where="store duckdb")


class DuckDBCollection(Collection):
    store: DuckDBStore

    def __init__(self, store: DuckDBStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self.path = store._file(name)
        self._con = store.connect(self.path)
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()
        self._ef: int | None = None
        self._fields = list(schema.fields)
        self._cols = ", ".join(["id", *map(quote, self._fields)])
        self._dim = schema.dim
        if schema.dim is not None:
            self._dist = _DISTANCE[schema.metric]
            self._qtype = f"FLOAT[{int(schema.dim)}]"

    # --- connections -------------------------------------------------------------
    @property
    def _db(self) -> duckdb.DuckDBPyConnection:
        """This thread's connection to the collection's database."""
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._con.cursor()
            self._local.cur = cur
            self._local.ef = None
            with self._lock:
                self._cursors.append(cur)
        if self._local.ef != self._ef and self._ef is not None:
            cur.execute(f"SET hnsw_ef_search = {int(self._ef)}")
            self._local.ef = self._ef
        return cur

    def _with_arrow(self, table: pa.Table, sql: str) -> None:
        """Run ``sql`` with ``table`` registered as ``{src}``."""
        db = self._db
        name = f"sb_src_{next(_names)}"
        db.register(name, table)
        try:
            db.execute(sql.format(src=name))
        finally:
            db.unregister(name)

    # --- conversions -------------------------------------------------------------
    def _arrow(self, docs: DocBatch, fields: list[str], vectors: bool) -> pa.Table:
        arrays: dict[str, pa.Array] = {"id": pa.array(docs.ids, pa.int64())}
        for f in fields:
            arrays[f] = pa.array(docs.fields[f], _ARROW_TYPE[self.schema.fields[f]])
        if vectors and docs.vectors is not None:
            flat = pa.array(np.ascontiguousarray(docs.vectors).reshape(-1), pa.float32())
            arrays["vec"] = pa.FixedSizeListArray.from_arrays(flat, docs.vectors.shape[1])
        return pa.table(arrays)

    def _batch(self, t: pa.Table, vectors: bool) -> DocBatch:
        fields = {}
        for f in self._fields:
            values = t.column(f).to_numpy(zero_copy_only=False)
            fields[f] = values.astype(object) if self.schema.fields[f] == "str" else values
        vecs = None
        if vectors and self._dim is not None:
            col = t.column("vec").combine_chunks()
            flat = col.flatten().to_numpy(zero_copy_only=False)
            vecs = np.ascontiguousarray(flat, np.float32).reshape(len(col), self._dim)
        ids = np.asarray(t.column("id").to_numpy(zero_copy_only=False), np.int64)
        return DocBatch(ids, fields, vecs)

    @staticmethod
    def _id_lists(ids: np.ndarray) -> list[str]:
        ids = np.asarray(ids, np.int64)
        return [
            ", ".join(map(str, ids[s : s + _MAX_IDS].tolist()))
            for s in range(0, len(ids), _MAX_IDS)
        ]

    # --- contract ----------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        vec = self._dim is not None
        cols = self._cols + (", vec" if vec else "")
        self._with_arrow(
            self._arrow(docs, self._fields, vec),
            f"INSERT OR REPLACE INTO {quote(self.name)} ({cols}) SELECT {cols} FROM {{src}}",
        )

    def get(self, ids: np.ndarray) -> DocBatch:
        cols = self._cols + (", vec" if self._dim is not None else "")
        parts = [
            self._db.execute(
                f"SELECT {cols} FROM {quote(self.name)} WHERE id IN ({lst})"
            ).fetch_arrow_table()
            for lst in self._id_lists(ids)
        ]
        if not parts:
            return DocBatch.empty(self.schema)
        return self._batch(pa.concat_tables(parts), vectors=True)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        names = [*fields, *(["vec"] if docs.vectors is not None and self._dim else [])]
        if not names:
            return
        sets = ", ".join(f"{quote(c)} = s.{quote(c)}" for c in names)
        self._with_arrow(
            self._arrow(docs, fields, vectors=True),
            f"UPDATE {quote(self.name)} AS t SET {sets} FROM {{src}} AS s WHERE t.id = s.id",
        )

    def delete(self, ids: np.ndarray) -> None:
        for lst in self._id_lists(ids):
            self._db.execute(f"DELETE FROM {quote(self.name)} WHERE id IN ({lst})")

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        sql, params = find_sql(where, order, limit)
        rows = self._db.execute(f"SELECT {self._cols} FROM {quote(self.name)}{sql}", params)
        return self._batch(rows.fetch_arrow_table(), vectors=False)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        d = f"{self._dist}(vec, ?::{self._qtype})"
        t = quote(self.name)
        params: list[Any] = []
        if where is None:
            # the shape vss's optimizer turns into an HNSW index scan
            sql = f"SELECT id, {d} AS d FROM {t} ORDER BY d LIMIT {int(k)}"
        else:
            # exact over the matching rows: vss would filter after its top k
            cond, params = where_sql(where)
            sql = f"SELECT id, {d} AS d FROM {t}{cond} ORDER BY d, id LIMIT {int(k)}"
        db = self._db
        queries = np.asarray(vectors, np.float32)
        return SearchResult.from_rows(
            queries, k, lambda q: db.execute(sql, [q.tolist(), *params]).fetchall()
        )

    def count(self) -> int:
        return int(_one(self._db.execute(f"SELECT count(*) FROM {quote(self.name)}")))

    @property
    def _index(self) -> str:
        return quote(self.name + "__hnsw")

    def build_index(self, params: HnswIndex) -> None:
        """CREATE INDEX ... USING HNSW: the statement returns with the graph built."""
        if self._dim is None:
            return
        opts = [f"metric = '{_HNSW_METRIC[self.schema.metric]}'"]
        if params.m is not None:
            opts.append(f"M = {params.m}")
        if params.ef_construct is not None:
            opts.append(f"ef_construction = {params.ef_construct}")
        db = self._db
        db.execute(f"DROP INDEX IF EXISTS {self._index}")
        db.execute(
            f"CREATE INDEX {self._index} ON {quote(self.name)} USING HNSW (vec) "
            f"WITH ({', '.join(opts)})"
        )

    def set_search_params(self, params: HnswSearch) -> None:
        if params.ef is not None:
            self._ef = params.ef  # each thread's connection applies it on next use

    def size_bytes(self) -> int:
        total = 0
        for p in (self.path, self.path + ".wal"):
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(p).st_size
        return total

    def compact(self) -> None:
        db = self._db
        has_index = _one(
            db.execute(
                "SELECT count(*) FROM duckdb_indexes() WHERE index_name = ?", [self.name + "__hnsw"]
            )
        )
        if has_index:
            db.execute(f"PRAGMA hnsw_compact_index('{self.name}__hnsw')")
        db.execute("CHECKPOINT")

    def close(self) -> None:
        with self._lock:
            for cur in self._cursors:
                cur.close()
            self._cursors.clear()
        self._local = threading.local()
        self._con.close()

    def _drop(self) -> None:
        self.close()
        for p in (self.path, self.path + ".wal"):
            if os.path.exists(p):
                os.remove(p)


class DuckDBStore(Store):
    async_ops = "inline"
    engine = "duckdb"
    capabilities = frozenset(Capability) - {Capability.SHARED_ACROSS_PROCESSES, Capability.PIPELINE}
    Index = HnswIndex
    Search = HnswSearch
    extra = "duckdb"
    url_form = DIRECTORY
    collection = DuckDBCollection
    keeps_open = True  # one DuckDB connection per file
    ram = RamUse(hnsw_m=16)  # the table in the buffer pool, vss's HNSW index

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.path = self.local_path(mkdir=True)
        self._config = {
            "extension_directory": vss_extension_dir(),
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }

    def connect(self, path: str) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(path, config=self._config)  # type: ignore[arg-type]
        con.execute("LOAD vss")
        con.execute("SET GLOBAL hnsw_enable_experimental_persistence = true")
        # DuckDB 1.4's late materialization rewrites the index's top k into a
        # semi-join with a full scan of the table (about 10x slower at 20k rows)
        con.execute("SET GLOBAL late_materialization_max_rows = 0")
        return con

    def _file(self, name: str) -> str:
        if not name or name in (".", "..") or "/" in name or os.sep in name:
            raise UserError(f"collection name {name!r} is not a file name", where="duckdb")
        return os.path.join(self.path, name + _SUFFIX)

    def has_collection(self, name: str) -> bool:
        return os.path.exists(self._file(name))

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        cols = ["id BIGINT PRIMARY KEY"] + [
            f"{quote(f)} {_SQL_TYPE[k]}" for f, k in schema.fields.items()
        ]
        if schema.dim is not None:
            cols.append(f"vec FLOAT[{int(schema.dim)}]")
        con = self.connect(self._file(name))
        try:
            con.execute(f"CREATE TABLE {quote(name)} ({', '.join(cols)})")
            for f in schema.indexed:
                con.execute(f"CREATE INDEX {quote(name + '__' + f)} ON {quote(name)} ({quote(f)})")
        finally:
            con.close()
        return self._open(name, schema)

    def versions(self) -> dict[str, str]:
        try:
            vss = metadata.version("duckdb-ext-vss")
        except metadata.PackageNotFoundError:
            vss = "?"
        return {"engine": f"DuckDB {duckdb.__version__} + vss {vss}", "client": "duckdb (python)"}
