"""The qdrant-edge store beyond the conformance suite: the index is really
built by build_index, parameters land in the shard's config, the traps of the
binding (bool matches, unsigned ids, cosine normalisation) are handled, and
the shard persists in its directory."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("qdrant_edge")

from storebench.data import filters as F  # noqa: E402
from storebench.data.batch import DocBatch  # noqa: E402
from storebench.data.truth import GroundTruth, distances, recall_at_k  # noqa: E402
from storebench.errors import UserError  # noqa: E402
from storebench.stores.base import StoreSpec  # noqa: E402
from storebench.stores.params import HnswIndex, HnswSearch  # noqa: E402
from tests.conftest import make_docs  # noqa: E402


def _spec(tmp_path, **kw):
    return StoreSpec("qdrant-edge", str(tmp_path / "q"), **kw)


HNSW = HnswIndex(m=16, ef_construct=200)


def _coll(store, name, schema, index=HNSW, ef=200):
    """A collection as a run makes it: the shard's HNSW config from the
    index parameters at creation, then the run's search setting."""
    coll = store.create_collection(name, schema, index)
    coll.set_search_params(HnswSearch(ef=ef))
    return coll


def _config(coll) -> dict:
    with open(os.path.join(coll._path, "edge_config.json")) as f:
        return json.load(f)


def test_build_index_builds_hnsw_with_the_given_parameters(tmp_path):
    docs = make_docs(2000, dim=32, seed=1)
    store = _spec(tmp_path).open()
    coll = _coll(store, "c", docs.schema(indexed=("tags.i",)), HnswIndex(m=12, ef_construct=90))
    coll.insert(docs)
    assert coll._shard.info().indexed_vectors_count == 0
    queries = make_docs(20, dim=32, seed=2).vectors
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 10, "l2")
    before = coll.search(queries, 10)  # plain segment: exact
    assert recall_at_k(before.ids, truth, 10).mean() == 1.0
    np.testing.assert_allclose(before.distances, truth.distances, rtol=1e-4, atol=1e-4)

    coll.build_index(HnswIndex(m=12, ef_construct=90))
    assert coll._shard.info().indexed_vectors_count == 2000
    hnsw = _config(coll)["hnsw_config"]
    assert (hnsw["m"], hnsw["ef_construct"]) == (12, 90)
    assert recall_at_k(coll.search(queries, 10).ids, truth, 10).mean() >= 0.95

    coll.build_index(HnswIndex(m=24, ef_construct=150))  # other parameters: shard reopened
    hnsw = _config(coll)["hnsw_config"]
    assert (hnsw["m"], hnsw["ef_construct"]) == (24, 150)
    assert coll.count() == 2000
    store.close()


def test_graph_is_walked_when_the_planner_allows_it(tmp_path):
    """With full_scan_threshold_kb=1 the planner uses the graph even on a
    small segment: a tiny ef then costs recall, proving ef reaches Qdrant."""
    docs = make_docs(3000, dim=32, seed=3)
    queries = make_docs(50, dim=32, seed=4).vectors
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 10, "l2")
    store = _spec(tmp_path, options={"full_scan_threshold_kb": 1}).open()
    coll = _coll(store, "g", docs.schema(), HnswIndex(m=4, ef_construct=8))
    coll.insert(docs)
    coll.build_index(HnswIndex(m=4, ef_construct=8))
    coll.set_search_params(HnswSearch(ef=1))
    low = recall_at_k(coll.search(queries, 10).ids, truth, 10).mean()
    coll.set_search_params(HnswSearch(ef=500))
    high = recall_at_k(coll.search(queries, 10).ids, truth, 10).mean()
    assert low < high
    store.close()


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_distances_are_the_metrics_own(tmp_path, metric):
    docs = make_docs(300, seed=5)
    store = _spec(tmp_path).open()
    coll = _coll(store, "d", docs.schema(metric))
    coll.insert(docs)
    queries = make_docs(5, seed=6).vectors
    res = coll.search(queries, 5)
    exact = np.stack(
        [distances(queries[i : i + 1], docs.vectors[res.ids[i]], metric)[0] for i in range(5)]
    )
    np.testing.assert_allclose(res.distances, exact, rtol=1e-4, atol=1e-4)
    got = coll.get(docs.ids[:3])
    if metric == "cosine":  # Qdrant stores unit vectors for cosine
        np.testing.assert_allclose(np.linalg.norm(got.vectors, axis=1), 1.0, rtol=1e-5)
    else:
        assert got.sorted_by_id().vectors.tobytes() == docs.vectors[:3].tobytes()
    store.close()


