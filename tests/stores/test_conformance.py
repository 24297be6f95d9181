"""The conformance suite: every store must pass it (the null store is exempt:
it keeps nothing). Add an engine to ENGINES in conftest.py to enrol it."""

import inspect
import multiprocessing as mp
import pickle

import numpy as np
import pytest

from storebench.data import filters as F
from storebench.data.batch import DocBatch
from storebench.data.truth import GroundTruth, recall_at_k
from storebench.errors import ForeignDataError, NotSupported
from storebench.stores.base import Capability, Collection, StoreSpec
from tests.conftest import make_docs

SCALARS = ["tags.i", "score", "label"]


def _sorted(b: DocBatch) -> DocBatch:
    return b.sorted_by_id()


def _assert_same(a: DocBatch, b: DocBatch, vectors: bool = True) -> None:
    a, b = _sorted(a), _sorted(b)
    np.testing.assert_array_equal(a.ids, b.ids)
    for k in SCALARS:
        assert list(a.fields[k]) == list(b.fields[k]), k
    if vectors:
        assert a.vectors is not None and b.vectors is not None
        assert a.vectors.tobytes() == b.vectors.tobytes(), "vectors must round-trip bit-exact"


@pytest.fixture
def coll(store, docs, params):
    # an engine that indexes as documents arrive takes the index parameters here
    c = store.create_collection("sb_conformance", docs.schema(indexed=("tags.i",)), params[0])
    c.insert(docs)
    yield c
    if "sb_conformance" in store._created:
        c.drop()


def test_crud_round_trip_is_bit_exact(store, coll, docs):
    assert coll.count() == len(docs)
    some = np.array([3, 7, 450, 10_000], dtype=np.int64)  # the last does not exist
    got = coll.get(some)
    _assert_same(got, docs.take(np.array([3, 7, 450])))

    if store.supports(Capability.UPDATE):  # faiss HNSW can neither update nor delete
        new = make_docs(2, seed=9)
        upd = DocBatch(
            np.array([3, 7], np.int64), {"tags.i": np.array([-1, -2], np.int64)}, new.vectors
        )
        coll.update(upd)
        got = _sorted(coll.get(np.array([3, 7], np.int64)))
        assert list(got.fields["tags.i"]) == [-1, -2]
        assert list(got.fields["label"]) == list(docs.fields["label"][[3, 7]]), (
            "update touches only given fields"
        )
        assert got.vectors.tobytes() == new.vectors.tobytes()

    if not store.supports(Capability.DELETE):
        return
    coll.delete(np.array([3, 450], np.int64))
    assert coll.count() == len(docs) - 2
    assert sorted(coll.get(np.array([3, 7, 450], np.int64)).ids.tolist()) == [7]


def random_filter(rng: np.random.Generator, depth: int = 0) -> F.Filter:
    r = rng.random()
    if depth < 2 and r < 0.3:
        parts = tuple(random_filter(rng, depth + 1) for _ in range(int(rng.integers(2, 4))))
        return F.And(parts) if rng.random() < 0.5 else F.Or(parts)
    if depth < 2 and r < 0.4:
        return F.Not(random_filter(rng, depth + 1))
    field = ["tags.i", "score", "label"][int(rng.integers(0, 3))]
    if field == "label":
        if rng.random() < 0.5:
            return F.In("label", tuple(f"l{v}" for v in rng.choice(6, size=2, replace=False)))
        return F.Cmp("label", ["eq", "ne"][int(rng.integers(0, 2))], f"l{rng.integers(0, 5)}")
    value = int(rng.integers(0, 50)) if field == "tags.i" else round(float(rng.random()), 3)
    kind = rng.integers(0, 3)
    if kind == 0:
        return F.Cmp(field, F.CMP_OPS[int(rng.integers(0, 6))], value)
    if kind == 1:
        hi = value + (10 if field == "tags.i" else 0.2)
        return F.Range(field, value, hi)
    return F.In(field, (value, int(rng.integers(0, 50))) if field == "tags.i" else (value,))


def test_random_filters_match_the_numpy_reference(store, coll, docs):
    if not store.supports(Capability.FIND):
        pytest.skip(f"{store.engine} declares no find")
    rng = np.random.default_rng(42)
    for _ in range(60):
        f = random_filter(rng)
        want = docs.ids[F.evaluate(f, docs.fields)]
        got = coll.find(f)
        assert sorted(got.ids.tolist()) == sorted(want.tolist()), f
        _assert_same(got, docs.take(np.searchsorted(docs.ids, got.ids)), vectors=False)


