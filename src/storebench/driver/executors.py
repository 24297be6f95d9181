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
import weakref
from array import array
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from storebench.common import interrupts
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
from storebench.measure.metrics import Histogram
from storebench.common.plugins import Kind
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

    def close(self) -> None:
        """After the run's last task (``Driver.close``): let go of what this
        executor kept between tasks (e.g. client processes)."""

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


class _Closing(Exception):
    """The pool is closing: the worker ends (it was told while at the start)."""


def _pool_worker(spec: Any, inbox: Any, out: Any, stop: Any, prog: Any, parent: int) -> None:
    """A client process of a ``_Pool``: runs one client of each task it is
    handed, until told to end. It opens the store once (its connections
    serve every task) and the task's collection at each task, as a client
    joining then would: what the parent changed since (an index built, as
    Redis's switch from FLAT to HNSW, which the store learns at the open)
    is seen. Its stop flag and progress slot are its own (the parent sets
    them), its start is the parent's (``_Pool``: "ready" out, "go" or
    "abort" in)."""
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
        while True:
            job = inbox.get()
            if job is None:
                return
            if job[0] != "run":  # the start of a task that ended without this client
                continue
            _, seq, name, schema, task, c, g = job

            def start(seq: int = seq, g: int = g) -> None:
                out.put(("ready", seq, g))
                while True:
                    msg = inbox.get()
                    if msg is None:
                        raise _Closing
                    if msg[1] == seq:
                        if msg[0] == "go":
                            return
                        raise threading.BrokenBarrierError

            try:
                if store is None:
                    store = spec.open()
                coll = store.open_collection(name, schema)
                res = run_client(task, coll, c, ctl, start, 0)
            except _Closing:
                return
            except BaseException as exc:
                res = _failure(c, exc)
            out.put(("result", seq, g, res))
    finally:
        if store is not None:
            store.close()


class _Worker:
    """One client process of a pool, with its inbox, stop flag and progress slot."""

    def __init__(self, ctx: Any, spec: Any, out: Any, w: int):
        self.inbox = ctx.SimpleQueue()  # the parent writes, no feeder thread
        stop, prog = ctx.RawArray("b", 1), ctx.RawArray("q", 1)
        self.stop = memoryview(stop).cast("B")
        self.progress = memoryview(prog).cast("B").cast("q")
        self.proc = ctx.Process(
            target=_pool_worker,
            args=(spec, self.inbox, out, stop, prog, os.getpid()),
            daemon=True,
            name=f"storebench-client-{w}",
        )


class _Pool:
    """The client processes of one run: worker g serves slot g of every task
    (each task's clients, and a mix's, in slot order). Started as tasks first
    need them, again if one died. Tasks start
    together on the parent's word: each client says "ready" after its
    warm-up, and when all have, the parent says "go" (or "abort" once one
    failed or the run is stopped), so no barrier has to be made per task in
    processes that already run. Messages carry the task's number: what an
    ended task left in a queue is passed over."""

    CLOSE_S = 5.0  # how long closing waits for workers to end before killing them

    def __init__(self, ctx: Any, spec: Any):
        self.ctx, self.spec = ctx, spec
        self.out = ctx.Queue()
        self.workers: list[_Worker] = []
        self.seq = 0  # the current task's number

    def worker(self, w: int) -> _Worker:
        """Worker w, started (again, if it died) with the signals blocked."""
        if w < len(self.workers) and self.workers[w].proc.is_alive():
            return self.workers[w]
        wk = _Worker(self.ctx, self.spec, self.out, w)
        if w < len(self.workers):
            self.workers[w] = wk
        else:
            self.workers.append(wk)
        with interrupts.blocked():  # the child starts with them blocked
            wk.proc.start()
        return wk

    def pids(self) -> list[int]:
        return [wk.proc.pid for wk in self.workers if wk.proc.pid is not None]

    def close(self) -> None:
        """Ask every worker to end, wait ``CLOSE_S`` at most, kill the rest."""
        workers, self.workers = self.workers, []
        started = [wk for wk in workers if wk.proc.pid is not None]
        for wk in started:
            with contextlib.suppress(Exception):
                wk.inbox.put(None)
        deadline = time.monotonic() + self.CLOSE_S
        for wk in started:
            wk.proc.join(max(0.0, deadline - time.monotonic()))
        for wk in started:
            if wk.proc.is_alive():
                wk.proc.kill()
                wk.proc.join(5)
        for wk in workers:
            with contextlib.suppress(Exception):
                wk.inbox.close()
        self.out.close()
        self.out = self.ctx.Queue()  # a pool closed may start again


class _StopAll:
    """The parent's stop flag over workers' own: setting it stops them all."""

    def __init__(self, workers: list[_Worker]):
        self.workers = workers

    def __getitem__(self, i: int) -> int:
        return int(any(wk.stop[0] for wk in self.workers))

    def __setitem__(self, i: int, v: int) -> None:
        for wk in self.workers:
            wk.stop[0] = v


