"""Executors: where a task's clients run. Threads share the process's store;
processes each open their own store from the picklable spec. Others (a
distributed one) plug in through the ``storebench.executors`` entry points.

Every executor returns one ``ClientResult`` per client and stops its clients
through the shared stop flag when the user interrupts. No wait is unbounded
once a stop is asked: an interrupt (even one arriving while the clients
start) or a failing client breaks the start barrier, so no client waits
there for one that will never come; clients not yet started are given up;
the others get ``STOP_GRACE_S`` to end their current operation, then are
left behind (threads), killed (processes) or discarded (Ray actors).

Thread clients share one GIL, handed on every switch interval to one of
the threads waiting for it: with 2,000 clients a thread waits some 10 s
for its turn, and every thread waiting wakes at every interval. So a
signal sets the stop flag in the signal handler itself where the compiled
module is installed (``native.stop_on_signal``), else from the first thread
that runs Python after it (``interrupts.on_signal``), not once the
interrupt has climbed the main thread's stack; from the stop on the
interval is long, set by the first client that sees it (clients ending
hand the GIL on as they go, and the waiting ones wake less often); the main
thread waits for the clients in one wait, not in polls each paying for a
turn; and the start barrier lets the clients through at once
(``StartGate``)."""

from __future__ import annotations

import _thread
import collections
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from storebench.common import interrupts
from storebench.driver import native as native_loop
from storebench.driver.core import (
    ClientResult,
    Controls,
    Interrupted,
    Measured,
    Task,
    merge,
    run_client,
)
from storebench.errors import NotSupported, TaskFailed, signal_name
from storebench.stores.base import Capability, Collection, Store

log = logging.getLogger("storebench")

ABORTED = "aborted: another client failed"
NOT_STARTED = "not started: the run was interrupted"
STOP_GRACE_S = 10.0  # after a stop: how long clients may take to end their current operation
STOPPING_SWITCH_S = 0.1  # thread clients after a stop: the GIL's switch interval
# a stop flag holding a signal's number: set by the signal's handler itself
# (``native.stop_on_signal``), so the clients may all have ended before the
# interrupt reaches the main thread; the run waits for it (an interrupted
# run, not tasks that ended early)
SIGNAL_STOPS = frozenset(int(s) for s in interrupts.SIGNALS)


