"""Executors: where a task's clients run. Threads share the process's store;
processes each open their own store from the picklable spec. Others (a
distributed one) plug in through the ``storebench.executors`` entry points.

Every executor returns one ``ClientResult`` per client and stops its clients
through the shared stop flag when the user interrupts."""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import signal
import threading
from array import array
from importlib import metadata
from typing import Any

from storebench.driver.core import ClientResult, Controls, Interrupted, Task, merge, run_client
from storebench.errors import NotSupported, UserError, signal_name
from storebench.metrics import Histogram
from storebench.stores.base import Capability, Collection, Store

ENTRY_POINT_GROUP = "storebench.executors"
ABORTED = "aborted: another client failed"


def _failure(c: int, exc: BaseException) -> ClientResult:
    msg = (
        ABORTED
        if isinstance(exc, threading.BrokenBarrierError)
        else f"client {c}: {type(exc).__name__}: {exc}"
    )
    return ClientResult(Histogram(), None, 0, {}, 0, 0, 0.0, False, error=msg)


def _order_failures_first(results: list[ClientResult]) -> list[ClientResult]:
    # the real cause before the clients it aborted
    return sorted(results, key=lambda r: (r.error is None, r.error == ABORTED))


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

    def run(self, task: Task, coll: Collection, progress: Any) -> list[ClientResult]:
        raise NotImplementedError

    def _watch(
        self, task: Task, ctl: Controls, progress: Any, start: Any, alive: Any, collect: Any
    ) -> KeyboardInterrupt | None:
        """Start the clients and show progress until ``alive()`` is false; on
        Ctrl-C ask the clients to stop and wait for them. Returns the
        interrupt, if one came."""
        total = task.ops
        bar = progress.task(task.name, total=total, duration_s=task.duration_s)
        interrupted: KeyboardInterrupt | None = None
        try:
            start()
            while alive():
                collect(0.1)
                bar.update(sum(ctl.progress[c] for c in range(task.clients)))
        except KeyboardInterrupt as exc:
            interrupted = exc
            ctl.stop[0] = 1
            while alive():
                collect(0.1)
        finally:
            bar.close()
        return interrupted


class ThreadExecutor(Executor):
    name = "threads"

    def run(self, task: Task, coll: Collection, progress: Any) -> list[ClientResult]:
        ctl = Controls(bytearray(1), array("q", [0] * task.clients))
        barrier = threading.Barrier(task.clients)
        results: list[ClientResult | None] = [None] * task.clients
        left = [task.clients]
        lock = threading.Lock()
        all_done = threading.Event()

        def client(c: int) -> None:
            try:
                results[c] = run_client(task, coll, c, ctl, barrier.wait)
            except BaseException as exc:
                barrier.abort()
                results[c] = _failure(c, exc)
            finally:
                with lock:
                    left[0] -= 1
                    if not left[0]:
                        all_done.set()

        threads = [
            threading.Thread(target=client, args=(c,), daemon=True, name=f"client-{c}")
            for c in range(task.clients)
        ]

        def start() -> None:
            for t in threads:
                t.start()

        # An Event, not Thread.join: a join interrupted by Ctrl-C can leave
        # is_alive() false for a thread that is still running (CPython 3.11).
        def collect(timeout: float) -> None:
            all_done.wait(timeout)

        def alive() -> bool:
            return not all_done.is_set()

        interrupted = self._watch(task, ctl, progress, start, alive, collect)
        done = _order_failures_first([r for r in results if r is not None])
        if interrupted:
            raise Interrupted(
                merge(task, [r for r in done if not r.error]), signal_name(interrupted)
            )
        return done


def _process_client(
    spec: Any,
    name: str,
    schema: Any,
    task: Task,
    c: int,
    stop: Any,
    prog: Any,
    barrier: Any,
    out: Any,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    ctl = Controls(memoryview(stop).cast("B"), memoryview(prog).cast("B").cast("q"))
    store = None
    try:
        store = spec.open()
        coll = store.open_collection(name, schema)
        out.put((c, run_client(task, coll, c, ctl, barrier.wait)))
    except BaseException as exc:
        barrier.abort()
        out.put((c, _failure(c, exc)))
    finally:
        if store is not None:
            store.close()


class ProcessExecutor(Executor):
    name = "processes"
    requires = frozenset({Capability.SHARED_ACROSS_PROCESSES})
    start_method = "spawn"  # no inherited threads or locks from the parent

    def run(self, task: Task, coll: Collection, progress: Any) -> list[ClientResult]:
        ctx: Any = mp.get_context(self.start_method)
        stop = ctx.RawArray("b", 1)
        prog = ctx.RawArray("q", task.clients)
        barrier = ctx.Barrier(task.clients)
        out = ctx.Queue()
        procs = [
            ctx.Process(
                target=_process_client,
                args=(self.store.spec, coll.name, coll.schema, task, c, stop, prog, barrier, out),
                daemon=True,
                name=f"storebench-client-{c}",
            )
            for c in range(task.clients)
        ]
        results: dict[int, ClientResult] = {}

        def start() -> None:
            for p in procs:
                p.start()

        ctl = Controls(memoryview(stop).cast("B"), memoryview(prog).cast("B").cast("q"))

        def collect(timeout: float) -> None:
            try:
                c, res = out.get(timeout=timeout)
                results[c] = res
            except queue_mod.Empty:
                for c, p in enumerate(procs):
                    if c not in results and not p.is_alive():
                        try:  # it may have sent its result just before exiting
                            c2, res = out.get(timeout=1.0)
                            results[c2] = res
                        except queue_mod.Empty:
                            barrier.abort()
                            results[c] = _failure(
                                c, RuntimeError(f"client process died (exit code {p.exitcode})")
                            )

        try:
            interrupted = self._watch(
                task, ctl, progress, start, lambda: len(results) < task.clients, collect
            )
        finally:
            for p in procs:
                if p.pid is None:  # never started
                    continue
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join()
        done = _order_failures_first([results[c] for c in sorted(results)])
        if interrupted:
            raise Interrupted(
                merge(task, [r for r in done if not r.error]), signal_name(interrupted)
            )
        return done


_BUILTIN: dict[str, type[Executor]] = {"threads": ThreadExecutor, "processes": ProcessExecutor}


def executor_names() -> list[str]:
    return sorted(
        set(_BUILTIN) | {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    )


def executor_class(name: str) -> type[Executor]:
    cls = _BUILTIN.get(name)
    if cls is None:
        eps = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
        if name not in eps:
            raise UserError(
                f"unknown executor {name!r} (known: {', '.join(executor_names())})",
                where="driver.executor",
            )
        cls = eps[name].load()
    return cls


def get_executor(name: str, store: Store) -> Executor:
    return executor_class(name)(store)
