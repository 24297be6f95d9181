"""pgvector's async view (``Collection.aio``): asyncpg, one connection per
event-loop client, with the sync collection's SQL, parameters and row
decoding, so both paths write the same rows and find the same neighbours."""

from __future__ import annotations

import io
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from psycopg.conninfo import conninfo_to_dict

from storebench.data.batch import DocBatch
from storebench.data.filters import Filter
from storebench.errors import NotSupported
from storebench.stores.base import AsyncView, SearchResult
from storebench.stores.columns import batch_from_rows
from storebench.stores.params import Order
from storebench.stores.sql.pgvector.codec import (
    INSERT_ROWS,
    copy_binary,
    decode_vector,
    dollars,
    encode_vector,
    neighbours,
)
from storebench.stores.sql.sqlite import quote, where_sql

if TYPE_CHECKING:
    from storebench.stores.sql.pgvector.collection import PgVectorCollection

# the async view's driver: asyncpg (on uvloop, 8 clients of single-row
# inserts spent ~35% less client CPU per insert than on psycopg's
# AsyncConnection, measured with benchmarks/client_models.py before that
# view was dropped: one async view per engine)
_asyncpg: Any
try:
    import asyncpg as _asyncpg
except ImportError:  # pragma: no cover - the pgvector extra installs it
    _asyncpg = None


class PgAsyncpgView(AsyncView):
    """The async view on asyncpg: the sync collection's SQL (its ``%s``
    markers as ``$n``) and row decoding, each statement prepared once per
    connection, vectors in pgvector's binary form both ways (a type codec)."""

    native = True
    coll: PgVectorCollection

    def __init__(self, coll: PgVectorCollection, share: AsyncView | None = None):
        if _asyncpg is None:
            raise NotSupported(
                "pgvector", "async clients without asyncpg (pip install 'storebench[pgvector]')"
            )
        super().__init__(coll, share)
        self.conn: Any = None
        self.stmts: dict[str, Any] = {}
        self.generation = -1

    async def open(self) -> None:
        if self.share is not None:
            self.conn, self.stmts = self.share.conn, self.share.stmts
            return
        store = self.coll.store
        params = conninfo_to_dict(store.spec.url or "")
        kw = {
            k: params[k] for k in ("host", "port", "user", "password") if params.get(k) is not None
        }
        if params.get("dbname"):
            kw["database"] = params["dbname"]
        try:
            conn = await _asyncpg.connect(**kw)
        except (OSError, _asyncpg.PostgresError) as exc:
            raise store.cannot_connect(exc) from exc
        sync = store.options.synchronous_commit
        if sync is not None:
            await conn.execute("SELECT set_config('synchronous_commit', $1, false)", sync)
        schema = await conn.fetchval(
            "SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE t.oid = to_regtype('vector')"
        )
        if schema is not None:
            await conn.set_type_codec(
                "vector",
                schema=schema,
                encoder=encode_vector,
                decoder=decode_vector,
                format="binary",
            )
        self.conn = conn

    async def close(self) -> None:
        if self.share is None and self.conn is not None:
            await self.conn.close()
        self.conn = None

    async def _stmt(self, sql: str) -> Any:
        stmt = self.stmts.get(sql)
        if stmt is None:
            stmt = self.stmts[sql] = await self.conn.prepare(dollars(sql))
        return stmt

    async def insert(self, docs: DocBatch) -> None:
        """As the sync ``insert``: a small batch one prepared multi-row
        INSERT, a larger one a binary COPY (an upsert, rare, on the sync
        connection)."""
        c = self.coll
        if len(docs) <= INSERT_ROWS:
            if len(docs):
                stmt = await self._stmt(c._insert_sql(docs))
                await stmt.fetch(*c._insert_params(docs))
            return
        columns, data = copy_binary(docs, c._fields, c._kinds)
        try:
            await self.conn.copy_to_table(
                c.name, source=io.BytesIO(data), columns=columns, format="binary"
            )
        except _asyncpg.UniqueViolationError:
            cols = ", ".join(quote(n) if n not in ("id", "v") else n for n in columns)
            c._upsert(cols, columns, data)

    async def insert_pipelined(self, batches: Sequence[DocBatch]) -> None:
        """One ``executemany`` (asyncpg pipelines it) per run of equal-sized
        batches, all in one transaction: they commit together, as the sync
        pipeline's statements do at its one Sync."""
        c = self.coll
        shapes = itertools.groupby(
            (d for d in batches if len(d)), key=lambda d: (len(d), d.vectors is not None)
        )
        async with self.conn.transaction():
            for _, run in shapes:
                same = list(run)
                await self.conn.executemany(
                    dollars(c._insert_sql(same[0])), [c._insert_params(d) for d in same]
                )

    async def get(self, ids: np.ndarray) -> DocBatch:
        c = self.coll
        stmt = await self._stmt(f"SELECT {c._select_all} FROM {c._t} WHERE id = ANY(%s)")
        rows = await stmt.fetch(ids.tolist())
        return batch_from_rows(c.schema, rows, c._vec, blobs=False)

    async def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        c = self.coll
        sql, params = c._find_sql(where, order, limit)
        stmt = await self._stmt(sql)
        return batch_from_rows(c.schema, await stmt.fetch(*params), False)

    async def search(
        self, vectors: np.ndarray, k: int, where: Filter | None = None
    ) -> SearchResult:
        c = self.coll
        store = c.store
        if self.generation != store._generation:  # settings reach it before its search
            for name, value in store._session_vars.items():
                await self.conn.execute("SELECT set_config($1, $2, false)", name, value)
            self.generation = store._generation
        wsql, wparams = where_sql(where, "%s")
        stmt = await self._stmt(c._knn_sql(k, wsql, "%s"))  # the sync search's statement
        q = len(vectors)
        ids, dist = np.empty((q, k), np.int64), np.empty((q, k), np.float32)
        for j in range(q):
            got, d = await stmt.fetchrow(vectors[j], *wparams)
            neighbours(ids[j], dist[j], got, d)
        return SearchResult(ids, dist)
