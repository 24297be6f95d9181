"""Synthetic data, deterministic by seed and generated in chunks.

``embedding`` (the default) is as hard for ANN indexes as real embeddings: a
Gaussian whose axis scales fall as a power law (the i-th as i^-1/2), turned
by a fixed random rotation. Its local intrinsic dimensionality, relative
contrast and HNSW recall curve fall in the band real sets span
(docs/datasets.md, "Hardness"). ``clustered`` is a mixture of 64 tight
Gaussians: every HNSW setting finds its neighbours (recall ~1.0), so it
checks correctness, not trade-offs. ``uniform`` is the worst case. Row i is
the same whatever the chunk size, so any slice can be regenerated alone.

Scalar fields for filters come the same way: ``uniform_ints`` (DocArray's
``tags.i``), ``label_column`` (a keyword that matches a chosen fraction of
the rows, as VectorDBBench's label filters: 1%, 10%, 50%, 99%) and
``string_chunks`` (arangob's ``--complexity``: that many string attributes
of a given size).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

import numpy as np

Kind = Literal["embedding", "clustered", "uniform"]
CHUNK = 65536
KINDS = ("embedding", "clustered", "uniform")
SPECTRUM_DECAY = 0.5  # the embedding kind's axis i has scale i^-SPECTRUM_DECAY
# the embedding kind's rotation is applied to blocks of this many rows, the
# last padded: BLAS computes a row by a kernel chosen by its place in the
# matrix, so a matrix of another height gave some rows another last bit
_ROTATE_ROWS = 256

# stream ids: each field draws from its own random stream, so adding a field
# never changes another
_QUERY_STREAM = 1
_LABEL_STREAM = 2
_STRING_STREAM = 3


def _chunk_rng(seed: int, chunk_index: int, stream: int = 0) -> np.random.Generator:
    key = [seed, chunk_index] if stream == 0 else [seed, chunk_index, stream]
    return np.random.default_rng(key)


def _centers(seed: int, clusters: int, dim: int) -> np.ndarray:
    return (
        np.random.default_rng([seed, 1 << 20]).normal(0.0, 1.0, (clusters, dim)).astype(np.float32)
    )


def _rotation(seed: int, dim: int) -> np.ndarray:
    """The embedding kind's axis scales, then a fixed random rotation (real
    embeddings' main directions are not the coordinate axes)."""
    rng = np.random.default_rng([seed, (1 << 20) + 2])
    q, r = np.linalg.qr(rng.normal(0.0, 1.0, (dim, dim)))
    scales = np.arange(1, dim + 1, dtype=np.float64) ** -SPECTRUM_DECAY
    return (scales[:, None] * (q * np.sign(np.diag(r)))).astype(np.float32)


