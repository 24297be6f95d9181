"""The Weaviate store: the Weaviate server with its official client
(``weaviate-client`` 4: REST for the schema, gRPC for data and queries).

A collection is a Weaviate collection named ``Sb_<name>`` (Weaviate's names
start with a capital), one object per document: the id as a UUID (the id's
64 bits as the UUID's integer, so ids map both ways), each field a property
``f_<name>`` (Weaviate's property names allow no dots; ``.`` is written
``__``), the vector self-provided (no vectorizer module). Metrics: l2 is
Weaviate's ``l2-squared`` (distances come back as their square root),
cosine is ``cosine`` (1 - cos), ip is ``dot`` (the negative inner product).

HNSW under our neutral names: index ``m`` -> ``maxConnections``,
``ef_construct`` -> ``efConstruction`` (both fixed when the collection is
made: the store's ``index`` parameters, or the defaults m=16,
ef_construct=128); search ``ef`` -> ``ef`` (changed on the live collection).
Weaviate indexes each object as it is imported, so ``build_index`` with the
parameters the collection has builds nothing (the index was built during
the upload); with others it makes the collection anew with them and imports
every object again.

Filters compile to Weaviate's filters (``where``): comparisons, ranges,
``contains_any`` for in, ``all_of``/``any_of``/``not_``. A filtered find
with an order is sorted here (Weaviate 1.35 returns the wrong objects for a
filter, a sort and a limit together). Weaviate returns
at most ``QUERY_MAXIMUM_RESULTS`` objects per query (the managed server's
is raised to 10^8).

``url``: ``http://host:port?grpc_port=N`` (gRPC port default 50051);
several, comma-separated: the nodes of a cluster (searches go to each in
turn, as behind a load balancer; the rest to the first). Without one, a
managed Weaviate server starts on 127.0.0.1 and stops with the store.

Options: the topology (``stores.config.ClusterOptions``): a collection gets
``replicas`` as its replication factor and ``shards`` as its shard count
(1 unless given: Weaviate's own default is one per node); ``nodes``,
``node_cpus``, ``node_memory`` make a managed cluster. ``topology`` reads
``/v1/nodes``: Weaviate's copies are peers (no primary), each a "replica".
"""

from __future__ import annotations

import contextlib
import itertools
import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, parse_qs

import numpy as np
import weaviate
from weaviate.classes.config import Configure, DataType, Property, Reconfigure, VectorDistances
from weaviate.classes.data import DataObject
from weaviate.classes.query import Filter as W
from weaviate.classes.query import MetadataQuery, Sort

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import And, Cmp, Filter, In, Not, Or, Range
from storebench.errors import UserError
from storebench.stores.base import (
    Capability,
    Collection,
    RamUse,
    SearchResult,
    Store,
    StoreSpec,
    redact_url,
)
from storebench.stores.columns import batch_from_records, last_per_id, plain
from storebench.stores.config import ClusterOptions, UrlForm
from storebench.stores.params import HnswIndex, HnswSearch, Order

_TYPES = {
    "int": DataType.INT,
    "float": DataType.NUMBER,
    "bool": DataType.BOOL,
    "str": DataType.TEXT,
}
_METRIC = {
    "l2": VectorDistances.L2_SQUARED,
    "cosine": VectorDistances.COSINE,
    "ip": VectorDistances.DOT,
}
_NAME = re.compile(r"^[A-Za-z0-9_]+$")
VECTOR = "default"
DEFAULTS = {"m": 16, "ef_construct": 128}


def _hnsw(index: HnswIndex) -> dict[str, int]:
    """maxConnections and efConstruction: the run's, else Weaviate's defaults."""
    return {k: getattr(index, k) or v for k, v in DEFAULTS.items()}


_BATCH = 1000
_U128 = 1 << 128


def to_uuid(id_: int) -> uuid.UUID:
    return uuid.UUID(int=id_ % _U128)


def from_uuid(u: uuid.UUID | str) -> int:
    n = (u if isinstance(u, uuid.UUID) else uuid.UUID(str(u))).int
    return n - _U128 if n >= 1 << 127 else n


