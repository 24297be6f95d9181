"""The pgvector store: PostgreSQL with the ``vector`` extension, through
psycopg 3.

A collection is one table ``(id bigint primary key, <fields>, v vector(dim))``;
fields listed in ``Schema.indexed`` get a B-tree index. An insert of up to
32 documents is one prepared multi-row ``INSERT .. ON CONFLICT`` (one round
trip); a larger one is one binary ``COPY``, built column-wise in numpy (no
Python object per document for numeric fields; strings are encoded once
each). Vectors travel in pgvector's binary form both ways, so they
round-trip bit-exact.
``insert_pipelined`` (capability ``pipeline``) sends each batch as one
multi-row ``INSERT .. ON CONFLICT`` in a libpq pipeline (COPY cannot be
pipelined); the pipeline's statements commit together at its one Sync.

``build_index`` creates an HNSW index (``m``, ``ef_construction``) with the
operator class of the collection's metric; ``ef`` sets ``hnsw.ef_search``
on every connection. Without an index, search is an exact scan. Filters
compile to SQL; with an HNSW index pgvector 0.6 filters *after* the index
scan, so a selective filter returns fewer than k rows unless ``ef`` is large
(see docs/engines/pgvector.md).

Without a URL it runs on a managed PostgreSQL 16 + pgvector from the
``pgserver`` wheel (``servers/postgres.py``; started and stopped by
``stores.opening``). With a
URL (``postgresql://user:pass@host:5432/db``, or any libpq connection
string; ``PG*`` environment variables fill in what it leaves out) it only
connects. Credentials never reach records or messages.

One piece: the binary COPY encoder, the connection per thread with its
search settings, and the SQL of each operation are all this engine's own;
what SQL engines share (``data.filters.to_sql``) lives elsewhere.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import SplitResult

import numpy as np
import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus, ExecStatus, Format
from pydantic import field_validator

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter, to_sql
from storebench.errors import NotSupported, UserError
from storebench.stores.base import (
    AsyncView,
    Capability,
    Collection,
    MiB,
    SearchResult,
    Store,
    StoreSpec,
    redact_url,
)
from storebench.stores.config import StoreOptions, UrlForm, check_port
from storebench.stores.params import HnswIndex, HnswSearch, IndexParams

if TYPE_CHECKING:
    from storebench.servers.base import Server

_SQL_TYPE = {"int": "bigint", "float": "double precision", "bool": "boolean", "str": "text"}
_NP_TYPE = {"int": np.int64, "float": np.float64, "bool": np.bool_, "str": object}
# binary COPY layout of fixed-width columns: (numpy big-endian dtype, bytes)
_BIN = {"int": (">i8", 8), "float": (">f8", 8), "bool": ("u1", 1)}
_OPS = {
    "l2": ("vector_l2_ops", "<->"),
    "ip": ("vector_ip_ops", "<#>"),
    "cosine": ("vector_cosine_ops", "<=>"),
}
# the temporary table of an upsert (temporary tables shadow others: no
# collection may have this name)
_BUFFER = "storebench__upsert_buffer"
_MAX_IDENT = 63  # PostgreSQL truncates longer identifiers (NAMEDATALEN - 1)
_MAX_PARAMS = 65535  # bind parameters per statement (the protocol's int16 count)
# insert: up to this many rows one prepared multi-row INSERT, more a binary
# COPY. Measured on one connection (10 text columns; or an int, a text and a
# 128- or 960-dim vector): the INSERT is 1.2-2x the documents/s up to 32 rows
# and uses half the client CPU or less (a COPY costs ~150 us of client CPU
# however small); at 64 rows it is even, at 128 COPY is 1.1-1.4x faster.
_INSERT_ROWS = 32
# the insert cursor: psycopg >= 3.2's RawCursor takes PostgreSQL's own $n
# placeholders, so a statement is not re-parsed per call (psycopg caches its
# %s conversion only up to 50 parameters: 4 rows of 11 columns)
_RAW_CURSOR = getattr(psycopg, "RawCursor", None)
# the async view's driver: asyncpg (on uvloop, 8 clients of single-row
# inserts spent ~35% less client CPU per insert than on psycopg's
# AsyncConnection, measured with benchmarks/client_models.py before that
# view was dropped: one async view per engine)
_asyncpg: Any
try:
    import asyncpg as _asyncpg
except ImportError:  # pragma: no cover - the pgvector extra installs it
    _asyncpg = None
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_COPY_TRAILER = b"\xff\xff"


def _packed(col: np.ndarray, dtype: str) -> list[bytes]:
    """Each value of a column in a fixed-width binary form (numpy scalars
    would come back in native byte order: slices of one buffer do not)."""
    raw, w = col.astype(dtype).tobytes(), np.dtype(dtype).itemsize
    return [raw[j : j + w] for j in range(0, len(raw), w)]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _VectorDumper(Dumper):
    """numpy float32 vector -> pgvector's binary input (dim, unused, floats)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        v = np.asarray(obj, dtype=">f4").ravel()
        return len(v).to_bytes(2, "big") + b"\x00\x00" + v.tobytes()


