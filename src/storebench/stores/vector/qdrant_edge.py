"""The qdrant-edge store: the Qdrant engine itself (its segments, HNSW,
payload indexes, optimizers and query planner) in this process, through the
``qdrant-edge-py`` package. One collection is one ``EdgeShard`` in its own
directory under ``url``.

Parameters: ``m`` -> ``HnswIndexConfig.m``, ``ef_construct`` ->
``HnswIndexConfig.ef_construct`` (the shard's config; ``build_index`` with
other values reopens the shard with them), ``ef`` -> ``SearchParams.hnsw_ef``
(per query).

- insert: ``upsert_points`` per batch (a ``Point`` object per document is
  what the binding takes). Points land in a plain appendable segment;
  ``build_index`` runs ``EdgeShard.optimize()``, which blocks until Qdrant's
  optimizers have built the HNSW graphs (and payload indexes) of the
  optimized segments: that is the readiness signal. Before it, searches are
  exact scans of the plain segment.
- Qdrant only builds a graph for segments above its indexing threshold
  (about 10 MB of vectors by default), so ``build_index`` would build nothing
  for small collections. This store sets the threshold to 1 KB
  (``indexing_threshold_kb`` option) so the index is always built. Qdrant's
  query planner still scans segments smaller than ``full_scan_threshold_kb``
  (Qdrant's default 10000 KB, kept here) instead of walking their graph, with
  or without a filter: below that size m/ef do not change results.
- payload: one payload key per field (a dotted name such as ``tags.i`` is
  one key, addressed as ``"tags.i"`` in filters); fields in
  ``Schema.indexed`` get a payload index (integer, float, keyword, bool).
- filters compile to Qdrant's filter model (must / should / must_not,
  MatchValue, MatchAny, RangeFloat). Order comparisons on strings do not
  exist there. Float equality is a closed range.
- find with order: Qdrant's ``order_by`` needs a range index, so ordering by
  an indexed int/float field is Qdrant's; by another field the matching
  documents are sorted here.
- update: a batch with every field and the vector is one ``upsert_points``
  in ``UpdateOnly`` mode; otherwise ``set_payload`` per document and
  ``update_vectors`` for the batch, for the ids that exist.
- compact: ``optimize()`` again (vacuum of deleted points and segment
  merging, at Qdrant's own thresholds).
- metric cosine: Qdrant normalises vectors on insert, so ``get`` returns
  unit vectors (not bit-exact); l2 and ip round-trip exactly.
- ids: Qdrant takes unsigned 64-bit ids; int64 ids are stored as their
  two's-complement uint64.

``url`` is a directory (made if its parent exists); without one the store
makes a private temporary directory and removes it on close. One process
only: the shard is not opened by client processes.
"""

from __future__ import annotations

import os
import re
import shutil
from array import array
from importlib import metadata
from typing import Any

import numpy as np
import qdrant_edge as qe
from pydantic import PositiveInt

from storebench.data import filters as F
from storebench.data.batch import DocBatch, Schema
from storebench.errors import UserError
from storebench.stores.ann.indexlib import DEFAULT_SEARCH, ONE, RWLock, index_values
from storebench.stores.base import Capability, Collection, RamUse, SearchResult, Store, StoreSpec
from storebench.stores.columns import DTYPES
from storebench.stores.config import DIRECTORY, StoreOptions
from storebench.stores.params import HnswIndex, HnswSearch, Order

_DISTANCE = {"l2": qe.Distance.Euclid, "ip": qe.Distance.Dot, "cosine": qe.Distance.Cosine}
_INDEX_TYPE = {
    "int": qe.PayloadSchemaType.Integer,
    "float": qe.PayloadSchemaType.Float,
    "str": qe.PayloadSchemaType.Keyword,
    "bool": qe.PayloadSchemaType.Bool,
}
_RANGE_OP = {"lt": "lt", "le": "lte", "gt": "gt", "ge": "gte"}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_PAGE = 10_000  # points per scroll page


def _uids(ids: np.ndarray) -> list[Any]:
    return np.asarray(ids, np.int64).view(np.uint64).tolist()


def _ids(uids: list[Any]) -> np.ndarray:
    # the uint64s' bytes read as int64: a quarter (one id) to half (100) of
    # np.array's time off
    return np.frombuffer(array("Q", uids), np.int64)


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


