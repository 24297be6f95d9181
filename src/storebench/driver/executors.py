"""Executors: where a task's clients run. Threads share the process's store;
processes each open their own store from the picklable spec. Others (a
distributed one) plug in through the ``storebench.executors`` entry points.

Every executor returns one ``ClientResult`` per client and stops its clients
through the shared stop flag when the user interrupts. No wait is unbounded
once a stop is asked: an interrupt (even one arriving while the clients
start) or a failing client breaks the start barrier, so no client waits
there for one that will never come; clients not yet started are given up;
the others get ``STOP_GRACE_S`` to end their current operation, then are
left behind (threads), killed (processes) or discarded (Ray actors)."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from storebench import interrupts
from storebench.driver.core import (
    ClientResult,
    Controls,
    Interrupted,
    Task,
    cpu_count,
    merge,
    run_client,
)
from storebench.errors import NotSupported, TaskFailed, signal_name
from storebench.metrics import Histogram
from storebench.plugins import Kind
from storebench.stores.base import Capability, Collection, Store

log = logging.getLogger("storebench")

ABORTED = "aborted: another client failed"
NOT_STARTED = "not started: the run was interrupted"
STOP_GRACE_S = 10.0  # after a stop: how long clients may take to end their current operation


def _failure(c: int, exc: BaseException) -> ClientResult:
    """A client that failed outright: its error, or ABORTED when another
    client's failure broke the start barrier (``first_failure`` reports the
    real one)."""
    if isinstance(exc, threading.BrokenBarrierError):
        msg = ABORTED
    elif isinstance(exc, TaskFailed):  # the measuring loop's: names task, client and op
        msg = str(exc)
    else:
        msg = f"client {c}: {type(exc).__name__}: {exc}"
    return ClientResult(Histogram(), None, 0, {}, {}, 0, 0, 0.0, False, error=msg)


def _not_started() -> ClientResult:
    """A client given up before it started (an interrupt while clients start)."""
    return ClientResult(Histogram(), None, 0, {}, {}, 0, 0, 0.0, False, error=NOT_STARTED)


def _slots(tasks: list[Task]) -> list[tuple[int, int]]:
    """(task index, client index) for every client of every task, in slot order."""
    return [(t, c) for t, task in enumerate(tasks) for c in range(task.lanes)]


def _per_task(
    tasks: list[Task], slots: list[tuple[int, int]], results: dict[int, ClientResult]
) -> list[list[ClientResult]]:
    """Results grouped by task, the real failure before the clients it aborted."""
    out: list[list[ClientResult]] = [[] for _ in tasks]
    for g, (t, _c) in enumerate(slots):
        if g in results:
            out[t].append(results[g])
    return [sorted(rs, key=lambda r: (r.error is None, r.error == ABORTED)) for rs in out]


class Executor:
    name: str
    requires: frozenset[Capability] = frozenset()  # what the store must declare

    def __init__(self, store: Store):
        missing = self.requires - store.capabilities
        if missing:
            raise NotSupported(
                store.engine, f"{self.name} clients (needs {', '.join(sorted(map(str, missing)))})"
            )
        self.store = store

    def run(self, tasks: list[Task], coll: Collection, progress: Any) -> list[list[ClientResult]]:
        """Run the tasks' clients together; results per task."""
        raise NotImplementedError

    # Per-run hooks (the runner calls them through setup_executor and
    # executors_released): an executor that needs more than one process (a
    # cluster) connects in setup, describes where its clients ran for the
    # record, and lets go of what it started in teardown.
    @classmethod
    def setup(cls, options: Mapping[str, Any]) -> None:
        """Before a run: the scenario's ``driver`` settings."""

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """For the run's record (``record["executor"]``): where clients ran."""
        return {"name": cls.name}

    @classmethod
    def teardown(cls) -> None:
        """After the last run: release what ``setup`` or ``run`` started."""

    def _watch(
        self,
        tasks: list[Task],
        ctl: Controls,
        progress: Any,
        launch: Callable[[int], None],
        alive: Callable[[], bool],
        collect: Callable[[float], None],
        abort: Callable[[int], None],
    ) -> KeyboardInterrupt | None:
        """Start client g with ``launch(g)``, each in turn, then show progress
        until ``alive()`` is false. On Ctrl-C or SIGTERM, even while clients
        start: set the stop flag, ``abort(started)`` (break the start barrier;
        give up the clients from ``started`` on that did not start: the one
        being launched may have), then wait for the clients at most
        ``STOP_GRACE_S``. Returns the interrupt, if one came; on any other
        error the clients are stopped the same way before it propagates."""
        counted = [t.ops for t in tasks]
        total = None if None in counted else sum(counted)  # type: ignore[arg-type]
        n = sum(t.lanes for t in tasks)
        bar = progress.task(
            "+".join(t.name for t in tasks),
            total=total,
            duration_s=tasks[0].duration_s,
            starting=f"{n} client{'s' if n != 1 else ''} ({self.name})",  # until they run
        )
        interrupted: KeyboardInterrupt | None = None
        started = 0
        try:
            for g in range(n):
                launch(g)
                started = g + 1
            while alive():
                collect(0.1)
                bar.update(sum(ctl.progress[g] for g in range(n)))
        except KeyboardInterrupt as exc:
            interrupts.acknowledge()
            interrupted = exc
            ctl.stop[0] = 1
            abort(started)
            deadline = time.monotonic() + STOP_GRACE_S
            while alive() and time.monotonic() < deadline:
                collect(0.1)
            if alive():
                log.warning("clients still running %g s after the stop: left behind", STOP_GRACE_S)
        except BaseException:
            ctl.stop[0] = 1
            abort(started)
            raise
        finally:
            bar.close()
        return interrupted

    @staticmethod
    def _finish(
        tasks: list[Task], per_task: list[list[ClientResult]], interrupted: KeyboardInterrupt | None
    ) -> list[list[ClientResult]]:
        if interrupted:
            partial = []
            for t, rs in zip(tasks, per_task, strict=True):
                measured = [r for r in rs if not r.error]
                stats = merge(t, measured)
                # complete only if every client ran to its end (none aborted,
                # given up or left behind)
                stats.complete &= len(measured) == t.lanes
                partial.append(stats)
            raise Interrupted(partial, signal_name(interrupted))
        return per_task


