"""The data directory: make, import, load, cached truth; generators."""

import pickle

import numpy as np
import pytest

from storebench.data import datasets, synthetic, truth
from storebench.data.datasets import Dataset, SyntheticSpec
from storebench.data.filters import Cmp
from storebench.data.shared import Shared
from storebench.data.truth import exact_knn
from storebench.errors import UserError

from .test_datasets_readers import write_bin, write_hdf5, write_vecs


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = tmp_path / "data"
    monkeypatch.setenv("STOREBENCH_DATA", str(r))
    return r


def test_data_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("STOREBENCH_DATA", str(tmp_path / "x"))
    assert datasets.data_dir() == tmp_path / "x"
    monkeypatch.delenv("STOREBENCH_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert datasets.data_dir() == tmp_path / "cache" / "storebench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert datasets.data_dir() == tmp_path / "home" / ".cache" / "storebench"


# --- generators -----------------------------------------------------------------


def test_generators_are_deterministic_and_row_i_does_not_depend_on_n():
    a = synthetic.vectors(70_000, 4, seed=3)
    np.testing.assert_array_equal(a[:1000], synthetic.vectors(1000, 4, seed=3))
    assert not np.array_equal(a, synthetic.vectors(70_000, 4, seed=4))
    q = synthetic.queries(50, 4, seed=3)
    np.testing.assert_array_equal(q, synthetic.queries(50, 4, seed=3))
    assert not np.isin(q, a).all(axis=1).any()  # new points, not copies of documents
    # clustered queries come from the documents' mixture: near some document,
    # unlike another seed's
    c = synthetic.vectors(70_000, 4, "clustered", seed=3)
    near = exact_knn(c, synthetic.queries(50, 4, "clustered", seed=3), 1, "l2")[1][:, 0].mean()
    far = exact_knn(c, synthetic.queries(50, 4, "clustered", seed=99), 1, "l2")[1][:, 0].mean()
    assert near < far

    # embedding queries have the documents' shape (covariance), unlike another seed's
    def off(qs):
        return np.abs(np.cov(qs.T) - np.cov(a.T)).max()

    assert off(synthetic.queries(5000, 4, seed=3)) < off(synthetic.queries(5000, 4, seed=99)) / 2
    np.testing.assert_array_equal(
        np.concatenate(list(synthetic.label_chunks(70_000, 0.1, seed=1))),
        synthetic.label_column(70_000, 0.1, seed=1),
    )


@pytest.mark.parametrize("selectivity", [0.01, 0.1, 0.5, 0.99])
def test_labels_match_the_chosen_selectivity(selectivity):
    n = 200_000
    col = synthetic.label_column(n, selectivity, seed=7)
    name = synthetic.label_name(selectivity)
    frac = (col == name).mean()
    sigma = np.sqrt(selectivity * (1 - selectivity) / n)
    assert abs(frac - selectivity) < 5 * sigma
    assert set(np.unique(col)) == {name, "other"}


def test_label_names_follow_vectordbbench():
    assert synthetic.label_name(0.01) == "label_1p"
    assert synthetic.label_name(0.99) == "label_99p"
    assert synthetic.label_name(0.005) == "label_0.5p"
    with pytest.raises(ValueError):
        synthetic.label_name(0)


def test_string_attributes_have_the_count_and_size_asked():
    cols = next(synthetic.string_chunks(1000, 3, 12, seed=1))
    assert sorted(cols) == ["test1", "test2", "test3"]
    for c in cols.values():
        assert c.dtype == np.dtype("<U12") and (np.char.str_len(c) == 12).all()
    assert len(np.unique(cols["test1"])) > 990  # random, not a constant
    np.testing.assert_array_equal(
        cols["test2"], next(synthetic.string_chunks(1000, 3, 12, seed=1))["test2"]
    )


# --- make / load / truth cache ------------------------------------------------------


def test_make_writes_memory_mappable_arrays_and_loads_by_name(root):
    spec = SyntheticSpec(n=3000, dim=16, nq=40, labels=(0.1, 0.5), strings=2, string_size=6)
    ds = datasets.make_synthetic(spec, "s1")
    assert (root / "s1" / "meta.json").exists()
    ds = datasets.load("s1")
    assert isinstance(ds.vectors, np.memmap) and ds.vectors.shape == (3000, 16)
    assert isinstance(ds.fields["label_10p"], np.memmap)
    np.testing.assert_array_equal(ds.vectors, synthetic.vectors(3000, 16, seed=0))
    np.testing.assert_array_equal(ds.queries, synthetic.queries(40, 16, seed=0))
    assert set(ds.meta.fields) == {"tags.i", "label_10p", "label_50p", "test1", "test2"}
    docs = ds.docs
    assert len(docs) == 3000 and docs.dim == 16 and docs.schema("l2").fields["label_50p"] == "str"
    assert ds.fields["tags.i"].max() < 3000
    with pytest.raises(UserError, match="a dataset of that name exists"):
        datasets.make_synthetic(spec, "s1")
    assert datasets.local_names() == ["s1"]


def test_truth_is_computed_once_cached_and_served_for_smaller_requests(root, monkeypatch):
    ds = datasets.make_synthetic(SyntheticSpec(n=2000, dim=8, nq=30, labels=(0.1,)), "t")
    gt = ds.truth(20)
    want_pos, want_d = exact_knn(np.asarray(ds.vectors), np.asarray(ds.queries), 20, "l2")
    assert (gt.ids == want_pos).all()
    files = sorted(p.name for p in (root / "t" / "truth").iterdir())
    assert files == ["k20-l2-all-q30.npz"]

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(truth, "exact_knn", boom)
    small = ds.truth(10, nq=5)  # served from the k=20 file
    assert (small.ids == gt.ids[:5, :10]).all()
    with pytest.raises(AssertionError, match="recomputed"):
        ds.truth(30)
    with pytest.raises(AssertionError, match="recomputed"):
        ds.truth(10, metric="ip")


def test_filtered_truth_by_filter_or_mask_shares_one_cache_entry(root):
    ds = datasets.make_synthetic(SyntheticSpec(n=4000, dim=8, nq=10, labels=(0.1,)), "f")
    flt = {"label_10p": "label_10p"}
    gt = ds.truth(10, where=flt)
    mask = np.asarray(ds.fields["label_10p"]) == "label_10p"
    assert mask[gt.ids].all()
    want, _ = exact_knn(np.asarray(ds.vectors), np.asarray(ds.queries), 10, "l2", rows=mask)
    assert (gt.ids == want).all()
    again = ds.truth(10, where=Cmp("label_10p", "eq", "label_10p"))
    assert (again.ids == gt.ids).all()
    assert len(list((root / "f" / "truth").iterdir())) == 1
    with pytest.raises(UserError, match="filter names field\\(s\\) nope; the dataset has: tags.i"):
        ds.truth(10, where={"nope": 1})


def test_load_errors_name_what_is_wrong(root):
    with pytest.raises(
        UserError, match="dataset 'sift-128-euclidean' is registered but not downloaded"
    ):
        datasets.load("sift-128-euclidean")
    with pytest.raises(
        UserError, match="unknown dataset 'nosuch' \\(local: none; registered: sift"
    ):
        datasets.load("nosuch")
    with pytest.raises(UserError, match="missing.fvecs: file not found"):
        datasets.load("missing.fvecs")


# --- import ------------------------------------------------------------------------------


def test_import_hdf5_keeps_the_provided_truth_with_exact_distances(root, tmp_path):
    rng = np.random.default_rng(0)
    train = rng.normal(size=(500, 8)).astype(np.float32)
    test = rng.normal(size=(12, 8)).astype(np.float32)
    nb, _ = exact_knn(train, test, 10, "cosine")
    write_hdf5(tmp_path / "set-8-angular.hdf5", train, test, nb, distance="angular")
    ds = datasets.import_path(tmp_path / "set-8-angular.hdf5")
    assert ds.name == "set-8-angular" and ds.metric == "cosine" and ds.meta.provided_truth_k == 10
    gt = ds.cached_truth(10)
    assert gt is not None and (gt.ids == nb).all()
    np.testing.assert_allclose(gt.distances, ds.truth(10, recompute=True).distances, atol=1e-6)


def test_import_bin_with_holdout_queries(root, tmp_path):
    a = np.random.default_rng(1).normal(size=(300, 6)).astype(np.float32)
    write_bin(tmp_path / "base.fbin", a)
    with pytest.raises(UserError, match="does not say its metric: give --metric"):
        datasets.import_path(tmp_path / "base.fbin")
    ds = datasets.import_path(tmp_path / "base.fbin", "b", metric="ip", holdout=20, seed=4)
    assert (ds.n, ds.nq) == (280, 20)
    # the held-out rows are the queries, and are not among the documents
    rows = [int(np.flatnonzero((a == q).all(1))[0]) for q in np.asarray(ds.queries)]
    assert len(set(rows)) == 20 and not np.isin(rows, ds.ids).any()
    assert len(np.unique(np.concatenate([rows, ds.ids]))) == 300


def test_a_corrupt_import_leaves_no_partial_entry(root, tmp_path):
    a = np.random.default_rng(1).normal(size=(200_000, 4)).astype(np.float32)
    a[150_000, 1] = np.nan  # found only after the first chunks are written
    write_vecs(tmp_path / "bad.fvecs", a)
    with pytest.raises(UserError, match=r"bad.fvecs: row 150000: vector holds NaN or inf"):
        datasets.import_path(tmp_path / "bad.fvecs", metric="l2")
    assert not root.exists() or list(root.iterdir()) == []


def test_load_of_a_path_imports_once_and_reuses(root, tmp_path):
    a = np.random.default_rng(2).normal(size=(100, 4)).astype(np.float32)
    write_hdf5(tmp_path / "small.hdf5", a, a[:5])
    ds = datasets.load(str(tmp_path / "small.hdf5"))
    assert ds.name == "small" and ds.nq == 5
    again = datasets.load(str(tmp_path / "small.hdf5"))
    assert again.path == ds.path and again.meta.created == ds.meta.created
    assert datasets.load(str(ds.path)).name == "small"  # a dataset directory works too


def test_shared_does_not_copy_a_dataset_array(root, tmp_path):
    ds = datasets.make_synthetic(SyntheticSpec(n=500, dim=4, nq=0), "sh")
    s = Shared(ds.vectors, tmp_path / "copy.npy")
    assert s.path == str(root / "sh" / "vectors.npy") and not (tmp_path / "copy.npy").exists()
    back = pickle.loads(pickle.dumps(s))
    np.testing.assert_array_equal(back.array, ds.vectors)
    # a slice is not the whole file: it is copied as before
    s2 = Shared(ds.vectors[10:20], tmp_path / "part.npy")
    assert s2.path == str(tmp_path / "part.npy")
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(s2)).array, ds.vectors[10:20])


