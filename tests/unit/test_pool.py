"""Process clients kept for a run (``ProcessExecutor``'s pool): the same
processes serve every task, a new collection is opened in them, they end
with the run, on an interrupt and on a failure; and the floor on an ops
task's measured window (``Task.min_duration_s``)."""

import os
import signal
import threading
import time

import psutil
import pytest

from storebench.common import interrupts
from storebench.data.batch import Schema
from storebench.driver import Driver, FnOp, Interrupted, Task
from storebench.errors import TaskFailed
from storebench.results.records import TaskRecord
from storebench.stores.base import StoreSpec


class Pids:
    """Each client's payload: its process id and the collection it was given."""

    def __call__(self, coll, c, clients):
        return FnOp(lambda i: None, finish=lambda: (os.getpid(), coll.name))


class Sleeps:
    """1 ms per op."""

    def __call__(self, coll, c, clients):
        return FnOp(lambda i: time.sleep(0.001))


class FailsInSetup:
    def __call__(self, coll, c, clients):
        if c == 1:
            raise LookupError("no such collection")
        return FnOp(lambda i: None)


def live_children(before):
    """This process's live children not in ``before`` (the suite's managed
    servers are children too)."""
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before
        and p.is_running()
        and p.status() != psutil.STATUS_ZOMBIE
        and "resource_tracker" not in " ".join(p.cmdline())
    ]


def children():
    return frozenset(p.pid for p in psutil.Process().children(recursive=True))


@pytest.fixture
def store():
    return StoreSpec("null").open()


def test_the_clients_of_a_run_serve_every_task_and_end_with_it(store):
    before = children()
    coll = store.create_collection("x", Schema())
    driver = Driver(executor="processes")
    _, first = driver.run(Task("a", Pids(), clients=2, ops=10), coll)
    _, again = driver.run(Task("b", Pids(), clients=2, ops=10), coll)
    _, more = driver.run(Task("c", Pids(), clients=4, ops=20), coll)
    pids = [pid for pid, _ in first]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert again == first  # the same two processes
    assert [pid for pid, _ in more[:2]] == pids and len({pid for pid, _ in more}) == 4
    other = store.create_collection("y", Schema())
    _, moved = driver.run(Task("d", Pids(), clients=2, ops=10), other)
    assert moved == [(pid, "y") for pid in pids]  # opened there, in the same processes
    assert {pid for pid, _ in more} <= {p.pid for p in live_children(before)}
    driver.close()
    assert not live_children(before)


def test_a_signal_mid_task_keeps_what_was_measured_and_ends_the_clients(store):
    before = children()
    coll = store.create_collection("x", Schema())
    driver = Driver(executor="processes")
    driver.run(Task("up", Pids(), clients=2, ops=4), coll)  # the clients are running
    main = threading.main_thread().ident
    timer = threading.Timer(1.5, signal.pthread_kill, (main, signal.SIGINT))
    with interrupts.handled(), pytest.raises(Interrupted) as stopped:
        timer.start()
        driver.run(Task("long", Sleeps(), clients=2, duration_s=60), coll)
    timer.join()
    (partial,) = stopped.value.partial
    assert partial.ops > 0 and not partial.complete
    assert not live_children(before)  # killed with the task, not left for the run's end
    _, pids = driver.run(Task("after", Pids(), clients=2, ops=4), coll)  # fresh ones
    assert len({pid for pid, _ in pids}) == 2
    driver.close()
    assert not live_children(before)


def test_a_failed_client_ends_the_clients(store):
    before = children()
    coll = store.create_collection("x", Schema())
    driver = Driver(executor="processes")
    driver.run(Task("up", Pids(), clients=3, ops=6), coll)
    with pytest.raises(TaskFailed, match="client 1: LookupError: no such collection"):
        driver.run(Task("fails", FailsInSetup(), clients=3, ops=6), coll)
    assert not live_children(before)


def test_an_executor_let_go_of_without_close_ends_its_clients(store):
    before = children()
    coll = store.create_collection("x", Schema())
    Driver(executor="processes").run(Task("a", Pids(), clients=2, ops=4), coll)
    assert not live_children(before)  # the driver is gone: so are its clients


class SleepsThenPids:
    """1 ms per op; each client's payload its process id."""

    def __call__(self, coll, c, clients):
        return FnOp(lambda i: time.sleep(0.001), finish=os.getpid)


def test_a_task_run_meanwhile_from_another_thread_gets_clients_of_its_own(store):
    before = children()
    coll = store.create_collection("x", Schema())
    driver = Driver(executor="processes")
    _, first = driver.run(Task("up", Pids(), clients=2, ops=4), coll)
    kept = {pid for pid, _ in first}
    out = {}
    other = threading.Thread(
        target=lambda: out.update(
            long=driver.run(Task("long", SleepsThenPids(), clients=2, duration_s=3.0), coll)
        )
    )
    other.start()
    time.sleep(1.0)  # the long task holds the kept clients
    stats, meanwhile = driver.run(Task("meanwhile", Pids(), clients=2, ops=4), coll)
    other.join()
    assert stats.ops == 4 and not kept & {pid for pid, _ in meanwhile}
    long_stats, long_pids = out["long"]
    assert long_stats.complete and set(long_pids) == kept
    driver.close()
    assert not live_children(before)


@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_a_floor_on_the_window_runs_a_small_task_at_least_that_long(store, executor):
    coll = store.create_collection("x", Schema())
    driver = Driver(executor=executor)
    task = Task("few", Pids(), clients=2, ops=10, min_duration_s=0.5)
    stats, _ = driver.run(task, coll)
    driver.close()
    assert stats.complete and stats.ops > 10  # went on past its ops
    assert stats.elapsed_ns >= 0.5e9
    assert TaskRecord.of(stats).min_window_s == 0.5
    exact, _ = Driver().run(Task("few", Pids(), clients=2, ops=10), coll)
    assert exact.ops == 10 and TaskRecord.of(exact).min_window_s is None


def test_a_floor_is_for_ops_tasks():
    with pytest.raises(ValueError, match="min_duration_s"):
        Task("t", Pids(), duration_s=1.0, min_duration_s=2.0)
    with pytest.raises(ValueError, match="min_duration_s"):
        Task("t", Pids(), ops=1, min_duration_s=-1.0)
