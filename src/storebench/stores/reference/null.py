"""The null store: accepts every call, keeps nothing, returns empty results.

Running a workload against it measures the harness itself: its throughput is
the ceiling no real engine can be measured above."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.stores.base import Capability, Collection, RamUse, SearchResult, Store
from storebench.stores.params import HnswIndex, HnswSearch, IndexParams, Order


class NullCollection(Collection):
    def __init__(self, store: Store, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._empty = DocBatch.empty(schema)
        self._no_hits: dict[tuple[int, int], SearchResult] = {}

    def insert(self, docs: DocBatch) -> None:
        pass

    def insert_pipelined(self, batches: Sequence[DocBatch]) -> None:
        pass

    def get(self, ids: np.ndarray) -> DocBatch:
        return self._empty

    def update(self, docs: DocBatch) -> None:
        pass

    def delete(self, ids: np.ndarray) -> None:
        pass

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        return self._empty

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        shape = (len(vectors), k)
        hit = self._no_hits.get(shape)
        if hit is None:  # built once per shape, so the hot path allocates nothing
            hit = self._no_hits[shape] = SearchResult.empty(*shape)
        return hit

    def count(self) -> int:
        return 0

    def build_index(self, params: HnswIndex) -> None:
        pass

    def set_search_params(self, params: HnswSearch) -> None:
        pass

    def size_bytes(self) -> int:
        return 0

    def compact(self) -> None:
        pass

    def _drop(self) -> None:
        pass


class NullStore(Store):
    async_ops = "inline"
    engine = "null"
    capabilities = frozenset(Capability)
    Index = HnswIndex
    Search = HnswSearch
    ram = RamUse(vector=0, fields=0, overhead=0)  # keeps nothing

    def has_collection(self, name: str) -> bool:
        return False

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        return NullCollection(self, name, schema)

    def _open(self, name: str, schema: Schema) -> Collection:
        return NullCollection(self, name, schema)

    def versions(self) -> dict[str, str]:
        return {"engine": "null"}