def test_dataset_without_queries_says_how_to_get_some(root):
    ds = datasets.make_synthetic(SyntheticSpec(n=100, dim=4, nq=0), "nq")
    with pytest.raises(UserError, match="no queries; import it with --queries or --holdout"):
        ds.truth(10)
    assert isinstance(Dataset(root / "nq").queries, np.ndarray)


def test_import_with_a_row_limit_drops_truth_that_no_longer_holds(root, tmp_path):
    from .test_datasets_readers import write_gt

    base = (np.abs(np.random.default_rng(3).normal(size=(500, 8))) * 30).astype(np.uint8)
    write_bin(tmp_path / "base.1B.u8bin", base)
    write_bin(tmp_path / "query.public.10K.u8bin", base[:6])
    write_gt(tmp_path / "GT.public.1B.ibin", np.tile(np.arange(450, 460), (6, 1)), np.ones((6, 10)))
    full = datasets.import_path(tmp_path, "full", metric="l2")
    assert full.meta.provided_truth_k == 10 and full.vectors.dtype == np.float32
    cut = datasets.import_path(tmp_path, "cut", metric="l2", limit=100)
    assert (cut.n, cut.nq, cut.meta.provided_truth_k) == (100, 6, 0)
    assert cut.truth(10).ids.max() < 100


