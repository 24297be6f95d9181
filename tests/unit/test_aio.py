"""The ``async`` executor (``driver/aio.py``) and the async timed loops:
known latencies through coroutine ops and sync ops run inline, the closed,
thinking and open loops with their per-interval series, many clients on a
few OS threads, clients in worker processes, failures and stops."""

import asyncio
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from storebench.common import interrupts
from storebench.data.batch import Schema
from storebench.driver import Driver, FnOp, Interrupted, Op, Task, loops
from storebench.driver.aio import AsyncExecutor, loop_name, workers_for
from storebench.driver.choice import choose_executor
from storebench.errors import NotCounted, NotSupported, TaskFailed
from storebench.run.progress import NoProgress
from storebench.stores.base import StoreSpec

clock = time.perf_counter_ns


@pytest.fixture
def coll():
    store = StoreSpec("null").open()
    return store.create_collection("x", Schema())


@pytest.fixture
def workers():
    """Set ``driver.workers`` for a test; restored after."""
    old = AsyncExecutor.workers

    def set_(w):
        AsyncExecutor.workers = w

    yield set_
    AsyncExecutor.workers = old


class KnownAsync(Op):
    """A coroutine op: 200 us, 2 ms on every 50th, on the virtual clock,
    each op giving the loop a turn (as a network wait does)."""

    def __init__(self, vc):
        self.vc = vc

    def __call__(self, i):
        raise AssertionError("an async client calls acall")

    async def acall(self, i):
        await asyncio.sleep(0)
        self.vc.spend(2_000_000 if i % 50 == 49 else 200_000)


class KnownAsyncFactory:
    def __init__(self, vc):
        self.vc = vc

    def __call__(self, coll, c, clients):
        return KnownAsync(self.vc)


def test_a_coroutine_op_s_known_latency_is_what_the_loop_measures(coll, virtual_clock):
    stats, _ = Driver().run(
        Task("known", KnownAsyncFactory(virtual_clock), ops=2_000, warmup_ops=20, executor="async"),
        coll,
    )
    assert stats.ops == 2_000
    assert stats.latency.percentile(50) == pytest.approx(200_000, rel=1e-3)
    assert stats.latency.percentile(99) == pytest.approx(2_000_000, rel=1e-3)
    assert stats.ops_per_s == pytest.approx(2_000 / 0.472, rel=1e-6)
    assert stats.series is not None and stats.series.ops().sum() == 2_000


def test_a_sync_op_runs_inline_with_its_known_latency(coll, virtual_clock):
    def factory(coll, c, clients):
        return FnOp(lambda i: virtual_clock.spend(2_000_000 if i % 50 == 49 else 200_000))

    stats, _ = Driver().run(Task("inline", factory, ops=2_000, executor="async"), coll)
    assert stats.latency.percentile(50) == pytest.approx(200_000, rel=1e-3)
    assert stats.latency.percentile(99) == pytest.approx(2_000_000, rel=1e-3)
    assert stats.ops_per_s == pytest.approx(2_000 / 0.472, rel=1e-6)


class Sleeps(Op):
    """An I/O-bound op of known latency on the real clock: 2 ms of waiting."""

    def __call__(self, i):
        time.sleep(0.002)

    async def acall(self, i):
        await asyncio.sleep(0.002)


def sleeps(coll, c, clients):
    return Sleeps()


def test_waiting_clients_overlap_on_one_loop(coll):
    # 20 clients x 10 ops of 2 ms waits: one after another, the ops' latencies
    # would add up to the run's time; as coroutines they wait together, so
    # the sum is many times it (about 20; a loaded machine stretches both)
    stats, _ = Driver().run(Task("io", sleeps, clients=20, ops=200, executor="async"), coll)
    assert stats.ops == 200
    assert stats.latency.percentile(50) >= 2_000_000
    assert stats.latency.sum_ns > 5 * stats.elapsed_ns


def test_many_pausing_clients_hold_a_few_os_threads(coll):
    task = Task(
        "social-like", sleeps, clients=200, ops=6_000, think_s=0.01, client_offset_s=0.00005
    )
    # the threads this test process holds already (earlier tests' leftovers:
    # the count is the process's)
    before = psutil.Process().num_threads()
    stats, _ = Driver(executor="async").run(task, coll)
    assert stats.ops == 6_000 and stats.complete
    # the loop's, a sampler, a few helpers
    assert stats.extra["client_threads"] - before <= 5
    assert stats.extra["client_loop"] == {"loop": loop_name(), "workers": 0}
    threads, _ = Driver(executor="threads").run(task, coll)
    assert threads.extra["client_threads"] >= 150  # a thread each (sampled: most at once)


def test_think_time_and_offsets_are_not_latency(coll):
    def factory(coll, c, clients):
        return FnOp(lambda i: None)

    stats, _ = Driver().run(
        Task(
            "think",
            factory,
            ops=20,
            clients=2,
            think_s=0.01,
            client_offset_s=0.05,
            executor="async",
        ),
        coll,
    )
    assert stats.latency.percentile(99) < 1_000_000
    assert stats.elapsed_ns >= 0.05e9 + 9 * 0.01e9