class QdrantEdgeCollection(Collection):
    store: QdrantEdgeStore

    def __init__(
        self,
        store: QdrantEdgeStore,
        name: str,
        schema: Schema,
        shard: Any,
        path: str,
        params: dict[str, int],
    ):
        super().__init__(store, name, schema)
        self._shard = shard
        self._path = path
        self._lock = RWLock()  # exclusive only while the shard is reopened or dropped
        self._fields = list(schema.fields)
        self._params = params  # the shard's HNSW config
        self._search = qe.SearchParams(hnsw_ef=DEFAULT_SEARCH["ef"])

    # --- conversions -------------------------------------------------------------
    def _payloads(self, docs: DocBatch, fields: list[str]) -> list[dict[str, Any]]:
        if not fields:
            return [{} for _ in range(len(docs))]
        cols = [docs.fields[f].tolist() for f in fields]
        return [dict(zip(fields, row, strict=True)) for row in zip(*cols, strict=True)]

    def _points(self, docs: DocBatch, fields: list[str]) -> list[Any]:
        assert docs.vectors is not None
        return [
            qe.Point(i, v, p)
            for i, v, p in zip(
                _uids(docs.ids), docs.vectors.tolist(), self._payloads(docs, fields), strict=True
            )
        ]

    def _batch(self, records: list[Any], vectors: bool) -> DocBatch:
        if not records:
            empty = DocBatch.empty(self.schema)
            return empty if vectors else empty.select(None, vectors=False)
        fields: dict[str, np.ndarray] = {}
        if self._fields:  # each point's payload read only where there are fields
            payloads = [r.payload for r in records]
            fields = {
                f: np.array([p[f] for p in payloads], dtype=DTYPES[kind])
                for f, kind in self.schema.fields.items()
            }
        uids: list[Any] = []
        vecs: list[Any] | None = [] if vectors else None
        for r in records:  # one pass, as ``search``'s
            uids.append(r.id)
            if vecs is not None:
                vecs.append(r.vector)
        return DocBatch.unchecked(
            _ids(uids), fields, None if vecs is None else np.array(vecs, np.float32)
        )

    # --- filters -------------------------------------------------------------------
    def _kind(self, field: str) -> str:
        if field not in self.schema.fields:
            raise UserError(f"no field {field!r} in collection {self.name}", where="filter")
        return self.schema.fields[field]

    @staticmethod
    def _key(field: str) -> str:
        return '"' + field + '"'  # one payload key, even with dots in it

    def _eq(self, field: str, value: Any) -> Any:
        kind, key, value = self._kind(field), self._key(field), _plain(value)
        if kind == "float" or (kind == "int" and not isinstance(value, int)):
            return qe.FieldCondition(key, range=qe.RangeFloat(gte=value, lte=value))
        if kind == "bool":  # a Python bool would reach Qdrant as the integer 1
            return qe.FieldCondition(key, match=qe.MatchValue(np.bool_(value)))  # type: ignore[arg-type]
        return qe.FieldCondition(key, match=qe.MatchValue(value))

    def _range(self, field: str, **bounds: Any) -> Any:
        if self._kind(field) not in ("int", "float"):
            raise UserError(
                f"qdrant-edge has no order comparison on {self._kind(field)} field {field!r}",
                where="filter",
            )
        return qe.FieldCondition(
            self._key(field), range=qe.RangeFloat(**{k: float(v) for k, v in bounds.items()})
        )

    def _cond(self, f: F.Filter) -> Any:
        if isinstance(f, F.Cmp):
            if f.op == "eq":
                return self._eq(f.field, f.value)
            if f.op == "ne":
                return qe.Filter(must_not=[self._eq(f.field, f.value)])
            return self._range(f.field, **{_RANGE_OP[f.op]: _plain(f.value)})
        if isinstance(f, F.Range):
            return self._range(f.field, gte=_plain(f.lo), lte=_plain(f.hi))
        if isinstance(f, F.In):
            kind = self._kind(f.field)
            values = [_plain(v) for v in f.values]
            if not values:
                return qe.HasIdCondition(set())  # matches nothing
            if kind == "str" or (kind == "int" and all(isinstance(v, int) for v in values)):
                return qe.FieldCondition(self._key(f.field), match=qe.MatchAny(values))
            return qe.Filter(should=[self._eq(f.field, v) for v in values])
        if isinstance(f, F.And):
            return qe.Filter(must=[self._cond(p) for p in f.parts])
        if isinstance(f, F.Or):
            return qe.Filter(should=[self._cond(p) for p in f.parts])
        if isinstance(f, F.Not):
            return qe.Filter(must_not=[self._cond(f.part)])
        raise TypeError(f"not a filter: {f!r}")

    def _filter(self, where: F.Filter | None) -> Any:
        if where is None:
            return None
        c = self._cond(where)
        return c if isinstance(c, qe.Filter) else qe.Filter(must=[c])

    # --- contract ----------------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        if not len(docs):
            return
        with self._lock.shared:
            self._shard.update(qe.UpdateOperation.upsert_points(self._points(docs, self._fields)))

    def get(self, ids: np.ndarray) -> DocBatch:
        with self._lock.shared:
            records = self._shard.retrieve(_uids(ids), bool(self._fields), True)  # payloads: fields
        return self._batch(records, vectors=True)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        with self._lock.shared:
            sh = self._shard
            if docs.vectors is not None and set(fields) == set(self._fields):
                sh.update(
                    qe.UpdateOperation.upsert_points(
                        self._points(docs, fields), update_mode=qe.UpdateMode.UpdateOnly
                    )
                )
                return
            uids = _uids(docs.ids)
            there = {r.id for r in sh.retrieve(uids, False, False)}
            hit = [j for j, u in enumerate(uids) if u in there]
            if not hit:
                return
            if fields:
                payloads = self._payloads(docs, fields)
                for j in hit:
                    sh.update(qe.UpdateOperation.set_payload([uids[j]], payloads[j]))
            if docs.vectors is not None:
                vecs = docs.vectors.tolist()
                sh.update(
                    qe.UpdateOperation.update_vectors(
                        [qe.PointVectors(uids[j], vecs[j]) for j in hit]
                    )
                )

    def delete(self, ids: np.ndarray) -> None:
        with self._lock.shared:
            self._shard.update(qe.UpdateOperation.delete_points(_uids(ids)))

    def _scroll(self, flt: Any, limit: int | None) -> list[Any]:
        out: list[Any] = []
        offset = None
        while limit is None or len(out) < limit:
            page = _PAGE if limit is None else min(_PAGE, limit - len(out))
            recs, offset = self._shard.scroll(
                qe.ScrollRequest(
                    offset=offset, limit=page, filter=flt, with_payload=True, with_vector=False
                )
            )
            out += recs
            if offset is None:
                break
        return out

    def find(
        self, where: F.Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        flt = self._filter(where)
        with self._lock.shared:
            if order is None:
                return self._batch(self._scroll(flt, limit), vectors=False)
            field, desc = order
            if field in self.schema.indexed and self._kind(field) in ("int", "float"):
                n = limit if limit is not None else self._count(flt)
                if n == 0:
                    return self._batch([], vectors=False)
                direction = qe.Direction.Desc if desc else qe.Direction.Asc
                recs, _ = self._shard.scroll(
                    qe.ScrollRequest(
                        limit=n,
                        filter=flt,
                        with_payload=True,
                        with_vector=False,
                        order_by=qe.OrderBy(self._key(field), direction=direction),
                    )
                )
                return self._batch(recs, vectors=False)
            found = self._batch(self._scroll(flt, None), vectors=False)
        idx = np.argsort(found.fields[field], kind="stable")
        idx = idx[::-1] if desc else idx
        return found.take(idx[:limit] if limit is not None else idx)

    def _request(self, kind: Any, v: list[float], k: int, flt: Any) -> Any:
        """A ``SearchRequest`` or ``QueryRequest`` (``kind``) for the nearest
        ``k`` to ``v``: no payload, no vector, the shard's ef."""
        where = {} if flt is None else {"filter": flt}  # ``filter=None`` costs a conversion
        return kind(
            query=qe.Query.Nearest(v),
            limit=k,
            params=self._search,
            with_payload=False,
            with_vector=False,
            **where,
        )

    def search(self, vectors: np.ndarray, k: int, where: F.Filter | None = None) -> SearchResult:
        nq = len(vectors)
        if nq == 0 or k == 0:
            return SearchResult.empty(nq, k)
        flt = None if where is None else self._filter(where)
        vecs = vectors.tolist()  # Qdrant takes the floats as f32, as float32 rounds them
        with self._lock.shared:
            if nq == 1:  # the binding's search: a few microseconds under its query
                results = [self._shard.search(self._request(qe.SearchRequest, vecs[0], k, flt))]
            else:
                reqs = [self._request(qe.QueryRequest, v, k, flt) for v in vecs]
                results = self._shard.query_batch(qe.QueryBatchRequest(reqs))
        # every query's points (nearest first) in one flat list, read in one
        # pass (no comprehension frames: 4-6 us a query); scores are float32,
        # so the distance in float32 is exactly rounded too
        uids: list[Any] = []
        scores: list[float] = []
        counts: list[int] = []
        for points in results:
            counts.append(len(points))
            for p in points:
                uids.append(p.id)
                scores.append(p.score)
        ids, dist = _ids(uids), np.array(scores, np.float32)
        if self.schema.metric == "cosine":  # in place, with 0-d operands (indexlib.ONE)
            dist = np.subtract(ONE, dist, out=dist)
        elif self.schema.metric == "ip":
            dist = np.negative(dist, out=dist)
        return SearchResult.from_flat(ids, dist, counts, k)

    def _count(self, flt: Any = None) -> int:
        return int(self._shard.count(qe.CountRequest(exact=True, filter=flt)))

    def count(self) -> int:
        with self._lock.shared:
            return self._count()

    def build_index(self, params: HnswIndex) -> None:
        wanted = index_values(params)
        with self._lock.exclusive:
            if wanted != self._params:  # the HNSW config lives in the shard's config
                self._shard.flush()
                self._shard.close()
                self._params = wanted
                self._shard = qe.EdgeShard.load(self._path, self.store._config(self.schema, wanted))
            self._shard.optimize()  # blocks until the optimizers are done

    def set_search_params(self, params: HnswSearch) -> None:
        if params.ef is not None:
            self._search = qe.SearchParams(hnsw_ef=params.ef)

    def size_bytes(self) -> int:
        """Disk blocks of the shard's directory (its files are sparse: the
        apparent size is mostly preallocation)."""
        with self._lock.shared:
            self._shard.flush()
            total = 0
            for root, _, files in os.walk(self._path):
                for f in files:
                    total += os.stat(os.path.join(root, f)).st_blocks * 512
            return total

    def compact(self) -> None:
        with self._lock.shared:
            self._shard.optimize()

    def _close(self) -> None:
        with self._lock.exclusive:
            if self._shard is not None:
                self._shard.close()
                self._shard = None

    def _drop(self) -> None:
        self._close()
        self.store._collections.pop(self.name, None)
        shutil.rmtree(self._path, ignore_errors=True)


class QdrantEdgeStore(Store):
    async_ops = "inline"
    engine = "qdrant-edge"
    extra = "qdrant-edge"
    capabilities = frozenset(Capability) - {Capability.SHARED_ACROSS_PROCESSES, Capability.PIPELINE}
    client_mode = "threads"
    Index = HnswIndex
    Search = HnswSearch
    url_form = DIRECTORY
    # the shard's vectors and HNSW graph, and its payload, in this process
    ram = RamUse(vector=0, fields=2, hnsw_m=16)

    class Options(StoreOptions):
        # Qdrant's own default is about 10 MB: small segments would stay plain
        indexing_threshold_kb: PositiveInt = 1
        full_scan_threshold_kb: PositiveInt = 10_000  # Qdrant's default

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.local_path(mkdir=True)
        self._collections: dict[str, QdrantEdgeCollection] = {}

    def _config(self, schema: Schema, params: dict[str, int]) -> Any:
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=schema.dim or 0, distance=_DISTANCE[schema.metric]),
            hnsw_config=qe.HnswIndexConfig(
                m=params["m"],
                ef_construct=params["ef_construct"],
                full_scan_threshold=self.options.full_scan_threshold_kb,
            ),
            optimizers=qe.EdgeOptimizersConfig(
                indexing_threshold=self.options.indexing_threshold_kb
            ),
        )

    def _path(self, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise UserError(
                f"collection name {name!r}: use letters, digits, '_', '-', '.'",
                where="store qdrant-edge",
            )
        return os.path.join(self.spec.url or "", name)

    def has_collection(self, name: str) -> bool:
        return name in self._collections or os.path.exists(self._path(name))

    def _create(self, name: str, schema: Schema, index: HnswIndex) -> Collection:
        if not schema.dim:
            raise UserError("qdrant-edge collections need vectors (schema has no dim)")
        path = self._path(name)
        params = index_values(index)
        shard = qe.EdgeShard.create(path, self._config(schema, params))
        for f in schema.indexed:
            key = QdrantEdgeCollection._key(f)
            shard.update(qe.UpdateOperation.create_field_index(key, _INDEX_TYPE[schema.fields[f]]))
        coll = QdrantEdgeCollection(self, name, schema, shard, path, params)
        self._collections[name] = coll
        return coll

    def _open(self, name: str, schema: Schema) -> Collection:
        if name in self._collections:
            return self._collections[name]
        path = self._path(name)
        if not os.path.exists(os.path.join(path, "edge_config.json")):
            raise UserError(f"no qdrant-edge shard {name!r} in {self.spec.url}")
        shard = qe.EdgeShard.load(path)
        coll = QdrantEdgeCollection(self, name, schema, shard, path, index_values(HnswIndex()))
        self._collections[name] = coll
        return coll

    def versions(self) -> dict[str, str]:
        v = metadata.version("qdrant-edge-py")
        return {"engine": f"Qdrant Edge (qdrant-edge-py {v})", "client": f"qdrant-edge-py {v}"}

    def close(self) -> None:
        for coll in list(self._collections.values()):
            coll._close()
        self._collections.clear()
        super().close()
