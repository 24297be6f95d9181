"""Progress on stderr (rich), silent when stderr is not a terminal.

A sweep line tells where the plan is ("run 7/18 · hnswlib m=16 · 1:02
elapsed · ETA 2:10", ``Sweep``); under it a bar per running task: counted
tasks by operations, duration-bound ones by time; a task whose clients are
still starting says so ("starting 4 client processes")."""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskProgressColumn,
    TimeElapsedColumn,
)
from rich.table import Column
from rich.text import Text

from storebench.common.redaction import redact

# before any run of an engine has been timed: a run's fixed cost and a
# managed server's start, per node of a cluster, times the engine's
# ``Store.pace.start`` (the work itself: the workload's ``TimeModel``, at
# the engine's pace, ``plan.dryrun.estimate``)
PRIOR_RUN_S = 0.1
PRIOR_SERVER_S = 4.0
MIN_WORK_S = 1e-3  # a run's least work: what its engine's pace is measured against


def fmt_duration(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "?"
    s = max(0, round(s))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class Sweep:
    """Time estimates for a plan's runs: each run's work (its workload's
    ``TimeModel.work_s``) times its engine's pace, measured on the runs
    done so far (those of the same engine and workload, else all of them),
    else taken from ``history`` (earlier records: engine, workload, work,
    seconds), else the model's own (plus the fixed costs above); to each
    its seconds known in advance (``timed``: the model's ``fixed_s``)."""

    def __init__(
        self,
        runs: list[tuple[str, str, float, float]],
        history: Iterable[tuple[str, str, float, float]] = (),
        timed: list[float] | None = None,
    ):
        # per run: (engine, workload, work, server processes it starts, each
        # weighed by its engine's start pace: 2 nodes at 1.5 are 3.0)
        self.runs = runs
        self.timed = timed or [0.0] * len(runs)
        self.done: list[tuple[str, str, float, float]] = []  # engine, workload, work, seconds
        self.history = list(history)

    def _rate(self, engine: str, workload: str) -> tuple[float, float] | None:
        """Seconds per second of modelled work, and a run's fixed seconds (0: in the rate)."""
        for pool in (self.done, self.history):
            same = [d for d in pool if d[0] == engine and d[1] == workload]
            if same:
                return sum(d[3] for d in same) / sum(d[2] for d in same), 0.0
        if self.done:
            return sum(d[3] for d in self.done) / sum(d[2] for d in self.done), 0.0
        return None

    def estimate(self, i: int) -> float:
        engine, workload, size, server = self.runs[i]
        rate = self._rate(engine, workload)
        if rate is None:
            rest = PRIOR_RUN_S + PRIOR_SERVER_S * server + size
        else:
            rest = rate[1] + size * rate[0]
        return self.timed[i] + rest

    def measured(self) -> bool:
        """Whether every run's estimate comes from timed runs (not the priors)."""
        return all(self._rate(e, w) is not None for e, w, _, _ in self.runs)

    def finished(self, i: int, seconds: float) -> None:
        engine, workload, size, _ = self.runs[i]
        self.done.append((engine, workload, size, max(0.0, seconds - self.timed[i])))

    def remaining(self, i: int, running_s: float = 0.0) -> float:
        """Seconds left from run ``i`` (running for ``running_s``) to the end."""
        rest = sum(self.estimate(j) for j in range(i + 1, len(self.runs)))
        return rest + max(0.0, self.estimate(i) - running_s) if i < len(self.runs) else rest

    def total(self) -> float:
        return sum(self.estimate(j) for j in range(len(self.runs)))


def record_seconds(rec: Any) -> float | None:
    """A record's wall time, from its start and finish stamps."""
    from datetime import datetime

    try:
        start = datetime.fromisoformat(str(rec.started_at))
        end = datetime.fromisoformat(str(rec.finished_at))
    except ValueError:
        return None
    return (end - start).total_seconds()


class _NullBar:
    def update(self, done: int) -> None:
        pass

    def close(self) -> None:
        pass


class NoProgress:
    def task(
        self,
        name: str,
        total: int | None = None,
        duration_s: float | None = None,
        starting: str | None = None,
    ) -> Any:
        return _NullBar()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def plan(self, sweep: Sweep | None) -> None:
        """The runs to come (``runner.run_scenario``, before the first)."""

    def run_started(self, i: int, label: str) -> None:
        """Run ``i`` of the plan begins (``label``: its configuration)."""

    def run_finished(self, i: int, seconds: float) -> None:
        pass

    def close(self) -> None:
        pass


class _Bar:
    """A counted task's bar (operations done of its total), or a
    duration-bound task's (seconds of its duration, operations so far in
    the text). Until the first update its text says what is starting."""

    def __init__(
        self,
        progress: Progress,
        name: str,
        total: int | None,
        duration_s: float | None = None,
        starting: str | None = None,
    ):
        self._p = progress
        self._name = redact(name)
        self._duration_s = duration_s if total is None else None
        self._t0: float | None = None
        text = f"{self._name}: starting {starting}" if starting else self._name
        self._id = progress.add_task(text, total=total or self._duration_s)

    def update(self, done: int) -> None:
        if self._t0 is None:
            self._t0 = time.monotonic()
            self._p.update(self._id, description=self._name)
        if self._duration_s is not None:
            elapsed = min(time.monotonic() - self._t0, self._duration_s)
            self._p.update(self._id, completed=elapsed, description=f"{self._name} ({done:,} ops)")
        else:
            self._p.update(self._id, completed=done)

    def close(self) -> None:
        self._p.remove_task(self._id)


class _Description(ProgressColumn):
    """A task's text; the sweep line's is made afresh at each refresh (its
    elapsed time and ETA move while a run goes on)."""

    def __init__(self, owner: RichProgress):
        super().__init__(table_column=Column(ratio=1, overflow="fold"))
        self.owner = owner

    def render(self, task: Task) -> Text:
        if task.fields.get("sweep"):
            return Text(self.owner.sweep_text(), style="bold")
        return Text(task.description)


class _BarOrNothing(BarColumn):
    def render(self, task: Task) -> Any:
        return Text("") if task.fields.get("sweep") else super().render(task)


class _ElapsedOrNothing(TimeElapsedColumn):
    def render(self, task: Task) -> Text:
        return Text("") if task.fields.get("sweep") else super().render(task)


class RichProgress(NoProgress):
    """The sweep's line, a bar per running task, a spinner for one-shot phases."""

    def __init__(self, console: Console):
        self._p = Progress(
            SpinnerColumn(),
            _Description(self),
            _BarOrNothing(bar_width=20),
            TaskProgressColumn(),
            _ElapsedOrNothing(),
            console=console,
            transient=True,
            expand=True,
        )
        self.console = console  # what prints above the bars (``print``)
        self._p.start()
        self._sweep: Sweep | None = None
        self._line: Any = None
        self._t0 = time.monotonic()
        self._run_t0 = self._t0
        self._i = 0
        self._label = ""

    def plan(self, sweep: Sweep | None) -> None:
        self._sweep = sweep
        self._t0 = time.monotonic()

    def sweep_text(self) -> str:
        now = time.monotonic()
        if self._sweep is None:
            return f"run {self._i + 1} · {redact(self._label)} · {fmt_duration(now - self._t0)}"
        eta = self._sweep.remaining(self._i, now - self._run_t0)
        return (
            f"run {self._i + 1}/{len(self._sweep.runs)} · {redact(self._label)} · "
            f"{fmt_duration(now - self._t0)} elapsed · ETA {fmt_duration(eta)}"
        )

    def run_started(self, i: int, label: str) -> None:
        self._i, self._label, self._run_t0 = i, label, time.monotonic()
        if self._line is None:
            self._line = self._p.add_task("", total=None, sweep=True)

    def run_finished(self, i: int, seconds: float) -> None:
        if self._sweep is not None:
            self._sweep.finished(i, seconds)

    def task(
        self,
        name: str,
        total: int | None = None,
        duration_s: float | None = None,
        starting: str | None = None,
    ) -> Any:
        return _Bar(self._p, name, total, duration_s, starting)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        bar = _Bar(self._p, name, None)
        try:
            yield
        finally:
            bar.close()

    def close(self) -> None:
        self._p.stop()


def make_progress(enabled: bool | None = None) -> NoProgress:
    console = Console(stderr=True)
    if enabled is None:
        enabled = sys.stderr.isatty()
    return RichProgress(console) if enabled else NoProgress()
