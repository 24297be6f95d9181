"""What the Elasticsearch and OpenSearch stores share: the REST API of a
Lucene search engine.

A collection is one index (one primary shard, no replicas unless the options
say otherwise); a document's id is its ``_id`` (the int64 as a string), its
scalar fields are typed mappings (``long``, ``double``, ``boolean``,
``keyword``) and its vector is one HNSW-indexed field (``sb_vec``). The two
engines differ only in the vector mapping, the kNN query, the client and how a
version is read; ``elasticsearch_store`` and ``opensearch_store`` say those.

Requests go through the official client's transport (connection pool, auth,
retries) as raw REST calls with bodies built as bytes: a bulk request is
NDJSON assembled from the columns (numbers serialised per column by orjson,
one ``bytes`` join per document: no dict per document), and responses are
trimmed with ``filter_path`` so the client parses only what is used.

Visibility. Lucene engines are near-real-time: a write becomes searchable at
the next refresh. With the default ``refresh: auto`` option a ``find``,
``search`` or ``count`` after this process's writes refreshes the index first
(read-your-writes, as the SQL stores give; the refresh is part of that first
read's latency). ``refresh: wait_for`` makes each write wait for visibility
instead, and ``refresh: none`` leaves it to the engine's refresh interval.
``get`` reads by id, which is real-time without a refresh. With process
clients a write in one process is refreshed by that process only.

Options (``StoreSpec.options``): the topology (``shards``, ``replicas``:
copies of the data, 1; and for a managed cluster ``nodes``, ``node_cpus``,
``node_memory``: ``stores.config.ClusterOptions``),
``refresh`` (auto | wait_for | none), ``force_merge`` (true: ``build_index``
merges to one segment, so search runs on one HNSW graph), ``request_timeout``
(seconds, 120), ``verify_certs`` / ``ca_certs`` (https), and for a managed
server ``heap`` (JVM -Xms and -Xmx, e.g. "2g"; default -Xms512m -Xmx1g).
Credentials: in the URL (``http://user:pass@host:9200``) or
``STOREBENCH_<ENGINE>_USERNAME`` / ``..._PASSWORD``; never in records or
messages.

One piece: it is the shared half of two adapters (Elasticsearch and
OpenSearch differ only in their client, distribution and a few parameters),
so splitting it would only move the REST API's mapping apart from its query
builder.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import orjson
from pydantic import PositiveFloat, StrictBool

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import And, Cmp, Filter, In, Not, Or, Range
from storebench.errors import ForeignDataError, StorebenchError, UserError
from storebench.stores.base import (
    Capability,
    Collection,
    MiB,
    Pace,
    SearchResult,
    Store,
    StoreSpec,
    redact_url,
)
from storebench.stores.columns import batch_from_records, plain
from storebench.stores.config import ClusterOptions, UrlForm, size_bytes
from storebench.stores.params import HnswIndex, HnswSearch, Order

VECTOR_FIELD = "sb_vec"
MAX_WINDOW = 10_000  # index.max_result_window's default: deeper pages scroll
BULK_BYTES = 16 << 20  # split bulk requests above this size
_NP = orjson.OPT_SERIALIZE_NUMPY
_JSON = {"content-type": "application/json", "accept": "application/json"}
_NDJSON = {"content-type": "application/x-ndjson", "accept": "application/json"}
_MAPPING = {"int": "long", "float": "double", "bool": "boolean", "str": "keyword"}
# index names: lowercase, none of \ / * ? " < > | space , # :, not starting with - _ +
_VALID_NAME = re.compile(r"^(?![-_+])[^A-Z\\/*?\"<>| ,#:]{1,255}$")


class EngineError(StorebenchError):
    """The engine refused or failed a request."""


# --- filters -------------------------------------------------------------------


_RANGE_OP = {"lt": "lt", "le": "lte", "gt": "gt", "ge": "gte"}


def to_query(f: Filter) -> dict[str, Any]:
    """Compile a storebench filter to a Query DSL bool/term/terms/range query."""
    if isinstance(f, Cmp):
        value = plain(f.value)
        if f.op == "eq":
            return {"term": {f.field: value}}
        if f.op == "ne":
            return {"bool": {"must_not": [{"term": {f.field: value}}]}}
        return {"range": {f.field: {_RANGE_OP[f.op]: value}}}
    if isinstance(f, Range):
        return {"range": {f.field: {"gte": plain(f.lo), "lte": plain(f.hi)}}}
    if isinstance(f, In):
        if not f.values:
            return {"match_none": {}}
        return {"terms": {f.field: [plain(v) for v in f.values]}}
    if isinstance(f, And):
        return {"bool": {"filter": [to_query(p) for p in f.parts]}}
    if isinstance(f, Or):
        return {"bool": {"should": [to_query(p) for p in f.parts], "minimum_should_match": 1}}
    if isinstance(f, Not):
        return {"bool": {"must_not": [to_query(f.part)]}}
    raise TypeError(f"not a filter: {f!r}")


# --- columns <-> JSON --------------------------------------------------------------


def _json_values(col: np.ndarray, kind: str) -> list[bytes]:
    """Each value of a column as JSON text, serialised for the whole column
    at once (numbers and booleans hold no commas, so a split is exact)."""
    if kind == "str":
        return [orjson.dumps(v) for v in col.tolist()]
    arr: np.ndarray = col.astype(
        {"int": np.int64, "float": np.float64, "bool": np.bool_}[kind], copy=False
    )
    return orjson.dumps(np.ascontiguousarray(arr), option=_NP)[1:-1].split(b",")


def _json_vectors(vecs: np.ndarray) -> list[bytes]:
    """Each row as a JSON array; float32 values in their shortest exact form."""
    dumps = orjson.dumps  # row by row: faster than one 2-d dump and a split
    return [dumps(row, option=_NP) for row in np.ascontiguousarray(vecs)]


def json_sources(docs: DocBatch, kinds: Mapping[str, str], wrap: bytes = b"") -> list[bytes]:
    """One JSON object per document (``{"f": v, ..., "sb_vec": [...]}``),
    optionally wrapped as ``{"<wrap>": {...}}`` (bulk updates use ``doc``)."""
    cols: list[tuple[bytes, list[bytes]]] = [
        (orjson.dumps(name) + b":", _json_values(col, kinds[name]))
        for name, col in docs.fields.items()
    ]
    if docs.vectors is not None:
        cols.append((orjson.dumps(VECTOR_FIELD) + b":", _json_vectors(docs.vectors)))
    keys = [k for k, _ in cols]
    head, tail = (b'{"' + wrap + b'":{', b"}}\n") if wrap else (b"{", b"}\n")
    if not cols:
        return [head + tail] * len(docs)
    return [
        head + b",".join([k + v for k, v in zip(keys, row, strict=True)]) + tail
        for row in zip(*(vals for _, vals in cols), strict=True)
    ]


def _ids_text(ids: np.ndarray) -> list[bytes]:
    return orjson.dumps(np.ascontiguousarray(ids, np.int64), option=_NP)[1:-1].split(b",")


def float32_exact(values: Any) -> np.ndarray:
    """float32 from JSON numbers written as float32's shortest decimal form
    (orjson's). Parsing to float64 and rounding to float32 gives back the
    original bits: rounding twice could only go wrong when the float64 lands
    exactly on a midpoint between two float32, and an exhaustive check of
    every float32 in [2^-30, 2^40) found no such value."""
    return np.asarray(values, np.float64).astype(np.float32)


# --- the store --------------------------------------------------------------------


class LuceneCollection(Collection):
    store: LuceneStore

    def __init__(
        self, store: LuceneStore, name: str, schema: Schema, index: HnswIndex | None = None
    ):
        super().__init__(store, name, schema)
        if VECTOR_FIELD in schema.fields:
            raise UserError(f"field name {VECTOR_FIELD!r} is reserved for the vector", "schema")
        self._kinds = dict(schema.fields)
        self._path = "/" + name
        self._ef: int | None = None  # set_search_params; None: the engine's
        # the index parameters the mapping fixed (None: opened, not created here)
        self._index = index

    # --- writes ------------------------------------------------------------------
    def _bulk(self, lines: Sequence[bytes], ignore: tuple[str, ...] = ()) -> None:
        """Send NDJSON lines (one or two per action), split into requests of
        at most BULK_BYTES, and fail on any item error not in ``ignore``."""
        params: dict[str, Any] = {"filter_path": "errors,items.*.error"}
        if self.store.options.refresh == "wait_for":
            params["refresh"] = "wait_for"
        for body in _chunks(lines):
            res = self.store._request("POST", self._path + "/_bulk", params, body, _NDJSON)
            if res.get("errors"):
                for item in res.get("items", []):
                    err = next(iter(item.values())).get("error")
                    if err and err.get("type") not in ignore:
                        raise EngineError(
                            f"{self.store.engine} bulk: {err.get('type')}: {err.get('reason')}"
                        )
        self.store._wrote(self.name)

    def insert(self, docs: DocBatch) -> None:
        if not len(docs):
            return
        sources = json_sources(docs, self._kinds)
        lines = [
            b'{"index":{"_id":"' + i + b'"}}\n' + s
            for i, s in zip(_ids_text(docs.ids), sources, strict=True)
        ]
        self._bulk(lines)

    def update(self, docs: DocBatch) -> None:
        if not len(docs) or (not docs.fields and docs.vectors is None):
            return
        sources = json_sources(docs, self._kinds, wrap=b"doc")
        lines = [
            b'{"update":{"_id":"' + i + b'"}}\n' + s
            for i, s in zip(_ids_text(docs.ids), sources, strict=True)
        ]
        self._bulk(lines, ignore=("document_missing_exception",))  # like SQL's UPDATE

    def delete(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        self._bulk([b'{"delete":{"_id":"' + i + b'"}}\n' for i in _ids_text(ids)])

    # --- reads ---------------------------------------------------------------------
    def _to_batch(self, hits: list[dict[str, Any]], with_vectors: bool) -> DocBatch:
        srcs = [h["_source"] for h in hits]
        vecs = float32_exact([s[VECTOR_FIELD] for s in srcs]) if with_vectors else None
        ids = [h["_id"] for h in hits]
        return batch_from_records(self.schema, ids, srcs, lambda s, f: s.get(f), vecs)

    def get(self, ids: np.ndarray) -> DocBatch:
        if not len(ids):
            return self._to_batch([], self.schema.dim is not None)
        body = b'{"ids":["' + b'","'.join(_ids_text(ids)) + b'"]}'
        res = self.store._request(
            "POST", self._path + "/_mget", {"filter_path": "docs._id,docs._source"}, body
        )
        hits = [d for d in res.get("docs", []) if "_source" in d]
        return self._to_batch(hits, self.schema.dim is not None)

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        self.store._before_read(self.name)
        body: dict[str, Any] = {
            "query": {"bool": {"filter": [to_query(where)]}} if where else {"match_all": {}}
        }
        if self.schema.dim is not None:
            body["_source"] = {"excludes": [VECTOR_FIELD]}
        if order is not None:
            body["sort"] = [{order[0]: {"order": "desc" if order[1] else "asc"}}]
        return self._to_batch(list(self._hits(body, limit)), with_vectors=False)

    def _hits(self, body: dict[str, Any], limit: int | None) -> Iterator[dict[str, Any]]:
        """All matching hits (up to ``limit``): one request when they fit in
        one page, else a scroll (which keeps the sort order)."""
        path = self._path + "/_search"
        fp = "hits.total,hits.hits._id,hits.hits._source,_scroll_id"
        first = dict(body, size=min(limit, MAX_WINDOW) if limit is not None else MAX_WINDOW)
        if limit is None or limit > MAX_WINDOW:
            first["track_total_hits"] = True
        res = self.store._request("POST", path, {"filter_path": fp}, orjson.dumps(first))
        hits = res.get("hits", {}).get("hits", [])
        total = res.get("hits", {}).get("total", {}).get("value", len(hits))
        if len(hits) >= total or (limit is not None and len(hits) >= limit):
            yield from hits
            return
        # more than a page: start again as a scroll
        want = total if limit is None else min(limit, total)
        page = dict(body, size=5_000)
        res = self.store._request(
            "POST", path, {"filter_path": fp, "scroll": "2m"}, orjson.dumps(page)
        )
        sid = res.get("_scroll_id")
        seen = 0
        try:
            while True:
                hits = res.get("hits", {}).get("hits", [])
                if not hits:
                    return
                take = hits[: want - seen]
                yield from take
                seen += len(take)
                if seen >= want:
                    return
                res = self.store._request(
                    "POST",
                    "/_search/scroll",
                    {"filter_path": fp},
                    orjson.dumps({"scroll": "2m", "scroll_id": sid}),
                )
                sid = res.get("_scroll_id", sid)
        finally:
            if sid:
                self.store._request(
                    "DELETE", "/_search/scroll", None, orjson.dumps({"scroll_id": [sid]})
                )

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        self.store._before_read(self.name)
        filt = to_query(where) if where is not None else None
        bodies = [
            orjson.dumps(self.store._knn_body(v, k, self._ef, filt), option=_NP) for v in vectors
        ]
        fp = "hits.hits._id,hits.hits._score"
        if len(vectors) == 1:
            results = [
                self.store._request("POST", self._path + "/_search", {"filter_path": fp}, bodies[0])
            ]
        else:
            head = b'{"index":"' + self.name.encode() + b'"}\n'
            res = self.store._request(
                "POST",
                "/_msearch",
                {
                    "filter_path": "responses.hits.hits._id,responses.hits.hits._score,responses.error"
                },
                b"".join(head + b + b"\n" for b in bodies),
                _NDJSON,
            )
            results = res.get("responses", [])

        def rows_of(r: dict[str, Any]) -> list[tuple[int, float]]:
            if "error" in r:
                raise EngineError(f"{self.store.engine} msearch: {r['error']}")
            hits = r.get("hits", {}).get("hits", [])[:k]
            scores = np.array([h["_score"] for h in hits], np.float64)
            dist = score_to_distance(scores, self.schema.metric)
            return list(zip([int(h["_id"]) for h in hits], dist, strict=True))

        return SearchResult.from_rows(results, k, rows_of)

    def count(self) -> int:
        self.store._refresh(self.name)
        return int(
            self.store._request("GET", self._path + "/_count", {"filter_path": "count"})["count"]
        )

    # --- index, parameters, size ---------------------------------------------------------
    def build_index(self, params: HnswIndex) -> None:
        """The HNSW graph is built as documents arrive (index parameters are
        fixed in the mapping at creation); this makes the index searchable and,
        with ``force_merge``, merges it into one segment (one graph), returning
        when the engine says the merge is done and the index is allocated."""
        if self._index is not None and params != self._index:
            changed = sorted(k for k, v in params if getattr(self._index, k) != v)
            raise UserError(
                f"{self.store.engine} fixes index parameters when the index is created; "
                f"give {changed} in the store's index parameters",
                where="store.index",
            )
        self.store._refresh(self.name)
        if self.store.options.force_merge:
            self._forcemerge()
        self.store._request(
            "GET",
            "/_cluster/health" + self._path,
            # green: every copy of every shard started (a replica still
            # recovering would leave the search to fewer nodes than asked)
            {"wait_for_status": "green", "timeout": "120s", "filter_path": "status"},
            timeout=180,
        )

    def _forcemerge(self) -> None:
        self.store._request(
            "POST",
            self._path + "/_forcemerge",
            {"max_num_segments": 1, "filter_path": "_shards"},
            timeout=3600,
        )
        self.store._refresh(self.name)

    def set_search_params(self, params: HnswSearch) -> None:
        if params.ef is not None:
            self._ef = params.ef

    def size_bytes(self) -> int:
        res = self.store._request(
            "GET",
            self._path + "/_stats/store",
            {"filter_path": "_all.total.store.size_in_bytes"},
        )
        return int(res["_all"]["total"]["store"]["size_in_bytes"])

    def compact(self) -> None:
        """Merge this index into one segment, dropping deleted documents."""
        self.store._refresh(self.name)
        self._forcemerge()

    def _drop(self) -> None:
        self.store._request("DELETE", self._path, None, ignore_status=(404,))


def score_to_distance(scores: np.ndarray, metric: str) -> np.ndarray:
    """Lucene's kNN scores back to the metric's distance: l2 score is
    1/(1+d^2); cosine (1+cos)/2; max inner product 1/(1-dot) below 0, else dot+1."""
    if metric == "l2":
        return np.sqrt(np.maximum(1.0 / scores - 1.0, 0.0))
    if metric == "cosine":
        return 2.0 * (1.0 - scores)
    dot = np.where(scores >= 1.0, scores - 1.0, 1.0 - 1.0 / scores)
    return -dot


def _chunks(lines: Sequence[bytes]) -> Iterator[bytes]:
    start, size = 0, 0
    for i, line in enumerate(lines):
        if size and size + len(line) > BULK_BYTES:
            yield b"".join(lines[start:i])
            start, size = i, 0
        size += len(line)
    if start < len(lines):
        yield b"".join(lines[start:])


class LuceneOptions(ClusterOptions):
    managed_only = ("heap", *ClusterOptions.managed_only)
    refresh: Literal["auto", "wait_for", "none"] = "auto"
    force_merge: StrictBool = True
    request_timeout: PositiveFloat = 120.0  # seconds
    verify_certs: StrictBool | None = None  # https
    ca_certs: str | None = None
    heap: str | None = None  # the managed JVM's -Xms and -Xmx, e.g. 2g


def hnsw_parameters(params: HnswIndex) -> dict[str, int]:
    """The HNSW build parameters given (the engine's defaults for the rest),
    by the names both engines use."""
    given = {"m": params.m, "ef_construction": params.ef_construct}
    return {k: v for k, v in given.items() if v is not None}


class Request(NamedTuple):
    """One HTTP request to the engine, as the store's ``_send`` takes it."""

    method: str
    path: str
    params: Mapping[str, Any] | None
    body: Any
    headers: Mapping[str, str]
    timeout: float


class LuceneStore(Store):
    """Shared Elasticsearch / OpenSearch store; subclasses give the dialect."""

    # no PIPELINE: the official clients send one HTTP/1.1 request at a time per
    # connection (no HTTP pipelining); in-flight requests are lanes
    capabilities = frozenset(Capability) - {Capability.PIPELINE}
    Index = HnswIndex
    Search = HnswSearch
    url_form = UrlForm(
        "http(s)://[user:password@]host:port (several, comma-separated: the nodes of a cluster)",
        schemes=("http", "https"),
        several=True,
    )
    Options = LuceneOptions
    collection = LuceneCollection
    # a JVM's bulk upload (JSON over HTTP, segments written, refreshed) and
    # its HNSW build with the force-merge far above the generic priors:
    # Elasticsearch took 12.5 s to upload and 11.7 s to index 5,000 x 96 on
    # one node held to 0.25 core (the priors: 0.4 s and 3.0 s at that
    # quota); a node started in 5.1 s, eight in 47.5 s
    pace = Pace(upload=30.0, build=4.0, start=1.4)

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        opts = self.options
        self.timeout = opts.request_timeout
        self._dirty: set[str] = set()  # written since the last refresh (auto)
        self.client: Any = None
        try:
            hosts = [self._split_url(u) for u in (self.spec.url or "").split(",")]
            tls = {"verify_certs": opts.verify_certs, "ca_certs": opts.ca_certs}
            self.client = self._connect(
                [url for url, _ in hosts],
                hosts[0][1],
                {k: v for k, v in tls.items() if v is not None},
            )
            self._request("GET", "/_cluster/health", {"filter_path": "status"})
        except Exception as exc:
            if isinstance(exc, UserError):
                raise
            where = redact_url(self.spec.url)
            raise UserError(f"cannot use {self.engine} at {where}: {exc}", where="store") from None

    def _split_url(self, url: str) -> tuple[str, tuple[str, str] | None]:
        parts = urlsplit(url)  # its form was checked (url_form)
        env = self.engine.upper()
        user = parts.username or os.environ.get(f"STOREBENCH_{env}_USERNAME")
        password = parts.password or os.environ.get(f"STOREBENCH_{env}_PASSWORD")
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        netloc = host + (f":{parts.port}" if parts.port else "")
        clean = urlunsplit(parts._replace(netloc=netloc))
        return clean, ((user, password or "") if user else None)

    # --- what each engine provides ---------------------------------------------------
    def _connect(self, urls: list[str], auth: tuple[str, str] | None, tls: dict[str, Any]) -> Any:
        """The engine's client, spreading requests over ``urls`` (``tls``:
        the certificate options given)."""
        raise NotImplementedError

    def _send(self, req: Request) -> Any:
        """The reply's body to one request, through the client."""
        raise NotImplementedError

    def _status(self, exc: Exception) -> int | None:
        """The HTTP status of a client error (None: not an HTTP answer)."""
        raise NotImplementedError

    def _exists(self, name: str) -> bool:
        """An index, alias or data stream of this exact name exists (both
        clients ask the same way)."""
        return bool(self.client.indices.exists(index=name))

    def _vector_mapping(self, dim: int, metric: str, params: HnswIndex) -> dict[str, Any]:
        raise NotImplementedError

    def _index_settings(self) -> dict[str, Any]:
        return {}

    def _knn_body(
        self, vector: np.ndarray, k: int, ef: int | None, filt: dict[str, Any] | None
    ) -> dict[str, Any]:
        raise NotImplementedError

    # --- requests ----------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] = _JSON,
        timeout: float | None = None,
        ignore_status: tuple[int, ...] = (),
    ) -> Any:
        try:
            return self._send(Request(method, path, params, body, headers, timeout or self.timeout))
        except Exception as exc:
            status = self._status(exc)
            if status is not None and status in ignore_status:
                return {}
            if status is not None:
                raise EngineError(f"{self.engine} {method} {path}: HTTP {status}: {exc}") from None
            raise

    def _wrote(self, name: str) -> None:
        if self.options.refresh == "auto":
            self._dirty.add(name)

    def _before_read(self, name: str) -> None:
        if name in self._dirty:
            self._refresh(name)

    def _refresh(self, name: str) -> None:
        self._dirty.discard(name)
        self._request("POST", f"/{name}/_refresh", {"filter_path": "_shards.failed"})

    # --- collections -------------------------------------------------------------------
    def _check_name(self, name: str) -> None:
        if not _VALID_NAME.match(name) or name in (".", ".."):
            raise UserError(
                f'{name!r} is not a valid {self.engine} index name (lowercase, no \\/*?"<>| ,#:)',
                where=f"store {self.engine}",
            )

    def has_collection(self, name: str) -> bool:
        self._check_name(name)  # never a pattern: a wildcard would match others' indices
        return self._exists(name)

    def _create(self, name: str, schema: Schema, index: HnswIndex) -> Collection:
        self._check_name(name)
        props: dict[str, Any] = {f: {"type": _MAPPING[k]} for f, k in schema.fields.items()}
        if schema.dim is not None:
            props[VECTOR_FIELD] = self._vector_mapping(schema.dim, schema.metric, index)
        body = {
            "settings": {
                "index": {
                    "number_of_shards": self.options.shards,
                    "number_of_replicas": self.options.replicas - 1,
                    # size_bytes reads the store stats, cached 10 s by default
                    "store.stats_refresh_interval": "0s",
                    **self._index_settings(),
                }
            },
            "mappings": {"dynamic": "strict", "properties": props},
        }
        try:
            # every copy started before the first write (replicas on other nodes)
            params = {"wait_for_active_shards": "all"}
            self._send(Request("PUT", "/" + name, params, orjson.dumps(body), _JSON, self.timeout))
        except Exception as exc:
            if self._status(exc) == 400 and "already_exists" in str(exc):
                raise ForeignDataError(
                    f"index {name!r} appeared in {self.engine} while this run created it"
                ) from None
            if self._status(exc) is not None:
                raise EngineError(f"{self.engine}: creating index {name!r}: {exc}") from None
            raise
        return LuceneCollection(self, name, schema, index)

    def topology(self, collections: list[str]) -> dict[str, Any] | None:
        """The nodes (``_cat/nodes``) and where each shard's copies live
        (``_cat/shards`` of this run's indices only)."""
        cat = {"format": "json", "h": "name"}
        nodes = sorted(n["name"] for n in self._request("GET", "/_cat/nodes", cat))
        shards = []
        for name in collections:
            cat = {"format": "json", "h": "index,shard,prirep,state,node"}
            for row in self._request("GET", f"/_cat/shards/{name}", cat):
                shards.append(
                    {
                        "collection": row["index"],
                        "shard": int(row["shard"]),
                        "copy": "primary" if row["prirep"] == "p" else "replica",
                        "node": row.get("node"),
                        "state": row["state"],
                    }
                )
        return {"nodes": nodes, "shards": shards}

    def engine_stats(self) -> dict[str, dict[str, Any]] | None:
        """Index statistics over all indices (``GET /_stats``): searches are
        ``query_total`` with the query and fetch phases' time, writes are
        ``index_total`` with ``index_time``. The engine counts a search once
        per shard it visits and adds each shard's time: calls are divided by
        ``shards`` (this store's indices all have that many); the time stays
        shard-time, which exceeds wall time when shards run in parallel."""
        paths = "_all.total.search,_all.total.indexing"
        s = self._request("GET", "/_stats/search,indexing", {"filter_path": paths})
        total = s.get("_all", {}).get("total", {})
        search, indexing = total.get("search", {}), total.get("indexing", {})
        out: dict[str, dict[str, Any]] = {}
        if "query_total" in search:
            ms = search.get("query_time_in_millis", 0) + search.get("fetch_time_in_millis", 0)
            calls = search["query_total"] // self.options.shards
            out["search"] = {"calls": calls, "time_s": ms / 1e3, "command": "search"}
        if "index_total" in indexing:
            ms = indexing.get("index_time_in_millis", 0)
            out["write"] = {
                "calls": indexing["index_total"],
                "time_s": ms / 1e3,
                "command": "index",
            }
        return out

    @classmethod
    def managed_memory(
        cls, options: Any, index: HnswIndex, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        # each managed node's JVM heap (-Xmx) and native memory; vectors and
        # graphs are memory-mapped files (page cache)
        heap = size_bytes(options.heap) or 1024 * MiB
        return 0, (heap + 256 * MiB) * options.topology()["nodes"]

    def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
            self.client = None
        super().close()