class _VectorLoader(Loader):
    format = Format.BINARY

    def load(self, data: Any) -> np.ndarray:
        return np.frombuffer(data, ">f4", offset=4).astype(np.float32)


def _row_types(k: int) -> tuple[np.dtype[Any], np.dtype[Any]]:
    """A reply's ids and distances as one (1, k) row each: made once per k
    (a dtype made per call costs as much as the rest of the decoding)."""
    return np.dtype((">i8", (k,))), np.dtype((">f4", (k,)))


_ROW_TYPES: dict[int, tuple[np.dtype[Any], np.dtype[Any]]] = {}


def _neighbours(ids: np.ndarray, dist: np.ndarray, got: bytes | None, d: bytes | None) -> None:
    """One query's row of a search result from its reply (``_knn_sql``):
    padded with -1 and inf past what was found (nothing: None)."""
    n = len(got) // 8 if got else 0
    if n:
        ids[:n] = np.frombuffer(got, ">i8")
        dist[:n] = np.frombuffer(d, ">f4")
    ids[n:] = -1
    dist[n:] = np.inf


def copy_binary(
    docs: DocBatch, fields: list[str], kinds: Mapping[str, str]
) -> tuple[list[str], bytes]:
    """One binary COPY stream for a batch: (column order, bytes).

    Fixed-width columns (id, numbers, bools, the vector) form a numpy
    structured array, one record per row; text columns go last, scattered
    in with numpy index arithmetic."""
    n = len(docs)
    fixed = [f for f in fields if kinds[f] != "str"]
    text = [f for f in fields if kinds[f] == "str"]
    has_vec = docs.vectors is not None
    ncols = 1 + len(fields) + (1 if has_vec else 0)
    spec: list[tuple[Any, ...]] = [("n", ">i2"), ("l_id", ">i4"), ("id", ">i8")]
    for i, f in enumerate(fixed):
        spec += [(f"l{i}", ">i4"), (f"f{i}", _BIN[kinds[f]][0])]
    if has_vec:
        dim = docs.vectors.shape[1]  # type: ignore[union-attr]
        spec += [("l_v", ">i4"), ("v_dim", ">i2"), ("v_pad", ">i2"), ("v", ">f4", (dim,))]
    rec = np.empty(n, np.dtype(spec))
    rec["n"] = ncols
    rec["l_id"] = 8
    rec["id"] = docs.ids
    for i, f in enumerate(fixed):
        rec[f"l{i}"] = _BIN[kinds[f]][1]
        rec[f"f{i}"] = docs.fields[f]
    if has_vec:
        rec["l_v"] = 4 + 4 * dim
        rec["v_dim"] = dim
        rec["v_pad"] = 0
        rec["v"] = docs.vectors
    columns = ["id", *fixed] + (["v"] if has_vec else []) + text
    if not text:
        return columns, _COPY_HEADER + rec.tobytes() + _COPY_TRAILER
    size = rec.dtype.itemsize
    encoded = [[str(s).encode() for s in docs.fields[f]] for f in text]
    lens = [np.fromiter(map(len, e), np.int64, n) for e in encoded]
    row_size: np.ndarray = size + np.sum([4 + ln for ln in lens], axis=0)
    starts = np.cumsum(row_size) - row_size
    out = np.empty(int(row_size.sum()), np.uint8)
    out[(starts[:, None] + np.arange(size)).ravel()] = rec.view(np.uint8)
    pos = starts + size
    for enc, ln in zip(encoded, lens, strict=True):
        out[(pos[:, None] + np.arange(4)).ravel()] = ln.astype(">i4").view(np.uint8)
        payload = np.frombuffer(b"".join(enc), np.uint8)
        if len(payload):
            first = np.cumsum(ln) - ln  # where each string starts in payload
            out[np.repeat(pos + 4 - first, ln) + np.arange(len(payload))] = payload
        pos = pos + 4 + ln
    return columns, _COPY_HEADER + out.tobytes() + _COPY_TRAILER


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
        if _asyncpg is None:
            raise NotSupported(
                "pgvector", "async clients without asyncpg (pip install 'storebench[pgvector]')"
            )
        return PgAsyncpgView(self, share)

    def _rows_to_batch(self, rows: list[tuple[Any, ...]], with_vectors: bool) -> DocBatch:
        if not rows:
            empty = DocBatch.empty(self.schema)
            return empty if with_vectors else empty.select(None, vectors=False)
        cols = list(zip(*rows, strict=True))
        fields: dict[str, np.ndarray] = {
            f: np.array(cols[i + 1], dtype=_NP_TYPE[self._kinds[f]])
            for i, f in enumerate(self._fields)
        }
        vecs = np.stack(cols[-1]) if with_vectors else None
        return DocBatch(np.array(cols[0], np.int64), fields, vecs)

    # --- contract ------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        """A small batch (up to ``_INSERT_ROWS``) is one prepared multi-row
        ``INSERT .. ON CONFLICT (id) DO UPDATE``: one round trip, where a
        COPY takes two and more client CPU. A larger one is a binary COPY,
        replaced through an upsert if some ids exist. Either way insert
        replaces existing ids."""
        if len(docs) <= _INSERT_ROWS:
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
        if n * len(cols) > _MAX_PARAMS:
            raise UserError(
                f"pgvector: a pipelined insert of {n} documents x {len(cols)} columns passes "
                f"PostgreSQL's {_MAX_PARAMS} parameters per statement: use smaller batches",
                where="store pgvector",
            )
        k = len(cols)
        if _RAW_CURSOR is not None:  # the store's insert cursor is a RawCursor
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

    def native_insert(self, ops: Sequence[Sequence[DocBatch]]) -> Any:
        """The statements ``insert_pipelined`` sends (``_insert_sql``, one per
        batch size, prepared once), each batch's parameters in binary; an
        operation's batches end with one Sync, so they commit together as
        in the Python pipeline (one batch: as ``insert``'s one statement)."""
        if _RAW_CURSOR is None:  # the statements' $n placeholders
            raise NotSupported("pgvector", "the native client for insert (psycopg < 3.2)")
        if any(len(b) == 1 and len(b[0]) > _INSERT_ROWS for b in ops):  # insert would COPY
            raise NotSupported(
                "pgvector", f"the native client for inserts of over {_INSERT_ROWS} rows (a COPY)"
            )
        statements: dict[str, int] = {}
        prepared: list[list[tuple[int, list[bytes | None]]]] = []
        for batches in ops:
            op = []
            for docs in batches:
                if len(docs):
                    sql = self._insert_sql(docs)
                    op.append((statements.setdefault(sql, len(statements)), self._binary(docs)))
            prepared.append(op)
        return self.store._native(list(statements), prepared)

    def native_search(self, queries: np.ndarray, k: int) -> Any:
        """``search``'s ORDER BY with the query vector bound once, in binary;
        the loop keeps the ids returned."""
        sql = f"SELECT id FROM {self._t} ORDER BY v {self._op} $1 LIMIT {int(k)}"
        vecs = np.asarray(queries, dtype=">f4")
        head = vecs.shape[1].to_bytes(2, "big") + b"\x00\x00"
        ops = [[(0, [head + v.tobytes()])] for v in vecs]
        return self.store._native([sql], ops, ids=True)

    def _binary(self, docs: DocBatch) -> list[bytes | None]:
        """A batch's parameters, row by row (id, fields, vector), in
        PostgreSQL's binary forms (bigint, double, boolean, text, vector)."""
        columns: list[list[bytes]] = [_packed(docs.ids, ">i8")]
        for f in self._fields:
            col, kind = docs.fields[f], self._kinds[f]
            if kind == "str":
                columns.append([x.encode() for x in col.tolist()])
            elif kind == "int":
                columns.append(_packed(col, ">i8"))
            elif kind == "float":
                columns.append(_packed(col, ">f8"))
            else:
                columns.append([bytes([bool(x)]) for x in col.tolist()])
        if docs.vectors is not None:
            vecs = docs.vectors.astype(">f4", copy=False)
            head = vecs.shape[1].to_bytes(2, "big") + b"\x00\x00"
            columns.append([head + v.tobytes() for v in vecs])
        return [x for row in zip(*columns, strict=True) for x in row]

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
                f"CREATE TEMPORARY TABLE {_BUFFER} ON COMMIT DROP AS SELECT {cols} FROM {self._t} LIMIT 0"
            )
            with cur.copy(f"COPY {_BUFFER} ({cols}) FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(data)
            cur.execute(
                f"INSERT INTO {self._t} ({cols}) SELECT {cols} FROM {_BUFFER} "
                f"ON CONFLICT (id) DO UPDATE SET {sets}"
            )

    def get(self, ids: np.ndarray) -> DocBatch:
        with self._cur() as cur:
            cur.execute(
                f"SELECT {self._select_all} FROM {self._t} WHERE id = ANY(%s)", [ids.tolist()]
            )
            rows = cur.fetchall()
        return self._rows_to_batch(rows, with_vectors=self._vec)

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

    def _where(self, where: Filter | None) -> tuple[str, list[Any]]:
        if where is None:
            return "", []
        sql, params = to_sql(where, quote, "%s")
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
            sql += " LIMIT %s"
            params.append(int(limit))
        with self._cur() as cur:
            cur.execute(f"SELECT {self._select_scalars} FROM {self._t}{sql}", params)
            rows = cur.fetchall()
        return self._rows_to_batch(rows, with_vectors=False)

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
                    i8, f4 = _ROW_TYPES.get(k) or _ROW_TYPES.setdefault(k, _row_types(k))
                    return SearchResult(
                        np.frombuffer(got, i8).astype(np.int64),
                        np.frombuffer(d, f4).astype(np.float32),
                    )
                ids, dist = np.empty((1, k), np.int64), np.empty((1, k), np.float32)
                _neighbours(ids[0], dist[0], got, d)
                return SearchResult(ids, dist)
            ids, dist = np.empty((q, k), np.int64), np.empty((q, k), np.float32)
            for j in range(q):
                res = run(head + vecs[j].tobytes())
                _neighbours(ids[j], dist[j], res.get_value(0, 0), res.get_value(0, 1))
            return SearchResult(ids, dist)
        ids, dist = np.empty((q, k), np.int64), np.empty((q, k), np.float32)
        wsql, wparams = self._where(where)
        sql = self._knn_sql(k, wsql, "%s")
        with self._cur() as cur:
            for j in range(q):
                cur.execute(sql, [vectors[j], *wparams])
                _neighbours(ids[j], dist[j], *cur.fetchone())
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


def _libpq(url: str, parts: SplitResult | None) -> dict[str, Any]:
    """The connection string as libpq reads it (keywords and URI alike),
    without connecting; its ports numbers."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ValueError(str(exc)) from None
    for port in str(params.get("port") or "").split(","):
        check_port(port.strip())
    return params


class PgVectorStore(Store):
    async_ops = "native"
    engine = "pgvector"
    capabilities = frozenset(Capability)
    Index = HnswIndex
    Search = HnswSearch
    extra = "pgvector"
    url_form = UrlForm(
        "postgresql://user[:password]@host:port/dbname or host=... port=... dbname=...",
        schemes=("postgresql", "postgres"),
        keywords=True,
        parse=_libpq,
    )

    class Options(StoreOptions):
        managed_only = ("settings", "tuning")
        settings: dict[str, str | int | float | bool] = {}  # postgresql.conf, over the tuning
        # the managed server's settings: the machine's rule, or initdb's defaults
        tuning: Literal["machine", "initdb"] = "machine"
        # a storage mode: on | off
        synchronous_commit: Literal["on", "off", "local", "remote_write", "remote_apply"] | None = (
            None
        )
        maintenance_work_mem: str | int | None = None  # for index builds, e.g. 1GB

        @field_validator("synchronous_commit", mode="before")
        @classmethod
        def _on_off(cls, v: Any) -> Any:
            if isinstance(v, bool):  # YAML reads a bare on/off as a boolean
                return "on" if v else "off"
            return v.lower() if isinstance(v, str) else v

        @field_validator("settings")
        @classmethod
        def _postgres_takes_them(cls, v: dict[str, Any]) -> dict[str, Any]:
            from storebench.servers.postgres import check_settings

            check_settings(v)
            return v

        @field_validator("maintenance_work_mem")
        @classmethod
        def _a_memory_size(cls, v: Any) -> Any:
            from storebench.servers.postgres import memory_bytes

            if v is not None:
                memory_bytes("maintenance_work_mem", v)
            return v

    @classmethod
    def managed_server(cls, options: Options) -> Callable[[], Server]:
        from storebench.servers.postgres import PostgresServer

        return functools.partial(PostgresServer, settings=options.settings, tuning=options.tuning)

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._session_vars: dict[str, str] = {}
        self._generation = 0
        self._vector_oid = 0  # the vector type's (``_register``)
        try:
            conn = self.connection()  # fail now, not in the first timed operation
            self._vector_ready(conn)
        except BaseException:
            self.close()
            raise

    # --- connections -----------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self.spec.url or "", autocommit=True)
        except psycopg.OperationalError as exc:
            raise UserError(
                f"cannot connect to PostgreSQL at {redact_url(self.spec.url)}: {exc}",
                where="store pgvector",
            ) from exc
        sync = self.options.synchronous_commit
        if sync is not None:
            conn.execute("SELECT set_config('synchronous_commit', %s, false)", [sync])
        return conn

    def _vector_ready(self, conn: psycopg.Connection[Any]) -> None:
        """The vector extension exists (created if missing and allowed)."""
        row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        if row is None:
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                raise UserError(
                    f"the pgvector extension is not installed in {redact_url(self.spec.url)} "
                    f"and could not be created: {exc}",
                    where="store pgvector",
                ) from exc
        with self._lock:
            conns = list(self._all)
        for c in conns:  # connections opened before the type existed
            self._register(c)

    def _register(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute("SELECT to_regtype('vector')::oid").fetchone()
        oid = row[0] if row else None
        if not oid:
            return
        self._vector_oid = oid
        dumper = type("VectorDumper", (_VectorDumper,), {"oid": oid})
        conn.adapters.register_dumper(np.ndarray, dumper)
        conn.adapters.register_loader(oid, _VectorLoader)

    def connection(self) -> psycopg.Connection[Any]:
        """This thread's connection (autocommit: each statement commits)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._register(conn)
            self._local.conn = conn
            self._local.generation = -1
            with self._lock:
                self._all.append(conn)
        return conn

    def _writer(self) -> psycopg.Cursor[Any]:
        """This thread's binary cursor for inserts, made once (setting one up
        is a tenth of a one-row insert's client CPU); inserts fetch nothing,
        so one cursor serves them all."""
        cur = getattr(self._local, "writer", None)
        if cur is None:
            conn = self.connection()
            if _RAW_CURSOR is not None:
                cur = _RAW_CURSOR(conn)
                cur.format = Format.BINARY
            else:
                cur = conn.cursor(binary=True)
            self._local.writer = cur
        return cur

    def _prepared(self, sql: str) -> Callable[[bytes], Any]:
        """This thread's runner of ``sql``, a query whose one parameter is a
        vector in pgvector's binary form: prepared on the server once per
        connection, then each call one ``PQexecPrepared`` (the GIL released
        while it waits) returning the checked result (``PGresult``, values
        binary). Without the cursor's adaptation, row building and wait
        loop, a query's client cost is little more than libpq's."""
        conn = self.connection()
        runners: dict[str, Any] | None = getattr(self._local, "prepared", None)
        if runners is None:
            runners = self._local.prepared = {}
        known: Callable[[bytes], Any] | None = runners.get(sql)
        if known is not None:
            return known
        pgconn, encoding = conn.pgconn, conn.info.encoding
        name = f"storebench_{len(runners)}".encode()

        def check(res: Any) -> Any:
            if res.status == ExecStatus.TUPLES_OK or res.status == ExecStatus.COMMAND_OK:
                return res
            if pgconn.status == ConnStatus.BAD:
                message = pgconn.get_error_message(encoding)
                raise psycopg.OperationalError(f"the connection to PostgreSQL broke: {message}")
            raise psycopg.errors.error_from_result(res, encoding=encoding)

        check(pgconn.prepare(name, sql.encode(), [self._vector_oid]))
        formats = [Format.BINARY]

        def run(vector: bytes) -> Any:
            return check(pgconn.exec_prepared(name, [vector], formats, Format.BINARY))

        runners[sql] = run
        return run

    def _set_search(self, params: HnswSearch) -> None:
        if params.ef is not None:
            self._session_vars["hnsw.ef_search"] = str(params.ef)
            self._generation += 1

    def _native(self, statements: list[str], ops: list[Any], ids: bool = False) -> Any:
        """A native op on a connection of its own (the extension's), with
        this store's session settings (search settings, synchronous_commit)."""
        from storebench.driver.native import extension

        info = self.connection().info
        host = info.host
        if host.startswith("/"):  # a Unix socket: the extension speaks TCP
            raise NotSupported("pgvector", "the native client on a Unix socket")
        setup = [f"SET {k} = '{v}'" for k, v in self._session_vars.items()]
        sync = self.options.synchronous_commit
        if sync is not None:
            setup.append(f"SET synchronous_commit = '{sync}'")
        ext = extension()
        return ext.postgres(  # type: ignore[union-attr]
            host if host else "127.0.0.1",
            int(info.port),
            info.user,
            info.password or "",
            info.dbname,
            setup,
            statements,
            ops,
            ids,
        )

    def _apply_settings(self) -> None:
        """Search settings reach each thread's connection before its next search."""
        if getattr(self._local, "generation", -1) == self._generation:
            return
        conn = self.connection()
        for k, v in self._session_vars.items():
            conn.execute("SELECT set_config(%s, %s, false)", [k, v])
        self._local.generation = self._generation

    # --- collections ---------------------------------------------------------------
    def has_collection(self, name: str) -> bool:
        row = self.connection().execute("SELECT to_regclass(%s)", [quote(name)]).fetchone()
        return row is not None and row[0] is not None

    def _check_name(self, name: str, schema: Schema) -> None:
        longest = max(
            [len(f"{name}_hnsw"), *(len(f"{name}_i{i}") for i in range(len(schema.indexed)))]
        )
        if name == _BUFFER:
            raise UserError(f"{name!r} is reserved by the pgvector store", where="store pgvector")
        if len(name.encode()) > _MAX_IDENT or longest > _MAX_IDENT:
            raise UserError(
                f"collection name {name!r} is too long for PostgreSQL identifiers "
                f"({_MAX_IDENT} bytes with its index suffixes)",
                where="store pgvector",
            )

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        self._check_name(name, schema)
        cols = ["id bigint PRIMARY KEY"] + [
            f"{quote(f)} {_SQL_TYPE[k]}" for f, k in schema.fields.items()
        ]
        if schema.dim is not None:
            cols.append(f"v vector({int(schema.dim)})")
        conn = self.connection()
        with conn.transaction():
            conn.execute(f"CREATE TABLE {quote(name)} ({', '.join(cols)})")
            for i, f in enumerate(schema.indexed):
                conn.execute(f"CREATE INDEX {quote(f'{name}_i{i}')} ON {quote(name)} ({quote(f)})")
        return PgVectorCollection(self, name, schema)

    def _open(self, name: str, schema: Schema) -> Collection:
        if not self.has_collection(name):
            raise UserError(
                f"no table {name!r} in {redact_url(self.spec.url)}", where="store pgvector"
            )
        return PgVectorCollection(self, name, schema)

    @classmethod
    def memory_use(
        cls, spec: StoreSpec, index: HnswIndex, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        from storebench.servers.postgres import memory_bytes, server_settings

        if spec.url is not None:
            return 0, 0  # a server of yours: not counted
        # the managed PostgreSQL keeps data on disk: shared buffers (taken
        # as the server touches them, all of them in a long run), the index
        # build's memory and its backends are its fixed share
        options = spec.checked_options
        if not isinstance(options, cls.Options):
            options = cls.check_options(spec.options, None)
        given = server_settings(options.tuning, options.settings)
        shared = memory_bytes("shared_buffers", given.get("shared_buffers", "128MB"))
        build = options.maintenance_work_mem or given.get("maintenance_work_mem", "64MB")
        return 0, shared + memory_bytes("maintenance_work_mem", build) + 64 * MiB

    def versions(self) -> dict[str, str]:
        conn = self.connection()
        server = conn.execute("SHOW server_version").fetchone()
        ext = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        engine = f"PostgreSQL {server[0] if server else '?'} + pgvector {ext[0] if ext else '?'}"
        impl = psycopg.pq.__impl__
        return {"engine": engine, "client": f"psycopg {metadata.version('psycopg')} ({impl})"}

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            with contextlib.suppress(Exception):  # a dead server's connection
                c.close()
        self._local = threading.local()
        super().close()


# --- the async view (``Collection.aio``) -------------------------------------------
# asyncpg, one connection per event-loop client, with the sync collection's
# SQL, parameters and row decoding, so both paths write the same rows and
# find the same neighbours.


def _dollars(sql: str) -> str:
    """psycopg's ``%s`` markers as PostgreSQL's own ``$n`` (asyncpg's)."""
    parts = sql.split("%s")
    out = [parts[0]]
    for k, part in enumerate(parts[1:], 1):
        out += [f"${k}", part]
    return "".join(out)


def _encode_vector(v: Any) -> bytes:
    return _VectorDumper.dump(None, v)  # type: ignore[arg-type]


def _decode_vector(data: bytes) -> np.ndarray:
    return np.frombuffer(data, ">f4", offset=4).astype(np.float32)


class PgAsyncpgView(AsyncView):
    """The async view on asyncpg: the sync collection's SQL (its ``%s``
    markers as ``$n``) and row decoding, each statement prepared once per
    connection, vectors in pgvector's binary form both ways (a type codec)."""

    native = True
    coll: PgVectorCollection

    def __init__(self, coll: PgVectorCollection, share: AsyncView | None = None):
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
            raise UserError(
                f"cannot connect to PostgreSQL at {redact_url(store.spec.url)}: {exc}",
                where="store pgvector",
            ) from exc
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
                encoder=_encode_vector,
                decoder=_decode_vector,
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
            stmt = self.stmts[sql] = await self.conn.prepare(_dollars(sql))
        return stmt

    async def insert(self, docs: DocBatch) -> None:
        """As the sync ``insert``: a small batch one prepared multi-row
        INSERT, a larger one a binary COPY (an upsert, rare, on the sync
        connection)."""
        c = self.coll
        if len(docs) <= _INSERT_ROWS:
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
                    _dollars(c._insert_sql(same[0])), [c._insert_params(d) for d in same]
                )

    async def get(self, ids: np.ndarray) -> DocBatch:
        c = self.coll
        stmt = await self._stmt(f"SELECT {c._select_all} FROM {c._t} WHERE id = ANY(%s)")
        rows = await stmt.fetch(ids.tolist())
        return c._rows_to_batch(rows, with_vectors=c._vec)

    async def find(
        self,
        where: Filter | None = None,
        order: tuple[str, bool] | None = None,
        limit: int | None = None,
    ) -> DocBatch:
        c = self.coll
        sql, params = c._where(where)
        if order is not None:
            sql += f" ORDER BY {quote(order[0])} {'DESC' if order[1] else 'ASC'}"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(int(limit))
        stmt = await self._stmt(f"SELECT {c._select_scalars} FROM {c._t}{sql}")
        return c._rows_to_batch(await stmt.fetch(*params), with_vectors=False)

    async def search(
        self, vectors: np.ndarray, k: int, where: Filter | None = None
    ) -> SearchResult:
        c = self.coll
        store = c.store
        if self.generation != store._generation:  # settings reach it before its search
            for name, value in store._session_vars.items():
                await self.conn.execute("SELECT set_config($1, $2, false)", name, value)
            self.generation = store._generation
        wsql, wparams = c._where(where)
        stmt = await self._stmt(c._knn_sql(k, wsql, "%s"))  # the sync search's statement
        q = len(vectors)
        ids, dist = np.empty((q, k), np.int64), np.empty((q, k), np.float32)
        for j in range(q):
            got, d = await stmt.fetchrow(vectors[j], *wparams)
            _neighbours(ids[j], dist[j], got, d)
        return SearchResult(ids, dist)