# --- content hash, peek -------------------------------------------------------------


def test_the_content_hash_follows_the_content_not_the_name(root):
    spec = SyntheticSpec(n=2000, dim=8, nq=10)
    a = datasets.make_synthetic(spec, "a")
    b = datasets.make_synthetic(spec, "b")
    assert len(a.content_hash) == 16 and a.content_hash == b.content_hash
    assert a.info()["content_hash"] == a.content_hash
    assert (
        datasets.make_synthetic(SyntheticSpec(n=2000, dim=8, nq=10, seed=1), "c").content_hash
        != a.content_hash
    )
    assert (
        datasets.make_synthetic(SyntheticSpec(n=2000, dim=8, nq=10, metric="ip"), "d").content_hash
        != a.content_hash
    )
    v = np.load(root / "b" / "vectors.npy", mmap_mode="r+")
    v[-1] += 1  # the last row is always in the sample
    v.flush()
    del v
    assert Dataset(root / "b").content_hash != a.content_hash


def test_peek_tells_what_load_would_give_and_writes_nothing(root, tmp_path):
    a = np.random.default_rng(2).normal(size=(100, 4)).astype(np.float32)
    write_hdf5(tmp_path / "small.hdf5", a, a[:5])
    # a metric given is used only where the source says none (this file: euclidean)
    m = datasets.peek(str(tmp_path / "small.hdf5"), metric="ip")
    assert (m.name, m.n, m.dim, m.metric, m.nq) == ("small", 100, 4, "l2", 5)
    assert not root.exists()
    ds = datasets.load(str(tmp_path / "small.hdf5"), metric="ip")
    assert (ds.n, ds.metric) == (100, "l2")
    assert datasets.peek("small") == ds.meta
    with pytest.raises(UserError, match="does not say its metric: give --set metric="):
        datasets.peek(str(write_bin(tmp_path / "base.fbin", a)))


def test_a_meta_json_of_another_tool_does_not_make_a_dataset_directory(root, tmp_path):
    ds = datasets.make_synthetic(SyntheticSpec(n=50, dim=4, nq=3), "mine")
    assert datasets.is_dataset_dir(ds.path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "meta.json").write_text('{"name": "x", "dim": 4}')
    assert not datasets.is_dataset_dir(tmp_path / "other")
    (ds.path / "meta.json").write_text("{ not json")
    assert datasets.is_dataset_dir(ds.path)  # ours, and corrupt
    with pytest.raises(UserError, match=r"mine/meta.json: corrupt meta.json"):
        datasets.load(str(ds.path))
