"""The native client (``client: native``, ``storebench_fastclient``) on the
managed PostgreSQL and Redis: the same rows written and the same search ids
as the Python path, the loop's contract (latencies, progress slot, stop
flag, deadline, open loop), errors counted as the Python loops count them,
and the record naming the client."""

from array import array
from typing import Any

import numpy as np
import pytest

from storebench.api import run
from storebench.data.batch import DocBatch
from storebench.driver import Task
from storebench.driver import native as native_loop
from storebench.driver.core import Controls
from storebench.driver.loops import address
from storebench.errors import NotSupported, TaskFailed
from storebench.stores.base import StoreSpec
from tests.conftest import make_docs
from tests.stores import servers as S

pytest.importorskip(native_loop.MODULE, reason="the native client is built by tools/setup.py")

ENGINES = [e for e in ("pgvector", "redis") if not S.skipped(e)]


@pytest.fixture(params=ENGINES)
def store(request: pytest.FixtureRequest) -> Any:
    st = StoreSpec(request.param, S.shared_url(request.param)).open()
    yield st
    st.close()


def with_flag(docs: DocBatch) -> DocBatch:
    """make_docs' int, float and string fields, and a bool."""
    fields = dict(docs.fields, flag=(docs.ids % 3 == 0))
    return DocBatch(docs.ids, fields, docs.vectors)


def ctl() -> Controls:
    return Controls(bytearray(1), array("q", [0, 0]))


def closed(
    op: Any, n: int, c: Controls, *, slot: int = 0, deadline: int = 1 << 62, start: int = 0
) -> Any:
    lat = np.zeros(n, np.int64)
    stop = address(c.stop, np.uint8)
    prog = address(c.progress, np.int64) + 8 * slot
    used, t0, err = op.closed(start, lat.ctypes.data, n, deadline, stop, prog)
    return lat, used, t0, err


def test_native_insert_writes_what_python_writes(store):
    docs = with_flag(make_docs(120))
    py = store.create_collection("sb_native_py", docs.schema())
    nat = store.create_collection("sb_native_nat", docs.schema())
    try:
        # ops: one batch of 1, pipelines of 3 batches of 4, a last odd batch
        ops = [[docs.slice(0, 1)]]
        ops += [
            [docs.slice(s + 4 * k, s + 4 * (k + 1)) for k in range(3)] for s in range(1, 109, 12)
        ]
        ops += [[docs.slice(109, 120)]]
        for batches in ops:
            if len(batches) == 1:
                py.insert(batches[0])
            else:
                py.insert_pipelined(batches)
        op = nat.native_insert(ops)
        assert len(op) == len(ops)
        c = ctl()
        lat, used, _, err = closed(op, len(ops), c)
        assert (used, err) == (len(ops), None)
        assert (lat > 0).all() and c.progress[0] == len(ops) - 1
        assert py.count() == nat.count() == 120
        a, b = py.get(docs.ids), nat.get(docs.ids)
        order_a, order_b = np.argsort(a.ids), np.argsort(b.ids)
        assert a.ids[order_a].tolist() == b.ids[order_b].tolist() == docs.ids.tolist()
        for f in docs.fields:
            assert a.fields[f][order_a].tolist() == b.fields[f][order_b].tolist(), f
            assert b.fields[f][order_b].tolist() == docs.fields[f].tolist(), f
        assert np.array_equal(a.vectors[order_a], b.vectors[order_b])
    finally:
        py.drop()
        nat.drop()


def test_native_pgvector_insert_sends_no_copy():
    """insert sends a batch of over 32 rows as a COPY: the native client
    sends only the statements the Python path sends, so it refuses."""
    store = StoreSpec("pgvector", S.shared_url("pgvector")).open()
    docs = make_docs(40)
    coll = store.create_collection("sb_native_copy", docs.schema())
    try:
        with pytest.raises(NotSupported, match="inserts of over 32 rows"):
            coll.native_insert([[docs]])
        coll.native_insert([[docs.slice(0, 20), docs.slice(20, 40)]])  # pipelined: INSERTs
    finally:
        coll.drop()
        store.close()


def test_native_search_returns_the_python_ids(store):
    docs = make_docs(400)
    coll = store.create_collection("sb_native_search", docs.schema())
    try:
        coll.insert(docs)
        assert coll.count() == 400
        queries = make_docs(20, seed=1).vectors
        want = coll.search(queries, 10).ids
        op = coll.native_search(queries, 10)
        lat, used, _, err = closed(op, 20, ctl())
        assert (used, err) == (20, None)
        ids, spans = op.results()
        got = [ids[spans[2 * j] : spans[2 * j + 1]] for j in range(20)]
        assert got == want.tolist()
        # op j sends query j mod their number: resumed at 20, the same ids again
        lat, used, _, err = closed(op, 40, ctl(), start=20)
        assert (used, err) == (40, None) and (lat[:20] == 0).all() and (lat[20:] > 0).all()
        ids, spans = op.results()
        assert ids[spans[40] : spans[79]] == ids[: spans[39]]
        # over an HNSW index at a small ef: the ids the Python search finds
        coll.build_index(store.Index(m=4, ef_construct=8))
        coll.set_search_params(store.Search(ef=4))
        want = coll.search(queries, 10).ids
        op = coll.native_search(queries, 10)
        lat, used, _, err = closed(op, 20, ctl())
        ids, spans = op.results()
        got = [ids[spans[2 * j] : spans[2 * j + 1]] for j in range(20)]
        assert [g + [-1] * (10 - len(g)) for g in got] == want.tolist()  # pgvector: ef rows
    finally:
        coll.drop()