class Latch:
    """Set once, waited for by the main thread: a lock held until ``set``.
    An interrupt leaves a lock's acquire either taken or not, while a
    ``threading.Event``'s wait (a Condition's) interrupted as another thread
    sets it can keep the Event's inner lock held, and the next wait never
    returns (seen with 2,000 thread clients ending at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._guard = threading.Lock()
        self._set = False

    def set(self) -> None:
        with self._guard:
            if not self._set:
                self._set = True
                self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        if not self._set and self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            self._lock.release()  # open for good (an interrupt here: ``_set`` says so)
        return self._set


class StartGate:
    """The thread clients' start barrier. ``threading.Barrier`` wakes its
    waiters through one shared lock, each in turn once it has the GIL, which
    the clients already through (measuring) keep: start-up grows as the
    square of the client count (15 minutes for 2,000, no signal acted on
    meanwhile). Here each client waits on a lock of its own, all released
    together. ``wait`` raises ``BrokenBarrierError`` once ``abort``ed."""

    def __init__(self, parties: int):
        self.left = parties
        self.lock = threading.Lock()
        self.waiting: list[threading.Lock] = []
        self.opened = self.broken = False

    def wait(self) -> None:
        mine = threading.Lock()
        mine.acquire()
        with self.lock:
            if self.broken:
                raise threading.BrokenBarrierError
            self.waiting.append(mine)
            self.left -= 1
            if not self.left:
                self.opened = True
                self._release()
        mine.acquire()  # until the last client arrives or an abort
        if not self.opened:
            raise threading.BrokenBarrierError

    def abort(self) -> None:
        with self.lock:
            self.broken = True
            self._release()

    def _release(self) -> None:
        # in one C call: a loop in Python gives the GIL up between releases,
        # and with every released client waiting for it, the next turn comes
        # after all of theirs (start-up quadratic in the clients again)
        collections.deque(map(_thread.LockType.release, self.waiting), maxlen=0)
        self.waiting.clear()


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
    return ClientResult.failed(msg)


def _slots(tasks: list[Task]) -> list[tuple[int, int]]:
    """(task index, client index) for every client of every task, in slot order."""
    return [(t, c) for t, task in enumerate(tasks) for c in range(task.lanes)]


def _per_task(
    tasks: list[Task],
    slots: list[tuple[int, int]],
    results: Mapping[int, ClientResult | Measured],
) -> list[list[ClientResult]]:
    """Results grouped by task (built from what the clients handed back),
    the real failure before the clients it aborted."""
    out: list[list[ClientResult]] = [[] for _ in tasks]
    for g, (t, _c) in enumerate(slots):
        if g in results:
            out[t].append(results[g].result())
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
            if ctl.stop[0] in SIGNAL_STOPS:  # set by the signal's handler, its interrupt on the way
                interrupts.await_interrupt()
        except KeyboardInterrupt as exc:
            interrupts.acknowledge()
            interrupted = exc
            ctl.stop[0] = 1
            abort(started)
            stopped = time.monotonic()
            deadline = stopped + STOP_GRACE_S
            while alive() and (left := deadline - time.monotonic()) > 0:
                collect(left)  # returns as clients end: no polling
            if alive():
                log.warning("clients still running %g s after the stop: left behind", STOP_GRACE_S)
            else:
                took = time.monotonic() - stopped
                log.info("clients ended %.1f s after the main thread took the interrupt", took)
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


# the executor classes set up for the run (``choice.setup_executor``), torn down at its end
_active: dict[str, type[Executor]] = {}


class ThreadExecutor(Executor):
    name = "threads"

    def run(self, tasks: list[Task], coll: Collection, progress: Any) -> list[list[ClientResult]]:
        slots = _slots(tasks)
        ctl = Controls.local(len(slots))
        barrier = StartGate(len(slots))
        results: dict[int, ClientResult | Measured] = {}
        left = [len(slots)]
        # a slot is claimed by its client as it begins, or by ``abort`` for a
        # client that had not: an interrupt inside Thread.start leaves it
        # unknown whether that thread runs, and the claim settles it
        claimed = [False] * len(slots)
        lock = threading.Lock()
        all_done = Latch()

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
                results[g] = run_client(tasks[t], coll, c, ctl, barrier.wait, g, len(slots))
            except BaseException as exc:
                barrier.abort()
                results[g] = _failure(c, exc)
            finally:
                if ctl.stop[0]:  # the first client to see a stop set by the signal itself
                    stop()
                finished(1)

        threads = [
            threading.Thread(target=client, args=(g,), daemon=True, name=f"client-{g}")
            for g in range(len(slots))
        ]

        def launch(g: int) -> None:
            threads[g].start()

        # after a stop each waiting client wakes only every STOPPING_SWITCH_S
        # to ask for the GIL (every 5 ms, thousands of them keep the CPU busy
        # with their wake-ups); one left behind must not change it after the run
        interval = sys.getswitchinterval()
        running = [True]
        switch = threading.RLock()  # re-entered by a signal handler in the main thread

        def stop() -> None:
            if not ctl.stop[0]:  # a signal's number stays (``SIGNAL_STOPS``)
                ctl.stop[0] = 1
            with switch:
                if running[0]:
                    sys.setswitchinterval(STOPPING_SWITCH_S)

        def abort(started: int) -> None:
            stop()
            barrier.abort()
            with lock:
                given_up = [g for g in range(len(slots)) if not claimed[g]]
                for g in given_up:
                    claimed[g] = True
                    results[g] = ClientResult.failed(NOT_STARTED)
            if given_up:
                finished(len(given_up))

        # A Latch, not Thread.join: a join interrupted by Ctrl-C can leave
        # is_alive() false for a thread that is still running (CPython 3.11).
        def collect(timeout: float) -> None:
            all_done.wait(timeout)

        def alive() -> bool:
            return not all_done.is_set()

        try:
            with interrupts.on_signal(stop), native_loop.stop_on_signal(ctl):
                interrupted = self._watch(tasks, ctl, progress, launch, alive, collect, abort)
        finally:
            with switch:
                running[0] = False
                sys.setswitchinterval(interval)
        return self._finish(tasks, _per_task(tasks, slots, results), interrupted)
