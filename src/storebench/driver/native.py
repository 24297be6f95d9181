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

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from storebench.common import interrupts
from storebench.driver.loops import address
from storebench.driver.measure import Measurement
from storebench.errors import NotSupported
from storebench.stores.native import MODULE, extension

if TYPE_CHECKING:
    from storebench.driver.core import Controls, Task
    from storebench.driver.measure import Outcome
    from storebench.stores.base import Collection

ClientChoice = Literal["python", "native", "auto"]
# a duration task's first buffer: doubled as it fills (the extension returns
# at its end; core's 1 GiB of address space would be paid for here too)
_DURATION_SLOTS = 1 << 16


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


@contextlib.contextmanager
def stop_on_signal(ctl: Controls) -> Iterator[None]:
    """Inside the block SIGINT and SIGTERM set ``ctl.stop`` to their number
    in the signal handler itself, before any Python runs (where the compiled module is
    installed; else ``interrupts.on_signal`` alone does it, a GIL turn
    later). With thousands of thread clients taking the GIL in turn, that
    turn comes seconds after the signal; the clients then see the stop at
    their next op and end, and the main thread and the signal watcher get
    their turns at once."""
    ext = extension()
    if ext is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    ext.stop_on_signal(address(ctl.stop, np.uint8), [int(s) for s in interrupts.SIGNALS])
    try:
        yield
    finally:
        ext.stop_on_signal(0, [])  # the flag may be freed after this


def measure(task: Task, native: Any, c: int, ctl: Controls, start_ns: int, slot: int) -> Outcome:
    """``core._measure`` with the native loop: client c's measured ops, its
    progress in ``ctl.progress[slot]`` (``driver/measure.py``: the same
    buffers, failed ops, end and floor)."""
    if task.think(c):
        raise NotSupported("native client", "think time")
    m = Measurement(task, c, ctl, start_ns, slot, first_slots=_DURATION_SLOTS)
    stop = address(ctl.stop, np.uint8)
    prog = address(ctl.progress, np.int64) + 8 * slot
    while True:
        if task.rate is not None:
            assert m.svc is not None
            used, _, error = native.open(
                m.used,
                m.lat.ctypes.data,
                m.svc.ctypes.data,
                len(m.lat),
                m.deadline,
                stop,
                prog,
                m.origin,
                m.interval,
            )
        else:
            used, t0, error = native.closed(
                m.used, m.lat.ctypes.data, len(m.lat), m.deadline, stop, prog
            )
            m.marks.append((m.used, t0))
        m.used = used
        if error is not None:  # the op at ``used`` failed: count it, go on after it
            m.fail(error, at=used)
        if not m.more():
            return m.outcome()
