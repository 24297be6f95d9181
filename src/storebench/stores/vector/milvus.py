"""The Milvus stores, through pymilvus's ``MilvusClient``: ``milvus`` is the
real Milvus (the standalone server of a release from the ``milvus`` wheel,
managed, or any Milvus server by URL); ``milvus-lite`` is Milvus Lite 3, the
pure-Python rewrite (managed, or in this process on a file). One client code
for both: they differ in the server they are managed with and the URLs they
take.

A collection is a Milvus collection ``(id INT64 primary key, f0.., v
FLOAT_VECTOR)``: scalar fields are stored under aliases (``f0``, ``f1``, ...,
since Milvus field names allow no dots), ints as INT64, floats DOUBLE, bools
BOOL, strings VARCHAR. Consistency is Strong, so a read sees every write
acknowledged before it.

Vector index: a FLAT index (exact) from the start, so searches are exact
until ``build_index``, which releases the collection, drops the index,
**flushes** (without a flush, Milvus Lite keeps the rows in its in-memory
segment and searches them by brute force, whatever the index), creates HNSW
(``m`` -> ``M``, ``ef_construct`` -> ``efConstruction``; Milvus Lite's
defaults, 16 and 200, for those not given: Milvus 2.2/2.3 has none), waits until the
engine reports it finished with no pending rows, and loads the collection.
``ef`` is the search parameter ``ef`` (64 if not given, Milvus Lite's default).

Distances: Milvus's L2 is squared (the square root is returned), IP and
COSINE are similarities (returned as ``-dot`` and ``1 - cos``).

Where it runs:

- ``milvus``, no URL: the Milvus standalone server of release ``version``
  (option; ``servers/milvus_standalone.py``), started and stopped by
  ``stores.opening``;
- ``milvus-lite``, no URL: a managed Milvus Lite server in its own process
  (``servers/milvus.py``);
- ``milvus-lite``, ``url`` a path (``/data/bench.db``): Milvus Lite inside
  this process, as ``MilvusClient("bench.db")`` runs it; the spec then points
  at its gRPC port, so client processes reach the same data while this store
  is open;
- either, ``url`` ``http(s)://[user:password@]host:19530``: any Milvus server
  (``MILVUS_TOKEN`` or ``MILVUS_USER``/``MILVUS_PASSWORD`` give credentials
  the URL leaves out).

One piece: both stores are one client (their collection, its filter
expressions and index lifecycle) differing only in the server they declare.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit, urlunsplit

import numpy as np
from pydantic import field_validator
from pymilvus import DataType, MilvusClient

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import And, Cmp, Filter, In, Not, Or, Range
from storebench.errors import StorebenchError, UserError
from storebench.servers import milvus_standalone
from storebench.servers.milvus import GRPC_OPTIONS  # the client's gRPC policy: see there
from storebench.stores.base import (
    Capability,
    Collection,
    RamUse,
    SearchResult,
    Store,
    StoreSpec,
    redact_url,
)
from storebench.stores.columns import batch_from_records
from storebench.stores.config import StoreOptions, UrlForm
from storebench.stores.params import HnswIndex, HnswSearch, IndexParams, Order

_METRIC = {"l2": "L2", "ip": "IP", "cosine": "COSINE"}
_TYPE = {"int": DataType.INT64, "float": DataType.DOUBLE, "bool": DataType.BOOL}
_OPS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_PAGE = 16_384  # Milvus's largest query window (offset + limit)
_POLL_S = 0.02  # interval between describe_index polls while the engine builds
# HNSW parameters not given: Milvus Lite's defaults, sent to every engine
# (Milvus 2.2/2.3 has none: it refuses an index without M and efConstruction,
# and a search without ef), so both build and search the same graph
_HNSW_BUILD = {"M": 16, "efConstruction": 200}
_HNSW_EF = 64
# every row (Milvus 2.2 refuses an empty query expression)
_ALL = "id >= 0 or id < 0"
_RETRIES = (
    3  # RPC retries before a call fails (pymilvus's default, 75, hides a dead server for minutes)
)


class IndexBuildFailed(StorebenchError):
    pass


def _release(server_version: str) -> tuple[int, int]:
    """(major, minor) of a Milvus server's version; Milvus Lite counts as
    new (it has what 2.6 has)."""
    m = re.match(r"v?(\d+)\.(\d+)", server_version)
    return (int(m.group(1)), int(m.group(2))) if m else (99, 0)


def _literal(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return repr(float(value))
    return json.dumps(str(value), ensure_ascii=False)  # "..." with \" and \\ escaped


def to_expr(f: Filter, attr: Mapping[str, str]) -> str:
    """Compile a storebench filter to a Milvus boolean expression."""
    if isinstance(f, Cmp):
        return f"{attr[f.field]} {_OPS[f.op]} {_literal(f.value)}"
    if isinstance(f, Range):
        a = attr[f.field]
        return f"({a} >= {_literal(f.lo)} and {a} <= {_literal(f.hi)})"
    if isinstance(f, In):
        return f"{attr[f.field]} in [{', '.join(_literal(v) for v in f.values)}]"
    if isinstance(f, And | Or):
        glue = " and " if isinstance(f, And) else " or "
        return "(" + glue.join(to_expr(p, attr) for p in f.parts) + ")"
    if isinstance(f, Not):
        return f"not ({to_expr(f.part, attr)})"
    raise TypeError(f"not a filter: {f!r}")


class MilvusCollection(Collection):
    store: MilvusStore

    def __init__(self, store: MilvusStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._fields = list(schema.fields)
        self._kinds = dict(schema.fields)
        self._attr = {f: f"f{i}" for i, f in enumerate(self._fields)}
        self._vec = schema.dim is not None
        self._metric = _METRIC[schema.metric]
        self._kw = self.store._kw

    @property
    def _c(self) -> MilvusClient:
        return self.store.client

    # --- rows <-> columns -----------------------------------------------------
    def _rows_in(self, docs: DocBatch, fields: list[str]) -> list[dict[str, Any]]:
        """pymilvus takes one dict per row: the least it forces."""
        cols = [(self._attr[f], docs.fields[f].tolist()) for f in fields]
        vecs = docs.vectors
        rows = []
        for j, i in enumerate(docs.ids.tolist()):
            row: dict[str, Any] = {"id": i}
            for a, values in cols:
                row[a] = values[j]
            if vecs is not None:
                row["v"] = vecs[j]
            rows.append(row)
        return rows

    def _batch_out(self, rows: list[Any], with_vectors: bool) -> DocBatch:
        vecs = [r["v"] for r in rows] if with_vectors else None
        ids = [r["id"] for r in rows]
        return batch_from_records(self.schema, ids, rows, lambda r, f: r[self._attr[f]], vecs)

    # --- the vector index -----------------------------------------------------
    def _create_index(self, index_type: str, params: Mapping[str, Any]) -> None:
        ip = self._c.prepare_index_params()
        ip.add_index(
            field_name="v",
            index_name="v",
            index_type=index_type,
            metric_type=self._metric,
            params=dict(params),
        )
        self._c.create_index(self.name, ip, **self._kw)
        self._wait_index()
        self.store._index_type[self.name] = index_type

    def _wait_index(self) -> None:
        """Until the engine reports the index finished with no pending rows."""
        wait = threading.Event()
        while True:
            d = self._c.describe_index(self.name, "v", **self._kw)
            state = str(d.get("state", "Finished"))
            if state.endswith("Failed"):
                raise IndexBuildFailed(
                    f"milvus: index build failed: {d.get('index_state_fail_reason', d)}"
                )
            if state.endswith("Finished") and not int(d.get("pending_index_rows", 0) or 0):
                return
            wait.wait(_POLL_S)  # a poll interval, not a guess at the build time

    # --- contract ------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        self._c.insert(self.name, self._rows_in(docs, self._fields), **self._kw)

    def get(self, ids: np.ndarray) -> DocBatch:
        out = [*self._attr.values()] + (["v"] if self._vec else [])
        rows = self._c.get(self.name, ids=ids.tolist(), output_fields=out, **self._kw)
        return self._batch_out(list(rows), with_vectors=self._vec)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        full = set(fields) == set(self._fields) and (docs.vectors is not None or not self._vec)
        if not full and not self.store._partial_update:
            # Milvus < 2.6 upserts whole rows only: the rest read back first
            # (two calls, not atomic against a concurrent writer of the same ids)
            docs, fields = self._whole(docs), self._fields
            full = True
        rows = self._rows_in(docs, fields)
        if full:
            self._c.upsert(self.name, rows, **self._kw)
        else:  # only the given fields (Milvus >= 2.6, Milvus Lite)
            self._c.upsert(self.name, rows, partial_update=True, **self._kw)

    def _whole(self, docs: DocBatch) -> DocBatch:
        """``docs`` with the fields (and vector) they leave out as stored."""
        stored = self.get(docs.ids)
        at = {int(i): j for j, i in enumerate(stored.ids.tolist())}
        rows = np.array([at[int(i)] for i in docs.ids.tolist()], np.int64)  # KeyError: no such id
        fields = {f: docs.fields.get(f, stored.fields[f][rows]) for f in self._fields}
        vecs = docs.vectors
        if self._vec and vecs is None:
            vecs = stored.vectors[rows]  # type: ignore[index]
        return DocBatch(docs.ids, fields, vecs)

    def delete(self, ids: np.ndarray) -> None:
        self._c.delete(self.name, ids=ids.tolist(), **self._kw)

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        if order is not None:
            return super().find(where, order, limit)  # NotSupported
        expr = _ALL if where is None else to_expr(where, self._attr)
        out = ["id", *self._attr.values()]
        n = _PAGE if limit is None else min(int(limit), _PAGE)
        rows = list(self._c.query(self.name, filter=expr, output_fields=out, limit=n, **self._kw))
        if len(rows) == n and (limit is None or limit > n):
            # more than one window: the official iterator walks the rest
            rows = self._iterate(expr, out, limit)
        return self._batch_out(rows, with_vectors=False)

    def _iterate(self, expr: str, out: list[str], limit: int | None) -> list[Any]:
        it = self._c.query_iterator(
            self.name,
            batch_size=_PAGE // 4,
            limit=-1 if limit is None else int(limit),
            filter=expr,
            output_fields=out,
            **self._kw,
        )
        rows: list[Any] = []
        try:
            while batch := it.next():
                rows.extend(batch)
        finally:
            it.close()
        return rows

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        params: dict[str, Any] = {"metric_type": self._metric}
        ef = self.store.ef or _HNSW_EF
        if self.store._index_type.get(self.name) == "HNSW":
            params["params"] = {"ef": max(ef, int(k))}
        res = self._c.search(
            self.name,
            data=list(np.asarray(vectors, np.float32)),
            limit=int(k),
            filter="" if where is None else to_expr(where, self._attr),
            output_fields=["id"],
            search_params=params,
            anns_field="v",
            consistency_level=self.store.options.search_consistency,
            **self._kw,
        )
        out = SearchResult.from_rows(res, k, lambda hits: [(h["id"], h["distance"]) for h in hits])
        dist, found = out.distances, out.ids >= 0
        if self._metric == "L2":
            dist[found] = np.sqrt(np.maximum(dist[found], 0))
        elif self._metric == "IP":
            dist[found] = -dist[found]
        else:
            dist[found] = 1.0 - dist[found]
        return out

    def count(self) -> int:
        if not self.store._count_star:  # Milvus 2.2: no count(*), the ids are counted
            return len(self._iterate(_ALL, ["id"], None))
        res = self._c.query(self.name, filter=_ALL, output_fields=["count(*)"], **self._kw)
        return int(res[0]["count(*)"])

    def build_index(self, params: HnswIndex) -> None:
        names = {"m": "M", "ef_construct": "efConstruction"}
        hnsw = _HNSW_BUILD | {names[k]: v for k, v in params.given().items()}
        c = self._c
        c.release_collection(self.name, **self._kw)
        c.drop_index(self.name, "v", **self._kw)
        c.flush(self.name, **self._kw)  # sealed segments: the index covers every row
        self._create_index("HNSW", hnsw)
        c.load_collection(self.name, **self._kw)

    def set_search_params(self, params: HnswSearch) -> None:
        if params.ef is not None:
            self.store.ef = params.ef

    def compact(self) -> None:
        """Merges segments and drops deleted rows; waits for the engine."""
        c = self._c
        job = c.compact(self.name, **self._kw)
        if not isinstance(job, int) or job <= 0:
            return  # nothing to compact, or done synchronously (Milvus Lite)
        wait = threading.Event()
        while str(c.get_compaction_state(job, **self._kw)) not in ("Completed", "Undefined"):
            wait.wait(_POLL_S)

    def _drop(self) -> None:
        self._c.drop_collection(self.name, **self._kw)
        self.store._index_type.pop(self.name, None)


URL_FORM = UrlForm("http(s)://[user:password@]host:19530", schemes=("http", "https", "tcp"))
LITE_URL_FORM = UrlForm(
    "http(s)://[user:password@]host:19530 or a Milvus Lite file path",
    schemes=("http", "https", "tcp"),
    path=True,
)


class SearchConsistency(StoreOptions):
    """``search_consistency``: the level searches read at. Session (the
    default) sees every write this client made, and waits for the server's
    time tick only right after one; Strong (every acknowledged write, any
    client) makes the real Milvus wait for its next time tick (200 ms) on
    every search; Bounded (writes older than a few seconds) and Eventually
    never wait."""

    search_consistency: Literal["Strong", "Bounded", "Session", "Eventually"] = "Session"


class MilvusStore(Store):
    """The real Milvus: managed, the standalone server of release ``version``."""

    engine = "milvus"
    server = "milvus_standalone:MilvusServer"
    capabilities = frozenset(Capability) - {Capability.ORDER, Capability.SIZE, Capability.PIPELINE}
    Index = HnswIndex
    Search = HnswSearch
    extra = "milvus"
    client_dist = "pymilvus"
    handles = ("client",)
    url_form = URL_FORM
    collection = MilvusCollection
    # the managed server (or Milvus Lite in this process): the loaded segments and index
    ram = RamUse(hnsw_m=16, fixed_mib=256)

    class Options(SearchConsistency):
        # the managed server's release (installed into the cache on first use)
        version: str = milvus_standalone.DEFAULT_VERSION
        managed_only: ClassVar[tuple[str, ...]] = ("version",)

        @field_validator("version", mode="before")
        @classmethod
        def _a_release(cls, v: Any) -> str:
            try:
                return milvus_standalone.check_version(str(v))
            except UserError as exc:
                raise ValueError(str(exc).split(": ", 1)[-1]) from None

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.ef: int | None = None  # set_search_params; None: the engine's
        self._index_type: dict[str, str] = {}
        self._kw: dict[str, Any] = {"retry_times": _RETRIES}
        self._lite_path: str | None = None
        url = spec.url
        if url is not None and self.url_form.is_path(self.engine, url):
            # Milvus Lite in this process
            from milvus_lite.server_manager import server_manager_instance

            path = self.local_path()
            uri = server_manager_instance.start_and_get_uri(path)
            if uri is None:
                raise UserError(
                    f"Milvus Lite could not open {path}", where=f"store {self.engine} url"
                )
            self._lite_path = path
            self.spec = self.spec.with_(url=uri)
            self.fill_option("lite_path", path)
        self.client = self._connect()

    def _connect(self) -> MilvusClient:
        parts = urlsplit(self.spec.url or "")
        token = os.environ.get("MILVUS_TOKEN", "")
        if parts.username or parts.password:
            token = f"{parts.username or ''}:{parts.password or ''}"
            netloc = parts.hostname or ""
            if parts.port:
                netloc += f":{parts.port}"
            parts = parts._replace(netloc=netloc)
        elif not token and os.environ.get("MILVUS_USER"):
            token = f"{os.environ['MILVUS_USER']}:{os.environ.get('MILVUS_PASSWORD', '')}"
        try:
            client = MilvusClient(uri=urlunsplit(parts), token=token, grpc_options=GRPC_OPTIONS)
            self._server_version = str(client.get_server_version(**self._kw))
            release = _release(self._server_version)
            self._count_star = release >= (2, 3)
            self._partial_update = release >= (2, 6)
        except Exception as exc:
            msg = str(exc).replace(token, "***") if token else str(exc)
            raise UserError(
                f"cannot reach Milvus at {redact_url(self.spec.url)}: {msg}",
                where=f"store {self.engine}",
            ) from exc
        return client

    def has_collection(self, name: str) -> bool:
        return bool(self.client.has_collection(name, **self._kw))

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        if not name.replace("_", "a").isalnum() or not name.isascii() or name[0].isdigit():
            raise UserError(
                f"collection name {name!r}: Milvus allows letters, digits and _ only",
                where=f"store {self.engine}",
            )
        coll = MilvusCollection(self, name, schema)
        s = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("id", DataType.INT64, is_primary=True)
        for f, kind in schema.fields.items():
            if kind == "str":
                s.add_field(coll._attr[f], DataType.VARCHAR, max_length=65_535)
            else:
                s.add_field(coll._attr[f], _TYPE[kind])
        if schema.dim is not None:
            s.add_field("v", DataType.FLOAT_VECTOR, dim=int(schema.dim))
        self.client.create_collection(name, schema=s, consistency_level="Strong", **self._kw)
        try:
            if schema.dim is not None:
                coll._create_index("FLAT", {})
            self.client.load_collection(name, **self._kw)
        except BaseException:
            self.client.drop_collection(name, **self._kw)  # ours: made a moment ago
            raise
        return coll

    def _open(self, name: str, schema: Schema) -> Collection:
        coll = super()._open(name, schema)
        if schema.dim is not None:
            with_index = self.client.list_indexes(name, **self._kw)
            if with_index:
                d = self.client.describe_index(name, with_index[0], **self._kw)
                self._index_type[name] = str(d.get("index_type", "FLAT"))
        return coll

    @classmethod
    def memory_use(
        cls, spec: StoreSpec, index: HnswIndex, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        if spec.url is not None and "://" in spec.url:
            return 0, 0  # a server of yours: not counted
        return cls.ram.of(index, dim, field_bytes)

    def engine_version(self) -> str:
        v = self._server_version
        if v.startswith("milvus_lite-"):  # Milvus Lite 3, the Python rewrite
            return v.replace("milvus_lite-", "Milvus Lite ")
        # the `milvus` wheel's standalone build calls itself v2.3.5-lite: the real engine
        return f"Milvus {v.removesuffix('-lite')}"

    def close(self) -> None:
        super().close()  # the client first
        if self._lite_path is not None:
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(self._lite_path)
            self._lite_path = None


class MilvusLiteStore(MilvusStore):
    """Milvus Lite 3: managed in its own process, or in this one on a file."""

    engine = "milvus-lite"
    server = "milvus:MilvusLiteServer"
    url_form = LITE_URL_FORM

    class Options(SearchConsistency):
        lite_path: str | None = None  # set by the store: the file a path url named
