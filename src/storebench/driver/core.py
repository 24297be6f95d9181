"""Tasks, the per-client run, and the exact merge of clients' results.

A ``Task`` is a picklable description of one timed operation stream: which
op (a factory called inside each client, after the client opened its own
collection), how many clients, count or duration, warm-up, think time or
open-loop rate. The ``Driver`` (``dispatch``) hands the task to an executor
(threads, processes, or a plug-in), whose clients each ``run_client``; then
``merge`` merges the clients' histograms exactly. This module imports
neither: executors and the driver build on it, not the other way round.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from storebench.driver import loops
from storebench.driver import native as native_loop
from storebench.driver.measure import FAILED, Measurement, Outcome
from storebench.errors import NotCounted, NotSupported, StorebenchError
from storebench.measure.metrics import DEFAULT_INTERVAL_S, Histogram, Series, TaskStats
from storebench.stores.base import Collection

log = logging.getLogger("storebench")


class Op:
    """One client's operation stream: ``op(i)`` performs operation i.

    Built inside the client by the task's factory, so it may hold connections
    and prepared arguments. ``finish`` returns what the workload needs back
    from the client (e.g. search results for recall); it runs untimed."""

    def __call__(self, i: int) -> None:
        raise NotImplementedError

    def finish(self) -> Any:
        return None

    @property
    def call(self) -> Callable[[int], Any]:
        """What the timed loop calls: a bound method, one lookup fewer per op."""
        return self.__call__

    def native(self) -> Any:
        """This stream as a native op (``driver/native.py``), connected and
        prepared: what a task with ``client: native`` times instead."""
        raise NotSupported("this operation", "the native client")

    # An event-loop client (the ``async`` executor, ``driver/aio.py``) awaits
    # ``acall(i)`` where an op defines it (``async def acall``); an op
    # without one has its sync call run inline on the loop. ``aopen`` runs
    # before warm-up (connect the op's async view, ``Collection.aio``),
    # ``aclose`` after ``finish``: both untimed.
    acall: Callable[[int], Awaitable[Any]] | None = None

    async def aopen(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class FnOp(Op):
    """An op from a plain function (called directly by the loop)."""

    def __init__(self, fn: Callable[[int], Any], finish: Callable[[], Any] | None = None):
        self.fn = fn
        self._finish = finish

    def __call__(self, i: int) -> None:
        self.fn(i)

    @property
    def call(self) -> Callable[[int], Any]:
        return self.fn

    def finish(self) -> Any:
        return self._finish() if self._finish else None


OpFactory = Callable[[Collection, int, int], Op]  # (collection, client, clients) -> Op


@dataclass(frozen=True)
class Task:
    name: str
    factory: OpFactory  # must be picklable for process clients (module-level)
    clients: int = 1
    ops: int | None = None  # total over all clients; None with duration_s
    duration_s: float | None = None
    warmup_ops: int = 0  # per client
    warmup_s: float = 0.0
    think_s: float = 0.0  # pause after each op (closed loop only)
    think_per_client: tuple[float, ...] = ()  # overrides think_s: client c pauses [c % len]
    client_offset_s: float = 0.0  # client c starts c * offset after the common start
    rate: float | None = None  # open loop: target ops/s over all clients
    items_per_op: int = 1
    executor: str | None = None  # None or auto: the driver decides (``choose_executor``)
    # requests each client keeps in flight: W > 1 runs W lanes per client,
    # each with its own connection, so a client has W requests outstanding
    inflight: int = 1
    max_errors: int = 0  # failed ops tolerated before the task fails
    interval_s: float | None = None  # the per-interval series' interval; None: the driver's
    # a floor on the measured window of an ``ops`` task: each client goes on
    # past its share of ``ops`` until this long after the start, so a task
    # of few fast ops is not timed over a fraction of a second (its start-up
    # and the first interval would be all it shows). Only for an op stream
    # that can go on past ``ops`` (a query set cycled: op i is query
    # i % queries); ``ops`` is then a minimum, the record's ops what ran.
    min_duration_s: float = 0.0
    # python: the loops of loops.py call the op; native: its native form's
    # loop (driver/native.py), the workload having resolved auto
    client: str = "python"

    def __post_init__(self) -> None:
        if self.clients < 1 or self.inflight < 1:
            raise ValueError(f"task {self.name}: clients and inflight must be >= 1")
        if (self.ops is None) == (self.duration_s is None):
            raise ValueError(f"task {self.name}: give exactly one of ops or duration_s")
        if self.rate is not None and (self.rate <= 0 or self.think_s or self.think_per_client):
            raise ValueError(f"task {self.name}: rate must be > 0 and excludes think time")
        if self.interval_s is not None and not self.interval_s > 0:
            raise ValueError(f"task {self.name}: interval_s must be > 0")
        if self.min_duration_s < 0 or (self.min_duration_s and self.duration_s is not None):
            raise ValueError(f"task {self.name}: min_duration_s must be >= 0, with ops only")
        if self.client not in ("python", "native"):
            raise ValueError(f"task {self.name}: client must be python or native")

    @property
    def interval_ns(self) -> int:
        return int((self.interval_s or DEFAULT_INTERVAL_S) * 1e9)

    @property
    def thinks(self) -> bool:
        """Its clients pause between operations (``choose_executor``)."""
        return bool(self.think_s or any(self.think_per_client))

    @property
    def lanes(self) -> int:
        """Independent op streams: clients x in-flight requests each."""
        return self.clients * self.inflight

    def think(self, c: int) -> float:
        return (
            self.think_per_client[c % len(self.think_per_client)]
            if self.think_per_client
            else self.think_s
        )

    def client_ops(self, c: int) -> int | None:
        """How many measured ops client c runs (None: until the deadline)."""
        if self.ops is None:
            return None
        return max(0, math.ceil((self.ops - c) / self.lanes))


@dataclass
class ClientResult:
    latency: Histogram
    service: Histogram | None
    ops: int
    errors: dict[str, int]
    skipped: dict[str, int]
    start_ns: int
    end_ns: int
    cpu_s: float
    complete: bool
    payload: Any = None
    error: str | None = None  # set when the client failed outright
    driver_clock: bool = True  # start/end are on the driver's monotonic clock
    series: Series | None = None  # per interval from start_ns
    service_series: Series | None = None  # the open loop's service times, likewise

    @classmethod
    def failed(cls, error: str) -> ClientResult:
        """A client that measured nothing: why."""
        return cls(Histogram(), None, 0, {}, {}, 0, 0, 0.0, False, error=error)

    def result(self) -> ClientResult:
        """Already built (as ``Measured.result``)."""
        return self


@dataclass
class Controls:
    """Shared with the clients: a stop flag and one progress slot each."""

    stop: Any  # stop[0] != 0 asks clients to end after their current op
    progress: Any  # progress[c] = index of client c's op in flight
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def local(cls, n: int) -> Controls:
        """For ``n`` clients in this process: the slots as an int64
        memoryview (a loop's write per op is cheaper than an array's)."""
        return cls(bytearray(1), memoryview(bytearray(8 * n)).cast("q"))

    @classmethod
    def shared(cls, stop: Any, prog: Any) -> Controls:
        """Over a shared stop byte and int64 slots (``RawArray``s or views
        of one) that another process writes too."""
        return cls(memoryview(stop).cast("B"), memoryview(prog).cast("B").cast("q"))


def _measure(
    task: Task,
    op: Callable[[int], Any],
    c: int,
    ctl: Controls,
    start_ns: int,
    slot: int,
    native: Any = None,
) -> Outcome:
    """Runs client c's measured ops (progress in ``ctl.progress[slot]``) on
    the loops of ``loops.py``; a ``native`` op runs its own loop instead
    (``driver/native.py``)."""
    if native is not None:
        return native_loop.measure(task, native, c, ctl, start_ns, slot)
    m = Measurement(task, c, ctl, start_ns, slot)
    while True:
        try:
            m.used = m.pick(loops.closed, loops.thinking, loops.open_)(op, m)
        except NotCounted as exc:  # nothing to do yet (e.g. a read before any write)
            m.skip(str(exc) or type(exc).__name__)
        except Exception as exc:  # one op failed: mark it, count it, go on
            m.raised(exc)
        if not m.more():
            return m.outcome()


@dataclass
class Measured:
    """What a client hands back as it ends: its measured ops as the loop
    left them. Building its ``ClientResult`` costs about a millisecond of
    Python per client, so an executor whose clients share this process's
    GIL builds them all once every client has ended (``result()`` in
    ``executors._per_task``): not while other clients are still measuring,
    nor while thousands of ending clients keep a second signal's watcher
    from its turn. A client in a process of its own builds it there."""

    task: Task
    out: Outcome
    start: int
    end: int
    cpu: float
    payload: Any

    def result(self) -> ClientResult:
        """Its per-interval series (failed ops counted where they ended) and
        the histograms they merge to."""
        task, out, start = self.task, self.out, self.start
        lat = out.lat
        ok = lat >= 0
        end_at = out.ends()
        series = Series.of(lat[ok], end_at[ok], start, task.interval_ns, end_at[lat == FAILED])
        shist = sseries = None
        if out.svc is not None:
            sseries = Series.of(out.svc[ok], end_at[ok], start, task.interval_ns)
            shist = sseries.histogram()
        return ClientResult(
            series.histogram(),  # the whole task's: the intervals merged
            shist,
            int(ok.sum()),
            dict(out.errors),
            dict(out.skipped),
            start,
            self.end,
            self.cpu,
            out.complete,
            self.payload,
            series=series,
            service_series=sseries,
        )


def run_client(
    task: Task,
    coll: Collection,
    c: int,
    ctl: Controls,
    sync: Callable[[], Any],
    slot: int | None = None,
    share: int = 1,
) -> Measured:
    """One client: build the op, warm up, meet the others, measure.
    ``slot`` is this client's place among all clients of a mix of tasks."""
    slot = c if slot is None else slot
    ops = task.factory(coll, c, task.lanes)
    op = ops.call
    native = ops.native() if task.client == "native" else None  # connected before the clock
    i = -1 - c
    warm_end = loops.clock() + int(task.warmup_s * 1e9)
    for _ in range(task.warmup_ops):
        if ctl.stop[0]:  # stopped before the start: the barrier is broken too
            break
        op(i)
        i -= task.lanes
    while loops.clock() < warm_end and not ctl.stop[0]:
        op(i)
        i -= task.lanes
    sync()  # all clients start measuring together
    if c == 0:
        log.info("task %s: measuring", task.name)
    cpu0 = time.process_time()
    start = loops.clock()
    if task.client_offset_s and c:
        time.sleep(c * task.client_offset_s)
    out = _measure(task, op, c, ctl, start, slot, native)
    end = loops.clock()
    cpu = (time.process_time() - cpu0) / share
    return Measured(task, out, start, end, cpu, ops.finish())


