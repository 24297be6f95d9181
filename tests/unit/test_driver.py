"""The driver's measurements against stores whose latency is known."""

import time

import numpy as np
import pytest

from storebench.data.batch import DocBatch, Schema
from storebench.driver import Driver, FnOp, Task, loops
from storebench.driver.core import ClientResult, Controls, merge
from storebench.driver.measure import Measurement
from storebench.errors import TaskFailed
from storebench.measure.metrics import Histogram
from storebench.stores.base import StoreSpec

clock = time.perf_counter_ns


def busy_wait(ns: int) -> None:
    end = clock() + ns
    while clock() < end:
        pass


class KnownLatency:
    """200 us per op, 2 ms on every 50th (so p99 is 2 ms), on ``clock``."""

    def __init__(self, clock=None):
        self.clock = clock

    def __call__(self, coll, c, clients):
        spend = self.clock.spend if self.clock is not None else busy_wait
        return FnOp(lambda i: spend(2_000_000 if i % 50 == 49 else 200_000))


class StallOnce:
    """10 us per op; op 300 stalls 200 ms."""

    def __call__(self, coll, c, clients):
        return FnOp(lambda i: busy_wait(200_000_000 if i == 300 else 10_000))


class FailEvery:
    def __init__(self, every):
        self.every = every

    def __call__(self, coll, c, clients):
        def op(i):
            if i % self.every == self.every - 1:
                raise ConnectionError("server went away")

        return FnOp(op)


class Items:
    def __call__(self, coll, c, clients):
        return FnOp(lambda i: None)


@pytest.fixture
def coll():
    store = StoreSpec("null").open()
    return store.create_collection("x", Schema())


def test_reported_percentiles_match_a_known_latency_distribution(coll, virtual_clock):
    stats, _ = Driver().run(
        Task("known", KnownLatency(virtual_clock), ops=2_000, warmup_ops=20), coll
    )
    assert stats.ops == 2_000
    # the histogram keeps 3 significant figures
    assert stats.latency.percentile(50) == pytest.approx(200_000, rel=1e-3)
    assert stats.latency.percentile(99) == pytest.approx(2_000_000, rel=1e-3)
    # throughput is counted ops over wall time: 40 ops of 2 ms + 1960 of 0.2 ms
    assert stats.ops_per_s == pytest.approx(2_000 / 0.472, rel=1e-6)


@pytest.fixture(params=["compiled", "python"])
def closed_loop(request, monkeypatch):
    """loops.closed as the compiled module runs it, and as Python does."""
    if request.param == "compiled":
        if loops.compiled is None:
            pytest.skip("the compiled module is not installed (tools/setup.py builds it)")
    else:
        monkeypatch.setattr(loops, "compiled", None)
    return loops.closed


class Recorded:
    """Op i's start and end on the driver's clock; raises at ``raise_at``,
    sets the stop flag at ``stop_at``."""

    def __init__(self, ctl, raise_at=None, stop_at=None):
        self.ctl, self.raise_at, self.stop_at = ctl, raise_at, stop_at
        self.seen, self.starts, self.ends = [], [], []

    def __call__(self, i):
        self.starts.append(clock())
        self.seen.append(i)
        if i == self.raise_at:
            raise ConnectionError("gone")
        if i == self.stop_at:
            self.ctl.stop[0] = 1
        self.ends.append(clock())


def measurement(ops, clients=3, c=1, slot=2):
    ctl = Controls.local(4)
    task = Task("t", Items(), ops=ops * clients, clients=clients)
    return Measurement(task, c, ctl, clock(), slot), ctl


def test_the_closed_loop_times_each_op_from_the_end_of_the_one_before(closed_loop):
    m, ctl = measurement(50)
    op = Recorded(ctl)
    assert closed_loop(op, m) == 50
    assert op.seen == list(range(1, 150, 3))  # client 1 of 3: ops 1, 4, 7, ...
    assert ctl.progress[2] == 49
    ((start, t0),) = m.marks
    assert start == 0 and t0 <= op.starts[0]
    lat = m.lat
    prev_end = np.array([t0] + op.ends[:-1])  # each slot runs from the time after the op before
    next_start = np.array(op.starts[1:] + [clock()])
    assert (lat > np.array(op.ends) - np.array(op.starts)).all()  # holds the op itself
    assert (lat < next_start - prev_end).all()  # ends before the next op starts
    ends = loops.closed_ends(lat, m.marks)
    assert (ends >= np.array(op.ends)).all() and (ends[:-1] <= next_start[:-1]).all()