class ThreadExecutor(Executor):
    name = "threads"

    def run(self, tasks: list[Task], coll: Collection, progress: Any) -> list[list[ClientResult]]:
        slots = _slots(tasks)
        ctl = Controls(bytearray(1), array("q", [0] * len(slots)))
        barrier = threading.Barrier(len(slots))
        results: dict[int, ClientResult] = {}
        left = [len(slots)]
        # a slot is claimed by its client as it begins, or by ``abort`` for a
        # client that had not: an interrupt inside Thread.start leaves it
        # unknown whether that thread runs, and the claim settles it
        claimed = [False] * len(slots)
        lock = threading.Lock()
        all_done = threading.Event()

        def finished(k: int) -> None:
            with lock:
                left[0] -= k
                if not left[0]:
                    all_done.set()

        def client(g: int) -> None:
            with lock:
                if claimed[g]:  # given up before it began
                    return
                claimed[g] = True
            t, c = slots[g]
            try:
                results[g] = run_client(tasks[t], coll, c, ctl, barrier.wait, g)
            except BaseException as exc:
                barrier.abort()
                results[g] = _failure(c, exc)
            finally:
                finished(1)

        threads = [
            threading.Thread(target=client, args=(g,), daemon=True, name=f"client-{g}")
            for g in range(len(slots))
        ]

        def launch(g: int) -> None:
            threads[g].start()

        def abort(started: int) -> None:
            barrier.abort()
            with lock:
                given_up = [g for g in range(len(slots)) if not claimed[g]]
                for g in given_up:
                    claimed[g] = True
                    results[g] = _not_started()
            if given_up:
                finished(len(given_up))

        # An Event, not Thread.join: a join interrupted by Ctrl-C can leave
        # is_alive() false for a thread that is still running (CPython 3.11).
        def collect(timeout: float) -> None:
            all_done.wait(timeout)

        def alive() -> bool:
            return not all_done.is_set()

        interrupted = self._watch(tasks, ctl, progress, launch, alive, collect, abort)
        return self._finish(tasks, _per_task(tasks, slots, results), interrupted)


def _process_client(
    spec: Any,
    name: str,
    schema: Any,
    task: Task,
    c: int,
    g: int,
    stop: Any,
    prog: Any,
    barrier: Any,
    out: Any,
    parent: int,
) -> None:
    # The parent decides when to stop (it started this process with both
    # signals blocked, so none came before these lines); the process dies
    # with the parent, even a parent ended by SIGKILL or a second signal.
    for s in interrupts.SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, interrupts.SIGNALS)
    interrupts.die_with_parent()
    if os.getppid() != parent:  # it died before that took effect
        return
    ctl = Controls(memoryview(stop).cast("B"), memoryview(prog).cast("B").cast("q"))
    store = None
    try:
        store = spec.open()
        coll = store.open_collection(name, schema)
        out.put((g, run_client(task, coll, c, ctl, barrier.wait, g)))
    except BaseException as exc:
        barrier.abort()
        out.put((g, _failure(c, exc)))
    finally:
        if store is not None:
            store.close()


