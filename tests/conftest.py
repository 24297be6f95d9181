import numpy as np
import pytest

from storebench.data.batch import DocBatch


def make_docs(n: int, dim: int = 16, seed: int = 0, start: int = 0) -> DocBatch:
    """Documents with an int, a float and a string field and clustered vectors."""
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.int64)
    fields = {
        "tags.i": rng.integers(0, 50, n, dtype=np.int64),
        "score": np.round(rng.random(n), 3),
        "label": np.array([f"l{v}" for v in rng.integers(0, 5, n)], dtype=object),
    }
    centers = rng.normal(size=(8, dim))
    vecs = (centers[rng.integers(0, 8, n)] + rng.normal(scale=0.3, size=(n, dim))).astype(
        np.float32
    )
    return DocBatch(ids, fields, vecs)


@pytest.fixture
def docs() -> DocBatch:
    return make_docs(500)
