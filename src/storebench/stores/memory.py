"""The memory store: numpy columns in this process, exact search.

It plays the study's "in-memory DocumentArray": no index, every search scans
all vectors (one BLAS matrix product), filters are numpy masks. Rows live in
growable arrays; an id->row dict finds documents; deletes leave tombstones
that ``compact`` removes."""

from __future__ import annotations

import threading

import numpy as np

from storebench.data.batch import DocBatch, Schema
from storebench.data.truth import distances, top_k
from storebench.stores.base import Capability, Collection, SearchResult, Store, StoreSpec
from storebench.stores.filters import Filter, evaluate

_DTYPES = {"int": np.int64, "float": np.float64, "bool": np.bool_, "str": object}


class MemoryCollection(Collection):
    def __init__(self, store: Store, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self._lock = threading.Lock()
        self._n = 0
        self._row_of: dict[int, int] = {}
        self._ids = np.empty(0, np.int64)
        self._alive = np.empty(0, bool)
        self._cols: dict[str, np.ndarray] = {
            k: np.empty(0, _DTYPES[kind]) for k, kind in schema.fields.items()
        }
        dim = schema.dim or 0
        self._vecs = np.empty((0, dim), np.float32)
        self._sq = np.empty(0, np.float32)  # squared norms, for l2

    # --- storage helpers (callers hold the lock) ---------------------------
    def _reserve(self, extra: int) -> None:
        need = self._n + extra
        cap = len(self._ids)
        if need <= cap:
            return
        cap = max(need, 2 * cap, 1024)

        def grow(a: np.ndarray) -> np.ndarray:
            out = np.empty((cap, *a.shape[1:]), a.dtype)
            out[: self._n] = a[: self._n]
            return out

        self._ids, self._alive, self._sq = grow(self._ids), grow(self._alive), grow(self._sq)
        self._cols = {k: grow(v) for k, v in self._cols.items()}
        if self.schema.dim:
            self._vecs = grow(self._vecs)

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        get = self._row_of.get
        return np.fromiter((get(i, -1) for i in ids.tolist()), np.int64, len(ids))

    def _set_vectors(self, rows: np.ndarray | slice, vecs: np.ndarray) -> None:
        self._vecs[rows] = vecs
        self._sq[rows] = np.einsum("ij,ij->i", vecs, vecs)

    # --- contract ------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        n = len(docs)
        with self._lock:
            old = self._rows(docs.ids)
            self._alive[old[old >= 0]] = False  # an existing id is replaced
            self._reserve(n)
            rows = slice(self._n, self._n + n)
            self._ids[rows] = docs.ids
            self._alive[rows] = True
            for k, col in self._cols.items():
                col[rows] = docs.fields[k]
            if self.schema.dim:
                self._set_vectors(rows, docs.vectors)  # type: ignore[arg-type]
            self._row_of.update(zip(docs.ids.tolist(), range(self._n, self._n + n), strict=True))
            self._n += n

    def get(self, ids: np.ndarray) -> DocBatch:
        rows = self._rows(ids)
        return self._batch(rows[rows >= 0], vectors=True)

    def _batch(self, rows: np.ndarray, vectors: bool) -> DocBatch:
        return DocBatch(
            self._ids[rows],
            {k: v[rows] for k, v in self._cols.items()},
            self._vecs[rows] if vectors and self.schema.dim else None,
        )

    def update(self, docs: DocBatch) -> None:
        with self._lock:
            rows = self._rows(docs.ids)
            hit = rows >= 0
            rows = rows[hit]
            for k, col in docs.fields.items():
                self._cols[k][rows] = col[hit]
            if docs.vectors is not None:
                self._set_vectors(rows, docs.vectors[hit])

    def delete(self, ids: np.ndarray) -> None:
        with self._lock:
            rows = self._rows(ids)
            self._alive[rows[rows >= 0]] = False
            pop = self._row_of.pop
            for i in ids.tolist():
                pop(i, None)

    def _mask(self, where: Filter | None) -> np.ndarray:
        n = self._n
        mask = self._alive[:n]
        if where is not None:
            mask = mask & evaluate(where, {k: v[:n] for k, v in self._cols.items()})
        return mask

    def find(
        self,
        where: Filter | None = None,
        order: tuple[str, bool] | None = None,
        limit: int | None = None,
    ) -> DocBatch:
        rows = np.flatnonzero(self._mask(where))
        if order is not None:
            field, desc = order
            keys = self._cols[field][rows]
            idx = np.argsort(keys, kind="stable")
            rows = rows[idx[::-1] if desc else idx]
        if limit is not None:
            rows = rows[:limit]
        return self._batch(rows, vectors=False)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        n = self._n
        mask = self._mask(where)
        if mask.all():
            rows = None
            d = distances(vectors, self._vecs[:n], self.schema.metric, self._sq[:n])
        else:
            rows = np.flatnonzero(mask)
            d = distances(vectors, self._vecs[rows], self.schema.metric, self._sq[rows])
        pos, dist = top_k(d, k)
        if rows is not None:
            pos = np.where(pos >= 0, rows[np.maximum(pos, 0)], -1)
        ids = np.where(pos >= 0, self._ids[np.maximum(pos, 0)], -1)
        return SearchResult(ids, dist)

    def count(self) -> int:
        return len(self._row_of)

    def size_bytes(self) -> int:
        n = self._n
        size = (
            self._ids[:n].nbytes
            + self._alive[:n].nbytes
            + self._vecs[:n].nbytes
            + self._sq[:n].nbytes
        )
        return size + sum(v[:n].nbytes for v in self._cols.values())

    def compact(self) -> None:
        with self._lock:
            keep = np.flatnonzero(self._alive[: self._n])
            self._ids, self._alive, self._sq = self._ids[keep], self._alive[keep], self._sq[keep]
            self._cols = {k: v[keep] for k, v in self._cols.items()}
            self._vecs = self._vecs[keep]
            self._n = len(keep)
            self._row_of = dict(zip(self._ids.tolist(), range(self._n), strict=True))

    def _drop(self) -> None:
        self.store._collections.pop(self.name, None)  # type: ignore[attr-defined]


class MemoryStore(Store):
    engine = "memory"
    capabilities = frozenset(Capability) - {
        Capability.INDEX,
        Capability.SEARCH_PARAMS,
        Capability.SHARED_ACROSS_PROCESSES,
    }
    exact = True

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self._collections: dict[str, MemoryCollection] = {}

    def has_collection(self, name: str) -> bool:
        return name in self._collections

    def _create(self, name: str, schema: Schema) -> Collection:
        coll = MemoryCollection(self, name, schema)
        self._collections[name] = coll
        return coll

    def _open(self, name: str, schema: Schema) -> Collection:
        return self._collections[name]

    def versions(self) -> dict[str, str]:
        return {"engine": f"numpy {np.__version__}"}