def _rotate(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """``x @ shape`` in blocks of ``_ROTATE_ROWS`` rows (the last padded with
    zeros): every row is computed the same way whatever ``len(x)``."""
    rows, pad = len(x), -len(x) % _ROTATE_ROWS
    if pad:
        x = np.concatenate([x, np.zeros((pad, x.shape[1]), np.float32)])
    out = np.empty((len(x), shape.shape[1]), np.float32)
    for b in range(0, len(x), _ROTATE_ROWS):
        np.matmul(x[b : b + _ROTATE_ROWS], shape, out=out[b : b + _ROTATE_ROWS])
    return out[:rows]


def vector_chunks(
    n: int,
    dim: int,
    kind: Kind = "embedding",
    seed: int = 0,
    clusters: int = 64,
    stream: int = 0,
) -> Iterator[np.ndarray]:
    """float32 vectors in chunks of ``CHUNK`` rows, each from its own random
    stream: row i is the same whatever ``n``."""
    if kind not in KINDS:
        raise ValueError(f"unknown synthetic kind {kind!r} (use {', '.join(KINDS)})")
    shape = _rotation(seed, dim) if kind == "embedding" else _centers(seed, clusters, dim)
    for ci, start in enumerate(range(0, n, CHUNK)):
        rows = min(CHUNK, n - start)
        rng = _chunk_rng(seed, ci, stream)
        if kind == "uniform":
            part = rng.random((rows, dim), dtype=np.float32)
        elif kind == "embedding":
            part = _rotate(rng.normal(0.0, 1.0, (rows, dim)).astype(np.float32), shape)
        else:
            which = rng.integers(0, clusters, rows)
            noise = rng.normal(0.0, 0.35, (rows, dim)).astype(np.float32)
            part = shape[which] + noise
        yield part


def fill(
    out: np.ndarray, parts: Iterable[np.ndarray], progress: Callable[[int], None] | None = None
) -> np.ndarray:
    """``out`` (an array or a memmap, flushed) filled row-wise with ``parts``
    in order; ``progress`` is told each part's rows."""
    pos = 0
    for part in parts:
        out[pos : pos + len(part)] = part
        pos += len(part)
        if progress is not None:
            progress(len(part))
    if isinstance(out, np.memmap):
        out.flush()
    return out


def vectors(
    n: int, dim: int, kind: Kind = "embedding", seed: int = 0, clusters: int = 64, stream: int = 0
) -> np.ndarray:
    parts = vector_chunks(n, dim, kind, seed, clusters, stream)
    return fill(np.empty((n, dim), np.float32), parts)


def queries(
    n: int, dim: int, kind: Kind = "embedding", seed: int = 0, clusters: int = 64
) -> np.ndarray:
    """Query vectors from the *same* distribution as ``vectors(.., seed)``
    (same cluster centres or rotation), but a separate random stream: new points, not
    copies of documents."""
    return vectors(n, dim, kind, seed, clusters, _QUERY_STREAM)


def uniform_ints(n: int, low: int, high: int, seed: int = 0) -> np.ndarray:
    """Uniform integers in [low, high): DocArray's ``tags.i``."""
    return np.random.default_rng([seed, (1 << 20) + 1]).integers(low, high, n, dtype=np.int64)


def uniform_int_chunks(
    n: int, low: int, high: int, seed: int = 0, stream: int = 4
) -> Iterator[np.ndarray]:
    """Like ``uniform_ints`` but in chunks (a different stream), for 10M+ rows."""
    for ci, start in enumerate(range(0, n, CHUNK)):
        rows = min(CHUNK, n - start)
        yield _chunk_rng(seed, ci, stream).integers(low, high, rows, dtype=np.int64)


def label_name(selectivity: float) -> str:
    """VectorDBBench's spelling: 0.01 -> label_1p, 0.005 -> label_0.5p."""
    if not 0.0 < selectivity <= 1.0:
        raise ValueError(f"selectivity {selectivity} is not in (0, 1]")
    p = selectivity * 100
    return f"label_{int(round(p))}p" if p >= 1 and abs(p - round(p)) < 1e-9 else f"label_{p:g}p"


def label_chunks(n: int, selectivity: float, seed: int = 0) -> Iterator[np.ndarray]:
    """A keyword column where a fraction ``selectivity`` of the rows (each
    independently, so the count is binomial) hold ``label_name(selectivity)``
    and the rest ``"other"``: the filter ``column == label`` selects that
    fraction. Each selectivity draws from its own stream."""
    name = label_name(selectivity)
    width = max(len(name), len("other"))
    stream = _LABEL_STREAM * 1000 + zlib.crc32(name.encode()) % 1000
    for ci, start in enumerate(range(0, n, CHUNK)):
        rows = min(CHUNK, n - start)
        hit = _chunk_rng(seed, ci, stream).random(rows) < selectivity
        col = np.full(rows, "other", dtype=f"<U{width}")
        col[hit] = name
        yield col


def label_column(n: int, selectivity: float, seed: int = 0) -> np.ndarray:
    return np.concatenate(list(label_chunks(n, selectivity, seed)) or [np.empty(0, "<U5")])


def string_chunks(n: int, count: int, size: int, seed: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """``count`` string attributes ``test1``..``testN`` of exactly ``size``
    random lowercase letters each (arangob's document complexity, with random
    rather than constant values so engines cannot compress them away)."""
    if count < 0 or size < 1:
        raise ValueError("string attributes need count >= 0 and size >= 1")
    for ci, start in enumerate(range(0, n, CHUNK)):
        rows = min(CHUNK, n - start)
        rng = _chunk_rng(seed, ci, _STRING_STREAM)
        out = {}
        for a in range(count):
            letters = rng.integers(97, 123, (rows, size), dtype=np.uint8)
            out[f"test{a + 1}"] = letters.view(f"S{size}").ravel().astype(f"<U{size}")
        yield out
