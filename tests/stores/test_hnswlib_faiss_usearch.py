"""The index-library stores (hnswlib, faiss, usearch) beyond the conformance
suite: neutral parameters reach the library under its own names, distances
are the metric's own, replacements/updates/deletes reach the graph, filters
hold, and the store refuses what the library cannot do."""

import threading

import numpy as np
import pytest
from pydantic import ValidationError

from storebench.data import filters as F
from storebench.data.batch import DocBatch, Schema
from storebench.data.truth import GroundTruth, distances, recall_at_k
from storebench.errors import NotSupported, UserError
from storebench.stores.base import Capability, StoreSpec
from storebench.stores.params import HnswIndex, HnswSearch
from tests.conftest import make_docs

LIBS = ["hnswlib", "faiss", "usearch"]
GENEROUS = HnswIndex(m=16, ef_construct=200), HnswSearch(ef=400)


def _open(engine: str, **kw):
    pytest.importorskip({"faiss": "faiss", "hnswlib": "hnswlib", "usearch": "usearch"}[engine])
    return StoreSpec(engine, **kw).open()


def _coll(store, name, schema, index=GENEROUS[0], search=GENEROUS[1]):
    """A collection as a run makes it: index parameters at creation (the
    index grows with the inserts), then the run's search setting."""
    coll = store.create_collection(name, schema, index)
    coll.set_search_params(search)
    return coll


@pytest.fixture(params=LIBS)
def engine(request):
    return request.param


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_distances_are_the_metrics_own(engine, metric):
    docs = make_docs(800, dim=12, seed=1)
    queries = make_docs(15, dim=12, seed=2).vectors
    store = _open(engine)
    coll = _coll(store, "m", docs.schema(metric))
    coll.insert(docs)
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 10, metric)
    for where in (None, F.Cmp("tags.i", "lt", 10)):
        res = coll.search(queries, 10, where)
        # each returned distance is the exact distance of the returned document
        exact = np.stack(
            [distances(queries[i : i + 1], docs.vectors[res.ids[i]], metric)[0] for i in range(15)]
        )
        np.testing.assert_allclose(res.distances, exact, rtol=1e-4, atol=1e-4)
        assert (np.diff(res.distances, axis=1) >= -1e-5).all(), "sorted nearest first"
        if where is None:
            assert recall_at_k(res.ids, truth, 10).mean() >= 0.85  # distances are the point
        else:
            mask = F.evaluate(where, docs.fields)
            assert np.isin(res.ids, docs.ids[mask]).all()
    store.close()


def test_neutral_parameters_reach_the_library(engine):
    docs = make_docs(300)
    store = _open(engine)
    coll = _coll(store, "p", docs.schema(), HnswIndex(m=12, ef_construct=99), HnswSearch(ef=77))
    coll.insert(docs)
    ix = coll._ix
    if engine == "hnswlib":
        assert (ix.M, ix.ef_construction, ix.ef) == (12, 99, 77)
    elif engine == "faiss":
        assert ix.hnsw.nb_neighbors(1) == 12 and ix.hnsw.efConstruction == 99
        assert coll._ef == 77
    else:
        assert (ix.connectivity, ix.expansion_add, ix.expansion_search) == (12, 99, 77)
    coll.set_search_params(HnswSearch(ef=150))
    if engine == "hnswlib":
        assert ix.ef == 150
    elif engine == "usearch":
        assert ix.expansion_search == 150
    # same parameters: the incrementally built index is kept
    coll.build_index(HnswIndex(m=12, ef_construct=99))
    assert coll._ix is ix
    # other parameters: rebuilt from the stored vectors, same answers
    coll.build_index(HnswIndex(m=24, ef_construct=150))
    assert coll._ix is not ix
    res = coll.search(docs.vectors[:20], 1)
    assert (res.ids[:, 0] == docs.ids[:20]).mean() >= 0.95
    store.close()


