"""The async views (``Collection.aio``) of pgvector and Redis against their
real servers: the same rows written and the same results found as the
sync path, search settings reaching the async connections, and whole
tasks run by the ``async`` executor on them."""

import asyncio

import numpy as np
import psutil
import pytest

from storebench.data.filters import Cmp
from storebench.driver import Driver, Task
from storebench.stores.base import StoreSpec
from storebench.stores.params import HnswIndex, HnswSearch
from storebench.workloads.ingest import IngestParams, Inserts, make_schema
from tests.conftest import make_docs
from tests.stores import servers as S

ENGINES = [e for e in ("pgvector", "redis") if not S.skipped(e)]


@pytest.fixture(params=ENGINES)
def store(request):
    s = StoreSpec(request.param, S.shared_url(request.param)).open()
    yield s
    s.close()


def run(coro):
    return asyncio.run(coro)


def test_async_writes_the_same_rows_and_finds_the_same_as_sync(store):
    docs = make_docs(200)
    sync = store.create_collection("sb_aio_sync", docs.schema())
    anew = store.create_collection("sb_aio_async", docs.schema())
    try:
        sync.insert(docs.slice(0, 10))
        sync.insert(docs.slice(10, 200))  # a large batch (pgvector: COPY)
        sync.insert_pipelined([docs.slice(0, 5), docs.slice(5, 10)])  # rewritten, replaced

        async def go():
            view = anew.aio()
            assert view.native
            await view.open()
            try:
                await view.insert(docs.slice(0, 10))
                await view.insert(docs.slice(10, 200))
                await view.insert_pipelined([docs.slice(0, 5), docs.slice(5, 10)])
                got = await view.get(docs.ids[:50])
                found = await view.find(Cmp("label", "eq", docs.fields["label"][3]), None, None)
                ordered = await view.find(None, ("score", True), 7)
                near = await view.search(docs.vectors[:5], 10)
                near_f = await view.search(docs.vectors[:2], 5, Cmp("tags.i", "ge", 10))
                return got, found, ordered, near, near_f
            finally:
                await view.close()

        got, found, ordered, near, near_f = run(go())
        assert anew.count() == sync.count() == 200
        want = sync.get(docs.ids[:50]).sorted_by_id()
        got = got.sorted_by_id()
        assert list(got.ids) == list(want.ids)
        for f in want.fields:
            assert list(got.fields[f]) == list(want.fields[f])
        assert got.vectors.tobytes() == want.vectors.tobytes()
        whole = anew.get(docs.ids).sorted_by_id()  # what async wrote is what was given
        assert whole.vectors.tobytes() == docs.sorted_by_id().vectors.tobytes()
        label = docs.fields["label"][3]
        assert sorted(found.ids) == sorted(sync.find(Cmp("label", "eq", label)).ids)
        want_order = sync.find(None, ("score", True), 7)
        assert list(ordered.fields["score"]) == list(want_order.fields["score"])
        s_near = sync.search(docs.vectors[:5], 10)
        assert (near.ids == s_near.ids).all()
        np.testing.assert_allclose(near.distances, s_near.distances, rtol=1e-5)
        assert (near_f.ids == sync.search(docs.vectors[:2], 5, Cmp("tags.i", "ge", 10)).ids).all()
    finally:
        sync.drop()
        anew.drop()


def connection_of(view):
    """A native view's connection (asyncpg connection, stream)."""
    for name in ("s", "conn", "writer"):
        if getattr(view, name, None) is not None:
            return getattr(view, name)
    raise AssertionError(f"{view!r} has no connection")


def test_views_of_one_client_share_its_connection(store):
    docs = make_docs(20)
    a = store.create_collection("sb_aio_a", docs.schema())
    b = store.create_collection("sb_aio_b", docs.schema())
    try:

        async def go():
            va = a.aio()
            await va.open()
            vb = b.aio(va)
            await vb.open()
            same = connection_of(va) is connection_of(vb)
            await vb.insert(docs)
            await vb.close()  # not its connection: a's stays open
            await va.insert(docs)
            await va.close()
            return same

        assert run(go())
        assert a.count() == b.count() == 20
    finally:
        a.drop()
        b.drop()


@pytest.mark.skipif(S.skipped("pgvector"), reason="STOREBENCH_SKIP_ENGINES")
def test_search_settings_reach_the_async_connections():
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    docs = make_docs(50)
    coll = store.create_collection("sb_aio_ef", docs.schema())
    try:
        coll.insert(docs)
        coll.build_index(HnswIndex(m=8, ef_construct=32))

        async def go():
            view = coll.aio()
            await view.open()
            try:
                out = []
                for ef in (41, 97):
                    coll.set_search_params(HnswSearch(ef=ef))
                    await view.search(docs.vectors[:1], 3)
                    out.append(await view.conn.fetchval("SHOW hnsw.ef_search"))
                return out
            finally:
                await view.close()

        assert run(go()) == ["41", "97"]
    finally:
        coll.drop()
        store.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_an_ingest_task_on_async_clients_writes_every_document(store, workers):
    from storebench.driver.aio import AsyncExecutor

    p = IngestParams(count=400, concurrency=8, complexity=3)
    coll = store.create_collection(f"sb_aio_ingest{workers}", make_schema(p))
    old = AsyncExecutor.workers
    AsyncExecutor.workers = workers
    # threads this test process held already (earlier tests' leftovers:
    # the thread count is the process's)
    before = psutil.Process().num_threads()
    try:
        stats, _ = Driver().run(
            Task("insert", Inserts(p), clients=8, ops=p.ops, executor="async"), coll
        )
        assert stats.ops == 400 and stats.complete
        assert coll.count() == 400
        got = coll.get(np.arange(400)).sorted_by_id()
        assert list(got.ids) == list(range(400))
        assert set(got.fields["test1"]) == {"some test value"}
        assert stats.extra["client_threads"] - before < 8  # 8 clients, no thread each
    finally:
        AsyncExecutor.workers = old
        coll.drop()
