"""Process clients: each opens its own store from the picklable spec, in
client processes kept for the run (``_Pool``: started at the first task that
needs them, serving every later task, ended by ``Driver.close``)."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import queue as queue_mod
import threading
import time
import weakref
from typing import Any

from storebench.common import interrupts
from storebench.driver.core import ClientResult, Controls, Task, run_client
from storebench.driver.executors import (
    NOT_STARTED,
    Executor,
    _active,
    _failure,
    _per_task,
    _slots,
)
from storebench.stores.base import Capability, Collection, Store


class _Closing(Exception):
    """The pool is closing: the worker ends (it was told while at the start)."""


CACHE_LINE = 64


def _control_line(block: Any) -> tuple[memoryview, memoryview]:
    """A worker's stop byte and progress slot, alone on a cache line of
    ``block`` (``RawArray("q", 16)``: a whole 64-byte line lies inside).
    multiprocessing packs small shared arrays next to each other, and a slot
    beside another worker's, written at every op, shares its line with
    what the other core writes (null store, 2 and 4 process clients: 7-10%
    more time per op). The arena is mapped page-aligned in every
    process, so the line is at the same offset in each."""
    raw = memoryview(block).cast("B")
    at = -ctypes.addressof(block) % CACHE_LINE
    return raw[at : at + 1], raw[at + 8 : at + 16].cast("q")


def _pool_worker(spec: Any, inbox: Any, out: Any, block: Any, parent: int) -> None:
    """A client process of a ``_Pool``: runs one client of each task it is
    handed, until told to end. It opens the store once (its connections
    serve every task) and the task's collection at each task, as a client
    joining then would: what the parent changed since (an index built, as
    Redis's switch from FLAT to HNSW, which the store learns at the open)
    is seen. Its stop flag and progress slot are its own (the parent sets
    them), its start is the parent's (``_Pool``: "ready" out, "go" or
    "abort" in)."""
    if not interrupts.client_process(parent):
        return
    ctl = Controls.shared(*_control_line(block))
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
                res = run_client(task, coll, c, ctl, start, 0).result()
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
        block = ctx.RawArray("q", 2 * CACHE_LINE // 8)
        self.stop, self.progress = _control_line(block)
        self.proc = ctx.Process(
            target=_pool_worker,
            args=(spec, self.inbox, out, block, os.getpid()),
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
                    results[g] = ClientResult.failed(NOT_STARTED)

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
