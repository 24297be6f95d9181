"""Exact nearest neighbours and recall.

Exact search is blocked matrix products on BLAS plus a partial sort, in
memory-bounded blocks of data rows, so it serves both the exact stores and
ground truth. Recall handles ties: a returned id is a hit when its true
distance is within the k-th true distance (plus a small relative
tolerance), each id counted once. The peers' rules (ann-benchmarks'
absolute epsilon, VectorDBBench's exact ids) are scores of their own in
``workloads/vector/scoring.py``.

``exact_knn`` is the ground-truth engine. For each (query block, data block)
it runs one GEMM giving a *ranking key* per pair (``|x|^2 - 2 q.x`` for l2,
``-q.x`` for ip, ``-q̂.x̂`` for cosine), then keeps per query the k smallest
keys. Once a query holds k candidates only keys below its current k-th key
can matter, so a block costs a vectorised compare and a scan of a bitmask;
the rare survivors are merged with a small partial sort. Work is split into
contiguous row segments run on a thread pool (numpy and BLAS release the
GIL), and the k winners' distances are finally recomputed directly (in
float64) so the reported distances are exact, not GEMM-rounded.

One module (~500 lines) on purpose: the blocked engine, the distances it
recomputes and the tie-aware recall share one notion of distance and its
tolerance; apart, the recall could drift from the truth it scores.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from storebench.data.batch import Metric

# Memory for the per-block scratch (distance block + mask + converted rows),
# shared by all worker threads: bounds peak memory whatever n and nq are.
_BLOCK_BYTES = 256 << 20
# Queries per block: more amortises the reads of the data, but the scratch
# per data row grows with it.
_QUERY_BLOCK = 2048
_MAX_ROWS_PER_BLOCK = 65536
# Index scratch of a partial sort over a whole block, done a few rows at a time.
_SELECT_BYTES = 8 << 20

Progress = Callable[[int], None]


def normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32, copy=False)


def distances(
    queries: np.ndarray, data: np.ndarray, metric: Metric, data_sq_norms: np.ndarray | None = None
) -> np.ndarray:
    """(q, n) distances in the metric's own terms (smaller is nearer)."""
    q = np.asarray(queries, dtype=np.float32)
    x = np.asarray(data, dtype=np.float32)
    if metric == "ip":
        return -(q @ x.T)
    if metric == "cosine":
        return 1.0 - normalize(q) @ normalize(x).T
    if data_sq_norms is None:
        data_sq_norms = np.einsum("ij,ij->i", x, x)
    d2 = (q * q).sum(1)[:, None] - 2.0 * (q @ x.T) + data_sq_norms[None, :]
    np.maximum(d2, 0.0, out=d2)
    return np.sqrt(d2, out=d2)