def test_bad_parameters_are_user_errors(engine):
    # index and search parameters: refused by the plan (tests/unit/test_scenario.py)
    # as by the store's models, before any store opens
    store = _open(engine)
    store.close()
    bad = [(store.Index, {"m": 0}), (store.Search, {"ef": "big"}), (store.Index, {"m": -3})]
    for model, given in bad:
        with pytest.raises(ValidationError):
            model.model_validate(given)
    with pytest.raises(UserError):
        _open(engine, url="/tmp/x")
    with pytest.raises(UserError):
        StoreSpec(engine, options={"threads": 2}).open()


def test_replace_update_and_delete_reach_the_graph(engine):
    docs = make_docs(400)
    store = _open(engine)
    coll = _coll(store, "u", docs.schema())
    coll.insert(docs)
    far = np.full((1, 16), 50.0, np.float32)
    again = DocBatch(docs.ids[5:6], {k: v[5:6] for k, v in docs.fields.items()}, far)
    if engine == "faiss":
        assert not store.supports(Capability.DELETE) and not store.supports(Capability.UPDATE)
        with pytest.raises(UserError, match="cannot replace"):
            coll.insert(again)
        with pytest.raises(NotSupported):
            coll.delete(docs.ids[:1])
        assert coll.count() == 400
        store.close()
        return
    coll.insert(again)  # replaces doc 5: its old vector must leave the graph
    assert coll.count() == 400
    assert coll.search(docs.vectors[5:6], 1).ids[0, 0] != 5
    assert coll.search(far, 1).ids[0, 0] == 5

    moved = DocBatch(docs.ids[6:7], {"tags.i": np.array([7])}, far + 1)
    coll.update(moved)
    assert coll.search(far + 1, 1).ids[0, 0] == 6
    assert coll.search(docs.vectors[6:7], 1).ids[0, 0] != 6

    coll.delete(docs.ids[:50])
    res = coll.search(docs.vectors[:50], 10)
    assert not np.isin(res.ids, docs.ids[:50]).any()
    assert coll.count() == 350
    # fewer live documents than k: padded
    coll.delete(docs.ids[50:395])
    res = coll.search(docs.vectors[:2], 10)
    assert (res.ids[:, :5] >= 0).all() and (res.ids[:, 5:] == -1).all()
    assert np.isinf(res.distances[:, 5:]).all()
    store.close()


def test_ids_repeated_in_one_batch_keep_the_last(engine):
    docs = make_docs(4)
    batch = DocBatch(np.array([1, 2, 1], np.int64), {}, docs.vectors[:3])
    store = _open(engine)
    coll = _coll(store, "r", batch.schema())
    if engine == "faiss":
        with pytest.raises(UserError):
            coll.insert(batch)
        return
    coll.insert(batch)
    assert coll.count() == 2
    res = coll.search(docs.vectors[:1], 2)
    assert res.ids[0].tolist().count(1) == 1, "the first vector of id 1 left the graph"
    assert coll.get(np.array([1], np.int64)).vectors.tobytes() == docs.vectors[2].tobytes()


def test_selective_filters(engine):
    docs = make_docs(1000, seed=3)
    store = _open(engine)
    coll = _coll(store, "f", docs.schema())
    coll.insert(docs)
    q = make_docs(5, seed=4).vectors
    for where, n in (
        (F.In("tags.i", ()), 0),
        (F.Cmp("score", "eq", float(docs.fields["score"][9])), None),
    ):
        want = docs.ids[F.evaluate(where, docs.fields)]
        res = coll.search(q, 10, where)
        got = res.ids[res.ids >= 0]
        assert set(got.tolist()) <= set(want.tolist())
        assert (res.ids >= 0).sum(axis=1).tolist() == [min(10, len(want))] * 5
        if n == 0:
            assert (res.ids == -1).all()
    store.close()


