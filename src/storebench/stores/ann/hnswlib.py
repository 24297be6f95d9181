"""The hnswlib store: hnswlib's HNSW index (the reference implementation) in
this process, with the shared column store of ``indexlib`` for ids, fields,
filters and bit-exact vectors.

Parameters: ``m`` -> ``M``, ``ef_construct`` -> ``ef_construction`` (both at
``init_index``), ``ef`` -> ``set_ef``. Labels are column-store rows.

- insert: ``add_items`` per batch (all cores), the index grows with
  ``resize_index``; replacing an id marks its old label deleted.
- update: ``add_items`` on the existing label (hnswlib updates the element in
  place); delete: ``mark_deleted`` (the element stays in the graph as a
  tombstone: hnswlib has no compaction, so no ``compact``).
- filtered search: hnswlib's own ``knn_query(filter=...)``, with the filter
  evaluated on the column store first and handed over as a set or list
  lookup (a C-level call); hnswlib calls it once per candidate with the GIL
  held, so filtered searches do not run in parallel across client threads. Where the filter leaves no more
  than k documents, or hnswlib cannot return k (it raises when a filtered or
  tombstoned graph runs dry), the search is exact over the matching rows.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

import hnswlib
import numpy as np

from storebench.stores.ann.indexlib import ONE, ZERO, LibraryCollection, LibraryStore

_SPACE = {"l2": "l2", "ip": "ip", "cosine": "cosine"}


def _predicate(allowed: np.ndarray) -> Callable[[int], bool]:
    """label -> allowed, as a C-level lookup (no Python frame per candidate):
    a set of the matching rows when they are few, else a list of flags."""
    n_allowed = int(np.count_nonzero(allowed))
    if n_allowed * 8 < len(allowed):
        return set(np.flatnonzero(allowed).tolist()).__contains__
    return allowed.tolist().__getitem__


class HnswlibCollection(LibraryCollection):
    _ix: hnswlib.Index

    def _index_new(self, params: dict[str, int], capacity: int) -> None:
        ix = hnswlib.Index(space=_SPACE[self.schema.metric], dim=self._dim)
        ix.init_index(max_elements=capacity, M=params["m"], ef_construction=params["ef_construct"])
        self._ix = ix

    def _index_add(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        ix = self._ix
        need = ix.element_count + len(rows)
        if need > ix.max_elements:
            ix.resize_index(max(need, 2 * ix.max_elements))
        ix.add_items(vecs, rows, num_threads=-1)

    def _index_remove(self, rows: np.ndarray) -> None:
        for r in rows.tolist():
            self._ix.mark_deleted(r)

    def _index_replace(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        self._ix.add_items(vecs, rows, num_threads=-1)

    def _index_set_ef(self, ef: int) -> None:
        self._ix.set_ef(ef)

    def _index_knn(
        self, q: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        try:
            if allowed is None:
                labels, d = self._ix.knn_query(q, k)  # positional: pybind's keywords cost 2-4 us
            else:
                labels, d = self._ix.knn_query(q, k=k, filter=_predicate(allowed))
        except RuntimeError:  # "Cannot return the results in a contiguous 2D array"
            rows = np.flatnonzero(self._c.alive[: self._c.n] if allowed is None else allowed)
            return self._exact(q, k, rows)
        metric = self.schema.metric  # in place, with 0-d operands (indexlib.ONE)
        if metric == "l2":
            d = np.sqrt(np.maximum(d, ZERO, out=d), out=d)
        elif metric == "ip":
            d = np.subtract(d, ONE, out=d)  # hnswlib's ip distance is 1 - dot
        return labels.view(np.int64), d  # labels are rows, below 2**63

    def _index_bytes(self) -> int:
        return int(self._ix.index_file_size())


class HnswlibStore(LibraryStore):
    engine = "hnswlib"
    extra = "hnswlib"
    collection_class = HnswlibCollection

    def versions(self) -> dict[str, str]:
        v = metadata.version("hnswlib")
        return {"engine": f"hnswlib {v}", "client": f"hnswlib {v} (python bindings)"}
