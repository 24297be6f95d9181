"""The usearch store: usearch's HNSW ``Index`` in this process, with the
shared column store of ``indexlib`` for ids, fields, filters and bit-exact
vectors.

Parameters: ``m`` -> ``connectivity``, ``ef_construct`` -> ``expansion_add``
(both fixed when the index is made), ``ef`` -> ``expansion_search``. Keys are
column-store rows; vectors are stored as f32 (no quantisation).

- metric: l2 -> ``l2sq`` (the store returns its square root), ip -> ``ip``
  (usearch returns 1 - dot), cosine -> ``cos``.
- update: ``remove`` then ``add`` under the same key (usearch rejects a
  duplicate key); delete: ``remove`` (a tombstone; no compaction here).
- filtered search: usearch's Python API has no filter (its C++ predicate
  search is not bound), so a filtered search is exact over the matching rows
  (numpy, as the memory store): its numbers are not usearch's.
"""

from __future__ import annotations

from importlib import metadata

import numpy as np
from usearch.index import Index

from storebench.stores.ann.indexlib import LibraryCollection, LibraryStore

_METRIC = {"l2": "l2sq", "ip": "ip", "cosine": "cos"}


class UsearchCollection(LibraryCollection):
    _ix: Index

    def _index_new(self, params: dict[str, int], capacity: int) -> None:
        self._ix = Index(
            ndim=self._dim,
            metric=_METRIC[self.schema.metric],
            dtype="f32",
            connectivity=params["m"],
            expansion_add=params["ef_construct"],
            expansion_search=self._ef,
        )

    def _index_add(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        self._ix.add(rows.astype(np.uint64), np.ascontiguousarray(vecs))

    def _index_remove(self, rows: np.ndarray) -> None:
        self._ix.remove(rows.astype(np.uint64))

    def _index_replace(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        keys = rows.astype(np.uint64)
        self._ix.remove(keys)
        self._ix.add(keys, np.ascontiguousarray(vecs))

    def _index_set_ef(self, ef: int) -> None:
        self._ix.expansion_search = ef  # type: ignore[misc]  # the setter exists

    def _index_knn(
        self, q: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        if allowed is not None:  # no filter in usearch's Python API
            return self._exact(q, k, np.flatnonzero(allowed))
        m = self._ix.search(q, k)
        # one query comes back as Matches, cut to its count; more as
        # BatchMatches, k wide, with counts (the rest is left unset). Keys
        # are rows, below 2**63: int64 as they are
        rows = m.keys.view(np.int64).reshape(len(q), -1)
        d = m.distances.reshape(len(q), -1)
        if rows.shape[1] < k or (len(q) > 1 and m.counts.min() < k):
            counts = m.counts if len(q) > 1 else np.array([rows.shape[1]])
            found = np.arange(k)[None, :] < counts[:, None]
            rows = np.where(found, np.pad(rows, ((0, 0), (0, k - rows.shape[1]))), -1)
            d = np.where(found, np.pad(d, ((0, 0), (0, k - d.shape[1]))), np.float32(np.inf))
        metric = self.schema.metric
        if metric == "l2":
            d = np.sqrt(np.maximum(d, 0.0))
        elif metric == "ip":
            d = d - 1.0
        return rows, d

    def _index_bytes(self) -> int:
        return int(self._ix.memory_usage)


class UsearchStore(LibraryStore):
    engine = "usearch"
    extra = "usearch"
    collection_class = UsearchCollection

    def versions(self) -> dict[str, str]:
        v = metadata.version("usearch")
        return {"engine": f"usearch {v}", "client": f"usearch {v} (python bindings)"}
