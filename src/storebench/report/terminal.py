"""Terminal tables of result records (rich)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from storebench import records
from storebench.records import RunRecord


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    if ns < 1_000:
        return f"{ns:.0f}ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f}µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e9:.2f}s"


def fmt_rate(x: float | None) -> str:
    if not x:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


STATUS_STYLE = {"ok": "green", "failed": "bold red", "interrupted": "yellow", "skipped": "yellow"}


def run_table(rec: RunRecord | dict[str, Any]) -> Table:
    """One record as a table; a hand-made record may lack any field but
    run_id (what it lacks shows as "?"). Numbers are formatted as the
    report formats them (``fmt_rate``, ``fmt_ns``, recall to 4 places)."""
    from storebench.report.data import store_label

    rec = records.parse(rec)
    grid = ", ".join(f"{k}={v}" for k, v in rec.grid_point.items())
    status = rec.status
    title = Text.assemble(
        (f"{rec.scenario or '?'} · {store_label(rec)}", "bold"),
        f"  {grid}  " if grid else "  ",
        (status, STATUS_STYLE.get(status, "")),
        f"  run {rec.run_id}",
    )
    t = Table(title=title, title_justify="left")
    for col in (
        "task",
        "clients",
        "ops",
        "ops/s",
        "docs/s",
        "mean",
        "p50",
        "p95",
        "p99",
        "max",
        "note",
    ):
        t.add_column(col, justify="left" if col in ("task", "note") else "right")
    for task in rec.tasks:
        if task.unsupported is not None:
            t.add_row(task.name, *["-"] * 9, Text(task.unsupported, "dim"))
            continue
        lat = task.latency_ns
        notes = [f"{k}={v}" for k, v in (task.search or {}).items()]
        for k in task.score_keys():
            v = task.number(k)
            if v is not None:
                notes.append(f"{k}={v:.4f}")
        if task.index_build == "during_insert":
            notes.append("index built during upload")
        if task.errors:
            notes.append(f"errors={sum(task.errors.values())}")
        if task.skipped:
            notes.append(f"skipped={sum(task.skipped.values())}")
        if not task.complete:
            notes.append("partial")
        t.add_row(
            task.name,
            str(task.clients),
            f"{task.ops:,}",
            fmt_rate(task.ops_per_s),
            fmt_rate(task.items_per_s) if task.items != task.ops else "",
            fmt_ns(lat.get("mean")),
            fmt_ns(lat.get("p50")),
            fmt_ns(lat.get("p95")),
            fmt_ns(lat.get("p99")),
            fmt_ns(lat.get("max")),
            " ".join(notes),
        )
    if rec.error:
        t.caption = Text(f"error: {rec.error}", "red")
        t.caption_justify = "left"
    return t


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader closed the pipe (``| head``): rich would exit 1; the
        command line ends quietly with 141 instead (``cli.Group``)."""
        self.quiet = True
        raise BrokenPipeError


def make_console() -> Console:
    """Wide enough for the tables even when the output is a pipe or a file."""
    console = _Console()
    return console if console.is_terminal else _Console(width=160)


def print_records(
    recs: Iterable[RunRecord | dict[str, Any]], console: Console | None = None
) -> None:
    console = console or make_console()
    for rec in recs:
        console.print(run_table(rec))
        console.print()


def print_study_tables(
    recs: Sequence[RunRecord | dict[str, Any]], console: Console | None = None
) -> None:
    """After a run: each workload's own report tables (the studies' shapes,
    as the Markdown report shows them), in the terminal."""
    from storebench.report.views import ALL, ViewInput, views_for
    from storebench.report.views import Table as ViewTable

    console = console or make_console()
    by_workload: dict[str, list[RunRecord]] = {}
    for rec in records.parse_all(recs):
        by_workload.setdefault(str(rec.workload), []).append(rec)
    for workload, recs in by_workload.items():
        v = ViewInput(workload, recs)
        for view in views_for(workload):
            if view.workload == ALL or view.needs_plots:
                continue
            for block in view.fn(v):
                if not isinstance(block, ViewTable):
                    continue
                t = Table(title=block.title, title_justify="left")
                for col, al in zip(block.columns, block.aligns(), strict=False):
                    t.add_column(col, justify="left" if al == "l" else "right")
                for row in block.rows:
                    t.add_row(*row)
                if block.note:
                    t.caption, t.caption_justify = block.note, "left"
                console.print(t)
                console.print()