def test_searches_run_beside_inserts(engine):
    docs = make_docs(4000, seed=5)
    store = _open(engine)
    coll = _coll(store, "t", docs.schema())
    coll.insert(docs.slice(0, 1000))
    errors: list[BaseException] = []

    def searcher():
        try:
            for i in range(200):
                coll.search(docs.vectors[i : i + 1], 5)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    for b in docs.slice(1000, 4000).batches(250):
        coll.insert(b)
    for t in threads:
        t.join()
    assert not errors
    assert coll.count() == 4000
    assert coll.search(docs.vectors[3999:4000], 1).ids[0, 0] == 3999
    store.close()


def test_searches_with_nothing_to_look_for(engine):
    """No document yet, k = 0, no query: every answer is padding, as wide
    as asked (the common case's path is not taken)."""
    store = _open(engine)
    coll = _coll(store, "nothing", Schema(dim=4, metric="cosine"))
    q = np.ones((2, 4), np.float32)
    assert coll.search(q, 3).ids.tolist() == [[-1] * 3] * 2
    coll.insert(DocBatch(np.array([10, 11], np.int64), {}, np.eye(4, dtype=np.float32)[:2]))
    assert coll.search(q, 0).ids.shape == (2, 0)
    assert coll.search(q[:0], 2).ids.shape == (0, 2)
    found = coll.search(q, 3)
    assert sorted(found.ids[0, :2].tolist()) == [10, 11] and found.ids[0, 2] == -1
    assert found.distances.dtype == np.float32 and np.isinf(found.distances[0, 2])
    store.close()


def test_size_counts_the_index(engine):
    docs = make_docs(500)
    store = _open(engine)
    coll = _coll(store, "s", docs.schema())
    coll.insert(docs)
    assert coll.size_bytes() > coll._c.nbytes() + 500 * 16 * 4 // 2
    store.close()


def test_a_writer_in_a_loop_lets_the_waiting_readers_in_first():
    """A writer that takes the lock back at once (inserts in a loop) lets
    the readers that waited for its release go first: searches while
    inserting are not starved until the stream ends."""
    import threading
    import time

    from storebench.stores.ann.indexlib import RWLock

    lock, order = RWLock(), []

    def reader():
        with lock.shared:
            order.append("read")

    with lock.exclusive:
        t = threading.Thread(target=reader)
        t.start()
        while not lock._readers_waiting:  # the reader waits for this writer
            time.sleep(0.001)
    with lock.exclusive:  # taken back at once
        order.append("write")
    t.join(5)
    assert order == ["read", "write"]


def test_a_writer_waits_for_a_reader_that_took_no_lock():
    """A reader that came in while no writer was about took no lock: a
    writer arriving then still waits until that reader leaves."""
    import threading
    import time

    from storebench.stores.ann.indexlib import RWLock

    lock, order = RWLock(), []

    def writer():
        with lock.exclusive:
            order.append("write")

    with lock.shared:
        assert lock._fast and not lock._readers_waiting  # in without the condition
        t = threading.Thread(target=writer)
        t.start()
        while not lock._gate:  # the writer is waiting
            time.sleep(0.001)
        time.sleep(0.05)
        order.append("read")
    t.join(5)
    assert order == ["read", "write"]
    assert not lock._gate  # no writer left: readers take no lock again


def test_a_search_waits_for_the_writer_in():
    """The search path takes the lock's shared side inline: with a writer
    in, a search queues, and runs when the writer has left."""
    import time

    docs = make_docs(100, seed=3)
    store = _open("faiss")
    coll = _coll(store, "t", docs.schema())
    coll.insert(docs)
    lock, order = coll._lock, []

    def search():
        order.append(("search", coll.search(docs.vectors[:1], 1).ids[0, 0]))

    with lock.exclusive:
        t = threading.Thread(target=search)
        t.start()
        deadline = time.monotonic() + 5
        while not lock._readers_waiting:  # the search waits for this writer
            assert time.monotonic() < deadline and not order, "the search ran beside a writer"
            time.sleep(0.001)
        order.append("write")
    t.join(5)
    assert order == ["write", ("search", docs.ids[0])]
    assert not lock._fast and not lock._gate  # it left; no writer about
    store.close()
