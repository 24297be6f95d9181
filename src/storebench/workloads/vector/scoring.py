"""The scores of what the search clients found, against exact ground truth
(ties at the k-th place count; the peers' recall by their own rules): one
computation per score of the catalogue (``results/scores.py``), in
``COMPUTATIONS`` under its name; and a search setting's own scores from its
scored tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from storebench.data.batch import DocBatch, Metric, Schema
from storebench.data.truth import GroundTruth, recall_at_k
from storebench.results.records import TaskRecord
from storebench.results.scores import CATALOGUE, Score


def recall(found: np.ndarray, truth: GroundTruth, k: int, fd: np.ndarray | None) -> float:
    """Mean recall@k (ties count)."""
    return float(recall_at_k(found, truth, k, found_distances=fd).mean())


def precision(found: np.ndarray, truth: GroundTruth, k: int, fd: np.ndarray | None) -> float:
    """Hits over results returned (a short answer is not penalised)."""
    rec = recall_at_k(found, truth, k, found_distances=fd)
    # recall_at_k divides the hits by min(k, true neighbours within the k-th
    # distance); the same bound gives the hits back
    kth = truth.distances[:, k - 1].astype(np.float64)
    bound = kth + np.abs(kth) * 1e-3 + 1e-6
    allowed = ((truth.distances <= bound[:, None]) & (truth.ids >= 0)).sum(axis=1)
    hits = np.rint(rec * np.minimum(k, allowed).clip(min=1))
    returned = (found[:, :k] >= 0).sum()
    return float(hits.sum() / returned) if returned else 0.0


def recall_ann_benchmarks(
    found: np.ndarray, truth: GroundTruth, k: int, fd: np.ndarray | None
) -> float:
    """ann-benchmarks' k-nn recall: a returned point counts when its true
    distance is at most the k-th true distance + 1e-3 (absolute), each
    time it is returned; hits over k."""
    if fd is None:  # the truth's own distances of the ids it lists
        listed = found[:, :, None] == truth.ids[:, None, :]
        at = np.take_along_axis(truth.distances, listed.argmax(axis=2), axis=1)
        fd = np.where(listed.any(axis=2), at, np.inf)
    threshold = truth.distances[:, k - 1, None].astype(np.float64) + 1e-3
    within = (np.asarray(fd, np.float64) <= threshold) & np.isfinite(fd) & (found >= 0)
    return float((within.sum(axis=1) / k).mean())


def recall_vectordbbench(
    found: np.ndarray, truth: GroundTruth, k: int, fd: np.ndarray | None
) -> float:
    """VectorDBBench's recall: returned ids among the first k true ids (no
    tie handling), each time it is returned; hits over k."""
    listed = (found[:, :, None] == truth.ids[:, None, :k]).any(axis=2) & (found >= 0)
    return float((listed.sum(axis=1) / k).mean())


# each score's computation, by its catalogue name: (found ids (q, k), the
# truth of those queries, k, the found ids' true distances or None) -> score
Computation = Callable[[np.ndarray, GroundTruth, int, "np.ndarray | None"], float]
COMPUTATIONS: dict[str, Computation] = {
    "recall": recall,
    "precision": precision,
    "recall (ann-benchmarks)": recall_ann_benchmarks,
    "recall (VectorDBBench)": recall_vectordbbench,
}


@dataclass(frozen=True)
class Scored:
    k: int
    scores: dict[str, float | None] = field(default_factory=dict)  # by key: recall@10
    queries: int = 0  # distinct queries scored
    short: int = 0  # queries that got fewer than k results

    def of(self, score: Score) -> float | None:
        return self.scores.get(score.key(self.k))


# the true distances of found ids for the queries (rows) given: see
# VectorData.true_distances
DistancesOf = Callable[[np.ndarray, np.ndarray], np.ndarray]


def score(
    payloads: Sequence[tuple[np.ndarray, np.ndarray]],
    truth: GroundTruth,
    k: int,
    distances_of: DistancesOf | None = None,
) -> Scored:
    """Every score over the queries the clients ran (each client returns its
    (found ids, ran) pair). With ``distances_of(rows, found)``, a found id
    tied with the k-th true neighbour counts even when the truth's columns
    end before it."""
    nq = len(truth.ids)
    found = np.full((nq, k), -1, np.int64)
    seen = np.zeros(nq, bool)
    for rows, ran in payloads:
        found[ran] = rows[ran]
        seen |= ran
    if not seen.any():
        return Scored(k, {s.key(k): None for s in CATALOGUE.values() if s.name in COMPUTATIONS})
    rows = np.flatnonzero(seen)
    fd = distances_of(rows, found[rows]) if distances_of is not None else None
    return score_found(found[rows], truth[rows], k, fd)


def score_found(
    found: np.ndarray,
    truth: GroundTruth,
    k: int,
    found_distances: np.ndarray | None = None,
    only: Sequence[Score] | None = None,
) -> Scored:
    """The catalogue's scores (``only`` these, if given) of ``found``; a
    score at a fixed k above the search's is not scored."""
    found = found[:, :k]
    out: dict[str, float | None] = {}
    for s in only or list(CATALOGUE.values()):
        at = s.k or k
        if s.name in COMPUTATIONS and at <= k:
            fd = None if found_distances is None else found_distances[:, :at]
            out[s.key(k)] = COMPUTATIONS[s.name](found[:, :at], truth, at, fd)
    return Scored(k, out, len(found), int(((found >= 0).sum(axis=1) < k).sum()))


def setting_scores(recs: Sequence[TaskRecord | None]) -> dict[str, float | None]:
    """A search setting's own scores: those of its first unfiltered scored
    task (the fewest clients; every client count runs the same queries)."""
    for rec in recs:
        if rec is None or not rec.measured or rec.filter:
            continue
        if any(v is not None for v in rec.scores.values()):
            return dict(rec.scores)
    return {}


HARDNESS_BUILD = {"m": 16, "ef_construct": 128}  # the fixed build of docs/datasets.md
HARDNESS_EFS = (16, 64, 256)


def recall_curve(
    data: np.ndarray, queries: np.ndarray, metric: Metric, engine: str = "hnswlib", k: int = 10
) -> dict[int, float]:
    """Mean recall@k per ef of one HNSW build of ``engine`` with
    ``HARDNESS_BUILD``: the recall curve that tells how hard a set is."""
    from storebench.stores.base import StoreSpec

    queries = np.asarray(queries, np.float32)
    truth = GroundTruth.compute(np.arange(len(data)), data, queries, k, metric)
    store = StoreSpec(engine).open()
    try:
        schema = Schema(dim=int(data.shape[1]), metric=metric)
        coll = store.create_collection("hardness", schema, store.Index(**HARDNESS_BUILD))
        for start in range(0, len(data), 10_000):
            rows = np.asarray(data[start : start + 10_000], np.float32)
            coll.insert(DocBatch(np.arange(start, start + len(rows), dtype=np.int64), {}, rows))
        coll.build_index(store.Index(**HARDNESS_BUILD))
        curve = {}
        for ef in HARDNESS_EFS:
            coll.set_search_params(store.Search.model_validate({"ef": ef}))
            found = coll.search(queries, k).ids
            curve[ef] = round(float(recall_at_k(found, truth, k).mean()), 3)
        return curve
    finally:
        store.close()