class ProcessExecutor(Executor):
    name = "processes"
    requires = frozenset({Capability.SHARED_ACROSS_PROCESSES})
    start_method = "spawn"  # no inherited threads or locks from the parent

    def run(self, tasks: list[Task], coll: Collection, progress: Any) -> list[list[ClientResult]]:
        slots = _slots(tasks)
        ctx: Any = mp.get_context(self.start_method)
        stop = ctx.RawArray("b", 1)
        prog = ctx.RawArray("q", len(slots))
        barrier = ctx.Barrier(len(slots))
        out = ctx.Queue()
        procs = [
            ctx.Process(
                target=_process_client,
                args=(
                    self.store.spec,
                    coll.name,
                    coll.schema,
                    tasks[t],
                    c,
                    g,
                    stop,
                    prog,
                    barrier,
                    out,
                    os.getpid(),
                ),
                daemon=True,
                name=f"storebench-client-{g}",
            )
            for g, (t, c) in enumerate(slots)
        ]
        results: dict[int, ClientResult] = {}

        def launch(g: int) -> None:
            with interrupts.blocked():  # the child starts with them blocked
                procs[g].start()

        def abort(started: int) -> None:
            barrier.abort()
            for g in range(started, len(slots)):
                if procs[g].pid is None:
                    results[g] = _not_started()

        ctl = Controls(memoryview(stop).cast("B"), memoryview(prog).cast("B").cast("q"))

        def collect(timeout: float) -> None:
            try:
                g, res = out.get(timeout=timeout)
                results[g] = res
            except queue_mod.Empty:
                for g, p in enumerate(procs):
                    if g not in results and not p.is_alive():
                        try:  # it may have sent its result just before exiting
                            g2, res = out.get(timeout=1.0)
                            results[g2] = res
                        except queue_mod.Empty:
                            barrier.abort()
                            results[g] = _failure(
                                slots[g][1],
                                RuntimeError(f"client process died (exit code {p.exitcode})"),
                            )

        try:
            interrupted = self._watch(
                tasks, ctl, progress, launch, lambda: len(results) < len(slots), collect, abort
            )
        finally:
            started = [p for p in procs if p.pid is not None]
            deadline = time.monotonic() + 5
            for p in started:  # they have returned their results: they are ending
                p.join(max(0.0, deadline - time.monotonic()))
            for p in started:
                if p.is_alive():
                    p.kill()
                    p.join(5)
        return self._finish(tasks, _per_task(tasks, slots, results), interrupted)


EXECUTORS = Kind(
    "executor",
    "storebench.executors",
    where="driver.executor",
    builtin={"threads": ThreadExecutor, "processes": ProcessExecutor},
)


def executor_names() -> list[str]:
    return EXECUTORS.names()


def executor_class(name: str) -> type[Executor]:
    cls: type[Executor] = EXECUTORS.load(name)
    return cls


# a workload's ``executor`` parameter (``choose_executor``)
ExecutorChoice = Literal["auto", "threads", "processes", "async"]


def choose_executor(
    store: Store | type[Store],
    run: str | None,
    task: str | None = None,
    lanes: int = 1,
    *,
    auto_processes: bool = True,
    thinking: bool = False,
) -> str:
    """Where a task's clients run: the one decision, made for the plan's
    check, the runner's set-up, the driver and the records alike.

    The task's own choice (a workload's ``executor`` parameter,
    ``ExecutorChoice``, or ``Task.executor``) as asked; none or ``auto``:
    the run's (``driver.executor``), else the store's ``client_mode``.
    ``auto`` with no run choice: processes when the task has several
    ``lanes`` (clients x in-flight streams) and the store can serve process
    clients, since thread clients share one interpreter (the GIL) and cheap
    requests make that the limit. A workload whose clients measured faster
    as threads passes ``auto_processes=False``: its ``auto`` is then the
    store's choice (ingest: see there).

    ``auto`` for clients that mostly pause (``thinking``: think time) and
    outnumber the cores: the ``async`` executor (``driver/aio.py``, one
    event loop) where the store's ops can run there (``Store.async_ops``),
    else the store's choice, never a process each. Measured with social's
    221 clients (load 8-10 from other work on 2 cores): memory p50/p99 10-66
    / 116-300 us as async against 29-109 / 2,600-28,000 us as threads,
    sqlite 24-78 / 310-1,870 against 82-218 / 39,000-44,000, the same ops/s,
    5 OS threads against 217-224. Not for clients that never pause: tune's
    100 pgvector search clients (load 16-55 from other work) made 1,291-1,843
    queries/s on one loop (1,184-1,489 over 2 or 4 worker loops) against
    2,386-3,352 as threads, at less client CPU per query (116 against 128
    us): the kernel shares the cores per thread, and one loop thread gets a
    sliver of them beside the server's 100 backends and the machine's other
    work; there ``async`` is for asking (6 OS threads against 105)."""
    if task is not None and task != "auto":
        return task
    if run is not None:
        return run
    if task == "auto" and thinking and lanes > cpu_count():
        return "async" if store.async_ops else store.client_mode
    if (
        task == "auto"
        and auto_processes
        and lanes > 1
        and Capability.SHARED_ACROSS_PROCESSES in store.capabilities
    ):
        return "processes"
    return store.client_mode


def get_executor(name: str, store: Store) -> Executor:
    return executor_class(name)(store)


_active: dict[str, type[Executor]] = {}


def setup_executor(name: str, options: Mapping[str, Any]) -> type[Executor]:
    """The executor class for a run, set up with the run's driver settings."""
    cls = executor_class(name)
    cls.setup(options)
    _active[name] = cls
    return cls


@contextlib.contextmanager
def executors_released() -> Iterator[None]:
    """Around a scenario's runs: each executor set up lets go of what it
    started when they end, however they end."""
    try:
        yield
    finally:
        while _active:
            _active.popitem()[1].teardown()
