import numpy as np
import pytest

from storebench.data import synthetic
from storebench.data import truth as truth_mod
from storebench.data.batch import DocBatch
from storebench.data.truth import GroundTruth, exact_knn, recall_at_k


def test_slices_are_views_and_validation_names_the_problem():
    b = DocBatch(np.arange(10, dtype=np.int64), {"f": np.arange(10)}, np.zeros((10, 4), np.float32))
    s = b.slice(2, 5)
    assert np.shares_memory(s.ids, b.ids) and np.shares_memory(s.vectors, b.vectors)
    assert np.shares_memory(s.fields["f"], b.fields["f"])
    with pytest.raises(ValueError, match="field 'f' has 3 values for 10 ids"):
        DocBatch(np.arange(10, dtype=np.int64), {"f": np.arange(3)})
    with pytest.raises(TypeError, match="float32"):
        DocBatch(np.arange(2, dtype=np.int64), {}, np.zeros((2, 2)))


def test_synthetic_rows_do_not_depend_on_n():
    whole = synthetic.vectors(1000, 8, seed=3)
    np.testing.assert_array_equal(whole[:100], synthetic.vectors(100, 8, seed=3))
    assert not np.array_equal(whole, synthetic.vectors(1000, 8, seed=4))


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_blocked_exact_knn_equals_brute_force(metric, monkeypatch):
    monkeypatch.setattr(truth_mod, "_BLOCK_BYTES", 4096)  # force many blocks
    rng = np.random.default_rng(0)
    data = rng.normal(size=(3000, 12)).astype(np.float32)
    q = rng.normal(size=(7, 12)).astype(np.float32)
    pos, dist = exact_knn(data, q, 10, metric)
    full = truth_mod.distances(q, data, metric)
    want = np.argsort(full, axis=1, kind="stable")[:, :10]
    np.testing.assert_allclose(dist, np.take_along_axis(full, want, 1), rtol=1e-5, atol=1e-5)
    assert (pos == want).mean() > 0.99  # equal but for exact ties


def test_recall_counts_ties_at_the_kth_distance_and_duplicates_once():
    truth = GroundTruth(np.array([[10, 11, 12, 13]]), np.array([[1.0, 2.0, 3.0, 3.0]], np.float32))
    assert recall_at_k(np.array([[10, 11, 13]]), truth, 3)[0] == 1.0  # 13 ties with 12
    assert recall_at_k(np.array([[10, 10, 10]]), truth, 3)[0] == pytest.approx(1 / 3)
    assert recall_at_k(np.array([[10, 99, -1]]), truth, 3)[0] == pytest.approx(1 / 3)