class Interrupted(StorebenchError):
    """The user stopped the run; ``partial`` holds what each running task
    had measured."""

    def __init__(self, partial: list[TaskStats], signal: str = "SIGINT"):
        self.partial = partial
        self.signal = signal
        super().__init__(f"interrupted by {signal}")


def merge(task: Task, results: list[ClientResult]) -> TaskStats:
    stats = TaskStats(task.name, clients=task.clients)
    if task.inflight > 1:
        stats.extra["inflight"] = task.inflight
    if task.min_duration_s:
        stats.extra["min_window_s"] = task.min_duration_s
    if task.rate is not None:
        stats.service = Histogram()
    # a series only where every client kept one (a plug-in executor may not)
    series = [r.series for r in results if r.series is not None]
    if len(series) == len(results):
        stats.series = Series(task.interval_ns)
        stats.series.merge(*series)
    service = [r.service_series for r in results if r.service_series is not None]
    if task.rate is not None and service and len(service) == len(results):
        stats.service_series = Series(task.interval_ns)
        stats.service_series.merge(*service)
    for r in results:
        stats.latency.merge(r.latency)
        if stats.service is not None and r.service is not None:
            stats.service.merge(r.service)
        stats.ops += r.ops
        for k, v in r.errors.items():
            stats.errors[k] = stats.errors.get(k, 0) + v
        for k, v in r.skipped.items():
            stats.skipped[k] = stats.skipped.get(k, 0) + v
        stats.cpu_s += r.cpu_s
        stats.complete &= r.complete and not r.error
    if results:
        stats.elapsed_ns = max(r.end_ns for r in results) - min(r.start_ns for r in results)
        if all(r.driver_clock for r in results):
            stats.end_ns = max(r.end_ns for r in results)
            stats.start_unix = unix_time(min(r.start_ns for r in results))
        for s in (stats.series, stats.service_series):
            if s is not None:
                s.fit(stats.elapsed_ns)
    stats.items = stats.ops * task.items_per_op
    return stats


def unix_time(clock_ns: int) -> float:
    """A time of the driver's monotonic clock in seconds since the epoch."""
    return (time.time_ns() - loops.clock() + clock_ns) / 1e9


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