class _Progress:
    """The parent's view of the progress slots: slot g is worker g's."""

    def __init__(self, workers: list[_Worker]):
        self.workers = workers

    def __getitem__(self, g: int) -> int:
        return int(self.workers[g].progress[0])


_pools: weakref.WeakSet[_Pool] = weakref.WeakSet()  # live pools, for ``teardown``


class ProcessExecutor(Executor):
    """Clients in processes, kept for the run: the first task that needs
    them starts them, a task with more lanes than before adds more, and they
    serve every later task (search settings, client counts) until the
    executor is closed (``Driver.close``, at the end of the run), garbage
    collected, or torn down with the run's executors. A task that fails or
    is interrupted closes them (a client may be stuck in an operation, or
    dead): the next task starts fresh ones."""

    name = "processes"
    requires = frozenset({Capability.SHARED_ACROSS_PROCESSES})
    start_method = "spawn"  # no inherited threads or locks from the parent

    def __init__(self, store: Store):
        super().__init__(store)
        self._pool: _Pool | None = None
        self._closer: weakref.finalize | None = None
        self._in_use = threading.Lock()  # held by the task the pool serves

    def _pool_for_run(self) -> _Pool:
        if self._pool is None:
            self._pool = _Pool(mp.get_context(self.start_method), self.store.spec)
            self._closer = weakref.finalize(self, self._pool.close)
            _pools.add(self._pool)
            _active.setdefault(self.name, type(self))  # torn down with the run's executors
        return self._pool

    def pids(self) -> list[int]:
        """The client processes kept (for tests and records)."""
        return self._pool.pids() if self._pool is not None else []

    def close(self) -> None:
        if self._closer is not None:
            self._closer()  # runs pool.close once
        self._pool = self._closer = None

    @classmethod
    def teardown(cls) -> None:
        for pool in list(_pools):
            pool.close()

    def run(self, tasks: list[Task], coll: Collection, progress: Any) -> list[list[ClientResult]]:
        # a task run meanwhile from another thread gets processes of its own
        shared = self._in_use.acquire(blocking=False)
        try:
            return self._run(tasks, coll, progress, shared)
        finally:
            if shared:
                self._in_use.release()

    def _run(
        self, tasks: list[Task], coll: Collection, progress: Any, shared: bool
    ) -> list[list[ClientResult]]:
        slots = _slots(tasks)
        n = len(slots)
        pool = (
            self._pool_for_run()
            if shared
            else _Pool(mp.get_context(self.start_method), self.store.spec)
        )
        pool.seq += 1
        seq = pool.seq
        results: dict[int, ClientResult] = {}
        sent = [False] * n  # the client's task is in its worker's inbox
        ready: set[int] = set()
        said: list[str] = []  # "go" or "abort", once per task

        def say(word: str) -> None:
            if not said:
                said.append(word)
                for g in range(n):
                    if sent[g]:
                        pool.workers[g].inbox.put((word, seq))

        def launch(g: int) -> None:
            t, c = slots[g]
            wk = pool.worker(g)
            wk.stop[0] = 0
            wk.progress[0] = 0
            wk.inbox.put(("run", seq, coll.name, coll.schema, tasks[t], c, g))
            sent[g] = True

        def abort(started: int) -> None:
            say("abort")
            for g in range(n):
                if not sent[g]:
                    results[g] = _not_started()

        def take(msg: tuple[Any, ...]) -> None:
            kind, s, g = msg[:3]
            if s != seq:  # an earlier task's
                return
            if kind == "ready":
                ready.add(g)
                if len(ready) == n:
                    say("go")
            else:
                results[g] = msg[3]
                if msg[3].error:  # no client waits at the start for one that failed
                    say("abort")

        def collect(timeout: float) -> None:
            try:
                take(pool.out.get(timeout=timeout))
                return
            except queue_mod.Empty:
                pass
            for g in range(n):
                if sent[g] and g not in results and not pool.workers[g].proc.is_alive():
                    with contextlib.suppress(queue_mod.Empty):
                        # it may have sent its result just before exiting
                        take(pool.out.get(timeout=1.0))
                    if g not in results:
                        code = pool.workers[g].proc.exitcode
                        results[g] = _failure(
                            slots[g][1], RuntimeError(f"client process died (exit code {code})")
                        )
                        say("abort")

        workers = pool.workers
        ctl = Controls(_StopAll(workers), _Progress(workers))
        keep = False
        try:
            interrupted = self._watch(
                tasks, ctl, progress, launch, lambda: len(results) < n, collect, abort
            )
            keep = shared and not interrupted and not any(r.error for r in results.values())
        finally:
            if not shared:
                pool.close()
            elif not keep:  # a client may be stuck or dead: the next task starts afresh
                self.close()
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