def pair_distances(
    queries: np.ndarray, data: np.ndarray, positions: np.ndarray, metric: Metric
) -> np.ndarray:
    """Distance from query i to row ``positions[i, j]`` of ``data``, computed
    directly in float64 (no GEMM rounding); inf where the position is -1."""
    q = np.asarray(queries, dtype=np.float32)
    nq, k = positions.shape
    out = np.full((nq, k), np.inf, np.float64)
    if nq == 0 or k == 0:
        return out.astype(np.float32)
    d = q.shape[1]
    step = max(1, (8 << 20) // max(1, k * d * 8))
    for s in range(0, nq, step):
        pos = positions[s : s + step]
        ok = pos >= 0
        flat = pos[ok]
        if flat.size == 0:
            continue
        order = np.argsort(flat, kind="stable")  # sorted reads are kinder to a memmap
        rows = np.empty((flat.size, d), np.float64)
        rows[order] = np.asarray(data[flat[order]], dtype=np.float64)
        qq = np.broadcast_to(q[s : s + step, None, :], (*pos.shape, d))[ok].astype(np.float64)
        if metric == "l2":
            val = np.sqrt(np.einsum("ij,ij->i", rows - qq, rows - qq))
        elif metric == "ip":
            val = -np.einsum("ij,ij->i", rows, qq)
        else:
            rn = np.linalg.norm(rows, axis=1)
            qn = np.linalg.norm(qq, axis=1)
            rn[rn == 0] = 1.0
            qn[qn == 0] = 1.0
            val = 1.0 - np.einsum("ij,ij->i", rows, qq) / (rn * qn)
        blk = out[s : s + step]
        blk[ok] = val
    return out.astype(np.float32)


def top_k(dist: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise k smallest, sorted: (positions, distances); pads with -1/inf."""
    q, n = dist.shape
    if n == 0 or k == 0:
        return np.full((q, k), -1, np.int64), np.full((q, k), np.inf, np.float32)
    kk = min(k, n)
    part = (
        np.argpartition(dist, kk - 1, axis=1)[:, :kk] if kk < n else np.tile(np.arange(n), (q, 1))
    )
    pd = np.take_along_axis(dist, part, axis=1)
    order = np.argsort(pd, axis=1, kind="stable")
    pos = np.take_along_axis(part, order, axis=1).astype(np.int64)
    pd = np.take_along_axis(pd, order, axis=1).astype(np.float32)
    if kk < k:
        pos = np.pad(pos, ((0, 0), (0, k - kk)), constant_values=-1)
        pd = np.pad(pd, ((0, 0), (0, k - kk)), constant_values=np.inf)
    return pos, pd


# --- the blocked engine ------------------------------------------------------


def _as_rows(rows: np.ndarray | None, n: int) -> np.ndarray | None:
    """A filter as sorted row positions (None: all rows)."""
    if rows is None:
        return None
    r = np.asarray(rows)
    if r.dtype == np.bool_:
        if r.shape != (n,):
            raise ValueError(f"filter mask has shape {r.shape}, expected ({n},)")
        return np.flatnonzero(r)
    r = np.unique(r.astype(np.int64))
    if len(r) and (r[0] < 0 or r[-1] >= n):
        raise ValueError("filter rows out of range")
    return r


class _Keeper:
    """The k smallest keys seen so far for a block of queries (unsorted)."""

    def __init__(self, nq: int, k: int):
        self.k = k
        self.key = np.full((nq, k), np.inf, np.float32)
        self.pos = np.full((nq, k), -1, np.int64)
        self.thr = np.full(nq, np.inf, np.float32)
        self.full = False
        self.mask: np.ndarray | None = None

    def _merge(self, rows: np.ndarray, key: np.ndarray, pos: np.ndarray) -> None:
        """Merge candidate columns (for the query rows ``rows``) into the state."""
        k = self.k
        allk = np.concatenate([self.key[rows], key], axis=1)
        allp = np.concatenate([self.pos[rows], pos], axis=1)
        if allk.shape[1] > k:
            sel = np.argpartition(allk, k - 1, axis=1)[:, :k]
            allk = np.take_along_axis(allk, sel, axis=1)
            allp = np.take_along_axis(allp, sel, axis=1)
        self.key[rows] = allk
        self.pos[rows] = allp
        self.thr[rows] = allk.max(axis=1)

    def add(self, block: np.ndarray, positions: np.ndarray | int) -> None:
        """``block`` is (nq, nb) keys for data rows ``positions`` (an array,
        or the int start of a contiguous range)."""
        nq, nb = block.shape
        if nb == 0:
            return
        if not self.full:
            kk = min(self.k, nb)
            # a few query rows at a time: argpartition's int64 index matrix
            # would otherwise be twice the size of the block itself
            step = max(1, _SELECT_BYTES // (8 * nb))
            for r0 in range(0, nq, step):
                part = block[r0 : r0 + step]
                sel = (
                    np.argpartition(part, kk - 1, axis=1)[:, :kk]
                    if kk < nb
                    else np.broadcast_to(np.arange(nb), part.shape)
                )
                key = np.take_along_axis(part, sel, axis=1)
                pos = sel + positions if isinstance(positions, int) else positions[sel]
                self._merge(np.arange(r0, r0 + len(part)), key, pos.astype(np.int64))
            self.full = bool(np.isfinite(self.thr).all())
            return
        if self.mask is None or self.mask.size < nq * nb:
            self.mask = np.empty(nq * nb, np.bool_)
        mask = self.mask[: nq * nb].reshape(nq, nb)  # contiguous, whatever nb
        np.less(block, self.thr[:, None], out=mask)
        if nb % 8 == 0:
            # scan 8 flags per word: survivors are rare once the state is full
            words = np.flatnonzero(mask.view(np.uint64))
            if len(words) == 0:
                return
            bits = mask.view(np.uint8).reshape(-1, 8)[words]
            wi, bi = np.nonzero(bits)
            flat = words[wi] * 8 + bi
            r, c = np.divmod(flat, nb)
        else:
            r, c = np.nonzero(mask)
            if len(r) == 0:
                return
        key = block[r, c]
        pos = c + positions if isinstance(positions, int) else positions[c]
        counts = np.bincount(r, minlength=nq)
        rows = np.flatnonzero(counts)
        width = int(counts.max())
        starts = np.cumsum(counts) - counts
        col = np.arange(len(r)) - starts[r]
        cand_key = np.full((nq, width), np.inf, np.float32)
        cand_pos = np.full((nq, width), -1, np.int64)
        cand_key[r, col] = key
        cand_pos[r, col] = pos
        self._merge(rows, cand_key[rows], cand_pos[rows])


def _prepare_queries(q: np.ndarray, metric: Metric) -> np.ndarray:
    if metric == "l2":
        return np.ascontiguousarray(-2.0 * q, dtype=np.float32)
    if metric == "ip":
        return np.ascontiguousarray(-q, dtype=np.float32)
    return np.ascontiguousarray(-normalize(q), dtype=np.float32)


def _segment(
    data: np.ndarray,
    qa: np.ndarray,
    k: int,
    metric: Metric,
    start: int,
    stop: int,
    rows: np.ndarray | None,
    nb: int,
    progress: Progress | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Keys and positions of the k best rows in [start, stop) (of ``rows`` if given)."""
    nq = len(qa)
    keeper = _Keeper(nq, k)
    out = np.empty(nq * nb, np.float32)
    for s in range(start, stop, nb):
        e = min(s + nb, stop)
        if rows is None:
            x = data[s:e]
            where: np.ndarray | int = s
        else:
            where = rows[s:e]
            x = data[where]
        x = np.asarray(x, dtype=np.float32)
        if metric == "cosine":
            x = normalize(x)
        block = out[: nq * (e - s)].reshape(nq, e - s)  # contiguous: GEMM writes in place
        np.matmul(qa, x.T, out=block)
        if metric == "l2":
            block += np.einsum("ij,ij->i", x, x)[None, :]
        keeper.add(block, where)
        if progress is not None:
            progress(e - s)
    return keeper.key, keeper.pos


_BLAS_SYMBOLS = (
    ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
    ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
    ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
    ("openblas_get_num_threads", "openblas_set_num_threads"),
)
_blas_lock = threading.Lock()
_blas_users = 0
_blas_saved: list[tuple[Callable[[int], None], int]] = []


def _openblas_controls() -> list[tuple[Callable[[], int], Callable[[int], None]]]:
    """(get, set) thread-count functions of every OpenBLAS loaded in this
    process (numpy's, and faiss's if loaded); empty where none is found."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return []
    out = []
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for get_name, set_name in _BLAS_SYMBOLS:
            get, set_ = getattr(lib, get_name, None), getattr(lib, set_name, None)
            if get is not None and set_ is not None:
                get.restype = ctypes.c_int
                out.append((get, set_))
                break
    return out


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """One BLAS thread per caller while inside: our own pool spreads the work
    over the cores, and a multi-threaded GEMM per worker would oversubscribe
    them. Process-wide (as threadpoolctl is), restored on exit; so do not
    run it while other threads of the process time BLAS work."""
    global _blas_users
    with _blas_lock:
        if _blas_users == 0:
            _blas_saved.clear()
            for get, set_ in _openblas_controls():
                _blas_saved.append((set_, int(get())))
                set_(1)
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                for set_, n in _blas_saved:
                    set_(n)
                _blas_saved.clear()


def default_threads() -> int:
    env = os.environ.get("STOREBENCH_THREADS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def exact_knn(
    data: np.ndarray,
    queries: np.ndarray,
    k: int,
    metric: Metric,
    *,
    rows: np.ndarray | None = None,
    threads: int | None = None,
    memory_bytes: int | None = None,
    progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Positions (into ``data``) and distances of the k nearest rows per query.

    ``data`` may be any (n, d) array-like of numbers, a read-only memmap
    included: it is read block by block and never copied whole. ``rows``
    restricts the search to those rows (a boolean mask over ``data`` or row
    positions): filtered ground truth. Results are sorted by distance, ties
    by position; missing neighbours are -1 / inf. ``memory_bytes`` bounds the
    scratch memory (default 256 MiB), ``threads`` the worker threads
    (default: the CPUs this process may use). ``progress(rows_done)`` is
    called as data rows are consumed (summed over query blocks)."""
    if metric not in ("l2", "ip", "cosine"):
        raise ValueError(f"unknown metric {metric!r} (use l2, ip or cosine)")
    q = np.asarray(queries, dtype=np.float32)
    if q.ndim != 2:
        raise ValueError("queries must be a 2-d array")
    n = len(data)
    nq = len(q)
    if n and q.shape[1] != data.shape[1]:
        raise ValueError(f"queries have dimension {q.shape[1]}, data {data.shape[1]}")
    sel = _as_rows(rows, n)
    m = n if sel is None else len(sel)
    if nq == 0 or k <= 0 or m == 0:
        return np.full((nq, max(k, 0)), -1, np.int64), np.full((nq, max(k, 0)), np.inf, np.float32)
    d = q.shape[1]
    threads = max(1, threads or default_threads())
    budget = memory_bytes or _BLOCK_BYTES
    qb = min(nq, _QUERY_BLOCK)
    per_thread = budget // threads
    nb = per_thread // (qb * 5 + d * 8)
    nb = int(min(_MAX_ROWS_PER_BLOCK, max(64, nb // 64 * 64)))
    # Contiguous segments: several per thread so a slow one does not idle the rest.
    n_seg = max(1, min(threads * 4, -(-m // nb)))
    seg = -(-m // n_seg)
    seg = -(-seg // nb) * nb  # whole blocks, so only a segment's last block is short
    bounds = [(s, min(s + seg, m)) for s in range(0, m, seg)]

    pos_out = np.empty((nq, k), np.int64)
    dist_out = np.empty((nq, k), np.float32)
    # `threads` cores in all: our workers, each with a single-threaded BLAS
    with single_threaded_blas(), ThreadPoolExecutor(max_workers=threads) as pool:
        for qs in range(0, nq, qb):
            qa = _prepare_queries(q[qs : qs + qb], metric)
            parts = list(
                pool.map(
                    lambda b, qa=qa: _segment(data, qa, k, metric, b[0], b[1], sel, nb, progress),
                    bounds,
                )
            )
            keys = np.concatenate([p[0] for p in parts], axis=1)
            poss = np.concatenate([p[1] for p in parts], axis=1)
            if keys.shape[1] > k:
                pick = np.argpartition(keys, k - 1, axis=1)[:, :k]
                poss = np.take_along_axis(poss, pick, axis=1)
            qpos = poss[:, :k]
            # exact distances for the winners, then sort by (distance, position)
            dist = pair_distances(q[qs : qs + qb], data, qpos, metric)
            by_pos = np.argsort(qpos, axis=1, kind="stable")
            qpos = np.take_along_axis(qpos, by_pos, axis=1)
            dist = np.take_along_axis(dist, by_pos, axis=1)
            order = np.argsort(dist, axis=1, kind="stable")
            pos_out[qs : qs + qb] = np.take_along_axis(qpos, order, axis=1)
            dist_out[qs : qs + qb] = np.take_along_axis(dist, order, axis=1)
    # fewer than k rows: the unfilled slots are -1 / inf
    pos_out[~np.isfinite(dist_out)] = -1
    return pos_out, dist_out


def exact_knn_work(rows: int, nq: int) -> int:
    """What ``exact_knn`` tells ``progress`` in all: the data rows it reads,
    once per block of queries."""
    return rows * -(-nq // _QUERY_BLOCK)


def exact_knn_bytes(nq: int, k: int, threads: int | None = None) -> int:
    """The most memory ``exact_knn`` takes for ``nq`` queries: its bounded
    scratch, the k best kept per query in each segment, and the results."""
    per_query = k * 12  # float32 key + int64 position
    segments = 4 * (threads or default_threads())
    return _BLOCK_BYTES + 2 * segments * min(nq, _QUERY_BLOCK) * per_query + nq * per_query


@dataclass(frozen=True)
class GroundTruth:
    """The true neighbours (as document ids) and their distances per query.
    Keep more than k columns (e.g. 100) so ties at the k-th place are seen."""

    ids: np.ndarray  # (q, K) int64
    distances: np.ndarray  # (q, K) float32

    @property
    def k(self) -> int:
        return int(self.ids.shape[1])

    def __getitem__(self, rows: slice | np.ndarray) -> GroundTruth:
        """The truth of a subset of the queries."""
        return GroundTruth(self.ids[rows], self.distances[rows])

    def head(self, k: int) -> GroundTruth:
        """The first k neighbours per query."""
        if k > self.k:
            raise ValueError(f"ground truth holds {self.k} neighbours per query, fewer than {k}")
        return GroundTruth(self.ids[:, :k], self.distances[:, :k])

    @staticmethod
    def compute(
        doc_ids: np.ndarray,
        data: np.ndarray,
        queries: np.ndarray,
        k: int,
        metric: Metric,
        where: np.ndarray | None = None,
        threads: int | None = None,
        progress: Progress | None = None,
    ) -> GroundTruth:
        """Exact k nearest documents per query; ``where`` (a boolean mask
        or row positions over ``data``) restricts them: filtered truth."""
        pos, d = exact_knn(data, queries, k, metric, rows=where, threads=threads, progress=progress)
        ids = np.where(pos >= 0, np.asarray(doc_ids)[np.maximum(pos, 0)], -1)
        return GroundTruth(ids.astype(np.int64), d)


def recall_at_k(
    found: np.ndarray,
    truth: GroundTruth,
    k: int,
    rtol: float = 1e-3,
    atol: float = 1e-6,
    found_distances: np.ndarray | None = None,
) -> np.ndarray:
    """Per-query recall@k of ``found`` (q, >=k) ids against ``truth``.

    A found id is a hit when it appears in the true list at a distance no
    greater than the k-th true distance (within tolerance): ties count.
    With ``found_distances`` (the *true* distances of the found ids,
    e.g. from ``pair_distances``, never the store's own numbers) a found id
    also counts when it lies within that bound though the true list, cut at
    K columns, does not hold it: a tie beyond the K-th place."""
    found = np.asarray(found)[:, :k]
    q = len(found)
    if truth.ids.shape[1] < k:
        raise ValueError(
            f"ground truth holds {truth.ids.shape[1]} neighbours per query, fewer than k={k}"
        )
    # where fewer than k documents exist the k-th distance is inf: all count
    kth = truth.distances[:, k - 1].astype(np.float64)
    bound = kth + np.abs(kth) * rtol + atol
    allowed = truth.distances <= bound[:, None]  # (q, K)
    allowed &= truth.ids >= 0
    # A repeated id in one result row counts once.
    order = np.argsort(found, axis=1, kind="stable")
    srt = np.take_along_axis(found, order, axis=1)
    dup = np.zeros_like(found, dtype=bool)
    dup[:, 1:] = srt[:, 1:] == srt[:, :-1]
    found = np.where(dup, -2, srt)
    match = (found[:, :, None] == truth.ids[:, None, :]) & allowed[:, None, :]
    hit = match.any(axis=2)
    if found_distances is not None:
        fd = np.take_along_axis(np.asarray(found_distances)[:, :k], order, axis=1)
        hit |= (found >= 0) & (fd.astype(np.float64) <= bound[:, None])
    hits = hit.sum(axis=1)
    denom = np.minimum(k, allowed.sum(axis=1)).clip(min=1) if q else np.ones(0)
    return hits / denom
