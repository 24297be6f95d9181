"""Synthetic data, deterministic by seed and generated in chunks.

``clustered`` is a Gaussian mixture (realistic: ANN indexes behave on it as on
real embeddings, unlike uniform noise); ``uniform`` is the worst case. Row i is
the same whatever the chunk size, so any slice can be regenerated alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np

Kind = Literal["clustered", "uniform"]
CHUNK = 65536


def _chunk_rng(seed: int, chunk_index: int) -> np.random.Generator:
    return np.random.default_rng([seed, chunk_index])


def vector_chunks(
    n: int,
    dim: int,
    kind: Kind = "clustered",
    seed: int = 0,
    clusters: int = 64,
    chunk: int = CHUNK,
) -> Iterator[np.ndarray]:
    """float32 vectors in chunks of ``chunk`` rows (the last may be shorter)."""
    if kind not in ("clustered", "uniform"):
        raise ValueError(f"unknown synthetic kind {kind!r} (use clustered or uniform)")
    centers = (
        np.random.default_rng([seed, 1 << 20]).normal(0.0, 1.0, (clusters, dim)).astype(np.float32)
    )
    for ci, start in enumerate(range(0, n, chunk)):
        rows = min(chunk, n - start)
        rng = _chunk_rng(seed, ci)
        if kind == "uniform":
            yield rng.random((rows, dim), dtype=np.float32)
        else:
            which = rng.integers(0, clusters, rows)
            noise = rng.normal(0.0, 0.35, (rows, dim)).astype(np.float32)
            yield centers[which] + noise


def vectors(
    n: int, dim: int, kind: Kind = "clustered", seed: int = 0, clusters: int = 64
) -> np.ndarray:
    out = np.empty((n, dim), np.float32)
    pos = 0
    for part in vector_chunks(n, dim, kind, seed, clusters):
        out[pos : pos + len(part)] = part
        pos += len(part)
    return out


def uniform_ints(n: int, low: int, high: int, seed: int = 0) -> np.ndarray:
    """Uniform integers in [low, high): DocArray's ``tags.i``."""
    return np.random.default_rng([seed, (1 << 20) + 1]).integers(low, high, n, dtype=np.int64)
