"""The timed loops: the only place operations are timed.

Each loop runs ``op(i)`` for one client and writes a latency in ns per
operation into a preallocated int64 buffer; nothing is allocated per
operation beyond what the operation itself does. The client's progress slot
holds the index of the operation in flight, so an operation that raises is
known by position, its latency marked -1 (not recorded) and the loop resumes.

Op indices interleave over clients: client c of C runs c, c+C, c+2C, ...
(warm-up runs -1-c, -1-c-C, ...), so ops never repeat across clients.

When each operation ended (for the per-interval series) costs the loops
nothing per operation where it follows from what they write: the closed loop
times back to back, so its ends are its start (appended to ``marks`` once per
call) plus the running sum of latencies (``closed_ends``); the open loop's
are its schedule plus latency (``open_ends``). Only the thinking loop, which
sleeps between operations anyway, writes its ends.

The closed loop of a Python op runs in Rust where the compiled module is
installed (``closed``: ``closed_calls`` in ``native/fastclient``): the op
is still called as here, the bookkeeping around it costs a third as much.
A task with ``client: native`` is timed by a loop of the same contract in
Rust (``driver/native.py``, ``native/fastclient``): closed and open as here,
with the GIL released, writing into the same buffers and slots from the
same clock (CLOCK_MONOTONIC); the store adapter only prepares its requests
before the clock. It is a driver loop, not a store's timer.

Each loop is called as ``loop(op, m)`` with the client's ``Measurement``
(``driver/measure.py``), whose buffers and bounds it reads once per call
(``_window``), never per operation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from storebench.stores.native import extension

clock = time.perf_counter_ns  # CLOCK_MONOTONIC: comparable across processes
compiled = extension()  # the native client's module: its closed loop, if installed


def _slots(a: np.ndarray) -> memoryview:
    """An int64 array as a memoryview: item assignment is cheaper than numpy's."""
    return memoryview(a).cast("B").cast("q")  # type: ignore[arg-type]


def _window(m: Any) -> tuple[memoryview, int, int, int, int, int, Any, Any, int]:
    """What every loop reads of client ``m`` for one call: its latency slots,
    the slots to fill (from ``m.used`` to the end), the first op's index and
    the step between ops (clients interleave), the deadline, stop flag and
    progress slot."""
    step, ctl = m.task.lanes, m.ctl
    start = m.used
    return (
        _slots(m.lat),
        start,
        len(m.lat),
        m.c + start * step,
        step,
        m.deadline,
        ctl.stop,
        ctl.progress,
        m.slot,
    )


def address(buf: Any, dtype: type) -> int:
    """Where a writable buffer (bytearray, array, memoryview of shared
    memory, numpy array) starts in memory."""
    return int(np.frombuffer(buf, dtype).ctypes.data)


def closed(op: Callable[[int], Any], m: Any) -> int:
    """Back-to-back operations; returns the number of buffer slots used.
    Where the compiled module is installed its ``closed_calls`` runs this
    loop (the same slots, clock, flag and progress; about a third of this
    one's cost per op); else each op's slot takes the time it ended, made
    latencies (each end less the one before) once per call, also when an
    op raises: a subtraction and an assignment less per op."""
    buf, start, end, i, step, deadline, stop, prog, slot = _window(m)
    t = clock()
    m.marks.append((start, t))
    if compiled is not None:
        return compiled.closed_calls(
            op,
            start,
            m.lat.ctypes.data,
            end,
            i,
            step,
            deadline,
            address(stop, np.uint8),
            address(prog, np.int64) + 8 * slot,
            t,
        )
    j = start
    try:
        for j in range(start, end):
            prog[slot] = j
            op(i)
            t1 = clock()
            buf[j] = t1
            i += step
            if t1 >= deadline or stop[0]:
                j += 1
                break
        else:
            j = end
    finally:  # slots [start, j) hold ends (an op that raised wrote none)
        if j > start:
            ends = m.lat[start:j]
            ends[1:] = np.diff(ends)
            ends[0] -= t
    return j


def thinking(op: Callable[[int], Any], m: Any) -> int:
    """Closed loop with a pause of ``m.think`` s after each operation (not
    part of latency); writes when each op ended into ``m.ends``."""
    buf, start, end, i, step, deadline, stop, prog, slot = _window(m)
    ebuf, think_s, sleep = _slots(m.ends), m.think, time.sleep
    for j in range(start, end):
        prog[slot] = j
        t0 = clock()
        op(i)
        t1 = clock()
        buf[j] = t1 - t0
        ebuf[j] = t1
        i += step
        if t1 >= deadline or stop[0]:
            return j + 1
        sleep(think_s)
    return end


def wait_until(t_ns: int) -> None:
    """Sleep to just before t_ns, then spin the last stretch (sleep overshoots)."""
    while True:
        left = t_ns - clock()
        if left <= 0:
            return
        if left > 200_000:
            time.sleep((left - 150_000) / 1e9)


