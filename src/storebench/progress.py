"""Progress bars on stderr (rich), silent when stderr is not a terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from storebench.redaction import redact


class _NullBar:
    def update(self, done: int) -> None:
        pass

    def close(self) -> None:
        pass


class NoProgress:
    def task(self, name: str, total: int | None = None, duration_s: float | None = None) -> Any:
        return _NullBar()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def close(self) -> None:
        pass


class _Bar:
    def __init__(self, progress: Progress, name: str, total: int | None):
        self._p = progress
        self._id = progress.add_task(redact(name), total=total)

    def update(self, done: int) -> None:
        self._p.update(self._id, completed=done)

    def close(self) -> None:
        self._p.remove_task(self._id)


class RichProgress(NoProgress):
    """A bar per running task; a spinner for one-shot phases."""

    def __init__(self, console: Console):
        self._p = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._p.start()

    def task(self, name: str, total: int | None = None, duration_s: float | None = None) -> Any:
        return _Bar(self._p, name, total)

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