def prop(field: str) -> str:
    name = "f_" + field.replace(".", "__")
    if not _NAME.match(name):
        raise UserError(f"field name {field!r} is not possible in Weaviate", where="store weaviate")
    return name


def _target(url: str, parts: SplitResult | None) -> tuple[str, int, int]:
    assert parts is not None
    query = parse_qs(parts.query)
    unknown = set(query) - {"grpc_port"}
    if unknown:
        raise ValueError(f"unknown URL parameter {sorted(unknown)[0]!r} (only grpc_port)")
    grpc = int(query.get("grpc_port", ["50051"])[0])
    if not 0 < grpc < 65536:
        raise ValueError(f"grpc_port {grpc} is not a port")
    return str(parts.hostname), parts.port or 8080, grpc


URL_FORM = UrlForm(
    "http://host:port[?grpc_port=N] (several, comma-separated: the nodes of a cluster)",
    schemes=("http",),
    several=True,
    parse=_target,
)


def compile_filter(f: Filter, props: Mapping[str, str]) -> Any:
    """A storebench filter as a Weaviate filter."""
    if isinstance(f, Cmp):
        p, v = W.by_property(props[f.field]), plain(f.value)
        return {
            "eq": p.equal,
            "ne": p.not_equal,
            "lt": p.less_than,
            "le": p.less_or_equal,
            "gt": p.greater_than,
            "ge": p.greater_or_equal,
        }[f.op](v)
    if isinstance(f, Range):
        p = props[f.field]
        return W.all_of(
            [
                W.by_property(p).greater_or_equal(plain(f.lo)),
                W.by_property(p).less_or_equal(plain(f.hi)),
            ]
        )
    if isinstance(f, In):
        values = [plain(v) for v in f.values]
        if not values:  # matches nothing
            return W.by_id().contains_any([to_uuid(-1)]) & W.by_id().not_equal(to_uuid(-1))
        return W.by_property(props[f.field]).contains_any(values)
    if isinstance(f, Not):
        return W.not_(compile_filter(f.part, props))
    if isinstance(f, And):
        return W.all_of([compile_filter(p, props) for p in f.parts])
    if isinstance(f, Or):
        return W.any_of([compile_filter(p, props) for p in f.parts])
    raise TypeError(f"not a filter: {f!r}")