def test_find_with_order_and_limit(store, coll, docs):
    if not store.supports(Capability.ORDER):
        pytest.skip(f"{store.engine} declares no order")
    where = F.Cmp("tags.i", "lt", 25)
    got = coll.find(where, order=("score", True), limit=7)
    mask = F.evaluate(where, docs.fields)
    want_scores = np.sort(docs.fields["score"][mask])[::-1][:7]
    np.testing.assert_allclose(got.fields["score"], want_scores)


def indexed(store, coll, params):
    """The collection as a benchmark searches it: index built with the
    entry's parameters and search parameters set, where the engine has them."""
    index, search = params
    if store.supports(Capability.INDEX):
        coll.build_index(index)
    if store.supports(Capability.SEARCH_PARAMS) and search.given():
        coll.set_search_params(search)
    return coll


def test_search_recall(store, coll, docs, params):
    if not store.supports(Capability.SEARCH):
        pytest.skip(f"{store.engine} declares no search (capability {Capability.SEARCH!s})")
    indexed(store, coll, params)
    queries = make_docs(30, seed=5).vectors
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 20, "l2")
    res = coll.search(queries, 10)
    assert res.ids.shape == (30, 10)
    recall = recall_at_k(res.ids, truth, 10).mean()
    if store.exact:
        assert recall == 1.0
        np.testing.assert_allclose(res.distances, truth.distances[:, :10], rtol=1e-3, atol=1e-3)
    else:
        assert recall >= 0.95


def test_filtered_search_respects_the_filter(store, coll, docs, params):
    if not store.supports(Capability.FILTERED_SEARCH):
        pytest.skip(f"{store.engine} declares no filtered search")
    indexed(store, coll, params)
    where = F.Cmp("tags.i", "lt", 5)  # about 10%
    mask = F.evaluate(where, docs.fields)
    queries = make_docs(20, seed=6).vectors
    truth = GroundTruth.compute(docs.ids[mask], docs.vectors[mask], queries, 10, "l2")
    res = coll.search(queries, 10, where)
    allowed = set(docs.ids[mask].tolist())
    assert set(res.ids[res.ids >= 0].tolist()) <= allowed
    recall = recall_at_k(res.ids, truth, 10).mean()
    assert recall == 1.0 if store.exact else recall >= 0.9


def test_drop_removes_only_what_the_run_created(store, docs):
    # Plant a collection the way someone else's data exists: not through
    # this store's create_collection, so the store does not own it.
    foreign = store._create("someone_elses_data", docs.schema(), store.Index())
    foreign.insert(docs.slice(0, 50))
    with pytest.raises(ForeignDataError):
        store.create_collection("someone_elses_data", docs.schema())
    with pytest.raises(ForeignDataError):
        store.open_collection("someone_elses_data", docs.schema()).drop()
    mine = store.create_collection("sb_mine", docs.schema())
    mine.insert(docs.slice(0, 10))
    mine.drop()
    assert not store.has_collection("sb_mine")
    assert store.has_collection("someone_elses_data")
    assert store.open_collection("someone_elses_data", docs.schema()).count() == 50


# each capability and a call that needs it
CALLS = {
    Capability.INSERT: ("insert", lambda c, d: c.insert(d.slice(0, 1))),
    Capability.GET: ("get", lambda c, d: c.get(d.ids[:1])),
    Capability.UPDATE: ("update", lambda c, d: c.update(d.slice(0, 1))),
    Capability.DELETE: ("delete", lambda c, d: c.delete(d.ids[:1])),
    Capability.FIND: ("find", lambda c, d: c.find(F.Cmp("tags.i", "eq", 1))),
    Capability.SEARCH: ("search", lambda c, d: c.search(d.vectors[:1], 3)),
    Capability.INDEX: ("build_index", lambda c, d: c.build_index(c.store.Index())),
    Capability.SEARCH_PARAMS: (
        "set_search_params",
        lambda c, d: c.set_search_params(c.store.Search()),
    ),
    Capability.SIZE: ("size_bytes", lambda c, d: c.size_bytes()),
    Capability.COMPACT: ("compact", lambda c, d: c.compact()),
    Capability.PIPELINE: (
        "insert_pipelined",
        lambda c, d: c.insert_pipelined([d.slice(0, 1), d.slice(1, 2)]),
    ),
}