def test_negative_ids_and_bool_fields(tmp_path):
    n = 60
    rng = np.random.default_rng(0)
    docs = DocBatch(
        np.arange(-30, 30, dtype=np.int64) * 1_000_000_007,
        {"flag": np.arange(n) % 3 == 0, "x": np.arange(n, dtype=np.int64)},
        rng.normal(size=(n, 8)).astype(np.float32),
    )
    store = _spec(tmp_path).open()
    coll = _coll(store, "n", docs.schema(indexed=("flag",)))
    coll.insert(docs)
    got = coll.get(docs.ids[:5]).sorted_by_id()
    np.testing.assert_array_equal(got.ids, docs.ids[:5])
    assert got.fields["flag"].dtype == np.bool_
    for where in (
        F.Cmp("flag", "eq", True),
        F.Cmp("flag", "ne", True),
        F.In("flag", (False,)),
        F.And((F.Cmp("flag", "eq", np.True_), F.Range("x", 3, 40))),
        F.Cmp("x", "eq", 2.5),  # an int field against a fraction: nothing
    ):
        want = docs.ids[F.evaluate(where, docs.fields)]
        assert sorted(coll.find(where).ids.tolist()) == sorted(want.tolist()), where
    res = coll.search(docs.vectors[:3], 1)
    np.testing.assert_array_equal(res.ids[:, 0], docs.ids[:3])
    with pytest.raises(UserError, match="order comparison"):
        coll.find(F.Cmp("flag", "lt", True))
    store.close()


def test_find_orders_natively_on_an_indexed_field_and_by_sorting_otherwise(tmp_path):
    docs = make_docs(500, seed=7)
    store = _spec(tmp_path).open()
    coll = _coll(store, "o", docs.schema(indexed=("tags.i",)))
    coll.insert(docs)
    where = F.Cmp("score", "gt", 0.5)
    mask = F.evaluate(where, docs.fields)
    for field in ("tags.i", "score"):
        got = coll.find(where, order=(field, True), limit=9)
        want = np.sort(docs.fields[field][mask])[::-1][:9]
        np.testing.assert_array_equal(got.fields[field], want)
        got = coll.find(where, order=(field, False))
        assert len(got) == mask.sum()
        assert (np.diff(got.fields[field]) >= 0).all()
    store.close()


def test_updates_of_missing_ids_are_ignored(tmp_path):
    docs = make_docs(20)
    store = _spec(tmp_path).open()
    coll = _coll(store, "u", docs.schema())
    coll.insert(docs)
    ids = np.array([3, 999], np.int64)
    coll.update(DocBatch(ids, {"tags.i": np.array([-7, -8])}))  # partial: per document
    coll.update(
        DocBatch(ids, {k: v[:2] for k, v in docs.fields.items()}, docs.vectors[:2])
    )  # whole documents: one UpdateOnly upsert
    assert coll.count() == 20
    got = coll.get(np.array([3], np.int64))
    assert got.vectors.tobytes() == docs.vectors[0].tobytes()
    assert got.fields["tags.i"][0] == docs.fields["tags.i"][0]
    store.close()


def test_the_shard_persists_and_drop_removes_its_directory(tmp_path):
    docs = make_docs(100)
    spec = _spec(tmp_path)
    store = spec.open()
    coll = _coll(store, "p", docs.schema(indexed=("tags.i",)))
    coll.insert(docs)
    coll.build_index(HnswIndex())
    assert coll.size_bytes() > 0
    store.close()

    again = spec.open()
    assert again.has_collection("p")
    reopened = again.open_collection("p", docs.schema(indexed=("tags.i",)))
    assert reopened.count() == 100
    with pytest.raises(Exception, match="did not create"):
        reopened.drop()
    again.close()

    third = spec.open()
    mine = _coll(third, "mine", docs.schema())
    mine.insert(docs.slice(0, 5))
    path = mine._path
    mine.drop()
    assert not os.path.exists(path)
    assert third.has_collection("p")
    third.close()


def test_options_and_names_are_checked(tmp_path):
    with pytest.raises(UserError, match="unknown option"):
        _spec(tmp_path, options={"threads": 1}).open()
    with pytest.raises(UserError):
        _spec(tmp_path, options={"indexing_threshold_kb": 0}).open()
    with pytest.raises(UserError, match="does not exist"):
        StoreSpec("qdrant-edge", str(tmp_path / "no" / "such")).open()
    store = _spec(tmp_path).open()
    with pytest.raises(UserError):
        _coll(store, "../escape", make_docs(2).schema())
    store.close()


def test_temporary_directory_is_removed_on_close():
    store = StoreSpec("qdrant-edge").open()
    path = store.spec.url
    _coll(store, "t", make_docs(3).schema()).insert(make_docs(3))
    assert os.path.isdir(path)
    store.close()
    assert not os.path.exists(path)


def test_searches_and_writes_from_several_threads(tmp_path):
    import threading

    docs = make_docs(3000, seed=8)
    store = _spec(tmp_path).open()
    coll = _coll(store, "t", docs.schema(indexed=("tags.i",)))
    coll.insert(docs.slice(0, 1000))
    errors: list[BaseException] = []

    def searcher():
        try:
            for i in range(100):
                coll.search(docs.vectors[i : i + 1], 5, F.Cmp("tags.i", "lt", 25))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    for b in docs.slice(1000, 3000).batches(250):
        coll.insert(b)
    coll.delete(docs.ids[:10])
    for t in threads:
        t.join()
    assert not errors
    assert coll.count() == 2990
    coll.build_index(HnswIndex())
    assert coll.search(docs.vectors[2999:3000], 1).ids[0, 0] == 2999
    store.close()
