"""The Redis store: hashes indexed by the search module (RediSearch), through
redis-py.

A collection ``name`` is the hashes ``name:<id>`` (fields as written, the
vector as a float32 blob, the id again as ``_id``) and the search index
``name`` over the prefix ``name:``: numbers (and bools, as 0/1) are NUMERIC,
strings TAG (exact, case-sensitive), the vector a VECTOR attribute. Index
attributes are aliases (``f0``, ``f1``, ...), so any field name works in
queries.

Vector index: a collection created with index parameters (a run's) starts
with the HNSW vector attribute it will be searched with (``m`` -> ``M``,
``ef_construct`` -> ``EF_CONSTRUCTION``), so each HSET inserts its document
into the graph as it arrives (the search module indexes a write before it
replies). Measured (``benchmarks/redis_upload.py``, 100k x 128, m=16,
ef_construction=64, 4 uploaders, a busy 2-core machine): straight into
HNSW, upload 57.9-73.1 s against the server's own HSET time of 52.8-67.2 s
(1.09-1.10x); a FLAT upload then a rebuild 278-409 s (the rebuild's
background scan re-reads every hash). ``build_index`` with
those parameters then builds nothing and says so (the record: index built
during the upload). Without parameters the collection starts with a FLAT
(exact) attribute, searches are exact until ``build_index``, which drops
the index definition (not the documents), re-creates it with HNSW and
waits until the engine reports the background indexing done (``FT.INFO``:
``indexing`` 0, ``percent_indexed`` 1): the index time is the engine's real
build time over the loaded data. ``ef`` becomes the query's ``EF_RUNTIME``.

Writes go out in pipelines (one round trip per batch, no MULTI); searches
of several query vectors too. ``insert_pipelined`` (capability ``pipeline``)
puts several batches' HSETs in one such pipeline on one connection: each
HSET is a request of its own, none waits for another's reply. Filters compile to the query language
(DIALECT 2): numeric ranges, TAG sets, ``-`` for not, ``|`` for or; a
filtered search is a hybrid query ``(<filter>)=>[KNN k @v $B]``.

Distances: RediSearch's L2 is the squared distance (its square root is
returned), IP is ``1 - dot`` (returned as ``-dot``), COSINE is ``1 - cos``.

Without a URL it runs on a managed Redis (``servers/redis.py``; started
and stopped by ``stores.opening``); with ``redis://[:password@]host:port/db`` it only
connects (``REDIS_PASSWORD`` fills in a password the URL leaves out). It
never flushes a database: ``drop`` removes its own index and the keys
``name:<integer>`` only.

One piece: the RediSearch query compiler, the FLAT/HNSW index lifecycle and
the pipelined hash writes depend on each other (a rebuild reads the index's
schema back); none is used by another store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import re
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import SplitResult

import numpy as np
import redis
import redis.asyncio
import redis.connection
from redis.backoff import NoBackoff
from redis.retry import Retry

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import And, Cmp, Filter, In, Not, Or, Range
from storebench.errors import NotSupported, StorebenchError, UserError
from storebench.stores.base import (
    AsyncView,
    Capability,
    Collection,
    MiB,
    SearchResult,
    Store,
    StoreSpec,
    hnsw_bytes,
    redact_url,
)
from storebench.stores.config import StoreOptions, UrlForm
from storebench.stores.params import HnswIndex, HnswSearch

if TYPE_CHECKING:
    from storebench.servers.base import Server

_pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # the redis extra brings hiredis: commands packed in C, as redis-py does with it
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - redis-py packs them
    _pack_command = None


def _redis_url(url: str, parts: SplitResult | None) -> SplitResult | None:
    """The URL as redis-py reads it; a path it would ignore is refused."""
    redis.connection.parse_url(url)  # ValueError on a query value it cannot read
    if parts is not None and parts.scheme == "unix":
        if not parts.path:
            raise ValueError("no socket path")
    elif parts is not None:
        db = parts.path.removeprefix("/")
        if db and not (db.isascii() and db.isdigit()):
            raise ValueError(f"the path is a database number, not {db!r}")
    return parts


# also FalkorDB's (a Redis server with a module)
REDIS_URL = UrlForm(
    "redis://[:password@]host:port/db",
    schemes=("redis", "rediss", "unix"),
    hostless=("unix",),
    parse=_redis_url,
)
_METRIC = {"l2": "L2", "ip": "IP", "cosine": "COSINE"}
_NP_TYPE = {"int": np.int64, "float": np.float64, "bool": np.bool_, "str": object}
_SEP = "\x1f"  # TAG separator: a control character no label contains
_ID = "_id"  # the hash field holding the id (NUMERIC attribute "_id")
_TAG_SPECIAL = re.compile(r"([^A-Za-z0-9_])")
_PAGE = 10_000  # results per FT.SEARCH page in find
_POLL_S = 0.01  # interval between FT.INFO polls while the engine indexes


class IndexingFailed(StorebenchError):
    """The engine reported documents it could not index."""


def _num(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "1" if value else "0"
    if isinstance(value, int | np.integer):
        return str(int(value))
    f = float(value)
    if math.isinf(f):
        return "+inf" if f > 0 else "-inf"
    return repr(f)


def _tag(value: Any) -> str:
    return _TAG_SPECIAL.sub(r"\\\1", str(value))


def to_query(f: Filter, attr: Mapping[str, str], kinds: Mapping[str, str]) -> str:
    """Compile a storebench filter to a RediSearch query (DIALECT 2).

    ``attr`` maps field names to index attributes, ``kinds`` to field kinds
    (str fields are TAG: eq, ne and in only)."""

    def cmp(field: str, op: str, value: Any) -> str:
        a = attr[field]
        if kinds[field] == "str":
            if op == "eq":
                return f"@{a}:{{{_tag(value)}}}"
            if op == "ne":
                return f"-@{a}:{{{_tag(value)}}}"
            raise UserError(
                f"redis: string field {field!r} supports eq, ne and in, not {op}",
                where="filter",
            )
        v = _num(value)
        return {
            "eq": f"@{a}:[{v} {v}]",
            "ne": f"-@{a}:[{v} {v}]",
            "lt": f"@{a}:[-inf ({v}]",
            "le": f"@{a}:[-inf {v}]",
            "gt": f"@{a}:[({v} +inf]",
            "ge": f"@{a}:[{v} +inf]",
        }[op]

    def go(node: Filter) -> str:
        if isinstance(node, Cmp):
            return cmp(node.field, node.op, node.value)
        if isinstance(node, Range):
            return f"@{attr[node.field]}:[{_num(node.lo)} {_num(node.hi)}]"
        if isinstance(node, In):
            if not node.values:
                return f"@{_ID}:[+inf -inf]"  # matches nothing
            if kinds[node.field] == "str":
                return f"@{attr[node.field]}:{{{' | '.join(_tag(v) for v in node.values)}}}"
            return "(" + " | ".join(cmp(node.field, "eq", v) for v in node.values) + ")"
        if isinstance(node, And):
            return "(" + " ".join(go(p) for p in node.parts) + ")"
        if isinstance(node, Or):
            return "(" + " | ".join(go(p) for p in node.parts) + ")"
        if isinstance(node, Not):
            return f"-({go(node.part)})"
        raise TypeError(f"not a filter: {node!r}")

    return go(f)


def _resp_args(args: Sequence[Any]) -> list[bytes]:
    """A command's arguments as redis-py sends them: str as UTF-8, numbers
    as their decimal text (floats by repr), bytes as they are."""
    return [
        a if isinstance(a, bytes) else (repr(a) if isinstance(a, float) else str(a)).encode()
        for a in args
    ]


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return {
        (k.decode() if isinstance(k, bytes) else k): v
        for k, v in zip(flat[::2], flat[1::2], strict=True)
    }


class RedisCollection(Collection):
    store: RedisStore

    def __init__(self, store: RedisStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self.prefix = f"{name}:"
        self._bprefix = self.prefix.encode()
        self._fields = list(schema.fields)
        self._kinds = dict(schema.fields)
        self._attr = {f: f"f{i}" for i, f in enumerate(self._fields)}
        self._vec = schema.dim is not None
        self._dist = 1.0  # "1 - dot" -> "-dot" for ip
        # an HSET of this collection: key and id at 1 and 3, values at 5, 7, ..
        self._template: list[Any] = ["HSET", None, _ID, None]
        for f in self._fields:
            self._template += [f, None]
        self._bools = {f for f, kind in self._kinds.items() if kind == "bool"}

    @property
    def _r(self) -> redis.Redis:
        return self.store.client

    def aio(self, share: AsyncView | None = None) -> AsyncView:
        """redis-py's asyncio connection, one per client (``RedisAsyncView``)."""
        return RedisAsyncView(self, share)

    def _key(self, i: int) -> str:
        return f"{self.prefix}{i}"

    def _id_of(self, key: bytes) -> int:
        return int(key[len(self._bprefix) :])

    # --- the index definition ---------------------------------------------
    def _schema_args(self, algorithm: str, params: HnswIndex) -> list[Any]:
        args: list[Any] = ["SCHEMA", _ID, "NUMERIC"]
        for f in self._fields:
            kind = self._kinds[f]
            if kind == "str":
                args += [f, "AS", self._attr[f], "TAG", "SEPARATOR", _SEP, "CASESENSITIVE"]
            else:
                args += [f, "AS", self._attr[f], "NUMERIC"]
        if self._vec:
            attrs: list[Any] = [
                "TYPE",
                "FLOAT32",
                "DIM",
                int(self.schema.dim),  # type: ignore[arg-type]
                "DISTANCE_METRIC",
                _METRIC[self.schema.metric],
            ]
            if algorithm == "HNSW":  # the engine's defaults for what is not given
                if params.m is not None:
                    attrs += ["M", params.m]
                if params.ef_construct is not None:
                    attrs += ["EF_CONSTRUCTION", params.ef_construct]
            args += ["v", "AS", "v", "VECTOR", algorithm, len(attrs), *attrs]
        return args

    def _create_index(self, algorithm: str, params: HnswIndex) -> None:
        self._r.execute_command(
            "FT.CREATE",
            self.name,
            "ON",
            "HASH",
            "PREFIX",
            1,
            self.prefix,
            *self._schema_args(algorithm, params),
        )
        self.store._algorithm[self.name] = algorithm
        self.store._built_with[self.name] = params

    def _info(self) -> dict[str, Any]:
        return _pairs(self._r.execute_command("FT.INFO", self.name))

    def _wait_indexed(self) -> bool:
        """Until the engine says every document is indexed (its own signal);
        whether it had to wait (the first look found indexing under way)."""
        wait = threading.Event()
        waited = False
        while True:
            info = self._info()
            if int(info.get("hash_indexing_failures", 0)):
                raise IndexingFailed(
                    f"redis: {info['hash_indexing_failures']} documents of {self.name} failed to index"
                )
            if int(info.get("indexing", 0)) == 0 and float(info.get("percent_indexed", 1)) >= 1:
                return waited
            waited = True
            wait.wait(_POLL_S)  # a poll interval, not a guess at the build time

    # --- contract ------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        # one round trip for the whole batch
        self.store._send(self._hsets(docs))

    def insert_pipelined(self, batches: Sequence[DocBatch]) -> None:
        """Every batch's HSETs in one pipeline (no MULTI): all requests are
        written before any reply is read, as ``redis-benchmark -P`` does."""
        commands: list[list[Any]] = []
        for docs in batches:
            commands += self._hsets(docs)
        self.store._send(commands)  # one round trip for all of them

    def _hsets(self, docs: DocBatch) -> list[list[Any]]:
        """One HSET per document (``_id``, the fields, the vector blob),
        built column-wise: one ``tolist`` per column (bools as 0/1), then
        per document a copy of the collection's template with its key, id
        and values put in (no Python work per field)."""
        ids = docs.ids.tolist()
        fields = docs.fields
        if self._bools:
            cols = [
                (fields[f].astype(np.int64) if f in self._bools else fields[f]).tolist()
                for f in self._fields
            ]
        else:
            cols = [fields[f].tolist() for f in self._fields]
        template = self._template
        prefix = self.prefix
        end = len(template)
        out: list[list[Any]] = []
        for i, row in zip(ids, zip(*cols, strict=True) if cols else [()] * len(ids), strict=True):
            args = template.copy()
            args[1] = f"{prefix}{i}"
            args[3] = i
            args[5:end:2] = row
            out.append(args)
        if docs.vectors is not None and len(ids):
            blobs = docs.vectors.astype(np.float32, copy=False).tobytes()
            width = docs.vectors.shape[1] * 4
            for j, args in enumerate(out):
                args += ["v", blobs[j * width : (j + 1) * width]]
        return out

    # --- the native client -------------------------------------------------------
    native_ops = frozenset({"insert", "search"})

    def native_insert(self, ops: Sequence[Sequence[DocBatch]]) -> Any:
        """Operation j sends the HSETs of ``ops[j]``'s batches at once (as
        ``insert_pipelined``, ``_hsets``' very commands) and reads their
        replies."""
        return self.store._native(
            [[_resp_args(c) for docs in batches for c in self._hsets(docs)] for batches in ops]
        )

    def native_search(self, queries: np.ndarray, k: int) -> Any:
        """``search``'s FT.SEARCH, one per operation; the loop keeps the
        ids of the keys returned."""
        vecs = np.ascontiguousarray(queries, dtype=np.float32)
        ops = [[_resp_args(self._knn_command(v.tobytes(), k, None))] for v in vecs]
        return self.store._native(ops, id_prefix=self._bprefix)

    def get(self, ids: np.ndarray) -> DocBatch:
        names = [*self._fields, _ID] + (["v"] if self._vec else [])
        pipe = self._r.pipeline(transaction=False)
        for i in ids.tolist():
            pipe.execute_command("HMGET", self._key(i), *names)
        rows = [r for r in pipe.execute() if r[-1] is not None]
        return self._rows(rows, names)

    def _rows(self, rows: list[list[Any]], names: list[str]) -> DocBatch:
        with_vec = "v" in names
        if not rows:
            empty = DocBatch.empty(self.schema)
            return empty if with_vec else empty.select(None, vectors=False)
        cols = list(zip(*rows, strict=True))
        pos = {n: k for k, n in enumerate(names)}
        fields = {f: self._decode(f, cols[pos[f]]) for f in self._fields}
        vecs = None
        if with_vec:
            vecs = np.frombuffer(b"".join(cols[pos["v"]]), np.float32).reshape(len(rows), -1)
        return DocBatch(np.array(cols[pos[_ID]], dtype=np.int64), fields, vecs)

    def _decode(self, field: str, values: tuple[Any, ...]) -> np.ndarray:
        kind = self._kinds[field]
        if kind == "str":
            return np.array([v.decode() for v in values], dtype=object)
        if kind == "float":
            return np.array(values, dtype=np.float64)
        if kind == "bool":
            return np.array(values, dtype=np.int64).astype(np.bool_)
        return np.array(values, dtype=np.int64)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        cols = [(f, docs.fields[f].tolist()) for f in fields]
        width = 0 if docs.vectors is None else docs.vectors.shape[1] * 4
        blobs = docs.vectors.tobytes() if docs.vectors is not None else b""
        if not cols and not width:
            return
        pipe = self._r.pipeline(transaction=False)
        for j, i in enumerate(docs.ids.tolist()):
            args: list[Any] = []
            for f, values in cols:
                v = values[j]
                args += [f, int(v) if isinstance(v, bool) else v]
            if width:
                args += ["v", blobs[j * width : (j + 1) * width]]
            pipe.execute_command("HSET", self._key(i), *args)
        pipe.execute()

    def delete(self, ids: np.ndarray) -> None:
        keys = [self._key(i) for i in ids.tolist()]
        if keys:
            self._r.execute_command("DEL", *keys)

    def _query(self, where: Filter | None) -> str:
        return "*" if where is None else to_query(where, self._attr, self._kinds)

    def find(
        self,
        where: Filter | None = None,
        order: tuple[str, bool] | None = None,
        limit: int | None = None,
    ) -> DocBatch:
        q = self._query(where)
        names = [_ID, *self._fields]
        ret = ["RETURN", len(names), _ID, *(self._attr[f] for f in self._fields)]
        sort = ["SORTBY", self._attr[order[0]], "DESC" if order[1] else "ASC"] if order else []
        rows: list[list[Any]] = []
        want = limit if limit is not None else math.inf
        while len(rows) < want:
            n = int(min(_PAGE, want - len(rows)))
            res = self._r.execute_command(
                "FT.SEARCH", self.name, q, *ret, *sort, "LIMIT", len(rows), n, "DIALECT", 2
            )
            total, hits = int(res[0]), res[2::2]
            for h in hits:
                d = _pairs(h)
                rows.append([d.get(self._attr[f]) for f in self._fields] + [d[_ID]])
            if not hits or len(rows) >= total:
                break
        return self._rows(rows, [*self._fields, _ID])

    def _knn_command(self, vec: bytes, k: int, where: Filter | None) -> list[Any]:
        """The FT.SEARCH of one query vector (``search``, its async and
        native forms): the k nearest, at the store's EF_RUNTIME on HNSW."""
        base = "*" if where is None else f"({self._query(where)})"
        ef = self.store.ef
        runtime = (
            f" EF_RUNTIME {ef}" if ef and self.store._algorithm.get(self.name) == "HNSW" else ""
        )
        q = f"{base}=>[KNN {int(k)} @v $B{runtime} AS __d]"
        return [
            "FT.SEARCH", self.name, q, "PARAMS", 2, "B", vec,
            "SORTBY", "__d", "RETURN", 1, "__d", "LIMIT", 0, int(k), "DIALECT", 2,
        ]  # fmt: skip

    def _knn_result(self, replies: Sequence[Any], k: int) -> SearchResult:
        """Ids and distances (the metric's, from the engine's) of FT.SEARCH replies."""
        out_ids = np.full((len(replies), k), -1, np.int64)
        out_d = np.full((len(replies), k), np.inf, np.float32)
        for j, res in enumerate(replies):
            keys, vals = res[1::2], res[2::2]
            for c, (key, val) in enumerate(zip(keys, vals, strict=True)):
                out_ids[j, c] = self._id_of(key)
                out_d[j, c] = float(val[1])
        metric = self.schema.metric
        if metric == "l2":
            np.sqrt(np.maximum(out_d, 0), out=out_d)
        elif metric == "ip":
            out_d -= 1.0
        return SearchResult(out_ids, out_d)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        vecs = np.ascontiguousarray(vectors, dtype=np.float32)
        if len(vecs) == 1:  # a plain command (a pipeline of one costs ~0.15 ms of client CPU more)
            return self._knn_result(
                [self._r.execute_command(*self._knn_command(vecs[0].tobytes(), k, where))], k
            )
        pipe = self._r.pipeline(transaction=False)
        for v in vecs:
            pipe.execute_command(*self._knn_command(v.tobytes(), k, where))
        return self._knn_result(pipe.execute(), k)

    def count(self) -> int:
        res = self._r.execute_command("FT.SEARCH", self.name, "*", "LIMIT", 0, 0, "DIALECT", 2)
        return int(res[0])

    def build_index(self, params: HnswIndex) -> bool:
        """HNSW over the documents already loaded; returns when indexed.

        An HNSW attribute with these parameters since the collection's
        creation holds every document already: nothing is built (False:
        built during the upload), once the engine confirms that it has
        indexed them all. Had it still been indexing (it indexes a write
        before replying, so only a server that defers vector inserts to
        worker threads would), the wait is this step's, and it is a build
        (True), so no indexing time goes unrecorded."""
        if (
            self.store._algorithm.get(self.name) == "HNSW"
            and self.store._built_with.get(self.name) == params
        ):
            return self._wait_indexed()
        self._r.execute_command("FT.DROPINDEX", self.name)  # keeps the documents
        self._create_index("HNSW", params)
        self._wait_indexed()
        return True

    def set_search_params(self, params: HnswSearch) -> None:
        if params.ef is not None:
            self.store.ef = params.ef

    def size_bytes(self) -> int:
        """The collection's keys (MEMORY USAGE each) plus its index's memory."""
        total = 0
        for keys in self.store._own_keys(self.prefix):
            pipe = self._r.pipeline(transaction=False)
            for key in keys:
                pipe.execute_command("MEMORY", "USAGE", key, "SAMPLES", 0)
            total += sum(int(x or 0) for x in pipe.execute())
        info = self._info()
        total += int(float(info.get("total_index_memory_sz_mb", 0)) * 1024 * 1024)
        total += int(float(info.get("vector_index_sz_mb", 0)) * 1024 * 1024)
        return total

    def _drop(self) -> None:
        self.store._drop_own(self.name, self.prefix)


