"""How hard a vector set is for approximate search, in the literature's terms.

- LID, local intrinsic dimensionality: the maximum-likelihood estimate over
  a query's k nearest neighbours (Levina and Bickel; Amsaleg et al.),
  ``-1 / mean(log(r_i / r_k))``; the median over the queries. Higher is
  harder.
- RC, relative contrast (He, Kumar and Chang): a query's mean distance to
  the data over its nearest neighbour's; the median. Nearer 1 is harder.

Distances are Euclidean: between unit vectors for cosine (monotone in the
cosine distance, whose LID would read half as large), between the raw
vectors for ip.
The recall curve of a fixed HNSW build is the third figure
(``workloads.vector.scoring.recall_curve``): it needs a store.
"""

from __future__ import annotations

import numpy as np

from storebench.data.batch import Metric
from storebench.data.truth import distances, exact_knn, normalize

LID_K = 100  # neighbours per query, as ann-benchmarks' hardness studies
SAMPLE = 1000  # queries measured, and data rows a mean distance is taken over (x10)


def hardness(
    data: np.ndarray, queries: np.ndarray, metric: Metric, seed: int = 0
) -> dict[str, float]:
    """LID and RC over at most ``SAMPLE`` of ``queries`` (rows of ``data``
    may be a memmap: read in blocks)."""
    rng = np.random.default_rng(seed)

    def some(rows: np.ndarray, count: int) -> np.ndarray:
        pick = rng.choice(len(rows), min(count, len(rows)), replace=False)
        return np.asarray(rows[np.sort(pick)], np.float32)

    q, sample = some(queries, SAMPLE), some(data, 10 * SAMPLE)
    if metric == "cosine":
        q, sample = normalize(q), normalize(sample)
    k = min(LID_K, len(data))
    near = exact_knn(data, q, k, "cosine" if metric == "cosine" else "l2")[1].astype(np.float64)
    if metric == "cosine":  # 1 - cos of unit vectors is half their squared distance
        near = np.sqrt(2.0 * np.maximum(near, 0.0))
    near = np.maximum(near, 1e-12)
    lid = -1.0 / np.mean(np.log(near[:, :-1] / near[:, -1:]), axis=1) if k > 1 else np.nan
    rc = distances(q, sample, "l2").mean(axis=1) / near[:, 0]
    return {
        "lid": round(float(np.median(lid)), 1),
        "rc": round(float(np.median(rc)), 2),
        "queries": len(q),
        "k": k,
    }