def test_pipelined_inserts_land_every_document_once(store, docs):
    """Each batch its own request, all sent before any reply: every document
    arrives once and reads back as sent; an id already there is replaced."""
    if not store.supports(Capability.PIPELINE):
        return
    c = store.create_collection("sb_pipelined", docs.schema())
    try:
        c.insert(make_docs(5, seed=9))  # ids 0..4 exist, other values: replaced
        c.insert_pipelined([docs.slice(i, min(i + 7, 300)) for i in range(0, 300, 7)])
        c.insert_pipelined([docs.slice(300, 301)])  # a pipeline of one
        assert c.count() == 301
        _assert_same(c.get(docs.ids[:301]), docs.slice(0, 301))
    finally:
        c.drop()


def test_declared_capabilities_are_exactly_the_implemented_ones(store, coll, docs):
    for cap, (method, call) in CALLS.items():
        implemented = getattr(type(coll), method) is not getattr(Collection, method)
        assert implemented == store.supports(cap), (
            f"{cap}: declared {store.supports(cap)}, implemented {implemented}"
        )
        if not store.supports(cap):
            with pytest.raises(NotSupported, match=f"not supported by {store.engine}"):
                call(coll, docs)


def test_size_and_compaction_keep_the_data(store, coll, docs):
    if store.supports(Capability.SIZE):
        assert coll.size_bytes() > 0
    if store.supports(Capability.COMPACT):
        coll.delete(docs.ids[:100])
        coll.compact()
        assert coll.count() == len(docs) - 100
        _assert_same(coll.get(docs.ids[100:110]), docs.slice(100, 110))


def test_size_of_collections_together_counts_shared_storage_once(store, docs):
    """``size_bytes_of`` is what several collections hold together. Where they
    share one database each one's ``size_bytes`` is all of it, and a plain sum
    counts it once per collection. So: growing one of two collections must
    grow their total by what that one grew, once. (Comparing the sizes
    themselves is not robust: a tiny collection of its own may weigh as much
    as a big one, e.g. DuckDB's file blocks.)"""
    if not store.supports(Capability.SIZE):
        return
    made: list[Collection] = []
    try:
        for name in ("sb_size_a", "sb_size_b"):
            made.append(store.create_collection(name, docs.schema()))
            made[-1].insert(docs.slice(0, 10))
            made[-1].count()  # engines that refresh on read (Lucene) make the writes visible
        a, b = made

        def sizes() -> tuple[int, int, int]:
            # both orders: a unit wrongly shared would hide the growth of
            # whichever collection comes second
            return a.size_bytes(), store.size_bytes_of(a, b), store.size_bytes_of(b, a)

        a0, ab0, ba0 = sizes()
        a.insert(make_docs(2000, seed=3, start=len(docs)))
        a.count()
        a1, ab1, ba1 = sizes()
        grew = a1 - a0
        assert grew > 0, f"2000 more documents, yet size_bytes went {a0} -> {a1}"
        for order, t0, t1 in (("a, b", ab0, ab1), ("b, a", ba0, ba1)):
            assert t1 - t0 == pytest.approx(grew, rel=0.25), (
                f"size_bytes_of({order}) grew {t1 - t0} bytes when a grew {grew} "
                "(twice: shared storage counted per collection; 0: a unit wrongly shared)"
            )
    finally:
        for c in made:
            if c.name in store._created:
                c.drop()


def _count_in_child(spec: StoreSpec, name: str, schema, out) -> None:  # runs in a spawned process
    s = spec.open()
    out.put(s.open_collection(name, schema).count())
    s.close()


def test_spec_is_picklable_and_reopens_in_another_process(store, coll, docs):
    spec = pickle.loads(pickle.dumps(store.spec))
    assert spec == store.spec
    if not store.supports(Capability.SHARED_ACROSS_PROCESSES):
        return
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_count_in_child, args=(store.spec, coll.name, coll.schema, q))
    p.start()
    assert q.get(timeout=240) == len(docs)  # a spawned child imports the client: slow when busy
    p.join(10)


def test_adapters_never_touch_clocks(store):
    src = inspect.getsource(inspect.getmodule(type(store)))
    for clock in ("perf_counter", "time.time(", "monotonic"):
        assert clock not in src, (
            f"{store.engine} adapter reads a clock ({clock}); timing is the driver's"
        )