def test_the_closed_loop_stops_at_the_flag_and_leaves_a_raising_op_unwritten(closed_loop):
    m, ctl = measurement(50)
    op = Recorded(ctl, stop_at=1 + 3 * 5)
    assert closed_loop(op, m) == 6  # the op that saw the stop counts
    m, ctl = measurement(50)
    op = Recorded(ctl, raise_at=1 + 3 * 4)
    with pytest.raises(ConnectionError):
        closed_loop(op, m)
    assert ctl.progress[2] == 4  # the op in flight, for Measurement.fail
    assert (m.lat[:4] > 0).all() and (m.lat[4:] == 0).all()
    m.used = 5
    assert closed_loop(Recorded(ctl), m) == 50  # the next call goes on after it
    assert [s for s, _ in m.marks] == [0, 5] and (m.lat[5:] > 0).all()


def test_four_clients_merge_into_one_histogram_of_all_their_samples(coll):
    stats, _ = Driver().run(
        Task("known", KnownLatency(), clients=4, ops=400, executor="processes"), coll
    )
    assert stats.ops == 400 and stats.latency.count == 400
    assert stats.clients == 4


def test_thread_clients_share_the_process_cpu_not_count_it_once_each(coll):
    # 4 thread clients busy-waiting: the task's client CPU is the process's
    # over the window (at most what it spent in all), not four times it
    cpu0 = time.process_time()
    stats, _ = Driver().run(
        Task("busy", KnownLatency(), clients=4, ops=1_000, executor="threads"), coll
    )
    spent = time.process_time() - cpu0
    assert 0.1 < stats.cpu_s <= spent * 1.05, (stats.cpu_s, spent)


def test_merge_of_client_results_equals_the_union_of_samples():
    rng = np.random.default_rng(0)
    samples = [rng.integers(1_000, 5_000_000, 3_000 + 100 * c) for c in range(4)]
    results = []
    for c, s in enumerate(samples):
        h = Histogram()
        h.record(s)
        results.append(ClientResult(h, None, len(s), {}, {}, 100 * c, 10**9 + c, 0.0, True))
    stats = merge(Task("t", Items(), clients=4, ops=1), results)
    union = Histogram()
    union.record(np.concatenate(samples))
    assert stats.latency.summary() == union.summary()
    assert stats.elapsed_ns == 10**9 + 3  # first start to last end


def test_open_loop_counts_queueing_behind_a_stall_and_closed_loop_does_not(coll):
    closed, _ = Driver().run(Task("closed", StallOnce(), ops=1_000), coll)
    opened, _ = Driver().run(Task("open", StallOnce(), ops=1_000, rate=1_000), coll)
    # closed loop: one slow op among 1000; p99 stays at the service time
    assert closed.latency.percentile(99) < 1_000_000
    assert closed.latency.hdr.max_value >= 200_000_000
    # open loop: the ~200 ops due during the stall waited for it
    assert opened.latency.percentile(99) > 100_000_000
    assert opened.latency.percentile(80) > 1_000_000
    assert opened.service is not None and opened.service.percentile(99) < 1_000_000
    # and it kept the schedule: never ahead of it (1000 ops at 1000/s take at
    # least a second), and not far behind (a busy machine may add some)
    assert 0.99e9 <= opened.elapsed_ns < 3e9


def test_duration_mode_runs_until_the_deadline(coll):
    stats, _ = Driver().run(Task("dur", Items(), duration_s=0.3, clients=2), coll)
    # each client stops at its first op past the deadline (late on a busy machine)
    assert 0.3e9 <= stats.elapsed_ns < 2.3e9
    assert stats.ops > 10_000


def test_think_time_is_not_latency_and_offsets_shift_clients(coll):
    stats, _ = Driver().run(
        Task("think", Items(), ops=20, clients=2, think_s=0.01, client_offset_s=0.05), coll
    )
    assert stats.latency.percentile(99) < 5_000_000  # half the think time: none of it counted
    assert stats.elapsed_ns >= 0.05e9 + 9 * 0.01e9


