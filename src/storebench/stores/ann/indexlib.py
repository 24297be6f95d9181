"""What the index-library stores (hnswlib, faiss, usearch) share.

An ANN index library keeps vectors under integer labels and nothing else, so
each of these stores pairs the library's index with a ``columns.Columns``
store in the same process: the column store keeps ids, scalar fields (for
filters, ``get`` and ``find``) and the vectors (``get`` returns them
bit-exact, whatever the library does to its copy); a document's row number
in the column store is its label in the index, so the id map is the column
store's id->row dict one way and its ``ids`` array the other.

Indexing is incremental, the way these libraries are used: the first insert
creates the index with the collection's index parameters (``create_collection``) and every insert
adds its batch to it, so ``create`` includes graph construction (as it did
in the DocArray study) and ``build_index`` with the same parameters has
nothing left to do. ``build_index`` with other parameters rebuilds the index
from the stored vectors. Searches before ``build_index`` use the same
(complete) index.

Searches take a shared lock and writes an exclusive one: the libraries'
growth (resize/reserve) and faiss's ``add`` must not run beside a search.
The shared side costs two set operations while nothing writes (``RWLock``).

Neutral parameters: index ``m``, ``ef_construct``; search ``ef``. Defaults
(the same for every engine, so runs compare): m=16, ef_construct=128, ef=64.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from threading import get_ident
from typing import ClassVar

import numpy as np

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.data.truth import distances, top_k
from storebench.errors import UserError
from storebench.stores.base import (
    DOCUMENTS,
    VECTORS,
    Capability,
    Collection,
    SearchResult,
    Store,
    StoreSpec,
)
from storebench.stores.columns import Columns, ColumnsCollection
from storebench.stores.params import HnswIndex, HnswSearch

DEFAULT_INDEX: dict[str, int] = {"m": 16, "ef_construct": 128}
DEFAULT_SEARCH: dict[str, int] = {"ef": 64}


def index_values(params: HnswIndex) -> dict[str, int]:
    """The index parameters with the defaults filled in (None: default)."""
    return {k: v if v is not None else DEFAULT_INDEX[k] for k, v in params}


# distances converted in place with these: numpy takes ~1 us per call to
# promote a Python float, a third of that for a 0-d array of the result's type
ONE = np.ones((), np.float32)
ZERO = np.zeros((), np.float32)


def padded(rows: np.ndarray) -> bool:
    """Whether a row of a k-nearest answer (k > 0) ends in -1 (a row's
    padding is at its end): one look per query, not a pass over the answer
    (one query: its last label read as it is, no view made)."""
    if len(rows) == 1:
        return rows.item(-1) < 0
    return min(rows[:, -1].tolist()) < 0


class RWLock:
    """Many readers or one writer, taking turns: a waiting writer holds off
    new readers, and a writer's release lets in the readers that waited for
    it before the next writer. (Writers first alone starved the readers: a
    writer inserting in a loop took the lock back before a waiting search
    woke, so searches while inserting waited for the whole stream.)

    ``with lock.shared:`` / ``with lock.exclusive:``. A reader in is a thread
    in ``_fast``. While no writer is in or waiting a reader takes no lock:
    it puts its thread in ``_fast``, then looks at ``_gate``; a writer raises
    ``_gate`` before it waits for ``_fast`` to empty, so one of the two
    always sees the other. A reader that finds the gate raised steps back
    and queues on the condition (``queue``); one leaving takes its thread
    out, then wakes a waiting writer if the gate is up (``wake``).
    Not reentrant (a thread holds it once)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._fast: set[int] = set()  # threads reading
        self._gate = False  # a writer is in or waiting: readers queue
        self._writer = False
        self._writers_waiting = 0
        self._readers_waiting = 0
        self._admit = 0  # readers let in ahead of waiting writers (their turn)
        self.shared = _Shared(self)
        self.exclusive = _Exclusive(self)

    def queue(self, me: int) -> None:
        """A reader that found the gate up: out of ``_fast``, wait for the
        writers' turn to end, back in."""
        with self._cond:
            self._fast.discard(me)
            self._cond.notify_all()  # a writer may be waiting for it to leave
            self._readers_waiting += 1
            while self._writer or (self._writers_waiting and not self._admit):
                self._cond.wait()
            self._readers_waiting -= 1
            if self._admit:
                self._admit -= 1
            self._fast.add(me)

    def wake(self) -> None:
        """A reader left with the gate up: the waiting writer looks again."""
        with self._cond:
            self._cond.notify_all()


