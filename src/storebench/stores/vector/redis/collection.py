"""Redis's collection: the hashes ``name:<id>`` and the search index over
them (FLAT until built, or HNSW from the start), pipelined writes, searches
as FT.SEARCH."""

from __future__ import annotations

import math
import threading
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import redis

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.errors import StorebenchError
from storebench.stores.base import AsyncView, Collection, SearchResult
from storebench.stores.params import HnswIndex, HnswSearch, Order
from storebench.stores.vector.redis import native
from storebench.stores.vector.redis.aio import RedisAsyncView
from storebench.stores.vector.redis.codec import ID, METRIC, SEP, pairs, to_query

if TYPE_CHECKING:
    from storebench.stores.vector.redis.store import RedisStore

_PAGE = 10_000  # results per FT.SEARCH page in find
_POLL_S = 0.01  # interval between FT.INFO polls while the engine indexes


class IndexingFailed(StorebenchError):
    """The engine reported documents it could not index."""


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
        self._template: list[Any] = ["HSET", None, ID, None]
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
        args: list[Any] = ["SCHEMA", ID, "NUMERIC"]
        for f in self._fields:
            kind = self._kinds[f]
            if kind == "str":
                args += [f, "AS", self._attr[f], "TAG", "SEPARATOR", SEP, "CASESENSITIVE"]
            else:
                args += [f, "AS", self._attr[f], "NUMERIC"]
        if self._vec:
            attrs: list[Any] = [
                "TYPE",
                "FLOAT32",
                "DIM",
                int(self.schema.dim),  # type: ignore[arg-type]
                "DISTANCE_METRIC",
                METRIC[self.schema.metric],
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
        return pairs(self._r.execute_command("FT.INFO", self.name))

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
    native_insert = native.insert
    native_search = native.search

    def get(self, ids: np.ndarray) -> DocBatch:
        names = [*self._fields, ID] + (["v"] if self._vec else [])
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
        return DocBatch(np.array(cols[pos[ID]], dtype=np.int64), fields, vecs)

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

    def _find(
        self, where: Filter | None, order: Order, limit: int | None
    ) -> Generator[list[Any], Any, DocBatch]:
        """``find`` page by page: each page's FT.SEARCH yielded, its reply
        sent back in; the documents returned (the async view's too)."""
        q = self._query(where)
        names = [ID, *self._fields]
        ret = ["RETURN", len(names), ID, *(self._attr[f] for f in self._fields)]
        sort = ["SORTBY", self._attr[order[0]], "DESC" if order[1] else "ASC"] if order else []
        rows: list[list[Any]] = []
        want = limit if limit is not None else math.inf
        while len(rows) < want:
            n = int(min(_PAGE, want - len(rows)))
            res = yield [
                "FT.SEARCH",
                self.name,
                q,
                *ret,
                *sort,
                "LIMIT",
                len(rows),
                n,
                "DIALECT",
                2,
            ]
            total, hits = int(res[0]), res[2::2]
            for h in hits:
                d = pairs(h)
                rows.append([d.get(self._attr[f]) for f in self._fields] + [d[ID]])
            if not hits or len(rows) >= total:
                break
        return self._rows(rows, [*self._fields, ID])

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        pages = self._find(where, order, limit)
        try:
            command = next(pages)
            while True:
                command = pages.send(self._r.execute_command(*command))
        except StopIteration as done:
            return done.value

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

        def rows_of(res: Any) -> list[tuple[int, float]]:
            pairs = zip(res[1::2], res[2::2], strict=True)
            return [(self._id_of(key), float(val[1])) for key, val in pairs]

        out = SearchResult.from_rows(replies, k, rows_of)
        out_d, metric = out.distances, self.schema.metric
        if metric == "l2":
            np.sqrt(np.maximum(out_d, 0), out=out_d)
        elif metric == "ip":
            out_d -= 1.0
        return out

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
