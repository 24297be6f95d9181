"""pgvector's collection: one table, the SQL of each operation on this
thread's connection (the store's), searches through libpq's prepared
statements."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.errors import UserError
from storebench.stores.base import AsyncView, Collection, SearchResult
from storebench.stores.columns import batch_from_rows
from storebench.stores.params import HnswIndex, HnswSearch, Order
from storebench.stores.sql.pgvector import native
from storebench.stores.sql.pgvector.aio import PgAsyncpgView
from storebench.stores.sql.pgvector.codec import (
    INSERT_ROWS,
    MAX_PARAMS,
    RAW_CURSOR,
    ROW_TYPES,
    copy_binary,
    neighbours,
    row_types,
)
from storebench.stores.sql.sqlite import find_sql, quote, where_sql

if TYPE_CHECKING:
    from storebench.stores.sql.pgvector.store import PgVectorStore

_OPS = {
    "l2": ("vector_l2_ops", "<->"),
    "ip": ("vector_ip_ops", "<#>"),
    "cosine": ("vector_cosine_ops", "<=>"),
}
# the temporary table of an upsert (temporary tables shadow others: no
# collection may have this name)
BUFFER = "storebench__upsert_buffer"


class PgVectorCollection(Collection):
    store: PgVectorStore

    def __init__(self, store: PgVectorStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._t = quote(name)
        self._fields = list(schema.fields)
        self._kinds = dict(schema.fields)
        self._vec = schema.dim is not None
        scalars = ["id", *map(quote, self._fields)]
        self._select_scalars = ", ".join(scalars)
        self._select_all = ", ".join(scalars + (["v"] if self._vec else []))
        self._opclass, self._op = _OPS[schema.metric]
        self._index = quote(f"{name}_hnsw")
        self._inserts: dict[tuple[int, bool], str] = {}  # INSERT per (rows, with vectors)
        self._knn: dict[int, str] = {}  # the unfiltered search per k (``_knn_sql``)

    def _cur(self) -> psycopg.Cursor[Any]:
        return self.store.connection().cursor(binary=True)

    def aio(self, share: AsyncView | None = None) -> AsyncView:
        """An async connection per client, on asyncpg (``PgAsyncpgView``)."""
        return PgAsyncpgView(self, share)

    # --- contract ------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        """A small batch (up to ``INSERT_ROWS``) is one prepared multi-row
        ``INSERT .. ON CONFLICT (id) DO UPDATE``: one round trip, where a
        COPY takes two and more client CPU. A larger one is a binary COPY,
        replaced through an upsert if some ids exist. Either way insert
        replaces existing ids."""
        if len(docs) <= INSERT_ROWS:
            if len(docs):
                sql, params = self._insert_sql(docs), self._insert_params(docs)
                self.store._writer().execute(sql, params, prepare=True)
            return
        columns, data = copy_binary(docs, self._fields, self._kinds)
        cols = ", ".join(quote(c) if c not in ("id", "v") else c for c in columns)
        try:
            with (
                self._cur() as cur,
                cur.copy(f"COPY {self._t} ({cols}) FROM STDIN (FORMAT BINARY)") as cp,
            ):
                cp.write(data)
        except psycopg.errors.UniqueViolation:
            # some ids exist (the COPY rolled back whole): insert replaces them,
            # as in every store, through a temporary table and one upsert
            self._upsert(cols, columns, data)

    def insert_pipelined(self, batches: Sequence[DocBatch]) -> None:
        """Each batch one multi-row ``INSERT ... ON CONFLICT (id) DO UPDATE``
        (insert replaces, as ``insert`` does), all sent in one libpq pipeline
        on this thread's connection: COPY cannot be pipelined, so this is
        the statement the pipeline carries. The pipeline ends with one Sync,
        so the server runs its statements as one implicit transaction: they
        commit together (as pgbench's ``\\startpipeline`` .. ``\\endpipeline``)."""
        conn = self.store.connection()
        cur = self.store._writer()
        with conn.pipeline():
            # runs of equal-sized batches: one executemany each (in a pipeline
            # it queues one prepared statement per batch, with less Python
            # per statement than an execute each)
            shapes = itertools.groupby(
                (d for d in batches if len(d)), key=lambda d: (len(d), d.vectors is not None)
            )
            for _, run in shapes:
                same = list(run)
                cur.executemany(self._insert_sql(same[0]), [self._insert_params(d) for d in same])

    def _insert_sql(self, docs: DocBatch) -> str:
        """``INSERT .. VALUES (..), (..) ON CONFLICT (id) DO UPDATE`` for this
        many rows (cached per row count: the same text each time, prepared
        once per connection: psycopg keeps up to 100 per connection)."""
        n, vec = len(docs), docs.vectors is not None
        sql = self._inserts.get((n, vec))
        if sql is not None:
            return sql
        cols = ["id", *map(quote, self._fields)] + (["v"] if vec else [])
        if n * len(cols) > MAX_PARAMS:
            raise UserError(
                f"pgvector: a pipelined insert of {n} documents x {len(cols)} columns passes "
                f"PostgreSQL's {MAX_PARAMS} parameters per statement: use smaller batches",
                where="store pgvector",
            )
        k = len(cols)
        if RAW_CURSOR is not None:  # the store's insert cursor is a RawCursor
            marks = [f"${j}" for j in range(1, n * k + 1)]
            rows = ["(" + ", ".join(marks[r * k : (r + 1) * k]) + ")" for r in range(n)]
        else:
            rows = ["(" + ", ".join(["%s"] * k) + ")"] * n
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols[1:])
        sql = (
            f"INSERT INTO {self._t} ({', '.join(cols)}) VALUES {', '.join(rows)} "
            f"ON CONFLICT (id) {f'DO UPDATE SET {sets}' if sets else 'DO NOTHING'}"
        )
        self._inserts[(n, vec)] = sql
        return sql

    # --- the native client -------------------------------------------------------
    native_ops = frozenset({"insert", "search"})
    native_insert = native.insert
    native_search = native.search

    def _insert_params(self, docs: DocBatch) -> list[Any]:
        columns: list[Iterable[Any]] = [docs.ids.tolist()]
        columns += [docs.fields[f].tolist() for f in self._fields]
        if docs.vectors is not None:
            columns.append(iter(docs.vectors))
        return [x for row in zip(*columns, strict=True) for x in row]

    def _upsert(self, cols: str, columns: list[str], data: bytes) -> None:
        conn = self.store.connection()
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols.split(", ") if c != "id")
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(
                f"CREATE TEMPORARY TABLE {BUFFER} ON COMMIT DROP AS SELECT {cols} FROM {self._t} LIMIT 0"
            )
            with cur.copy(f"COPY {BUFFER} ({cols}) FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(data)
            cur.execute(
                f"INSERT INTO {self._t} ({cols}) SELECT {cols} FROM {BUFFER} "
                f"ON CONFLICT (id) DO UPDATE SET {sets}"
            )

    def get(self, ids: np.ndarray) -> DocBatch:
        with self._cur() as cur:
            cur.execute(
                f"SELECT {self._select_all} FROM {self._t} WHERE id = ANY(%s)", [ids.tolist()]
            )
            rows = cur.fetchall()
        return batch_from_rows(self.schema, rows, self._vec, blobs=False)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        sets = [f"{quote(f)} = %s" for f in fields] + (
            ["v = %s"] if docs.vectors is not None else []
        )
        if not sets:
            return
        columns: list[Iterable[Any]] = [docs.fields[f].tolist() for f in fields]
        if docs.vectors is not None:
            columns.append(iter(docs.vectors))
        columns.append(docs.ids.tolist())
        sql = f"UPDATE {self._t} SET {', '.join(sets)} WHERE id = %s"
        with self._cur() as cur:
            if len(docs) == 1:
                cur.execute(sql, [next(iter(c)) for c in columns])
            else:
                cur.executemany(sql, list(zip(*columns, strict=True)))

    def delete(self, ids: np.ndarray) -> None:
        with self._cur() as cur:
            cur.execute(f"DELETE FROM {self._t} WHERE id = ANY(%s)", [ids.tolist()])

    def _find_sql(
        self, where: Filter | None, order: Order, limit: int | None
    ) -> tuple[str, list[Any]]:
        """``find``'s statement and parameters (the async view's too)."""
        sql, params = find_sql(where, order, limit, "%s")
        return f"SELECT {self._select_scalars} FROM {self._t}{sql}", params

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        with self._cur() as cur:
            cur.execute(*self._find_sql(where, order, limit))
            rows = cur.fetchall()
        return batch_from_rows(self.schema, rows, False)

    def _knn_sql(self, k: int, where: str, mark: str) -> str:
        """k nearest as one row of two byte strings, the ids (big-endian
        int64) and their distances (big-endian float32) in order: the vector
        is bound once (``mark``), the operator used once (``ORDER BY d`` is
        the index's order: the plan is an HNSW index scan, see the tests),
        and numpy reads each reply whole, no Python object per neighbour.
        Both are ordered by (d, id), so they pair up whatever order the
        index gave."""
        return (
            "SELECT string_agg(int8send(id), '' ORDER BY d, id), "
            "string_agg(float4send(d::real), '' ORDER BY d, id) FROM "
            f"(SELECT id, v {self._op} {mark} AS d FROM {self._t}{where} "
            f"ORDER BY d LIMIT {int(k)}) AS knn"
        )

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        """One statement per query vector. Without a filter it is prepared
        once per connection and run through libpq itself (the vector
        encoded to pgvector's binary form, the reply read by numpy): half
        the client CPU of a cursor's execute and fetch, which are most of a
        query's client cost at a 100-neighbour reply."""
        self.store._apply_settings()
        q = len(vectors)
        if where is None:
            sql = self._knn.get(k) or self._knn.setdefault(k, self._knn_sql(k, "", "$1"))
            run = self.store._prepared(sql)
            vecs = np.asarray(vectors, dtype=">f4")
            head = vecs.shape[1].to_bytes(2, "big") + b"\x00\x00"
            if q == 1:  # the search ops' case: as few numpy calls as can be
                res = run(head + vecs.tobytes())
                got, d = res.get_value(0, 0), res.get_value(0, 1)
                if got is not None and len(got) == 8 * k:
                    i8, f4 = ROW_TYPES.get(k) or ROW_TYPES.setdefault(k, row_types(k))
                    return SearchResult(
                        np.frombuffer(got, i8).astype(np.int64),
                        np.frombuffer(d, f4).astype(np.float32),
                    )
                ids, dist = np.empty((1, k), np.int64), np.empty((1, k), np.float32)
                neighbours(ids[0], dist[0], got, d)
                return SearchResult(ids, dist)
            ids, dist = np.empty((q, k), np.int64), np.empty((q, k), np.float32)
            for j in range(q):
                res = run(head + vecs[j].tobytes())
                neighbours(ids[j], dist[j], res.get_value(0, 0), res.get_value(0, 1))
            return SearchResult(ids, dist)
        ids, dist = np.empty((q, k), np.int64), np.empty((q, k), np.float32)
        wsql, wparams = where_sql(where, "%s")
        sql = self._knn_sql(k, wsql, "%s")
        with self._cur() as cur:
            for j in range(q):
                cur.execute(sql, [vectors[j], *wparams])
                neighbours(ids[j], dist[j], *cur.fetchone())
        return SearchResult(ids, dist)

    def count(self) -> int:
        with self._cur() as cur:
            cur.execute(f"SELECT count(*) FROM {self._t}")
            return int(cur.fetchone()[0])  # type: ignore[index]

    def build_index(self, params: HnswIndex) -> None:
        names = {"m": "m", "ef_construct": "ef_construction"}
        given = [f"{names[k]} = {v}" for k, v in params.given().items()]
        with_ = f" WITH ({', '.join(given)})" if given else ""  # else the engine's defaults
        conn = self.store.connection()
        mem = self.store.options.maintenance_work_mem
        if mem:
            conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", [str(mem)])
        conn.execute(f"DROP INDEX IF EXISTS {self._index}")
        # returns once the whole graph is built: the index is ready to use
        conn.execute(
            f"CREATE INDEX {self._index} ON {self._t} USING hnsw (v {self._opclass}){with_}"
        )
        conn.execute(f"ANALYZE {self._t}")

    def set_search_params(self, params: HnswSearch) -> None:
        self.store._set_search(params)

    def size_bytes(self) -> int:
        """The table with its TOAST data and all its indexes."""
        with self._cur() as cur:
            cur.execute("SELECT pg_total_relation_size(%s::regclass)", [self._t])
            return int(cur.fetchone()[0])  # type: ignore[index]

    def compact(self) -> None:
        # VACUUM FULL rewrites this table (and its indexes) only.
        self.store.connection().execute(f"VACUUM FULL {self._t}")

    def _drop(self) -> None:
        self.store.connection().execute(f"DROP TABLE IF EXISTS {self._t}")
