"""Chroma specifics beyond the conformance suite: NOT pushed down to the
leaves, ef_search taking effect after set_search_params, distances per
metric, padding, and one directory per collection."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("chromadb")

from storebench.data import filters as F  # noqa: E402
from storebench.data.batch import DocBatch  # noqa: E402
from storebench.data.truth import GroundTruth, distances, recall_at_k  # noqa: E402
from storebench.stores.base import StoreSpec  # noqa: E402
from storebench.stores.params import HnswIndex, HnswSearch  # noqa: E402
from storebench.stores.vector.chroma import FALSE, TRUE, compile_filter  # noqa: E402
from tests.conftest import make_docs  # noqa: E402

KINDS = {"tags.i": "int", "score": "float", "label": "str"}


def test_not_is_pushed_down_to_the_leaves():
    f = F.Not(F.And((F.Cmp("tags.i", "lt", 5), F.In("label", ("l1", "l2")))))
    assert compile_filter(f, KINDS) == {
        "$or": [{"tags.i": {"$gte": 5}}, {"label": {"$nin": ["l1", "l2"]}}]
    }
    assert compile_filter(F.Not(F.Range("score", 0.1, 0.2)), KINDS) == {
        "$or": [{"score": {"$lt": 0.1}}, {"score": {"$gt": 0.2}}]
    }
    assert compile_filter(F.Not(F.Not(F.Cmp("tags.i", "eq", 3))), KINDS) == {"tags.i": {"$eq": 3}}


def test_constants_fold_and_ints_meet_fractions():
    assert compile_filter(F.In("tags.i", ()), KINDS) is FALSE
    assert compile_filter(F.Not(F.In("tags.i", ())), KINDS) is TRUE
    assert compile_filter(F.Or((F.In("tags.i", ()), F.Cmp("tags.i", "eq", 1))), KINDS) == {
        "tags.i": {"$eq": 1}
    }
    assert compile_filter(F.Cmp("tags.i", "lt", 2.5), KINDS) == {"tags.i": {"$lte": 2}}
    assert compile_filter(F.Cmp("tags.i", "eq", 2.5), KINDS) is FALSE
    assert compile_filter(F.Cmp("score", "eq", 1), KINDS) == {"score": {"$eq": 1.0}}


INDEX = HnswIndex(m=16, ef_construct=200)  # the index the fixture's collections get


@pytest.fixture
def store(tmp_path: Path):
    s = StoreSpec("chroma", str(tmp_path / "c")).open()
    yield s
    s.close()


def test_filters_with_negations_match_numpy(store):
    docs = make_docs(400)
    coll = store.create_collection("sb_f", docs.schema(), INDEX)
    coll.insert(docs)
    cases = [
        F.Not(F.Or((F.Cmp("tags.i", "ge", 10), F.Cmp("label", "eq", "l1")))),
        F.Not(F.And((F.Range("tags.i", 5, 20), F.Not(F.In("label", ("l0", "l3")))))),
        F.Cmp("tags.i", "gt", 24.5),
        F.Not(F.In("tags.i", ())),
        F.In("tags.i", ()),
    ]
    for f in cases:
        want = docs.ids[F.evaluate(f, docs.fields)]
        assert sorted(coll.find(f).ids.tolist()) == sorted(want.tolist()), f


def test_ef_search_applies_after_set_search_params(tmp_path: Path):
    s = StoreSpec("chroma", str(tmp_path / "c")).open()
    rng = np.random.default_rng(0)
    n, dim = 5000, 32
    docs = DocBatch(
        np.arange(n, dtype=np.int64),
        {"tags.i": np.zeros(n, np.int64)},
        rng.normal(size=(n, dim)).astype(np.float32),
    )
    coll = s.create_collection("sb_ef", docs.schema(), HnswIndex(m=4, ef_construct=8))
    coll.insert(docs)
    queries = rng.normal(size=(40, dim)).astype(np.float32)
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 10, "l2")
    coll.set_search_params(HnswSearch(ef=10))
    low = recall_at_k(coll.search(queries, 10).ids, truth, 10).mean()
    coll.set_search_params(HnswSearch(ef=500))
    high = recall_at_k(coll.search(queries, 10).ids, truth, 10).mean()
    assert high > low + 0.2, (low, high)
    assert coll.count() == n
    s.close()


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_distances_per_metric(store, metric):
    docs = make_docs(300)
    coll = store.create_collection(f"sb_{metric}", docs.schema(metric), INDEX)
    coll.insert(docs)
    queries = make_docs(10, seed=3).vectors
    res = coll.search(queries, 5)
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 20, metric)
    assert recall_at_k(res.ids, truth, 5).mean() >= 0.95
    want = distances(queries, docs.vectors, metric)[np.arange(10)[:, None], res.ids]
    np.testing.assert_allclose(res.distances, want, rtol=1e-3, atol=1e-3)


def test_padding_and_own_directory(store):
    docs = make_docs(60)
    coll = store.create_collection("sb", docs.schema(), INDEX)  # shorter than Chroma's 3 chars
    coll.insert(docs)
    one = int(docs.fields["tags.i"][0])
    n_match = int((docs.fields["tags.i"] == one).sum())
    res = coll.search(docs.vectors[:2], 20, F.Cmp("tags.i", "eq", one))
    assert ((res.ids >= 0).sum(axis=1) == n_match).all()
    assert np.isinf(res.distances[res.ids < 0]).all()
    assert (Path(store.spec.url) / "sb").is_dir() and coll.size_bytes() > 0
    coll.drop()
    assert not (Path(store.spec.url) / "sb").exists()


def test_empty_calls_do_not_reach_chroma(store):
    docs = make_docs(5)
    coll = store.create_collection("sb_empty", docs.schema(), INDEX)
    coll.insert(docs.slice(0, 0))
    coll.update(docs.slice(0, 0))
    coll.delete(np.empty(0, np.int64))
    assert len(coll.get(np.empty(0, np.int64))) == 0
    assert coll.count() == 0
