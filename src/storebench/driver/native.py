"""The native timed loop (``client: native``): a driver loop in Rust.

Where a Python client's CPU per request is what a task would measure (one
small insert on PostgreSQL costs psycopg ~60 us of client CPU, pgbench ~30),
a collection may prepare an operation stream for ``storebench_fastclient``
(``native/fastclient``, built at set-up): its own connection, statements
parsed and every request encoded before the clock (``Collection.native_insert``,
``native_search``). The extension then runs the loops of ``loops.py`` with
the GIL released: the same contract (a latency in ns per op into the
driver's int64 buffer, the progress slot written, the stop flag read, the
deadline, CLOCK_MONOTONIC), so the driver, histograms and records do not
change. An op that fails ends the call with its slot marked -1 and its
error's text; ``measure`` counts it as ``core._measure`` counts a Python
op's exception, and resumes after it.

A task's ``client`` is ``python`` or ``native``; a workload's ``client``
parameter may also be ``auto``, which ``resolve`` turns into native where
the collection offers the op and the extension is installed.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from storebench.driver import loops
from storebench.errors import NotSupported, TaskFailed

if TYPE_CHECKING:
    from storebench.driver.core import Controls, Task
    from storebench.stores.base import Collection

MODULE = "storebench_fastclient"
ClientChoice = Literal["python", "native", "auto"]
# a duration task's first buffer: doubled as it fills (the extension returns
# at its end; core's 1 GiB of address space would be paid for here too)
_DURATION_SLOTS = 1 << 16


def extension() -> Any | None:
    """The native client's module, or None where it is not installed."""
    try:
        return importlib.import_module(MODULE)
    except ImportError:
        return None


def resolve(client: str, coll: Collection, op: str, *, think: bool = False) -> str:
    """``python`` or ``native`` for ``op`` on ``coll``; ``native`` where it
    cannot be is a NotSupported naming the store and the op; ``auto`` is
    native where it can be."""
    if client == "python":
        return "python"
    why = None
    if op not in coll.native_ops:
        why = f"the native client for {op}"
    elif think:
        why = f"the native client for {op} with think time"
    elif extension() is None:
        why = f"the native client ({MODULE} is not installed: tools/setup.py builds it)"
    if why is None:
        return "native"
    if client == "auto":
        return "python"
    raise NotSupported(coll.store.engine, why)


def _address(buf: Any, dtype: type) -> int:
    """Where a writable buffer (bytearray, array, memoryview of shared
    memory, numpy array) starts in memory."""
    return int(np.frombuffer(buf, dtype).ctypes.data)


def measure(
    task: Task, native: Any, c: int, ctl: Controls, start_ns: int, slot: int
) -> tuple[
    np.ndarray, np.ndarray | None, Callable[[], np.ndarray], Counter[str], Counter[str], bool
]:
    """``core._measure`` with the native loop: client c's measured ops, its
    progress in ``ctl.progress[slot]``; the same returns."""
    if task.think(c):
        raise NotSupported("native client", "think time")
    n = task.client_ops(c)
    deadline = start_ns + int(task.duration_s * 1e9) if task.duration_s is not None else 1 << 62
    size = n if n is not None else _DURATION_SLOTS
    lat = np.zeros(size, np.int64)
    svc = np.zeros(size, np.int64) if task.rate is not None else None
    marks: list[tuple[int, int]] = []
    interval = task.lanes * 1e9 / task.rate if task.rate else 0.0
    origin = start_ns + int(c * interval / task.lanes)
    stop = _address(ctl.stop, np.uint8)
    prog = _address(ctl.progress, np.int64) + 8 * slot
    errors: Counter[str] = Counter()
    used = 0
    while True:
        if task.rate is not None:
            used, t0, error = native.open(
                used,
                lat.ctypes.data,
                svc.ctypes.data,  # type: ignore[union-attr]
                len(lat),
                deadline,
                stop,
                prog,
                origin,
                interval,
            )
        else:
            start = used
            used, t0, error = native.closed(used, lat.ctypes.data, len(lat), deadline, stop, prog)
            marks.append((start, t0))
        if error is not None:  # one op failed: marked -1; count it, go on after it
            errors[error[:250]] += 1
            used += 1
            if sum(errors.values()) > task.max_errors:
                raise TaskFailed(
                    f"task {task.name}: operation {used - 1} of client {c} failed: {error}"
                )
        if ctl.stop[0] or loops.clock() >= deadline or (n is not None and used >= n):
            break
        if used == len(lat):  # duration mode: more room, doubled (as _measure)
            more = np.zeros(len(lat), np.int64)
            lat = np.concatenate([lat, more])
            if svc is not None:
                svc = np.concatenate([svc, more])
    complete = not ctl.stop[0] and (n is None or used >= n)
    lat = lat[:used]

    def end_times() -> np.ndarray:
        if task.rate is not None:
            return loops.open_ends(lat, origin, interval)
        return loops.closed_ends(lat, marks)

    svc = svc[:used] if svc is not None else None
    return lat, svc, end_times, errors, Counter(), complete