class WeaviateCollection(Collection):
    store: WeaviateStore

    def __init__(self, store: WeaviateStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self.cls = store.class_name(name)
        self._handles()
        self._props = {f: prop(f) for f in schema.fields}
        self._vec = schema.dim is not None
        self._sqrt = schema.metric == "l2"

    def _handles(self) -> None:
        """The collection on the first node, and on each node in turn for searches."""
        self.c = self.store.client.collections.get(self.cls)
        nodes = [self.c, *(cl.collections.get(self.cls) for cl in self.store.others)]
        self._next_node = itertools.cycle(nodes).__next__

    def _objects(self, docs: DocBatch, fields: list[str]) -> list[DataObject]:
        cols = [(self._props[f], docs.fields[f].tolist()) for f in fields]
        vecs = docs.vectors if self._vec else None
        out = []
        for i, id_ in enumerate(docs.ids.tolist()):
            props = {p: values[i] for p, values in cols}
            vector = vecs[i].tolist() if vecs is not None else None
            out.append(DataObject(properties=props, uuid=to_uuid(id_), vector=vector))
        return out

    def _to_batch(self, objs: list[Any], with_vectors: bool) -> DocBatch:
        vecs = [o.vector[VECTOR] for o in objs] if with_vectors and self._vec else None
        ids = [from_uuid(o.uuid) for o in objs]
        return batch_from_records(
            self.schema, ids, objs, lambda o, f: o.properties[self._props[f]], vecs
        )

    def insert(self, docs: DocBatch) -> None:
        """Objects with an existing id replace it (Weaviate's batch import)."""
        docs = last_per_id(docs)
        objs = self._objects(docs, list(self.schema.fields))
        for start in range(0, len(objs), _BATCH):
            res = self.c.data.insert_many(objs[start : start + _BATCH])
            if res.has_errors:
                first = next(iter(res.errors.values()))
                raise UserError(f"weaviate import failed: {first.message}", where="store weaviate")

    def _fetch(self, where: Any, limit: int, vectors: bool, sort: Any = None) -> list[Any]:
        if limit <= 0:
            return []
        res = self.c.query.fetch_objects(
            filters=where, limit=limit, include_vector=vectors, sort=sort
        )
        return list(res.objects)

    def get(self, ids: np.ndarray) -> DocBatch:
        if not len(ids):
            return self._to_batch([], True)
        uuids = [to_uuid(i) for i in ids.tolist()]
        return self._to_batch(self._fetch(W.by_id().contains_any(uuids), len(uuids), True), True)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        vecs = docs.vectors if self._vec else None
        if not fields and vecs is None:
            return
        cols = [(self._props[f], docs.fields[f].tolist()) for f in fields]
        for i, id_ in enumerate(docs.ids.tolist()):  # Weaviate has no batch update
            self.c.data.update(
                uuid=to_uuid(id_),
                properties={p: values[i] for p, values in cols} or None,
                vector=vecs[i].tolist() if vecs is not None else None,
            )

    def delete(self, ids: np.ndarray) -> None:
        if len(ids):
            self.c.data.delete_many(
                where=W.by_id().contains_any([to_uuid(i) for i in ids.tolist()])
            )

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        filters = None if where is None else compile_filter(where, self._props)
        if order is None:
            n = self.count() if limit is None else int(limit)
            return self._to_batch(self._fetch(filters, n, False), False)
        if filters is None:  # ties in a stable order (by id), as the other stores give them
            sort = Sort.by_property(self._props[order[0]], ascending=not order[1]).by_id()
            n = self.count() if limit is None else int(limit)
            return self._to_batch(self._fetch(None, n, False, sort), False)
        # Weaviate 1.35 sorts a filtered query with a limit wrongly (it returns
        # some matches in order, not the first ones): every match, sorted here
        found = self._to_batch(self._fetch(filters, self.count(), False), False)
        ranks = np.unique(found.fields[order[0]], return_inverse=True)[1]  # any kind, str too
        idx = np.lexsort((found.ids, -ranks if order[1] else ranks))
        return found.take(idx if limit is None else idx[: int(limit)])

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        filters = None if where is None else compile_filter(where, self._props)
        query = self._next_node().query

        def rows_of(q: np.ndarray) -> list[tuple[int, float]]:
            res = query.near_vector(
                q.tolist(), limit=k, filters=filters, return_metadata=MetadataQuery(distance=True)
            )
            return [(from_uuid(o.uuid), o.metadata.distance) for o in res.objects[:k]]

        out = SearchResult.from_rows(vectors, k, rows_of)
        if self._sqrt:
            dist = out.distances
            np.sqrt(np.maximum(dist, 0), out=dist, where=np.isfinite(dist))
        return out

    def count(self) -> int:
        return int(self.c.aggregate.over_all(total_count=True).total_count or 0)

    def hnsw(self) -> dict[str, int]:
        cfg = self.c.config.get().vector_config[VECTOR].vector_index_config
        return {"m": cfg.max_connections, "ef_construct": cfg.ef_construction, "ef": cfg.ef}

    def build_index(self, params: HnswIndex) -> bool | None:
        want = _hnsw(params)
        have = self.hnsw()
        if all(have[k] == v for k, v in want.items()):
            return False  # built as the objects were imported
        # maxConnections and efConstruction are fixed: the collection anew
        objs = list(self.c.iterator(include_vector=True))
        batch = self._to_batch(objs, True)
        self.store.client.collections.delete(self.cls)
        self.store.make_collection(self.cls, self.schema, want, have["ef"])
        self._handles()
        self.insert(batch)
        return True

    def set_search_params(self, params: HnswSearch) -> None:
        # ef is the collection's (on the server), not the connection's: each
        # process client applies the run's setting as it opens, and 40 updates
        # at once find the shards read-only while the first is applied
        if params.ef is not None and self.hnsw()["ef"] != params.ef:
            self.c.config.update(
                vector_config=Reconfigure.Vectors.update(
                    name=VECTOR,
                    vector_index_config=Reconfigure.VectorIndex.hnsw(ef=params.ef),
                )
            )

    def _drop(self) -> None:
        self.store.client.collections.delete(self.cls)


class WeaviateStore(Store):
    engine = "weaviate"
    server = "weaviate:WeaviateServer"
    capabilities = frozenset(Capability) - {
        Capability.SIZE,
        Capability.COMPACT,
        Capability.PIPELINE,
    }
    Index = HnswIndex
    Search = HnswSearch
    Options = ClusterOptions
    extra = "weaviate"
    client_dist = "weaviate-client"
    url_form = URL_FORM
    collection = WeaviateCollection
    ram = RamUse(vector=0, fields=2, overhead=512, hnsw_m=DEFAULTS["m"], fixed_mib=256)
    handles = ("client",)

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        nodes = self.check_url(self.spec.url)
        first, *rest = nodes if isinstance(nodes, list) else [nodes]
        self.others: list[Any] = []
        try:
            self.client = self._connect(*first)
            self.others = [self._connect(*node) for node in rest]
            self._version = str(self.client.get_meta().get("version", "?"))
        except Exception as exc:
            raise UserError(
                f"cannot reach Weaviate at {redact_url(self.spec.url)}: {exc}",
                where="store weaviate",
            ) from exc

    @staticmethod
    def _connect(host: str, port: int, grpc: int) -> Any:
        return weaviate.connect_to_custom(
            http_host=host,
            http_port=port,
            http_secure=False,
            grpc_host=host,
            grpc_port=grpc,
            grpc_secure=False,
        )

    def close(self) -> None:
        others, self.others = self.others, []
        for client in others:
            with contextlib.suppress(Exception):
                client.close()
        super().close()

    @staticmethod
    def class_name(name: str) -> str:
        if not _NAME.match(name):
            raise UserError(
                f"collection name {name!r} is not possible in Weaviate", where="store weaviate"
            )
        return "Sb_" + name

    def has_collection(self, name: str) -> bool:
        return bool(self.client.collections.exists(self.class_name(name)))

    def make_collection(
        self, cls: str, schema: Schema, hnsw: Mapping[str, int], ef: int | None
    ) -> None:
        self.client.collections.create(
            cls,
            properties=[
                Property(name=prop(f), data_type=_TYPES[t]) for f, t in schema.fields.items()
            ],
            vector_config=Configure.Vectors.self_provided(
                name=VECTOR,
                vector_index_config=Configure.VectorIndex.hnsw(
                    max_connections=hnsw["m"],
                    ef_construction=hnsw["ef_construct"],
                    ef=ef,
                    distance_metric=_METRIC[schema.metric or "l2"],
                ),
            ),
            replication_config=Configure.replication(factor=self.options.replicas),
            sharding_config=Configure.sharding(desired_count=self.options.shards),
        )

    def _create(self, name: str, schema: Schema, index: HnswIndex) -> WeaviateCollection:
        # ef is set by set_search_params before any search (the run's settings)
        self.make_collection(self.class_name(name), schema, _hnsw(index), None)
        return WeaviateCollection(self, name, schema)

    def engine_version(self) -> str:
        return f"Weaviate {self._version}"

    def topology(self, collections: list[str]) -> dict[str, Any] | None:
        """The nodes, and which node holds a copy of each shard of this run's
        collections (``/v1/nodes``, verbose)."""
        nodes = self.client.cluster.nodes(output="verbose")
        wanted = {self.class_name(c): c for c in collections}
        shards = [
            {
                "collection": wanted[sh.collection],
                "shard": sh.name,
                "copy": "replica",
                "node": node.name,
                "state": sh.vector_indexing_status,
            }
            for node in nodes
            for sh in node.shards or []
            if sh.collection in wanted
        ]
        return {"nodes": sorted(n.name for n in nodes), "shards": shards}
