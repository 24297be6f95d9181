"""Exact ground truth: equal to brute-force numpy, filtered, bounded, tie-aware."""

import numpy as np
import pytest

from storebench.data import truth as truth_mod
from storebench.data.truth import (
    GroundTruth,
    exact_knn,
    pair_distances,
    recall_at_k,
    single_threaded_blas,
)


def brute(data, queries, k, metric, rows=None):
    """Float64 brute force: every distance, full sort (ties by position)."""
    x = np.asarray(data, np.float64)
    q = np.asarray(queries, np.float64)
    if metric == "l2":
        d = np.sqrt(((q[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    elif metric == "ip":
        d = -(q @ x.T)
    else:
        xn = x / np.linalg.norm(x, axis=1, keepdims=True)
        qn = q / np.linalg.norm(q, axis=1, keepdims=True)
        d = 1.0 - qn @ xn.T
    if rows is not None:
        keep = np.zeros(len(x), bool)
        keep[rows] = True
        d[:, ~keep] = np.inf
    pos = np.argsort(d, axis=1, kind="stable")[:, :k]
    dist = np.take_along_axis(d, pos, 1)
    pos = np.where(np.isfinite(dist), pos, -1)
    return pos, dist


def data(n=3000, dim=12, nq=25, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(10, dim))
    x = (centers[rng.integers(0, 10, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)
    q = (centers[rng.integers(0, 10, nq)] + 0.3 * rng.normal(size=(nq, dim))).astype(np.float32)
    return x, q


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
@pytest.mark.parametrize("threads", [1, 2])
def test_exact_knn_equals_brute_force_across_many_small_blocks(metric, threads):
    x, q = data()
    # a tiny scratch budget forces 64-row blocks: hundreds of blocks, many segments
    pos, dist = exact_knn(x, q, 20, metric, threads=threads, memory_bytes=64 * 1024)
    want_pos, want_dist = brute(x, q, 20, metric)
    np.testing.assert_allclose(dist, want_dist, rtol=1e-5, atol=1e-5)
    assert (pos == want_pos).mean() > 0.999
    # distances are exact (recomputed), so sorted and matching their positions
    assert (np.diff(dist, axis=1) >= 0).all()
    np.testing.assert_allclose(pair_distances(q, x, pos, metric), dist, rtol=1e-6, atol=1e-6)


def test_query_blocks_and_odd_sizes(monkeypatch):
    monkeypatch.setattr(truth_mod, "_QUERY_BLOCK", 7)  # 25 queries -> 4 query blocks
    monkeypatch.setattr(truth_mod, "_SELECT_BYTES", 1024)  # first blocks: 2 query rows at a time
    x, q = data(n=1001, nq=25)  # 1001 rows: blocks not a multiple of 8 at the end
    pos, dist = exact_knn(x, q, 13, "l2", threads=2, memory_bytes=32 * 1024)
    want_pos, want_dist = brute(x, q, 13, "l2")
    np.testing.assert_allclose(dist, want_dist, rtol=1e-5, atol=1e-5)
    assert (pos == want_pos).all()


@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_filtered_truth_only_returns_allowed_rows_and_is_exact(metric):
    x, q = data()
    rng = np.random.default_rng(5)
    mask = rng.random(len(x)) < 0.05
    pos, dist = exact_knn(x, q, 10, metric, rows=mask, memory_bytes=64 * 1024, threads=2)
    want_pos, want_dist = brute(x, q, 10, metric, rows=np.flatnonzero(mask))
    assert mask[pos].all()
    np.testing.assert_allclose(dist, want_dist, rtol=1e-5, atol=1e-5)
    assert (pos == want_pos).all()
    # the same filter given as row positions
    pos2, _ = exact_knn(x, q, 10, metric, rows=np.flatnonzero(mask)[::-1])
    assert (pos2 == pos).all()


def test_fewer_matches_than_k_are_padded():
    x, q = data(n=500)
    mask = np.zeros(500, bool)
    mask[[3, 77, 400]] = True
    pos, dist = exact_knn(x, q, 5, "l2", rows=mask)
    assert (np.sort(pos[:, :3], axis=1) == [3, 77, 400]).all()
    assert (pos[:, 3:] == -1).all() and np.isinf(dist[:, 3:]).all()
    pos, dist = exact_knn(x, q, 5, "l2", rows=np.zeros(500, bool))
    assert (pos == -1).all() and np.isinf(dist).all()
    pos, dist = exact_knn(x[:2], q, 5, "ip")
    assert (pos[:, 2:] == -1).all() and (pos[:, :2] >= 0).all()


def test_memmap_and_integer_data_are_read_block_by_block(tmp_path):
    rng = np.random.default_rng(1)
    x8 = rng.integers(0, 256, (2000, 16), dtype=np.uint8)
    path = tmp_path / "x.npy"
    np.save(path, x8)
    mm = np.load(path, mmap_mode="r")
    q = rng.integers(0, 256, (9, 16)).astype(np.float32)
    pos, dist = exact_knn(mm, q, 10, "l2", memory_bytes=64 * 1024)
    _, want = brute(x8.astype(np.float32), q, 10, "l2")
    np.testing.assert_allclose(dist, want, rtol=1e-6)


def test_progress_counts_every_row_and_blas_threads_are_restored():
    x, q = data(n=2000)
    seen = []
    exact_knn(x, q, 5, "l2", threads=2, memory_bytes=64 * 1024, progress=seen.append)
    assert sum(seen) == 2000
    controls = truth_mod._openblas_controls()
    if not controls:
        pytest.skip("no OpenBLAS found in this process")
    before = [get() for get, _ in controls]
    with single_threaded_blas(), single_threaded_blas():
        assert all(get() == 1 for get, _ in controls)
    assert [get() for get, _ in controls] == before


def test_bad_arguments_are_value_errors():
    x, q = data(n=100)
    with pytest.raises(ValueError, match="unknown metric"):
        exact_knn(x, q, 5, "hamming")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimension"):
        exact_knn(x, q[:, :5], 5, "l2")
    with pytest.raises(ValueError, match="shape"):
        exact_knn(x, q, 5, "l2", rows=np.ones(99, bool))


def test_ground_truth_compute_maps_positions_to_ids_with_a_filter():
    x, q = data(n=800)
    ids = np.arange(800, dtype=np.int64) * 10 + 7
    mask = np.arange(800) % 3 == 0
    gt = GroundTruth.compute(ids, x, q, 10, "l2", where=mask)
    want_pos, _ = brute(x, q, 10, "l2", rows=np.flatnonzero(mask))
    assert (gt.ids == ids[want_pos]).all()
    assert gt.k == 10 and gt.head(3).ids.shape == (25, 3) and gt[2:4].ids.shape == (2, 10)


def test_recall_counts_ties_within_epsilon_and_not_beyond():
    truth = GroundTruth(
        np.array([[10, 11, 12, 13, 14]]), np.array([[1.0, 2.0, 3.0, 3.0000001, 3.1]], np.float32)
    )
    assert recall_at_k(np.array([[10, 11, 13]]), truth, 3)[0] == 1.0  # 13 ties with 12
    assert recall_at_k(np.array([[10, 11, 14]]), truth, 3)[0] == pytest.approx(
        2 / 3
    )  # 14 is beyond
    assert recall_at_k(np.array([[10, 10, 10]]), truth, 3)[0] == pytest.approx(1 / 3)
    assert recall_at_k(np.array([[10, 99, -1]]), truth, 3)[0] == pytest.approx(1 / 3)


def test_recall_with_true_distances_counts_ties_beyond_the_stored_list():
    # id 50 is not in the (cut) true list but is exactly as near as the 3rd
    truth = GroundTruth(np.array([[10, 11, 12]]), np.array([[1.0, 2.0, 3.0]], np.float32))
    found = np.array([[10, 11, 50]])
    assert recall_at_k(found, truth, 3)[0] == pytest.approx(2 / 3)
    fd = np.array([[1.0, 2.0, 3.0]])
    assert recall_at_k(found, truth, 3, found_distances=fd)[0] == 1.0
    fd_far = np.array([[1.0, 2.0, 3.5]])
    assert recall_at_k(found, truth, 3, found_distances=fd_far)[0] == pytest.approx(2 / 3)


def test_recall_of_exact_answers_on_data_with_duplicates_is_one():
    x, q = data(n=301)
    x = np.concatenate([x, x])  # every vector twice: row i and i + 301 tie everywhere
    gt = GroundTruth.compute(np.arange(len(x)), x, q, 100, "l2")
    # an equally correct answer: each true neighbour replaced by its twin. The
    # 9th place splits a pair, so one twin lies beyond the k-th column: a tie.
    found = (gt.ids[:, :9] + 301) % 602
    assert (np.sort(found, 1) != np.sort(gt.ids[:, :9], 1)).any(axis=1).all()
    assert np.allclose(recall_at_k(found, gt, 9), 1.0)
    # and a wrong answer still loses: the 21st..29th neighbours are farther
    wrong = gt.ids[:, 20:29]
    assert (gt.distances[:, 20] > gt.distances[:, 8] * 1.001).all()
    assert (recall_at_k(wrong, gt, 9) == 0).all()
