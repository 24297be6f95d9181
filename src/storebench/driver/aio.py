"""The ``async`` executor: each client a coroutine on an event loop.

Thread clients cost an OS thread each and take turns on the GIL; process
clients cost a process each. Here a task's clients are coroutines on one
event loop (uvloop where installed, else asyncio's; the record says which),
so 221 clients that mostly pause (social) or wait on the network (a server
store) need no thread each. Where the machine has cores to spare for the
client (``driver.workers``; see ``workers_for``), the clients are shared
out over that many worker processes, one loop each, for stores that serve
process clients; with 0 the loop runs on a thread of this process, on the
store the run opened.

A client awaits its op's ``acall(i)`` where the op has one (the workload's
op on the store's async view, ``Collection.aio``); an op without one runs
its sync call inline on the loop: right for an in-process store, whose
calls hold the GIL anyway, while an I/O-bound call then blocks the loop's
other clients for its round trip.

The contract is the other executors': one ``ClientResult`` per client, the
shared stop flag and progress slots, a start barrier (an asyncio gate per
loop, joined across worker processes by a process barrier), ``STOP_GRACE_S``
on an interrupt, partial results, and no worker process left behind.
Timing is the driver's: ``loops.closed_async`` and its twins, with the same
buffers and end times as the sync loops.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue as queue_mod
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, ClassVar

from storebench.common import interrupts
from storebench.driver import loops
from storebench.driver.core import (
    ClientResult,
    Controls,
    Measured,
    Op,
    Task,
    cpu_count,
    log,
)
from storebench.driver.executors import (
    NOT_STARTED,
    Executor,
    Latch,
    _failure,
    _per_task,
    _slots,
)
from storebench.driver.measure import Measurement, Outcome
from storebench.errors import NotCounted, NotSupported
from storebench.stores.base import Capability, Collection, Store

Slot = tuple[int, int, int]  # (global slot, task index, client index)


def loop_name(choice: str = "auto") -> str:
    """The event loop clients run on: uvloop where installed (``auto``)."""
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise NotSupported("async executor", "uvloop (pip install uvloop)") from None
        return "asyncio"
    return "uvloop"


def run_on_loop(main: Coroutine[Any, Any, Any], kind: str) -> Any:
    """Run ``main`` to its end on a new loop of that kind."""
    if kind == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    with asyncio.Runner() as runner:
        return runner.run(main)


class Gate:
    """The start barrier of one loop's clients. ``outer`` (a process
    barrier's ``wait``) joins the loops of several worker processes: the
    last client of this loop to arrive waits there, off the loop, for the
    other loops. ``abort`` (from the loop's thread) breaks it for all."""

    def __init__(
        self,
        parties: int,
        outer: Callable[[], Any] | None = None,
        outer_abort: Callable[[], Any] | None = None,
    ):
        self.parties = parties
        self.arrived = 0
        self.outer = outer
        self.outer_abort = outer_abort  # breaks the other loops' gates too
        self.broken = False
        self.go = asyncio.Event()

    async def wait(self) -> None:
        if self.broken:
            raise threading.BrokenBarrierError
        self.arrived += 1
        if self.arrived == self.parties:
            if self.outer is not None:
                try:
                    await asyncio.get_running_loop().run_in_executor(None, self.outer)
                except BaseException:
                    self.abort()
                    raise
            self.go.set()
        else:
            await self.go.wait()
        if self.broken:
            raise threading.BrokenBarrierError

    def abort(self) -> None:
        self.broken = True
        self.go.set()
        if self.outer_abort is not None:
            self.outer_abort()


def _inline(call: Callable[[int], Any]) -> Callable[[int], Awaitable[Any]]:
    """A sync op as a coroutine function: run inline, holding the loop."""

    async def op(i: int) -> Any:
        return call(i)

    return op


async def _measure(
    task: Task,
    op: Callable[[int], Awaitable[Any]],
    c: int,
    ctl: Controls,
    start_ns: int,
    slot: int,
) -> Outcome:
    """``core._measure`` on the async loops (``driver/measure.py``: the same
    buffers, failed and uncounted ops, end and floor)."""
    m = Measurement(task, c, ctl, start_ns, slot)
    while True:
        try:
            m.used = await m.pick(loops.closed_async, loops.thinking_async, loops.open_async)(op, m)
        except NotCounted as exc:
            m.skip(str(exc) or type(exc).__name__)
        except Exception as exc:
            m.raised(exc)
        if not m.more():
            return m.outcome()


async def run_client_async(
    task: Task, coll: Collection, c: int, ctl: Controls, gate: Gate, slot: int, share: int
) -> Measured:
    """``core.run_client`` as a coroutine. ``share``: the clients on this
    loop; each reports that share of the process's CPU time over its
    window, so the task's sum is the process's own (not ``share`` times it)."""
    ops: Op = task.factory(coll, c, task.lanes)
    await ops.aopen()
    try:
        op = ops.acall if ops.acall is not None else _inline(ops.call)
        i = -1 - c
        warm_end = loops.clock() + int(task.warmup_s * 1e9)
        turn = asyncio.sleep  # warm-up is untimed: the loop's other clients get a turn each op
        for _ in range(task.warmup_ops):
            if ctl.stop[0]:
                break
            await op(i)
            await turn(0)
            i -= task.lanes
        while loops.clock() < warm_end and not ctl.stop[0]:
            await op(i)
            await turn(0)
            i -= task.lanes
        await gate.wait()
        if c == 0:
            log.info("task %s: measuring", task.name)
        cpu0 = time.process_time()
        start = loops.clock()
        if task.client_offset_s and c:
            await asyncio.sleep(c * task.client_offset_s)
        out = await _measure(task, op, c, ctl, start, slot)
        end = loops.clock()
        cpu = (time.process_time() - cpu0) / share
        payload = ops.finish()
    finally:
        await ops.aclose()
    return Measured(task, out, start, end, cpu, payload)


async def _clients(
    tasks: list[Task],
    mine: list[Slot],
    coll_for: Callable[[], Collection],
    ctl: Controls,
    gate: Gate,
    put: Callable[[int, ClientResult | Measured], None],
) -> None:
    """Run these clients together on the running loop; each result goes to
    ``put`` as its client ends."""

    async def one(g: int, t: int, c: int) -> None:
        res: ClientResult | Measured
        try:
            res = await run_client_async(tasks[t], coll_for(), c, ctl, gate, g, len(mine))
        except BaseException as exc:
            gate.abort()
            res = _failure(c, exc)
        put(g, res)

    await asyncio.gather(*(one(g, t, c) for g, t, c in mine))


def _worker(
    spec: Any,
    name: str,
    schema: Any,
    tasks: list[Task],
    mine: list[Slot],
    kind: str,
    stop: Any,
    prog: Any,
    barrier: Any,
    out: Any,
    parent: int,
) -> None:
    """A worker process: its share of the clients on one loop, on its own
    store opened from the spec (``interrupts.client_process``: the parent
    decides when to stop)."""
    if not interrupts.client_process(parent):
        return
    ctl = Controls.shared(stop, prog)
    store: Store | None = None
    try:
        store = spec.open()
        coll = store.open_collection(name, schema)

        async def main() -> None:
            gate = Gate(len(mine), barrier.wait, barrier.abort)
            await _clients(
                tasks, mine, lambda: coll, ctl, gate, lambda g, r: out.put((g, r.result()))
            )

        run_on_loop(main(), kind)
    except BaseException as exc:
        barrier.abort()
        for g, _t, c in mine:
            out.put((g, _failure(c, exc)))
    finally:
        if store is not None:
            store.close()


def workers_for(store: Store, requested: int | None) -> int:
    """Worker processes for the clients (0: a loop on a thread of this
    process). Asked for: as asked (a store that lives in one process takes
    0 only). Default: 0 where the store lives in this process or the
    machine has 2 cores or fewer (the server shares them, and one loop in
    this process measured as fast as one in a worker: the worker's
    start-up is all it adds); else half the cores, the rest left to a
    server on the same machine."""
    shared = Capability.SHARED_ACROSS_PROCESSES in store.capabilities
    if requested is not None:
        if requested and not shared:
            raise NotSupported(store.engine, "async clients in worker processes (driver.workers)")
        return requested
    if not shared or cpu_count() <= 2:
        return 0
    return max(1, cpu_count() // 2)


class AsyncExecutor(Executor):
    name = "async"
    workers: ClassVar[int | None] = None  # driver.workers (None: ``workers_for`` decides)
    event_loop: ClassVar[str] = "auto"  # driver.event_loop: auto | uvloop | asyncio
    start_method = "spawn"

    @classmethod
    def setup(cls, options: Mapping[str, Any]) -> None:
        cls.workers = options.get("workers")
        cls.event_loop = options.get("event_loop") or "auto"
        loop_name(cls.event_loop)  # an unknown or missing loop fails before the run

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {"name": cls.name, "loop": loop_name(cls.event_loop), "workers": cls.workers}

    def run(self, tasks: list[Task], coll: Collection, progress: Any) -> list[list[ClientResult]]:
        slots = _slots(tasks)
        kind = loop_name(self.event_loop)
        w = min(workers_for(self.store, self.workers), len(slots))
        # for the task's record (``client_loop``): the loop, and worker
        # processes (0: the loop ran on a thread of this process)
        self.where = {"loop": kind, "workers": w}
        if w == 0:
            return self._in_process(tasks, coll, progress, slots, kind)
        return self._in_workers(tasks, coll, progress, slots, kind, w)

    def _in_process(
        self,
        tasks: list[Task],
        coll: Collection,
        progress: Any,
        slots: list[tuple[int, int]],
        kind: str,
    ) -> list[list[ClientResult]]:
        """All clients on one loop, on a thread of this process (the main
        thread keeps the signals and the progress bar). ``launch(g)`` hands
        client g to the loop, as the other executors start a client each:
        an interrupt while they start gives up those not yet handed over."""
        n = len(slots)
        ctl = Controls.local(n)
        results: dict[int, ClientResult | Measured] = {}
        done = Latch()
        ready = Latch()
        lock = threading.Lock()
        claimed = [False] * n  # by launch as it hands the client over, or by abort
        aborted = [False]
        state: dict[str, Any] = {}

        async def main() -> None:
            q: asyncio.Queue[int | None] = asyncio.Queue()
            gate = Gate(n)
            with lock:
                state.update(loop=asyncio.get_running_loop(), q=q, gate=gate)
                if aborted[0]:  # an abort came before the loop ran
                    gate.abort()
                    q.put_nowait(None)
            ready.set()

            async def one(g: int) -> None:
                t, c = slots[g]
                res: ClientResult | Measured
                try:
                    res = await run_client_async(tasks[t], coll, c, ctl, gate, g, n)
                except BaseException as exc:
                    gate.abort()
                    res = _failure(c, exc)
                results[g] = res

            clients = []
            for _ in range(n):
                g = await q.get()
                if g is None:
                    break
                clients.append(asyncio.ensure_future(one(g)))
            await asyncio.gather(*clients)

        def body() -> None:
            try:
                run_on_loop(main(), kind)
            except BaseException as exc:
                for g, (_t, c) in enumerate(slots):
                    results.setdefault(g, _failure(c, exc))
            finally:
                ready.set()
                done.set()

        thread = threading.Thread(target=body, daemon=True, name="async-clients")

        def launch(g: int) -> None:
            if g == 0:
                thread.start()
                ready.wait()
            with lock:
                if claimed[g] or "loop" not in state:
                    return
                claimed[g] = True
                state["loop"].call_soon_threadsafe(state["q"].put_nowait, g)

        def abort(started: int) -> None:
            with lock:
                aborted[0] = True
                for g in range(n):
                    if not claimed[g]:
                        claimed[g] = True
                        results[g] = ClientResult.failed(NOT_STARTED)
                if "loop" in state:
                    loop = state["loop"]
                    loop.call_soon_threadsafe(state["gate"].abort)
                    loop.call_soon_threadsafe(state["q"].put_nowait, None)
                elif not thread.is_alive():  # never started: nothing will end it
                    done.set()

        def collect(timeout: float) -> None:
            done.wait(timeout)

        interrupted = self._watch(
            tasks, ctl, progress, launch, lambda: not done.is_set(), collect, abort
        )
        return self._finish(tasks, _per_task(tasks, slots, results), interrupted)

    def _in_workers(
        self,
        tasks: list[Task],
        coll: Collection,
        progress: Any,
        slots: list[tuple[int, int]],
        kind: str,
        w: int,
    ) -> list[list[ClientResult]]:
        """Client g on worker g % w, each worker one loop in its own process."""
        ctx: Any = mp.get_context(self.start_method)
        stop = ctx.RawArray("b", 1)
        prog = ctx.RawArray("q", len(slots))
        barrier = ctx.Barrier(w)
        out = ctx.Queue()
        shares: list[list[Slot]] = [[] for _ in range(w)]
        for g, (t, c) in enumerate(slots):
            shares[g % w].append((g, t, c))
        procs = [
            ctx.Process(
                target=_worker,
                args=(
                    self.store.spec,
                    coll.name,
                    coll.schema,
                    tasks,
                    shares[k],
                    kind,
                    stop,
                    prog,
                    barrier,
                    out,
                    os.getpid(),
                ),
                daemon=True,
                name=f"storebench-async-{k}",
            )
            for k in range(w)
        ]
        results: dict[int, ClientResult] = {}

        def launch(g: int) -> None:
            if g < w:
                with interrupts.blocked():  # the child starts with them blocked
                    procs[g].start()

        def abort(started: int) -> None:
            barrier.abort()
            for k, p in enumerate(procs):
                if p.pid is None:
                    for g, _t, _c in shares[k]:
                        results[g] = ClientResult.failed(NOT_STARTED)

        ctl = Controls.shared(stop, prog)

        def collect(timeout: float) -> None:
            try:
                g, res = out.get(timeout=timeout)
                results[g] = res
            except queue_mod.Empty:
                for k, p in enumerate(procs):
                    missing = [s for s in shares[k] if s[0] not in results]
                    if missing and p.pid is not None and not p.is_alive():
                        try:  # it may have sent its results just before exiting
                            while True:
                                g2, res = out.get(timeout=1.0)
                                results[g2] = res
                        except queue_mod.Empty:
                            pass
                        barrier.abort()
                        for g, _t, c in missing:
                            results.setdefault(
                                g,
                                _failure(
                                    c, RuntimeError(f"worker process died (exit code {p.exitcode})")
                                ),
                            )

        try:
            interrupted = self._watch(
                tasks, ctl, progress, launch, lambda: len(results) < len(slots), collect, abort
            )
        finally:
            started = [p for p in procs if p.pid is not None]
            deadline = time.monotonic() + 5
            for p in started:
                p.join(max(0.0, deadline - time.monotonic()))
            for p in started:
                if p.is_alive():
                    p.kill()
                    p.join(5)
        return self._finish(tasks, _per_task(tasks, slots, results), interrupted)
