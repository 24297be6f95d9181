"""One client's measured ops, whichever loop runs them.

Three kinds of loop time operations: the Python loops of ``loops.py`` (thread
and process clients), their async twins (``driver/aio.py``: clients as
coroutines) and the compiled loop of the native client (``driver/native.py``).
They differ only in how they call an operation; everything around the call
is here, once: the latency buffers (and when they grow), what a failed or
uncounted operation leaves in them, when a client is done (its share of
``ops``, the deadline, the stop flag, the window's floor), and the results
(``Outcome``) from which ``core`` builds the client's histograms and series.

The loop ``pick`` names is called as ``loop(op, m)`` and returns how many
slots are used; an exception it raises is one operation's (``skip`` or
``fail`` marks it at the progress slot); ``more()`` says whether to call it
again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from storebench.driver import loops
from storebench.errors import TaskFailed

if TYPE_CHECKING:
    from storebench.driver.core import Controls, Task

# Latency slots a client of a duration task starts with: 1 GiB of address
# space, which costs memory only as operations fill it (the kernel hands out
# zeroed pages on first touch), so no task short of 134 M operations per client
# stops to copy its buffer; past that it doubles. (Growing by small chunks
# copied everything measured so far at each step: the copies grew with the
# task and ate its throughput, as its per-interval series showed.)
DURATION_SLOTS = 1 << 27
DURATION_CHUNK = 1 << 16  # where that much address space is refused
Loop = Callable[[Any, "Measurement"], Any]
FAILED = -1  # the latency slot of an op that failed
SKIPPED = -2  # the latency slot of an op that found nothing to do


@dataclass
class Outcome:
    """A client's measured ops: latency per op (FAILED/SKIPPED marked),
    service times (open loop), when each op ended (computed once the clock
    has stopped), errors and skips by message, and whether it ran them all."""

    lat: np.ndarray
    svc: np.ndarray | None
    ends: Callable[[], np.ndarray]
    errors: Counter[str]
    skipped: Counter[str]
    complete: bool


class Measurement:
    """The buffers and bookkeeping of client ``c``'s measured ops, from
    ``start_ns``; its progress is ``ctl.progress[slot]``. ``first_slots``:
    the buffer a duration task starts with (a loop that returns to Python
    often may start smaller)."""

    def __init__(
        self,
        task: Task,
        c: int,
        ctl: Controls,
        start_ns: int,
        slot: int,
        first_slots: int = DURATION_SLOTS,
    ):
        self.task, self.c, self.ctl, self.slot = task, c, ctl, slot
        self.n = task.client_ops(c)
        self.deadline = (
            start_ns + int(task.duration_s * 1e9) if task.duration_s is not None else 1 << 62
        )
        self.floor = start_ns + int(task.min_duration_s * 1e9)  # the window's (ops tasks)
        self.think = task.think(c)
        size = self.n if self.n is not None else first_slots
        try:
            self.lat = np.zeros(size, np.int64)
        except MemoryError:
            if self.n is not None:
                raise
            size = DURATION_CHUNK  # strict overcommit: start small, double as needed
            self.lat = np.zeros(size, np.int64)
        self.svc = np.zeros(size, np.int64) if task.rate is not None else None
        self.ends = np.zeros(size if self.think else 0, np.int64)  # the thinking loop's
        self.marks: list[tuple[int, int]] = []  # the closed loop's (first slot, start) per call
        self.interval = task.lanes * 1e9 / task.rate if task.rate else 0.0
        self.origin = start_ns + int(c * self.interval / task.lanes)
        self.errors: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.used = 0

    def pick(self, closed: Loop, thinking: Loop, open_: Loop) -> Loop:
        """Which of the three loops runs this client: open at a rate,
        thinking with a pause, else closed (called as ``loop(op, self)``)."""
        if self.task.rate is not None:
            return open_
        return thinking if self.think else closed

    def skip(self, why: str) -> None:
        """The op in flight found nothing to do (NotCounted): not a latency."""
        at = int(self.ctl.progress[self.slot])
        self.lat[at] = SKIPPED
        self.skipped[why] += 1
        self.used = at + 1

    def fail(self, why: str, at: int | None = None, exc: BaseException | None = None) -> None:
        """The op in flight (or at slot ``at``) failed: marked, counted under
        ``why`` (shortened), and the task failed once it has more errors than
        it tolerates."""
        at = int(self.ctl.progress[self.slot]) if at is None else at
        self.lat[at] = FAILED
        if len(self.ends):  # the thinking loop writes ends of ops that returned only
            self.ends[at] = loops.clock()
        self.errors[why[:250]] += 1
        self.used = at + 1
        if sum(self.errors.values()) > self.task.max_errors:
            detail = f"{type(exc).__name__}: {exc}" if exc is not None else why
            raise TaskFailed(
                f"task {self.task.name}: operation {at} of client {self.c} failed: {detail}"
            ) from exc

    def raised(self, exc: Exception) -> None:
        """``fail`` for the exception the op in flight raised."""
        self.fail(f"{type(exc).__name__}: {str(exc)[:200]}", exc=exc)

    def more(self) -> bool:
        """After a loop returned: whether to call it again (room is made)."""
        done = self.n is not None and self.used >= self.n
        if done and loops.clock() < self.floor:  # its ops are done, the window not yet
            self.deadline, done = self.floor, False
        if self.ctl.stop[0] or loops.clock() >= self.deadline or done:
            return False
        if self.used == len(self.lat):  # duration or floor: doubled so copies stay O(ops)
            more = np.zeros(max(len(self.lat), 1024), np.int64)
            self.lat = np.concatenate([self.lat, more])
            if self.think:
                self.ends = np.concatenate([self.ends, more])
            if self.svc is not None:
                self.svc = np.concatenate([self.svc, more])
        return True

    def outcome(self) -> Outcome:
        used, task = self.used, self.task
        lat = self.lat[:used]
        think, ends, marks = self.think, self.ends, self.marks
        origin, interval = self.origin, self.interval

        def end_times() -> np.ndarray:
            if task.rate is not None:
                return loops.open_ends(lat, origin, interval)
            return ends[:used] if think else loops.closed_ends(lat, marks)

        return Outcome(
            lat,
            self.svc[:used] if self.svc is not None else None,
            end_times,
            self.errors,
            self.skipped,
            not self.ctl.stop[0] and (self.n is None or used >= self.n),
        )