def open_(op: Callable[[int], Any], m: Any) -> int:
    """Open loop: op j is due at ``m.origin + j * m.interval`` whatever
    happened before.

    Latency runs from the intended start, so time spent queued behind a slow
    operation counts (coordinated omission corrected); ``m.svc`` keeps the
    service time from the actual start."""
    buf, start, end, i, step, deadline, stop, prog, slot = _window(m)
    sbuf, origin, interval = _slots(m.svc), m.origin, m.interval
    for j in range(start, end):
        prog[slot] = j
        due = origin + int(j * interval)
        if clock() < due:
            wait_until(due)
        t0 = clock()
        op(i)
        t1 = clock()
        buf[j] = t1 - due
        sbuf[j] = t1 - t0
        i += step
        if t1 >= deadline or stop[0]:
            return j + 1
    return end


# --- the same loops for event-loop clients (``driver/aio.py``) -----------------
# Each is its sync twin with ``await op(i)``: the same buffers, progress
# slot, stop flag and return value, so ``closed_ends`` and ``open_ends``
# hold for them too. Coroutines of one loop take turns, so a loop yields
# where its twin sleeps (``asyncio.sleep``), never spins. (The bodies stay
# twins: sharing one would cost a call per operation.)

SPIN_NS = 1_500_000  # the open loop's last stretch: yielding (loop timers have 1 ms steps)
YIELD_EVERY = 16  # the closed loop lets the loop's other clients run this often


async def closed_async(op: Callable[[int], Awaitable[Any]], m: Any) -> int:
    """``closed`` for a coroutine op. An op that never waits (a sync call
    run inline) would keep the loop from its other clients until this one
    ends: every ``YIELD_EVERY`` ops the loop gets a turn, outside the
    timing (the clock restarts after it, a new entry in ``marks``)."""
    buf, start, end, i, step, deadline, stop, prog, slot = _window(m)
    marks = m.marks
    t = clock()
    marks.append((start, t))
    for j in range(start, end):
        prog[slot] = j
        await op(i)
        t1 = clock()
        buf[j] = t1 - t
        t = t1
        i += step
        if t1 >= deadline or stop[0]:
            return j + 1
        if not (j + 1) % YIELD_EVERY:
            await asyncio.sleep(0)
            t = clock()
            marks.append((j + 1, t))
    return end


async def thinking_async(op: Callable[[int], Awaitable[Any]], m: Any) -> int:
    """``thinking`` for a coroutine op: the pause lets the loop's other clients run."""
    buf, start, end, i, step, deadline, stop, prog, slot = _window(m)
    ebuf, think_s, sleep = _slots(m.ends), m.think, asyncio.sleep
    for j in range(start, end):
        prog[slot] = j
        t0 = clock()
        await op(i)
        t1 = clock()
        buf[j] = t1 - t0
        ebuf[j] = t1
        i += step
        if t1 >= deadline or stop[0]:
            return j + 1
        await sleep(think_s)
    return end


async def wait_until_async(t_ns: int) -> None:
    """Sleep to within ``SPIN_NS`` of t_ns, then yield to the loop until it
    comes (a loop timer fires up to 1 ms late)."""
    while True:
        left = t_ns - clock()
        if left <= 0:
            return
        await asyncio.sleep((left - SPIN_NS) / 1e9 if left > 2 * SPIN_NS else 0)


async def open_async(op: Callable[[int], Awaitable[Any]], m: Any) -> int:
    """``open_`` for a coroutine op: latency from the intended start (a
    turn given to the loop's other clients counts, as any queueing does)."""
    buf, start, end, i, step, deadline, stop, prog, slot = _window(m)
    sbuf, origin, interval = _slots(m.svc), m.origin, m.interval
    for j in range(start, end):
        prog[slot] = j
        due = origin + int(j * interval)
        if clock() < due:
            await wait_until_async(due)
        t0 = clock()
        await op(i)
        t1 = clock()
        buf[j] = t1 - due
        sbuf[j] = t1 - t0
        i += step
        if t1 >= deadline or stop[0]:
            return j + 1
        if not (j + 1) % YIELD_EVERY:  # behind schedule it would not wait: the others' turn
            await asyncio.sleep(0)
    return end


def closed_ends(lat: np.ndarray, marks: list[tuple[int, int]]) -> np.ndarray:
    """When each op of ``closed`` ended: each call's start plus the running
    sum of its latencies (an op marked -1, which failed, ends its call)."""
    ends = np.zeros(len(lat), np.int64)
    bounds = [s for s, _ in marks[1:]] + [len(lat)]
    for (s, t0), e in zip(marks, bounds, strict=True):
        seg = lat[s:e]
        ends[s:e] = t0 + np.cumsum(np.maximum(seg, 0))
    return ends


def open_ends(lat: np.ndarray, origin: int, interval: float) -> np.ndarray:
    """When each op of ``open_`` ended: when it was due plus its latency."""
    due = origin + (np.arange(len(lat)) * interval).astype(np.int64)
    return due + lat
