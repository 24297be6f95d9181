"""Recall@k and precision@k of what the search clients found, against exact
ground truth (ties at the k-th place count), and a search setting's own
metrics from its scored tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from storebench.data.batch import DocBatch, Metric, Schema
from storebench.data.truth import GroundTruth, recall_at_k
from storebench.results.records import TaskRecord


@dataclass(frozen=True)
class Score:
    recall: float | None  # mean recall@k (ties count)
    precision: float | None  # hits over results returned (a short answer is not penalised)
    queries: int  # distinct queries scored
    short: int = 0  # queries that got fewer than k results


# the true distances of found ids for the queries (rows) given: see
# VectorData.true_distances
DistancesOf = Callable[[np.ndarray, np.ndarray], np.ndarray]


def score(
    payloads: Sequence[Any], truth: GroundTruth, k: int, distances_of: DistancesOf | None = None
) -> Score:
    """Recall@k and precision@k over the queries the clients ran (each
    client returns its (found ids, ran) pair). With ``distances_of(rows,
    found)``, a found id tied with the k-th true neighbour counts even when
    the truth's columns end before it."""
    nq = len(truth.ids)
    found = np.full((nq, k), -1, np.int64)
    seen = np.zeros(nq, bool)
    for rows, ran in payloads:
        found[ran] = rows[ran]
        seen |= ran
    if not seen.any():
        return Score(None, None, 0)
    rows = np.flatnonzero(seen)
    fd = distances_of(rows, found[rows]) if distances_of is not None else None
    return score_found(found[rows], truth[rows], k, fd)


def score_found(
    found: np.ndarray, truth: GroundTruth, k: int, found_distances: np.ndarray | None = None
) -> Score:
    found = found[:, :k]
    rec = recall_at_k(found, truth, k, found_distances=found_distances)
    # recall_at_k divides the hits by min(k, true neighbours within the k-th
    # distance); the same bound gives the hits back
    kth = truth.distances[:, k - 1].astype(np.float64)
    bound = kth + np.abs(kth) * 1e-3 + 1e-6
    allowed = ((truth.distances <= bound[:, None]) & (truth.ids >= 0)).sum(axis=1)
    hits = np.rint(rec * np.minimum(k, allowed).clip(min=1))
    returned = (found >= 0).sum(axis=1)
    prec = float(hits.sum() / returned.sum()) if returned.sum() else 0.0
    return Score(float(rec.mean()), prec, len(found), int((returned < k).sum()))


def setting_metrics(recs: Sequence[TaskRecord | None], k: int) -> dict[str, Any]:
    """A search setting's own metrics: the recall and precision of its
    first unfiltered scored task (the fewest clients; every client count
    runs the same queries)."""
    for rec in recs:
        if rec is not None and rec.measured and not rec.filter:
            got = {key: rec.get(key) for key in (f"recall@{k}", f"precision@{k}")}
            if got[f"recall@{k}"] is not None:
                return got
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