class RedisStore(Store):
    async_ops = "native"
    engine = "redis"
    capabilities = frozenset(Capability) - {Capability.COMPACT}
    Index = HnswIndex
    Search = HnswSearch
    extra = "redis"
    url_form = REDIS_URL

    class Options(StoreOptions):
        managed_only = ("persistence", "server_args")
        persistence: Literal["none", "rdb", "aof"] = "none"
        server_args: list[str | int | float] = []

    @classmethod
    def managed_server(cls, options: Options) -> Callable[[], Server]:
        from storebench.servers.redis import RedisServer

        return functools.partial(
            RedisServer,
            persistence=options.persistence,
            args=[str(a) for a in options.server_args],
        )

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.ef: int | None = None  # EF_RUNTIME (set_search_params); None: the engine's
        self._algorithm: dict[str, str] = {}
        self._built_with: dict[str, HnswIndex] = {}  # each index's parameters, as created
        # the write path's own connections (``_send``): made on demand, one
        # per concurrent writer, reused through a free list
        self._writers: list[redis.Connection] = []
        self._spare: list[redis.Connection] = []
        try:
            self.client = self._connect()
        except BaseException:
            self.close()
            raise

    def _send(self, commands: list[list[Any]]) -> None:
        """Sends ``commands`` on one connection, every one before reading any
        reply (a pipeline without MULTI), then reads all the replies and
        raises the first error among them (having read them all, the
        connection stays in step). The connection comes off the store's
        free list and goes back after (list pop/append: atomic), not the
        pool's checkout with a pipeline object around it: that made a
        one-HSET insert cost 1.7x the client CPU (29 us, now 17, most of it
        the socket calls). A connection that failed mid-way is closed and
        reconnects on its next use."""
        if not commands:
            return
        try:
            conn = self._spare.pop()
        except IndexError:
            pool = self.client.connection_pool
            conn = pool.connection_class(**pool.connection_kwargs)
            self._writers.append(conn)
        error: redis.ResponseError | None = None
        try:
            if _pack_command is not None:  # what redis-py's packer calls, less its checks
                packed = [b"".join([_pack_command(tuple(c)) for c in commands])]
            else:
                packed = conn.pack_commands(commands)
            conn.send_packed_command(packed, False)
            for _ in commands:
                try:
                    conn.read_response()
                except redis.ResponseError as exc:
                    error = error or exc
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._spare.append(conn)
        if error is not None:
            raise error

    def _native(self, ops: list[list[list[bytes]]], id_prefix: bytes | None = None) -> Any:
        """A native op on a connection of its own (the extension's), after
        the AUTH and SELECT this store's connections send."""
        from storebench.stores.native import extension

        pool = self.client.connection_pool
        kw = pool.connection_kwargs
        if "path" in kw or kw.get("ssl") or "host" not in kw:
            raise NotSupported("redis", "the native client on a Unix socket or TLS")
        hello = []
        if kw.get("password"):
            user = [kw["username"]] if kw.get("username") else []
            hello.append(_resp_args(["AUTH", *user, kw["password"]]))
        if kw.get("db"):
            hello.append(_resp_args(["SELECT", kw["db"]]))
        ext = extension()
        return ext.redis(kw["host"], int(kw["port"]), hello, ops, id_prefix)  # type: ignore[union-attr]

    def _connect(self) -> redis.Redis:
        url = self.spec.url or ""
        kw: dict[str, Any] = {
            "protocol": 2,  # the reply shapes parsed here
            # no silent retries: a benchmark reports a failed call, and a dead
            # server fails the run at once instead of after backoffs
            "retry": Retry(NoBackoff(), 0),
            # one connection per concurrent client thread (social runs 221);
            # redis-py 8's pool refuses a 101st by default
            "max_connections": 100_000,
        }
        if "@" not in url and os.environ.get("REDIS_PASSWORD"):
            kw["password"] = os.environ["REDIS_PASSWORD"]
        client = redis.Redis.from_url(url, **kw)
        try:
            client.ping()
            modules = client.execute_command("MODULE", "LIST")
        except redis.RedisError as exc:
            client.close()
            raise UserError(
                f"cannot reach Redis at {redact_url(url)}: {exc}", where="store redis"
            ) from exc
        names = {_pairs(m).get("name", b"").lower() for m in modules}
        if not names & {b"search", b"ft"}:
            client.close()
            raise UserError(
                f"Redis at {redact_url(url)} has no search module (RediSearch)",
                where="store redis",
            )
        self._modules = {_pairs(m)["name"].decode(): str(_pairs(m).get("ver", "")) for m in modules}
        return client

    # --- own keys only ----------------------------------------------------------
    def _own_keys(self, prefix: str, batch: int = 1000) -> Any:
        """Keys ``<prefix><integer>`` (this collection's documents), in batches.

        The glob is escaped and every key re-checked, so another collection
        whose name starts with this one's never matches."""
        glob = re.sub(r"([\\*?\[\]])", r"\\\1", prefix) + "*"
        own = re.compile(re.escape(prefix.encode()) + rb"-?[0-9]+\Z")
        chunk: list[bytes] = []
        for key in self.client.scan_iter(match=glob, count=batch):
            if own.match(key):
                chunk.append(key)
                if len(chunk) >= batch:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk

    def _drop_own(self, name: str, prefix: str) -> None:
        if name.encode() in self._indexes():
            self.client.execute_command("FT.DROPINDEX", name)
        for keys in self._own_keys(prefix):
            self.client.execute_command("UNLINK", *keys)
        self._algorithm.pop(name, None)
        self._built_with.pop(name, None)

    def _indexes(self) -> set[bytes]:
        return set(self.client.execute_command("FT._LIST"))

    # --- collections ---------------------------------------------------------------
    def has_collection(self, name: str) -> bool:
        if name.encode() in self._indexes():
            return True
        return next(iter(self._own_keys(f"{name}:")), None) is not None

    def _create(self, name: str, schema: Schema, index: HnswIndex) -> Collection:
        """With index parameters, the HNSW index they make, loaded as the
        documents arrive; without, FLAT (exact) until ``build_index``."""
        coll = RedisCollection(self, name, schema)
        if index.given():
            coll._create_index("HNSW", index)
        else:
            coll._create_index("FLAT", HnswIndex())
        return coll

    def _open(self, name: str, schema: Schema) -> Collection:
        if name.encode() not in self._indexes():
            raise UserError(
                f"no index {name!r} in {redact_url(self.spec.url)}", where="store redis"
            )
        coll = RedisCollection(self, name, schema)
        info = coll._info()
        for attr in info.get("attributes", []):
            if b"VECTOR" in attr:  # a flat list with value-less flags: look, don't pair
                self._algorithm[name] = "HNSW" if b"HNSW" in attr else "FLAT"
        return coll

    def engine_stats(self) -> dict[str, dict[str, Any]] | None:
        """``INFO commandstats``: calls and microseconds the server itself
        spent per command (FT.SEARCH for searches, HSET for writes). The
        search module runs queries on the main thread here (no WORKERS), so
        the time is the whole query's."""
        stats = self.client.info("commandstats")
        out: dict[str, dict[str, Any]] = {}
        for op, cmd in (("search", "FT.SEARCH"), ("write", "HSET")):
            s = stats.get(f"cmdstat_{cmd}")
            if s:
                out[op] = {"calls": int(s["calls"]), "time_s": s["usec"] / 1e6, "command": cmd}
        return out

    @classmethod
    def memory_use(
        cls, spec: StoreSpec, index: HnswIndex, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        if spec.url is not None:
            return 0, 0  # a server of yours: not counted
        # the managed Redis keeps the hashes and the vector index in RAM
        m = index.m or 16
        return 4 * dim + field_bytes + 256 + hnsw_bytes(dim, m), 16 * MiB

    def versions(self) -> dict[str, str]:
        info = self.client.info("server")
        search = self._modules.get("search", "?")
        if search.isdigit():  # 21005 -> 2.10.5
            v = int(search)
            search = f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        return {
            "engine": f"Redis {info.get('redis_version', '?')} + RediSearch {search}",
            "client": f"redis-py {metadata.version('redis')}",
        }

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        for conn in getattr(self, "_writers", ()):
            conn.disconnect()
        super().close()


# --- the async view (``Collection.aio``) -------------------------------------------


class RedisAsyncView(AsyncView):
    """An asyncio stream per event-loop client, commands packed and replies
    parsed by hiredis, with the sync collection's commands and reply
    decoding: the same hashes written, the same neighbours found. Every
    command of a call is written before any reply is read, as the sync
    ``_send`` does. Not redis-py's asyncio connection: on uvloop, 8 clients
    of one-HSET inserts spent 62-81 us of client CPU per insert through it,
    against 43-48 us for the sync client (its awaits per reply cost more
    than the round trip's own work; ``benchmarks/client_models.py``)."""

    native = True
    coll: RedisCollection

    def __init__(self, coll: RedisCollection, share: AsyncView | None = None):
        super().__init__(coll, share)
        self.reader: Any = None
        self.writer: Any = None

    async def open(self) -> None:
        if self.share is not None:
            self.reader, self.writer, self.parser = (
                self.share.reader,
                self.share.writer,
                self.share.parser,
            )
            return
        import hiredis

        url = self.coll.store.spec.url or ""
        kw = redis.asyncio.ConnectionPool.from_url(url).connection_kwargs
        if "path" in kw:
            self.reader, self.writer = await asyncio.open_unix_connection(kw["path"])
        else:
            self.reader, self.writer = await asyncio.open_connection(
                kw.get("host", "localhost"), kw.get("port", 6379)
            )
        sock = self.writer.get_extra_info("socket")
        if sock is not None and "path" not in kw:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = hiredis.Reader()
        password = kw.get("password")
        if password is None and "@" not in url:
            password = os.environ.get("REDIS_PASSWORD")
        setup: list[list[Any]] = []
        if password is not None:
            user = kw.get("username")
            setup.append(["AUTH", user, password] if user else ["AUTH", password])
        if kw.get("db"):
            setup.append(["SELECT", kw["db"]])
        await self._send(setup)

    async def close(self) -> None:
        if self.share is None and self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None

    async def _send(self, commands: list[list[Any]]) -> list[Any]:
        """All ``commands`` written, then every reply read; the first error
        among them raised once all are read (the connection stays in step)."""
        if not commands:
            return []
        import hiredis

        self.writer.write(b"".join([hiredis.pack_command(tuple(c)) for c in commands]))
        parser = self.parser
        replies: list[Any] = []
        while len(replies) < len(commands):
            reply = parser.gets()
            if reply is False:
                data = await self.reader.read(1 << 16)
                if not data:
                    raise redis.ConnectionError("Redis closed the connection")
                parser.feed(data)
                continue
            replies.append(reply)
        for reply in replies:
            if isinstance(reply, hiredis.ReplyError):
                raise redis.ResponseError(str(reply))
        return replies

    async def insert(self, docs: DocBatch) -> None:
        await self._send(self.coll._hsets(docs))

    async def insert_pipelined(self, batches: Sequence[DocBatch]) -> None:
        commands: list[list[Any]] = []
        for docs in batches:
            commands += self.coll._hsets(docs)
        await self._send(commands)

    async def get(self, ids: np.ndarray) -> DocBatch:
        c = self.coll
        names = [*c._fields, _ID] + (["v"] if c._vec else [])
        replies = await self._send([["HMGET", c._key(i), *names] for i in ids.tolist()])
        return c._rows([r for r in replies if r[-1] is not None], names)

    async def find(
        self,
        where: Filter | None = None,
        order: tuple[str, bool] | None = None,
        limit: int | None = None,
    ) -> DocBatch:
        c = self.coll
        q = c._query(where)
        names = [_ID, *c._fields]
        ret = ["RETURN", len(names), _ID, *(c._attr[f] for f in c._fields)]
        sort = ["SORTBY", c._attr[order[0]], "DESC" if order[1] else "ASC"] if order else []
        rows: list[list[Any]] = []
        want = limit if limit is not None else math.inf
        while len(rows) < want:
            n = int(min(_PAGE, want - len(rows)))
            (res,) = await self._send(
                [["FT.SEARCH", c.name, q, *ret, *sort, "LIMIT", len(rows), n, "DIALECT", 2]]
            )
            total, hits = int(res[0]), res[2::2]
            for h in hits:
                d = _pairs(h)
                rows.append([d.get(c._attr[f]) for f in c._fields] + [d[_ID]])
            if not hits or len(rows) >= total:
                break
        return c._rows(rows, [*c._fields, _ID])

    async def search(
        self, vectors: np.ndarray, k: int, where: Filter | None = None
    ) -> SearchResult:
        c = self.coll
        vecs = np.ascontiguousarray(vectors, dtype=np.float32)
        replies = await self._send([c._knn_command(v.tobytes(), k, where) for v in vecs])
        return c._knn_result(replies, k)