def test_loop_contract_stop_deadline_and_open_loop(store):
    docs = make_docs(50)
    coll = store.create_collection("sb_native_loop", docs.schema())
    try:
        op = coll.native_insert([[docs.slice(j, j + 1)] for j in range(50)])
        c = ctl()
        c.stop[0] = 1  # asked to stop: the op in flight ends, then the loop
        lat, used, t0, err = closed(op, 50, c, slot=1)
        assert (used, err) == (1, None) and lat[0] > 0 and c.progress[1] == 0
        c.stop[0] = 0
        # a deadline already passed: one op, then it returns
        lat, used, _, err = closed(op, 50, c, deadline=0)
        assert (used, err) == (1, None)
        # open loop: op j due at origin + j * interval, latency from then
        lat, svc = np.zeros(50, np.int64), np.zeros(50, np.int64)
        from storebench.driver.loops import clock

        origin, interval = clock() + 1_000_000, 200_000.0
        used, _, err = op.open(
            0,
            lat.ctypes.data,
            svc.ctypes.data,
            50,
            1 << 62,
            address(c.stop, np.uint8),
            address(c.progress, np.int64),
            origin,
            interval,
        )
        assert (used, err) == (50, None)
        assert (svc > 0).all() and (lat >= svc).all()
        assert clock() >= origin + 49 * interval
        assert coll.count() == 50
    finally:
        coll.drop()


def test_failed_ops_are_counted_and_the_loop_resumes(store):
    docs = make_docs(10)
    coll = store.create_collection("sb_native_err", docs.schema())
    op = coll.native_insert([[docs.slice(j, j + 1)] for j in range(10)])
    coll.drop()  # every insert now fails (Redis: the key holds another type)
    if store.engine == "redis":
        for j in range(10):
            store.client.set(f"sb_native_err:{j}", "not a hash")
    try:
        c = ctl()
        lat, used, _, err = closed(op, 10, c)
        assert used == 0 and lat[0] == -1 and err
        task = Task("insert", lambda *a: None, ops=10, max_errors=10, client="native")
        out = native_loop.measure(task, op, 0, c, 0, 0)
        assert sum(out.errors.values()) == 10 and (out.lat == -1).all() and out.complete
        word = "WRONGTYPE" if store.engine == "redis" else "does not exist"
        assert all(word in k for k in out.errors)
        with pytest.raises(TaskFailed, match="operation 3 of client 0 failed"):
            native_loop.measure(
                Task("insert", lambda *a: None, ops=10, max_errors=3, client="native"),
                op,
                0,
                c,
                0,
                0,
            )
    finally:
        if store.engine == "redis":
            store.client.delete(*[f"sb_native_err:{j}" for j in range(10)])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("pipeline", "executor"), [(1, "threads"), (16, "processes")])
def test_ingest_native_records_its_client_and_holds_every_document(
    engine, pipeline, executor, tmp_path
):
    (rec,) = run(
        "ingest",
        [f"{engine}={S.shared_url(engine)}"],
        {
            "count": 2000,
            "concurrency": 4,
            "pipeline": pipeline,
            "batch_size": 3,
            "client": "native",
            "executor": executor,
            "grid": {},
        },
        results_dir=str(tmp_path),
    )
    assert rec["status"] == "ok", rec.get("error")
    insert = next(t for t in rec["tasks"] if t["name"] == "insert")
    assert insert["client"] == "native" and insert["complete"]
    assert insert["executor"] == executor
    assert insert["requests"] == -(-2000 // 3)
    settle = next(t for t in rec["tasks"] if t["name"] == "settle")
    assert settle["held"] == 2000


@pytest.mark.parametrize("engine", ENGINES)
def test_search_workload_native_has_the_python_recall(engine, tmp_path):
    # clustered data: the index each run builds (rows inserted by another
    # client, in another order) finds the same neighbours at these ef
    small = {"n": 1500, "dim": 16, "queries": 60, "k": 10, "batch_size": 500, "warmup": 2}
    small |= {"clients": [1, 3], "labels": [], "repeats": 1, "grid": {"search.ef": [10, 40]}}
    small |= {"data": "clustered"}
    recalls = {}
    for client in ("python", "native"):
        (rec,) = run(
            "search",
            [f"{engine}={S.shared_url(engine)}"],
            {**small, "client": client},
            results_dir=str(tmp_path / client),
        )
        assert rec["status"] == "ok", rec.get("error")
        tasks = [t for t in rec["tasks"] if t.get("phase") == "search"]
        assert tasks and all(t["client"] == client for t in tasks)
        assert all(t["queries_scored"] == 60 for t in tasks)
        recalls[client] = [t["scores"]["recall@10"] for t in tasks]
    if engine == "pgvector":
        assert recalls["native"] == recalls["python"]
    else:  # each run builds its own HNSW graph, and Redis' differs run to run
        assert np.allclose(recalls["native"], recalls["python"], atol=0.02)


def test_native_where_the_store_has_none_is_unsupported(tmp_path):
    (rec,) = run(
        "ingest",
        ["sqlite"],
        {"count": 100, "client": "native", "grid": {}},
        results_dir=str(tmp_path),
    )
    (insert,) = [t for t in rec["tasks"] if t["name"] == "insert"]
    assert insert["unsupported"] == "the native client for insert is not supported by sqlite"
    store = StoreSpec("memory").open()
    coll = store.create_collection("c", make_docs(1).schema())
    assert native_loop.resolve("auto", coll, "insert") == "python"
    with pytest.raises(NotSupported, match="native client for search is not supported by memory"):
        native_loop.resolve("native", coll, "search")