def test_open_loop_keeps_its_schedule_and_counts_queueing(coll):
    class StallOnce(Op):
        def __call__(self, i):
            raise AssertionError

        async def acall(self, i):
            await asyncio.sleep(0.2 if i == 300 else 0)

    stats, _ = Driver().run(
        Task("open", lambda c, k, n: StallOnce(), ops=1_000, rate=1_000, executor="async"), coll
    )
    assert stats.latency.percentile(99) > 100_000_000  # ops due during the stall waited
    assert stats.service is not None and stats.service.percentile(50) < 1_000_000
    assert 0.99e9 <= stats.elapsed_ns < 3e9
    assert stats.series is not None and stats.series.ops().sum() == stats.ops


def test_the_closed_loop_series_holds_across_its_turns(coll):
    # a sync op inline: every YIELD_EVERY ops the loop gets a turn, a new mark
    def factory(coll, c, clients):
        return FnOp(lambda i: None)

    stats, _ = Driver(interval_s=0.1).run(
        Task("closed", factory, duration_s=0.35, clients=3, executor="async"), coll
    )
    assert stats.series.ops().sum() == stats.ops > 1_000
    # every op in its interval; the window may end just past the last op's interval
    intervals = -(-stats.elapsed_ns // 100_000_000)
    assert intervals - 1 <= len(stats.series) <= intervals


def test_loops_end_times_with_marks():
    lat = np.array([5, 5, -1, 5, 5], np.int64)
    ends = loops.closed_ends(lat, [(0, 100), (2, 200), (4, 300)])
    assert list(ends) == [105, 110, 200, 205, 305]


def test_failed_and_uncounted_ops(coll):
    class Flaky(Op):
        def __call__(self, i):
            raise AssertionError

        async def acall(self, i):
            if i % 10 == 9:
                raise ConnectionError("server went away")
            if i % 10 == 8:
                raise NotCounted("nothing yet")

    stats, _ = Driver().run(
        Task("errs", lambda c, k, n: Flaky(), ops=100, max_errors=20, executor="async"), coll
    )
    assert stats.ops == 80
    assert stats.errors == {"ConnectionError: server went away": 10}
    assert stats.skipped == {"nothing yet": 10}
    with pytest.raises(TaskFailed, match="server went away"):
        Driver().run(Task("errs", lambda c, k, n: Flaky(), ops=100, executor="async"), coll)


class FailsToOpen:
    def __call__(self, coll, c, clients):
        if c == 1:
            raise LookupError("no collection named 'posts'")
        return FnOp(lambda i: None)


class Items:
    def __call__(self, coll, c, clients):
        return FnOp(lambda i: None)


@pytest.mark.parametrize("w", [0, 2])
def test_a_client_failing_in_setup_is_reported_not_the_clients_it_aborted(coll, w, workers):
    workers(w)
    tasks = [
        Task("write", Items(), clients=2, ops=10, executor="async"),
        Task("read", Items(), clients=2, ops=10, executor="async"),
        Task("read_comments", FailsToOpen(), clients=3, ops=10, executor="async"),
    ]
    with pytest.raises(TaskFailed) as failed:
        Driver().run_mix(tasks, coll)
    msg = str(failed.value)
    assert msg.startswith("task read_comments: client 1: LookupError: no collection named"), msg
    assert "6 other client(s) aborted because of it" in msg


def test_clients_in_worker_processes_merge_like_the_others(coll, workers):
    workers(2)
    stats, _ = Driver().run(
        Task("io", sleeps, clients=6, ops=120, think_s=0.001, executor="async"), coll
    )
    assert stats.ops == 120 and stats.clients == 6 and stats.complete
    assert stats.latency.count == 120 and stats.latency.percentile(50) >= 2_000_000
    # each worker reports its own CPU once, not once per client
    assert stats.cpu_s < 3.0


def test_a_store_in_one_process_keeps_its_clients_there(workers):
    store = StoreSpec("memory").open()
    assert workers_for(store, None) == 0
    with pytest.raises(NotSupported):
        workers_for(store, 2)


def test_auto_picks_the_loop_for_many_pausing_clients_where_the_store_allows():
    memory = StoreSpec("memory").open()
    assert choose_executor(memory, None, "auto", 221, thinking=True) == "async"
    assert choose_executor(memory, None, "auto", 221) == "threads"  # no pauses: as before
    assert choose_executor(memory, "threads", "auto", 221, thinking=True) == "threads"

    class Remote(type(memory)):
        async_ops = None  # sync calls that wait on a server

    assert choose_executor(Remote, None, "auto", 221, thinking=True) == "threads"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_stop_mid_task_returns_what_was_measured(coll, sig):
    task = Task("t", sleeps, clients=50, duration_s=60, think_s=0.001)
    main = threading.main_thread().ident

    def interrupt_soon():
        time.sleep(1.0)
        signal.pthread_kill(main, sig)

    threading.Thread(target=interrupt_soon, daemon=True).start()
    t0 = time.monotonic()
    with interrupts.handled(), pytest.raises(Interrupted) as stopped:
        AsyncExecutor(coll.store).run([task], coll, NoProgress())
    assert time.monotonic() - t0 < 10
    (partial,) = stopped.value.partial
    assert partial.ops > 0 and not partial.complete
    assert not [t for t in threading.enumerate() if t.name == "async-clients"]
