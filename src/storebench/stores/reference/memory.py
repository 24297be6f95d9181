"""The memory store: numpy columns in this process, exact search.

It plays the study's "in-memory DocumentArray": no index, every search scans
all vectors (one BLAS matrix product), filters are numpy masks. Rows live in
a ``columns.Columns`` store (growable arrays, an id->row dict); deletes leave
tombstones that ``compact`` removes."""

from __future__ import annotations

import threading

import numpy as np

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.data.truth import distances, top_k
from storebench.stores.base import Capability, Collection, SearchResult, Store, StoreSpec
from storebench.stores.columns import Columns, ColumnsCollection
from storebench.stores.params import IndexParams


class MemoryCollection(ColumnsCollection):
    def __init__(self, store: Store, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._lock = threading.Lock()
        self._c = Columns(schema)

    def insert(self, docs: DocBatch) -> None:
        with self._lock:
            self._c.append(docs)  # an existing id is replaced

    def update(self, docs: DocBatch) -> None:
        with self._lock:
            self._c.update(docs)

    def delete(self, ids: np.ndarray) -> None:
        with self._lock:
            self._c.delete(ids)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        c = self._c
        n = c.n
        mask = c.mask(where)
        matched = int(np.count_nonzero(mask))
        if 2 * matched >= n:
            # most rows (all, or all but some deleted ones): scan them in
            # place and rule the others out, rather than gather a copy of
            # nearly every vector per query (512 MB at 1M x 128)
            d = distances(vectors, c.vecs[:n], self.schema.metric, c.sq[:n])
            if matched < n:
                d[:, ~mask] = np.inf
            pos, dist = top_k(d, min(k, matched))
        else:
            rows = np.flatnonzero(mask)
            d = distances(vectors, c.vecs[rows], self.schema.metric, c.sq[rows])
            pos, dist = top_k(d, k)
            pos = np.where(pos >= 0, rows[np.maximum(pos, 0)], -1)
        if pos.shape[1] < k:  # fewer matches than k: pad as top_k does
            pad = ((0, 0), (0, k - pos.shape[1]))
            pos = np.pad(pos, pad, constant_values=-1)
            dist = np.pad(dist, pad, constant_values=np.inf)
        return SearchResult(c.ids[pos], dist)  # padding too: row -1 is id -1 (``Columns.ids``)

    def size_bytes(self) -> int:
        return self._c.nbytes()

    def compact(self) -> None:
        with self._lock:
            self._c.compact()

    def _drop(self) -> None:
        self.store._collections.pop(self.name, None)  # type: ignore[attr-defined]


class MemoryStore(Store):
    async_ops = "inline"
    engine = "memory"
    capabilities = frozenset(Capability) - {
        Capability.INDEX,
        Capability.SEARCH_PARAMS,
        Capability.SHARED_ACROSS_PROCESSES,
        Capability.PIPELINE,
    }
    exact = True
    ram = Columns.ram

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self._collections: dict[str, MemoryCollection] = {}

    def has_collection(self, name: str) -> bool:
        return name in self._collections

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        coll = MemoryCollection(self, name, schema)
        self._collections[name] = coll
        return coll

    def _open(self, name: str, schema: Schema) -> Collection:
        return self._collections[name]

    def versions(self) -> dict[str, str]:
        return {"engine": f"numpy {np.__version__}"}