class _Shared:
    # the same four steps are inline in ``LibraryCollection.search``
    def __init__(self, lock: RWLock):
        self.lock = lock

    def __enter__(self) -> None:
        lock = self.lock
        lock._fast.add(get_ident())
        if lock._gate:
            lock.queue(get_ident())

    def __exit__(self, *exc: object) -> None:
        lock = self.lock
        lock._fast.discard(get_ident())
        if lock._gate:
            lock.wake()


class _Exclusive:
    def __init__(self, lock: RWLock):
        self.lock = lock

    def __enter__(self) -> None:
        lock = self.lock
        with lock._cond:
            lock._writers_waiting += 1
            lock._gate = True
            while lock._writer or lock._admit or lock._fast:
                lock._cond.wait()
            lock._writers_waiting -= 1
            lock._writer = True

    def __exit__(self, *exc: object) -> None:
        lock = self.lock
        with lock._cond:
            lock._writer = False
            lock._admit = lock._readers_waiting  # their turn before the next writer
            lock._gate = bool(lock._writers_waiting)
            lock._cond.notify_all()


class LibraryCollection(ColumnsCollection):
    """The engine-blind part; a subclass fills in the ``_index_*`` hooks (a
    library that cannot remove a label takes back ``update`` and ``delete``)."""

    store: LibraryStore
    can_remove: ClassVar[bool] = True  # the library can drop a label from its index

    def __init__(self, store: LibraryStore, name: str, schema: Schema, index: HnswIndex):
        super().__init__(store, name, schema)
        if not schema.dim:
            raise UserError(f"{store.engine} stores need vectors (schema has no dim)")
        self._dim: int = schema.dim
        self._c = Columns(schema)
        self._lock = RWLock()
        self._params = index_values(index)  # the index the inserts build
        self._ef = DEFAULT_SEARCH["ef"]
        self._built = False  # the library's index exists

    # --- hooks -----------------------------------------------------------------
    def _index_new(self, params: dict[str, int], capacity: int) -> None:
        """Create an empty index (self._built follows)."""
        raise NotImplementedError

    def _index_add(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        """Add vectors under labels ``rows`` (new labels, ascending)."""
        raise NotImplementedError

    def _index_remove(self, rows: np.ndarray) -> None:
        raise NotImplementedError

    def _index_replace(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        """New vectors for labels already in the index."""
        raise NotImplementedError

    def _index_knn(
        self, q: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, distances) of the k nearest live rows (only rows where
        ``allowed`` is true, if given), padded with -1/inf: int64 and float32,
        distances in the metric's own terms. k never exceeds the live
        (allowed) rows."""
        raise NotImplementedError

    def _index_set_ef(self, ef: int) -> None:
        pass

    def _index_bytes(self) -> int:
        raise NotImplementedError

    # --- shared helpers ----------------------------------------------------------
    def _exact(self, q: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exhaustive search over ``rows`` (numpy BLAS, as the memory store)."""
        c = self._c
        pos, dist = top_k(distances(q, c.vecs[rows], self.schema.metric, c.sq[rows]), k)
        return np.where(pos >= 0, rows[np.maximum(pos, 0)], -1), dist

    def _ensure_index(self, extra: int) -> None:
        if not self._built:
            self._index_new(self._params, max(1024, self._c.n + extra))
            self._index_set_ef(self._ef)
            self._built = True

    # --- contract ------------------------------------------------------------------
    def update(self, docs: DocBatch) -> None:
        with self._lock.exclusive:
            rows, hit = self._c.update(docs)
            if docs.vectors is not None and len(rows) and self._built:
                self._index_replace(rows, np.ascontiguousarray(docs.vectors[hit]))

    def delete(self, ids: np.ndarray) -> None:
        with self._lock.exclusive:
            rows = self._c.delete(ids)
            if len(rows) and self._built:
                self._index_remove(rows)

    def insert(self, docs: DocBatch) -> None:
        if not len(docs):
            return
        with self._lock.exclusive:
            c = self._c
            if not self.can_remove:
                old = c.rows(docs.ids)
                if (old >= 0).any() or len(np.unique(docs.ids)) < len(docs):
                    dup = docs.ids[old >= 0][:1].tolist() or "repeated within the batch"
                    raise UserError(
                        f"{self.store.engine} cannot replace a document (id {dup}): "
                        "its index has no removal",
                        where=f"{self.store.engine} insert",
                    )
            self._ensure_index(len(docs))
            new, dead = c.append(docs)
            old_dead = dead[dead < new.start]
            if len(old_dead):
                self._index_remove(old_dead)
            rows = np.arange(new.start, new.stop, dtype=np.int64)
            if len(dead) > len(old_dead):  # ids repeated in the batch: only the last is indexed
                rows = rows[c.alive[new]]
            self._index_add(rows, c.vecs[rows] if len(rows) < len(docs) else c.vecs[new])

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        q = np.ascontiguousarray(vectors, dtype=np.float32)
        # ``with self._lock.shared``, its steps inline: the two calls it
        # makes are 1-3 us of a 100 us query (faiss, ef 16)
        lock, me = self._lock, get_ident()
        lock._fast.add(me)
        if lock._gate:
            lock.queue(me)
        try:
            c = self._c
            if where is None and 0 < k <= len(c.row_of) and self._built and len(q):
                rows, dist = self._index_knn(q, k, None)  # the common case
            else:
                found = self._search_rest(q, k, where)
                if found is None:  # nothing to look for
                    return SearchResult.empty(len(q), k)
                rows, dist = found
            ids = c.ids[rows]  # padding too: row -1 is id -1 (``Columns.ids``)
        finally:
            lock._fast.discard(me)
            if lock._gate:
                lock.wake()
        return SearchResult(ids, dist)

    def _search_rest(
        self, q: np.ndarray, k: int, where: Filter | None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``search``'s rows and distances with a filter and for k above the
        live documents; None where there is nothing to look for (no query,
        k = 0, no live or matching document, no index yet)."""
        c = self._c
        live = c.count()
        allowed = None
        if where is not None:
            allowed = c.mask(where)
            live = int(allowed.sum())
            if live == c.count():
                allowed = None  # every live document matches
        if live == 0 or k == 0 or not self._built or not len(q):
            return None
        if allowed is not None and live <= k:
            return self._exact(q, k, np.flatnonzero(allowed))  # all of them
        kk = min(k, live)
        rows, dist = self._index_knn(q, kk, allowed)
        if kk < k:
            rows = np.pad(rows, ((0, 0), (0, k - kk)), constant_values=-1)
            dist = np.pad(dist, ((0, 0), (0, k - kk)), constant_values=np.inf)
        return rows, dist

    def build_index(self, params: HnswIndex) -> bool:
        """False (nothing built) when the inserts built it with these parameters."""
        wanted = index_values(params)
        with self._lock.exclusive:
            if self._built and wanted == self._params:
                return False  # built incrementally with these parameters: ready
            self._params = wanted
            self._built = False
            self._ensure_index(0)
            rows = np.flatnonzero(self._c.alive[: self._c.n])
            if len(rows):
                self._index_add(rows, self._c.vecs[rows])
        return True

    def set_search_params(self, params: HnswSearch) -> None:
        if params.ef is None:
            return
        ef = params.ef
        with self._lock.exclusive:
            self._ef = ef
            if self._built:
                self._index_set_ef(ef)

    def size_bytes(self) -> int:
        """The library's index plus the column store (ids, fields, vectors)."""
        with self._lock.shared:
            return self._c.nbytes() + (self._index_bytes() if self._built else 0)

    def _drop(self) -> None:
        with self._lock.exclusive:
            self.store._collections.pop(self.name, None)
            self._c = Columns(self.schema)
            self._built = False


class LibraryStore(Store):
    """Collections live in this process (in memory); no url."""

    collection_class: ClassVar[type[LibraryCollection]]
    async_ops = "inline"
    client_mode = "threads"
    capabilities = DOCUMENTS | VECTORS | {Capability.ORDER, Capability.SIZE}
    Index = HnswIndex
    Search = HnswSearch
    ram = replace(Columns.ram, hnsw_m=DEFAULT_INDEX["m"])

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)  # no url_form, no Options: it takes neither
        self._collections: dict[str, LibraryCollection] = {}

    def has_collection(self, name: str) -> bool:
        return name in self._collections

    def _create(self, name: str, schema: Schema, index: HnswIndex) -> Collection:
        coll = self.collection_class(self, name, schema, index)
        self._collections[name] = coll
        return coll

    def _open(self, name: str, schema: Schema) -> Collection:
        if name not in self._collections:
            raise UserError(f"no collection {name!r} in this {self.engine} store")
        return self._collections[name]
