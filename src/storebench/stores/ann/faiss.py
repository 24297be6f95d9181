"""The faiss store: faiss's ``IndexHNSWFlat`` in this process, with the shared
column store of ``indexlib`` for ids, fields, filters and bit-exact vectors.

Parameters: ``m`` -> ``IndexHNSWFlat(d, M)``, ``ef_construct`` ->
``hnsw.efConstruction``, ``ef`` -> ``SearchParametersHNSW.efSearch`` (per
search call). Labels are faiss's own sequential ids, which are column-store
rows: faiss HNSW cannot remove a vector (``remove_ids`` is not implemented
for it), so this store declares neither ``delete`` nor ``update``, and an
insert that would replace an existing id is refused rather than leaving a
stale vector in the graph.

- metric: l2 -> ``METRIC_L2`` (squared; the store returns its square root),
  ip -> ``METRIC_INNER_PRODUCT``, cosine -> inner product over copies
  normalised as ``faiss.normalize_L2`` does (the column store keeps the
  originals for ``get``).
- filtered search: faiss's own selector, ``SearchParametersHNSW(sel=
  IDSelectorBitmap)`` built from the filter's mask over the column store.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import faiss
import numpy as np
from faiss import fvec_renorm_L2, swig_ptr  # type: ignore[attr-defined]  # not in the stubs

from storebench.stores.ann.indexlib import ONE, ZERO, LibraryCollection, LibraryStore, padded
from storebench.stores.base import Capability, Collection


class FaissCollection(LibraryCollection):
    can_remove = False
    # faiss's HNSW cannot drop a label: the contract's refusals
    update = Collection.update
    delete = Collection.delete
    _ix: faiss.IndexHNSWFlat

    def _index_new(self, params: dict[str, int], capacity: int) -> None:
        metric = faiss.METRIC_L2 if self.schema.metric == "l2" else faiss.METRIC_INNER_PRODUCT
        ix = faiss.IndexHNSWFlat(self._dim, params["m"], metric)
        ix.hnsw.efConstruction = params["ef_construct"]
        self._ix = ix

    def _prep(self, x: np.ndarray) -> np.ndarray:
        if self.schema.metric != "cosine":
            return np.ascontiguousarray(x, dtype=np.float32)
        x = np.array(x, np.float32, order="C")  # a copy: normalised in place
        fvec_renorm_L2(self._dim, len(x), swig_ptr(x))  # normalize_L2's call; zeros stay zero
        return x

    def _index_add(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        if rows[0] != self._ix.ntotal or rows[-1] != self._ix.ntotal + len(rows) - 1:
            raise AssertionError("faiss labels must follow the column store's rows")
        self._ix.add(self._prep(vecs))

    def _index_set_ef(self, ef: int) -> None:
        self._ix.hnsw.efSearch = ef

    def _index_knn(
        self, q: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        params = None  # no filter: the index's own hnsw.efSearch (self._ef)
        if allowed is not None:
            bitmap = np.packbits(allowed, bitorder="little")  # alive until search returns
            sel = faiss.IDSelectorBitmap(len(allowed), swig_ptr(bitmap))
            params = faiss.SearchParametersHNSW(efSearch=self._ef, sel=sel)  # type: ignore[attr-defined]
        # the call under ``Index.search``, whose Python wrapper checks and
        # converts what is already right here (4-9 us a query on this path)
        n, x = len(q), self._prep(q)
        d, labels = np.empty((n, k), np.float32), np.empty((n, k), np.int64)
        self._ix.search_c(n, swig_ptr(x), k, swig_ptr(d), swig_ptr(labels), params)  # type: ignore[attr-defined]
        metric = self.schema.metric  # in place, with 0-d operands (indexlib.ONE)
        if metric == "l2":
            d = np.sqrt(np.maximum(d, ZERO, out=d), out=d)
        elif metric == "ip":
            d = np.negative(d, out=d)
        else:
            d = np.subtract(ONE, d, out=d)
        if padded(labels):
            d[labels < 0] = np.inf
        return labels, d

    def _index_bytes(self) -> int:
        ix = self._ix
        h: Any = ix.hnsw  # faiss's stubs leave out the graph's vectors
        return int(
            ix.ntotal * ix.d * 4  # the flat vector storage
            + h.neighbors.size() * 4
            + h.levels.size() * 4
            + h.offsets.size() * 8
        )


class FaissStore(LibraryStore):
    engine = "faiss"
    extra = "faiss"
    collection_class = FaissCollection
    capabilities = LibraryStore.capabilities - {Capability.UPDATE, Capability.DELETE}

    def versions(self) -> dict[str, str]:
        return {
            "engine": f"faiss {faiss.__version__}",
            "client": f"faiss-cpu {metadata.version('faiss-cpu')}",
        }