def test_failed_ops_are_counted_by_kind_and_fail_the_task_past_the_limit(coll):
    stats, _ = Driver().run(Task("errs", FailEvery(10), ops=100, max_errors=20), coll)
    assert stats.ops == 90
    assert sum(stats.errors.values()) == 10
    assert "ConnectionError: server went away" in stats.errors
    with pytest.raises(TaskFailed, match="server went away"):
        Driver().run(Task("errs", FailEvery(10), ops=100), coll)


def test_items_per_op_scales_item_throughput(coll):
    stats, _ = Driver().run(Task("batch", Items(), ops=100, items_per_op=50), coll)
    assert stats.items == 5_000
    assert stats.items_per_s == pytest.approx(stats.ops_per_s * 50)


def test_processes_refused_for_a_store_that_lives_in_one_process():
    store = StoreSpec("memory").open()
    coll = store.create_collection("m", DocBatch(np.arange(3, dtype=np.int64)).schema())
    with pytest.raises(Exception, match="processes clients"):
        Driver().run(Task("p", Items(), ops=1, executor="processes"), coll)


class Writer:
    """Appends to a shared list (threads share it); the readers wait for data."""

    def __init__(self, box):
        self.box = box

    def __call__(self, coll, c, clients):
        return FnOp(lambda i: self.box.append(i))


class Reader:
    def __init__(self, box):
        self.box = box

    def __call__(self, coll, c, clients):
        from storebench.errors import NotCounted

        def op(i):
            if not self.box:
                raise NotCounted("no data yet")

        return FnOp(op)


def test_tasks_run_together_and_empty_reads_are_skipped_not_counted(coll):
    box = []
    writers = Task("write", Writer(box), clients=2, ops=20, think_s=0.005)
    readers = Task("read", Reader(box), clients=3, ops=300, think_per_client=(0.0, 0.001, 0.002))
    (w, _), (r, _) = Driver().run_mix([writers, readers], coll)
    assert w.ops == 20 and w.clients == 2 and len(box) == 20
    assert r.clients == 3
    assert r.ops + sum(r.skipped.values()) == 300
    assert r.errors == {}
    # writers pause 5 ms between writes and started with the readers, so the
    # reader with no pause saw an empty box at least once
    assert r.skipped.get("no data yet", 0) >= 1
    assert r.latency.count == r.ops


class FailsToOpen:
    """An op factory whose client 1 fails while setting up (opening its
    collection, say), before the clients meet at the start."""

    def __call__(self, coll, c, clients):
        if c == 1:
            raise LookupError("no collection named 'posts'")
        return FnOp(lambda i: None)


@pytest.mark.parametrize("executor", ["threads", "processes", "async"])
def test_a_client_failing_in_setup_is_reported_not_the_clients_it_aborted(coll, executor):
    # the failing task comes last: every client of the tasks before it is
    # only aborted by the failure, and must not be what the run reports
    tasks = [
        Task("write", Items(), clients=2, ops=10, executor=executor),
        Task("read", Items(), clients=2, ops=10, executor=executor),
        Task("read_comments", FailsToOpen(), clients=3, ops=10, executor=executor),
    ]
    with pytest.raises(TaskFailed) as failed:
        Driver().run_mix(tasks, coll)
    msg = str(failed.value)
    assert msg.startswith(
        "task read_comments: client 1: LookupError: no collection named 'posts'"
    ), msg
    assert "6 other client(s) aborted because of it" in msg


def test_a_phase_timed_from_a_task_end_counts_what_came_between():
    """Driver.once(since_ns=stats.end_ns): elapsed runs from the task's last
    end, so time spent between the task and the call is not lost; the call
    alone is call_s. A since_ns from a clock ahead of ours is ignored."""
    coll = StoreSpec("null").open().create_collection("x", Schema())
    driver = Driver()
    stats, _ = driver.run(Task("t", KnownLatency(), clients=2, ops=20), coll)
    assert stats.end_ns is not None
    time.sleep(0.05)  # bookkeeping between the task and the phase
    phase, out = driver.once("wait", lambda: busy_wait(10_000_000) or 7, since_ns=stats.end_ns)
    assert out == 7
    assert 0.01 <= phase.extra["call_s"] < 0.05
    assert phase.elapsed_ns / 1e9 >= 0.06
    ahead, _ = driver.once("x", lambda: None, since_ns=clock() + 10**12)
    assert ahead.elapsed_ns < 10**9  # timed from the call
