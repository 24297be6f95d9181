"""Exact nearest neighbours and recall.

Exact search is blocked matrix products on BLAS plus a partial sort, in
memory-bounded blocks of data rows, so it serves both the exact stores and
ground truth. Recall handles ties: a returned id is a hit when its true
distance is within the k-th true distance (plus a small tolerance), the way
ann-benchmarks counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storebench.data.batch import Metric

# Data rows per block: keeps the (queries x block) distance matrix near 64 MB.
_BLOCK_BYTES = 64 << 20


def normalize(x: np.ndarray) -> np.ndarray:
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


def exact_knn(
    data: np.ndarray, queries: np.ndarray, k: int, metric: Metric
) -> tuple[np.ndarray, np.ndarray]:
    """Positions (into ``data``) and distances of the k nearest rows per query,
    computed block by block so memory stays bounded for any n."""
    n = len(data)
    nq = len(queries)
    block = max(1024, _BLOCK_BYTES // max(1, 4 * nq))
    best_pos = np.full((nq, 0), -1, np.int64)
    best_d = np.full((nq, 0), np.inf, np.float32)
    for start in range(0, max(n, 1), block):
        chunk = data[start : start + block]
        if len(chunk) == 0:
            break
        pos, d = top_k(distances(queries, chunk, metric), k)
        pos = np.where(pos >= 0, pos + start, -1)
        merged_d = np.concatenate([best_d, d], axis=1)
        merged_p = np.concatenate([best_pos, pos], axis=1)
        sel, best_d = top_k(merged_d, k)
        best_pos = np.take_along_axis(merged_p, np.maximum(sel, 0), axis=1)
        best_pos[sel < 0] = -1
    if best_pos.shape[1] < k:
        best_pos, best_d = (
            np.pad(best_pos, ((0, 0), (0, k - best_pos.shape[1])), constant_values=-1),
            np.pad(best_d, ((0, 0), (0, k - best_d.shape[1])), constant_values=np.inf),
        )
    return best_pos, best_d


@dataclass(frozen=True)
class GroundTruth:
    """The true neighbours (as document ids) and their distances per query.
    Keep more than k columns (e.g. 100) so ties at the k-th place are seen."""

    ids: np.ndarray  # (q, K) int64
    distances: np.ndarray  # (q, K) float32

    @staticmethod
    def compute(
        doc_ids: np.ndarray, data: np.ndarray, queries: np.ndarray, k: int, metric: Metric
    ) -> GroundTruth:
        pos, d = exact_knn(data, queries, k, metric)
        ids = np.where(pos >= 0, doc_ids[np.maximum(pos, 0)], -1)
        return GroundTruth(ids.astype(np.int64), d)


def recall_at_k(
    found: np.ndarray, truth: GroundTruth, k: int, rtol: float = 1e-3, atol: float = 1e-6
) -> np.ndarray:
    """Per-query recall@k of ``found`` (q, >=k) ids against ``truth``.

    A found id is a hit when it appears in the true list at a distance no
    greater than the k-th true distance (within tolerance): ties count."""
    found = np.asarray(found)[:, :k]
    q = len(found)
    if truth.ids.shape[1] < k:
        raise ValueError(
            f"ground truth holds {truth.ids.shape[1]} neighbours per query, fewer than k={k}"
        )
    # where fewer than k documents exist the k-th distance is inf: all count
    kth = truth.distances[:, k - 1].astype(np.float64)
    allowed = truth.distances <= (kth + np.abs(kth) * rtol + atol)[:, None]  # (q, K)
    allowed &= truth.ids >= 0
    # A repeated id in one result row counts once.
    srt = np.sort(found, axis=1)
    dup = np.zeros_like(found, dtype=bool)
    dup[:, 1:] = srt[:, 1:] == srt[:, :-1]
    found = np.where(dup, -2, srt)
    match = (found[:, :, None] == truth.ids[:, None, :]) & allowed[:, None, :]
    hits = match.any(axis=2).sum(axis=1)
    denom = np.minimum(k, allowed.sum(axis=1)).clip(min=1) if q else np.ones(0)
    return hits / denom
