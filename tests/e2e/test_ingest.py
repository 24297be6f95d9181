"""The ingest scenario: every document lands once, whatever the split
(clients, batches, in-flight lanes, pipelines), on sqlite and on the real
Redis and PostgreSQL the test fixtures start; a pipeline on a store without
one is reported unsupported; the settle wait is counted by default and not in
compat mode."""

import threading
import time

import numpy as np
import pytest

import storebench
from storebench.driver import Driver
from storebench.errors import TaskFailed
from storebench.stores.base import Capability, StoreSpec
from storebench.stores.reference.memory import MemoryCollection, MemoryStore
from storebench.workloads.base import RunContext
from storebench.workloads.ingest import IngestParams, IngestWorkload


@pytest.mark.parametrize("clients, batch, inflight", [(1, 1, 1), (3, 7, 1), (2, 4, 3)])
def test_ingest_inserts_every_document_once(tmp_path, clients, batch, inflight):
    sets = {
        "count": 1000,
        "concurrency": clients,
        "batch_size": batch,
        "inflight": inflight,
        "complexity": 3,
    }
    recs = storebench.run("ingest", stores=["memory", "sqlite"], set=sets, results_dir=tmp_path)
    assert len(recs) == 2  # values set for gridded parameters replace their axes
    for rec in recs:
        assert rec["status"] == "ok", rec["error"]
        task, settle = rec["tasks"]
        assert task["name"] == "insert" and settle["name"] == "settle"
        assert settle["held"] == 1000 and settle["counted"] is True
        p = rec["params"]
        assert task["ops"] == -(-1000 // p["batch_size"])
        assert (p["concurrency"], p["batch_size"], p["inflight"]) == (clients, batch, inflight)
        assert task["items"] >= 1000 and task["clients"] == clients
        assert rec["metrics"]["docs_per_s"] > 0


def test_in_flight_requests_run_as_lanes_per_client(tmp_path):
    from storebench.data.batch import Schema
    from storebench.driver import Driver, FnOp, Task
    from storebench.stores.base import StoreSpec

    seen = []

    class Record:
        def __call__(self, coll, lane, lanes):
            seen.append((lane, lanes))
            return FnOp(lambda i: None)

    coll = StoreSpec("null").open().create_collection("x", Schema())
    stats, _ = Driver().run(Task("t", Record(), clients=2, inflight=3, ops=60), coll)
    assert sorted(seen) == [(lane, 6) for lane in range(6)]
    assert stats.ops == 60 and stats.clients == 2 and stats.extra["inflight"] == 3


# --- every document once, on real engines ------------------------------------------


def _ingest(store, mode: str = "default", **params) -> RunContext:
    """One ingest run through the workload, its collection kept for checks
    (the runner would drop it); the caller drops it and closes the store."""
    ctx = RunContext("test-ingest-" + str(time.monotonic_ns()), store, Driver(), mode)
    IngestWorkload().run(ctx, IngestParams(**params))
    return ctx


def _check_every_document_once(ctx: RunContext, n: int, complexity: int) -> None:
    (coll,) = ctx.collections
    assert coll.count() == n
    got = coll.get(np.arange(n + 5, dtype=np.int64))  # 5 ids never inserted
    assert sorted(got.ids.tolist()) == list(range(n))  # each id once, none extra
    assert set(got.fields) == {f"test{j + 1}" for j in range(complexity)}
    assert set(got.fields["test1"].tolist()) == {"some test value"}


def _spec(engine: str) -> StoreSpec:
    from tests.stores.servers import shared_url

    return StoreSpec(engine, shared_url(engine))


@pytest.mark.parametrize("engine", ["redis", "pgvector"])
@pytest.mark.parametrize(
    "pipeline, inflight, batch",
    [(1, 1, 1), (1, 2, 7), (3, 1, 1), (3, 2, 7), (16, 2, 1), (4, 1, 128)],
)
def test_pipelined_and_in_flight_inserts_land_every_document_once(
    engine, pipeline, inflight, batch
):
    store = _spec(engine).open()
    try:
        assert store.supports(Capability.PIPELINE)
        n = 701  # no split comes out even
        params = {"count": n, "concurrency": 2, "batch_size": batch, "inflight": inflight}
        ctx = _ingest(store, pipeline=pipeline, complexity=3, **params)
        try:
            insert, settle = ctx.tasks
            requests = -(-n // batch)
            assert insert.ops == -(-requests // pipeline)  # one op: one pipeline
            assert insert.requests == requests and insert.pipeline == pipeline
            assert insert.latency_per == ("pipeline" if pipeline > 1 else "request")
            assert insert.docs_per_s > 0 and insert.requests_per_s > 0
            assert settle.held == n and ctx.metrics["counted"] == "completed"
            assert insert.executor == "threads"  # ingest's auto: the store's choice
            _check_every_document_once(ctx, n, 3)
        finally:
            for c in ctx.collections:
                c.drop()
    finally:
        store.close()


@pytest.mark.parametrize("inflight, batch", [(1, 1), (3, 7)])
def test_sqlite_lands_every_document_once(tmp_path, inflight, batch):
    store = StoreSpec("sqlite", str(tmp_path / "ingest.db")).open()
    try:
        params = {"count": 500, "concurrency": 2, "batch_size": batch, "inflight": inflight}
        ctx = _ingest(store, complexity=2, **params)
        _check_every_document_once(ctx, 500, 2)
    finally:
        store.close()


def test_the_shared_executor_rule():
    """choose_executor: as asked; auto:
    processes for several lanes where the store serves them and the run
    chose no executor, unless the workload opts out (ingest does:
    AUTO_PROCESSES); else the run's executor, else the store's client_mode.
    The plan, the runner, the driver and the records decide alike."""
    from storebench.driver import FnOp, Task
    from storebench.driver.choice import choose_executor
    from storebench.workloads import ingest

    procs, mem = StoreSpec("null").open(), StoreSpec("memory").open()
    assert procs.client_mode == mem.client_mode == "threads"
    ctx = RunContext("r", procs, Driver())
    assert choose_executor(procs, None, "auto", 2) == "processes"
    assert choose_executor(procs, None, "auto", 1) == "threads"  # one lane: the store's choice
    # ingest opts out (the plan asks the workload as the run does)
    assert (
        ingest.IngestWorkload.executor(ingest.IngestParams(concurrency=8), procs, None) == "threads"
    )
    assert choose_executor(procs, None, "threads", 8) == "threads"
    assert choose_executor(procs, None, "processes", 1) == "processes"
    assert choose_executor(procs, "ray", "auto", 8) == "ray"
    assert choose_executor(mem, None, "auto", 8) == "threads"  # threads only
    assert ingest.AUTO_PROCESSES is False
    # a run's executor (plan and runner: no task), a task's own choice (driver, records)
    assert choose_executor(type(procs), None) == "threads"
    assert choose_executor(procs, "ray") == "ray"
    assert choose_executor(procs, "ray", "threads", 8) == "threads"
    assert choose_executor(procs, None, None, 8) == "threads"  # no choice is not auto

    def task(executor: str | None) -> Task:
        noop = FnOp(lambda i: None)
        return Task("t", lambda coll, c, n: noop, clients=2, ops=2, executor=executor)

    assert ctx.executor_name(task(None)) == "threads"
    assert ctx.executor_name(task("auto")) == "processes"
    assert RunContext("r", procs, Driver(executor="ray")).executor_name(task(None)) == "ray"


@pytest.mark.parametrize(
    "clients, inflight, executor, want",
    [
        (3, 1, "processes", "processes"),  # as asked
        (1, 2, "processes", "processes"),  # the lanes of one client, each a process
        (3, 1, "auto", "threads"),  # ingest's auto: the store's choice
        (3, 2, "threads", "threads"),
    ],
)
def test_clients_run_where_asked_and_every_document_lands_once(
    tmp_path, clients, inflight, executor, want
):
    """Process clients rebuild their own batches (the op factory pickles);
    every document lands once. The record names the executor and the client
    CPU beside the wall time."""
    store = StoreSpec("sqlite", str(tmp_path / "ingest.db")).open()
    try:
        params = {"count": 601, "concurrency": clients, "inflight": inflight, "batch_size": 4}
        ctx = _ingest(store, complexity=2, executor=executor, **params)
        insert = ctx.tasks[0]
        assert insert.executor == want
        assert insert.client_cpu_per_s >= 0 and insert.client_saturated is not None
        _check_every_document_once(ctx, 601, 2)
    finally:
        store.close()


@pytest.mark.parametrize("engine", ["redis", "pgvector"])
@pytest.mark.parametrize("pipeline, inflight, batch", [(1, 1, 1), (3, 2, 7)])
def test_process_clients_land_every_document_once(engine, pipeline, inflight, batch):
    store = _spec(engine).open()
    try:
        params = {"count": 701, "concurrency": 2, "batch_size": batch, "inflight": inflight}
        ctx = _ingest(store, pipeline=pipeline, complexity=3, executor="processes", **params)
        try:
            assert ctx.tasks[0].executor == "processes"
            _check_every_document_once(ctx, 701, 3)
        finally:
            for c in ctx.collections:
                c.drop()
    finally:
        store.close()


def test_a_driver_executor_overrides_auto(tmp_path):
    store = StoreSpec("sqlite", str(tmp_path / "ingest.db")).open()
    try:
        ctx = RunContext("test-ingest-driver", store, Driver(executor="threads"))
        IngestWorkload().run(ctx, IngestParams(count=50, concurrency=4, complexity=1))
        assert ctx.tasks[0].executor == "threads"
        _check_every_document_once(ctx, 50, 1)
    finally:
        store.close()


def test_a_pipeline_on_a_store_without_one_is_reported_unsupported(tmp_path):
    (rec,) = storebench.run(
        "ingest",
        stores=["sqlite"],
        set={"count": 100, "pipeline": 4, "grid": {}},
        results_dir=tmp_path,
    )
    # not inserted one by one instead: no insert ran at all
    assert rec["status"] == "ok", rec["error"]
    assert rec["tasks"] == [
        {"name": "insert", "unsupported": "pipeline is not supported by sqlite"}
    ]
    assert "docs_per_s" not in rec["metrics"]


# --- settle: counted by default, not in compat --------------------------------------


class _LaggingCollection(MemoryCollection):
    """Acknowledges inserts at once, holds them ``lag_s`` later (as an engine
    that applies writes after answering): a test double for the workload's
    accounting, not an adapter."""

    lag_s = 0.15

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._pending: list[tuple[float, int]] = []
        self._plock = threading.Lock()

    def insert(self, docs):
        super().insert(docs)
        with self._plock:
            self._pending.append((time.monotonic() + self.lag_s, len(docs)))

    def count(self) -> int:
        now = time.monotonic()
        with self._plock:
            unseen = sum(n for t, n in self._pending if t > now)
        return super().count() - unseen


class _LaggingStore(MemoryStore):
    def _create(self, name, schema, index):
        coll = _LaggingCollection(self, name, schema)
        self._collections[name] = coll
        return coll


@pytest.mark.parametrize("mode", ["default", "compat"])
def test_settle_is_counted_by_default_and_not_in_compat(mode):
    store = _LaggingStore(StoreSpec("memory"))
    ctx = _ingest(store, mode, count=2000, concurrency=2, batch_size=10, complexity=2)
    insert, settle = ctx.tasks
    m = ctx.metrics
    # the engine held everything only about lag_s after the last acknowledgment
    assert settle.held == 2000 and settle.polls > 1
    assert settle.timed_from == "last acknowledgment"
    assert 0.1 < settle.elapsed_s < 5 and settle.call_s <= settle.elapsed_s
    assert m["settle_s"] == settle.elapsed_s
    if mode == "default":
        assert m["counted"] == "completed" and settle.counted is True
        assert m["elapsed_s"] == pytest.approx(insert.elapsed_s + settle.elapsed_s)
    else:  # arangob: the clock stops at the last acknowledgment
        assert m["counted"] == "acknowledged" and settle.counted is False
        assert m["elapsed_s"] == insert.elapsed_s and "compat" in m["method"]
    assert m["docs_per_s"] == pytest.approx(2000 / m["elapsed_s"])
    assert m["requests_per_s"] == pytest.approx(200 / m["elapsed_s"])


def test_an_engine_that_never_settles_fails_the_count_check_in_time():
    store = _LaggingStore(StoreSpec("memory"))

    class Never(_LaggingCollection):
        lag_s = 60.0

    store._create = lambda name, schema, index: store._collections.setdefault(
        name, Never(store, name, schema)
    )
    ctx = RunContext("test-ingest-never", store, Driver())
    t0 = time.monotonic()
    with pytest.raises(TaskFailed, match="holds 0 of 300 documents"):
        IngestWorkload().run(ctx, IngestParams(count=300, complexity=1, settle_timeout_s=0.2))
    assert time.monotonic() - t0 < 10
    assert ctx.tasks[-1].name == "settle" and ctx.tasks[-1].held == 0
