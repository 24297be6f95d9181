"""Terminal tables of result records (rich), fitted to the terminal.

A table never cuts a number: each column is at least as wide as its longest
word (numbers are words), headers wrap at spaces or are abbreviated, and
when the columns still do not fit, the least important ones are left out
(the caption names them). A run prints as one line by default
(``run_line``), as a full table with ``-v`` (``run_table``); the study's own
tables (``study_tables``) come last, for ``run`` and ``show`` alike, for
one run as for many.

One module (~500 lines) on purpose: the run line, the run table and the
study tables are written for the one fitting step (``fitted_table``) and
change with it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from storebench.results import records
from storebench.results import scores as catalogue
from storebench.results.records import RunRecord, TaskRecord
from storebench.results.scores import RECALL


def fmt_ns(ns: float | None) -> str:
    """A latency to 3 significant figures (the HDR histograms' resolution),
    in the largest unit that keeps it at least 1: one rule, so a value
    shows the same in every table whatever its source's last digits."""
    if ns is None:
        return "-"
    r = float(f"{ns:.3g}")
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if r >= scale:
            x = r / scale
            return f"{x:,.{2 if x < 10 else 1 if x < 100 else 0}f}{unit}"
    return f"{r:.0f}ns"


def fmt_mean(latency_ns: dict[str, Any] | None) -> str:
    """The mean latency, marked where it is above the p95 (``views.stalls``)."""
    from storebench.report.views import stalls

    lat = latency_ns or {}
    return fmt_ns(lat.get("mean")) + stalls(lat.get("mean"), lat.get("p95"))


def fmt_latency(t: Any, key: str, of: str = "latency_ns") -> str:
    """A task's latency ``key`` (``of``: or its service time), the mean
    marked where it is above the p95; "-" without the task or the value."""
    if t is None:
        return "-"
    return fmt_mean(getattr(t, of)) if key == "mean" else fmt_ns(t.number(f"{of}.{key}"))


def fmt_rate(x: float | None) -> str:
    if not x:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


STATUS_STYLE = {"ok": "green", "failed": "bold red", "interrupted": "yellow", "skipped": "yellow"}

# --- fitting ------------------------------------------------------------------------

# header words shortened before they are cut (a cut keeps a trailing ".")
ABBREVIATIONS = {
    "configuration": "config",
    "clients": "cl",
    "saturated": "sat",
    "ceiling": "ceil",
    "engine": "eng",
    "server": "srv",
    "client": "cli",
}
# what a reader looks for first keeps its column longest (lower: kept longer)
PRIORITY_WORDS = (
    ("qps", 1),
    ("ops/s", 1),
    ("p50", 2),
    ("p99", 2),
    ("docs/s", 3),
    ("mean", 3),
    ("upload", 3),
    ("index", 3),
    ("clients", 4),
    ("p95", 4),
    ("ops", 4),
    ("max", 5),
    ("cpu/s", 5),
    ("cpu", 5),
    ("ceiling", 5),
    ("saturated", 5),
    ("engine", 5),
    ("note", 5),
    # the footprint and a streaming stage's details, after what a row is
    ("service", 5),
    ("beside", 5),
    ("rss", 5),
    ("data size", 5),
    ("bytes/vector", 5),
    ("runs", 6),
    ("run", 6),
)
DEFAULT_PRIORITY = 3
KEEP_WHOLE_HEADERS_UP_TO = 2  # whole header words, unless a column this telling goes
BORDER_PER_COLUMN = 3  # a cell's two spaces of padding and its left border
BORDER_EDGE = 1  # the table's right edge


def column_priority(header: str, position: int) -> int:
    """The first column (what a row is) stays; then recall and throughput,
    the median and tail latency; run ids and machine details go first."""
    if position == 0:
        return 0
    text = header.lower()
    scores = tuple((s.name, s.priority) for s in catalogue.CATALOGUE.values())
    for word, prio in scores + PRIORITY_WORDS:
        if re.search(rf"(?<![\w/]){re.escape(word)}(?![\w/])", text):
            return prio
    return DEFAULT_PRIORITY


def _words(cell: str) -> list[str]:
    return [w for line in cell.split("\n") for w in line.split(" ") if w]


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _abbreviate(header: str, width: int) -> str:
    """``header`` with each word longer than ``width`` shortened: a known
    abbreviation, else cut with a trailing "." (never an ellipsis)."""
    out = []
    for word in header.split(" "):
        if len(word) > width:
            # the letters go short, what follows them stays: Recall@10 -> rec@10
            m = re.match(r"(\W*)([A-Za-z]+)(.*)", word)
            lead, letters, rest = m.groups() if m else ("", word, "")
            if len(lead) + len(rest) >= width - 1:  # what follows is long too: cut the word
                lead, letters, rest = "", word, ""
            room = max(1, width - len(lead) - len(rest))
            scores = {s.name: s.short for s in catalogue.CATALOGUE.values() if s.short}
            short = (ABBREVIATIONS | scores).get(letters.lower())
            if short and len(short) <= room:
                letters = short
            elif len(letters) > room:
                letters = letters[: max(1, room - 1)] + "." if room > 1 else letters[:1]
            word = lead + letters + rest
        out.append(word)
    return " ".join(out)


@dataclass
class Fit:
    """Which columns a table keeps at a width, how wide each is, and the
    headers as shown; those left out (``hidden``), and of them the ones
    that hold one value in every row (``same``: header -> value)."""

    kept: list[int]
    widths: list[int]
    headers: list[str]
    hidden: list[str]
    same: dict[str, str]


EMPTY_CELLS = ("", "-")


def telling_columns(cells: Sequence[Sequence[str]], among: Sequence[int]) -> list[int]:
    """The columns (of ``among``) that tell the rows apart: the first, then
    left to right each that splits rows not told apart yet (a blank cell
    repeats the one above it: a row that continues its group), until every
    row is apart. Rows that no columns tell apart: the first column only."""
    filled: dict[int, list[str]] = {}
    for i in among:
        last, filled[i] = "", []
        for c in cells[i]:
            last = c if c.strip() else last
            filled[i].append(last)
    nrows = len(cells[among[0]]) if among else 0

    def groups(cols: list[int]) -> int:
        return len({tuple(filled[i][r] for i in cols) for r in range(nrows)})

    keys = list(among[:1])
    apart = groups(keys)
    for i in among[1:]:
        if apart == nrows:
            break
        if (more := groups([*keys, i])) > apart:
            keys.append(i)
            apart = more
    return keys if apart == nrows else keys[:1]


def fit_columns(
    headers: Sequence[str],
    rows: Sequence[Sequence[str | Text]],
    width: int,
    priorities: Sequence[int] | None = None,
) -> Fit:
    """Columns that fit ``width`` (borders included) with no word of a cell
    cut, each column at least its longest word wide. A column that holds
    nothing (every cell "-" or blank) is left out; the columns that tell
    the rows apart (``telling_columns``) always stay. While the rest do not
    fit, one goes: first those with the same value in every row (the
    caption says it once), then the highest priority number (the least
    important: ``column_priority``), the rightmost among equals. The room
    left widens the columns toward their full width, the narrowest need
    first. Header words stay whole unless shortening them keeps a column of
    the first priorities (recall, throughput, p50/p99) that whole words
    would leave out."""
    n = len(headers)
    cells = [[_plain(r[i]) if i < len(r) else "" for r in rows] for i in range(n)]
    prio = list(priorities or [column_priority(h, i) for i, h in enumerate(headers)])
    start = [i for i in range(n) if not rows or any(c not in EMPTY_CELLS for c in cells[i])]
    start = start or [0]
    keys = telling_columns(cells, start)
    for i in keys:  # what a row is stays
        prio[i] = 0
    same = {i for i in start if len(rows) > 1 and i not in keys and len(set(cells[i])) == 1}

    def fit(whole_headers: bool) -> Fit:
        return _fit(headers, cells, width, prio, start, same, whole_headers)

    whole, short = fit(True), fit(False)
    wanted = {i for i in short.kept if prio[i] <= KEEP_WHOLE_HEADERS_UP_TO}
    return whole if wanted <= set(whole.kept) else short


def _fit(
    headers: Sequence[str],
    cells: list[list[str]],
    width: int,
    prio: Sequence[int],
    start: list[int],
    same: set[int],
    whole_headers: bool,
) -> Fit:
    # a column's narrowest: its longest word (numbers whole), a header word
    # of 4 at least; the columns that say what a row is, whole up to a quarter
    least, full, words = [], [], []
    for i, h in enumerate(headers):
        cell_min = max((len(w) for c in cells[i] for w in _words(c)), default=1)
        head_word = max((len(w) for w in h.split()), default=1)
        head_min = head_word if whole_headers else min(head_word, max(cell_min, 4))
        longest = max((len(line) for c in cells[i] for line in c.split("\n")), default=1)
        full.append(max(longest, len(h), cell_min, head_min, 1))
        label = min(longest, max(12, width // 4)) if prio[i] == 0 else 0
        words.append(max(cell_min, head_min, 1))
        least.append(max(words[-1], label))
    kept = list(start)

    def needed(cols: list[int]) -> int:
        return sum(least[i] for i in cols) + BORDER_PER_COLUMN * len(cols) + BORDER_EDGE

    while needed(kept) > width:
        droppable = [i for i in kept if prio[i] > 0]
        if not droppable:
            least = words  # the labels wrap too, at their words
            break
        kept.remove(max(droppable, key=lambda i: (i in same, prio[i], i)))
    widths = {i: least[i] for i in kept}
    room = width - needed(kept)
    for i in sorted(kept, key=lambda i: (prio[i] > 0, full[i] - least[i])):
        grow = min(room, full[i] - widths[i])
        widths[i] += grow
        room -= grow
    hidden = [i for i in start if i not in kept]
    return Fit(
        kept,
        [widths[i] for i in kept],
        [_abbreviate(headers[i], widths[i]) for i in kept],
        [headers[i] for i in hidden],
        {headers[i]: cells[i][0] for i in hidden if i in same},
    )


def fitted_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str | Text]],
    width: int,
    aligns: Sequence[str] | None = None,
    title: str | Text | None = None,
    caption: str | Text | None = None,
    priorities: Sequence[int] | None = None,
) -> Table:
    """A rich table of ``rows`` that fits ``width`` (``fit_columns``):
    cells wrap at spaces, a word longer than its column (text only: numbers
    set the column's width) folds; the caption names the columns left out,
    and the value of those that hold one value in every row. What the
    stalls mark means (``views.STALLS_NOTE``) is said where a cell shown
    carries it, and only there."""
    from storebench.report.views import STALLS_NOTE, stalls_note

    aligns = list(aligns or ["l"] + ["r"] * (len(headers) - 1))
    fit = fit_columns(headers, rows, width, priorities)
    t = Table(title=title, title_justify="left")
    for i, w, h in zip(fit.kept, fit.widths, fit.headers, strict=True):
        t.add_column(h, justify="left" if aligns[i] == "l" else "right", width=w, overflow="fold")
    shown = [[row[i] if i < len(row) else "" for i in fit.kept] for row in rows]
    for cells in shown:  # cells are data, never markup: "storebench[hnswlib]" stays whole
        t.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))
    why = stalls_note([*([_plain(c) for c in row] for row in shown), list(fit.same.values())])
    if isinstance(caption, str) and not why:  # a view's note says it of all its columns
        caption = caption.replace(f". {STALLS_NOTE}", ".").replace(STALLS_NOTE, "")
    notes: list[str | Text] = [caption] if caption else []
    if why and why not in _plain(caption or ""):
        notes.append(why)
    if fit.same:
        notes.append("in every row: " + ", ".join(f"{h}={v}" for h, v in fit.same.items()))
    if others := [h for h in fit.hidden if h not in fit.same]:
        notes.append(f"not shown at {width} columns: {', '.join(others)}")
    if notes:
        t.caption = Text("\n").join(n if isinstance(n, Text) else Text(n) for n in notes)
        t.caption_justify = "left"
    return t


# --- one run ------------------------------------------------------------------------


RUN_COLUMNS = (
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
    "recall",
    "note",
)


def _recall_text(task: Any) -> tuple[str, list[str]]:
    """The task's recall (its own column) and its other scores (the note)."""
    recall, others = "", []
    for k in task.score_keys():
        v = task.scores[k]
        if v is None:
            continue
        if catalogue.of(k) is RECALL and not recall:
            recall = catalogue.text(k, v)
            if k != RECALL.key(10):
                others.append(f"({k})")
        else:
            others.append(f"{k}={catalogue.text(k, v)}")
    return recall, others


def run_title(rec: RunRecord) -> Text:
    from storebench.report.data import store_label

    grid = ", ".join(f"{k}={v}" for k, v in rec.grid_point.items())
    return Text.assemble(
        (f"{rec.scenario or '?'} · {store_label(rec)}", "bold"),
        f"  {grid}  " if grid else "  ",
        (rec.status, STATUS_STYLE.get(rec.status, "")),
        f"  run {rec.run_id}",
    )


def task_cells(t: TaskRecord) -> list[str]:
    """A measured task's clients, operations, rates and latencies, as every
    per-task table prints them (``RUN_COLUMNS[1:10]``)."""
    lat = t.latency_ns
    return [
        str(t.clients),
        f"{t.ops:,}",
        fmt_rate(t.ops_per_s),
        fmt_rate(t.items_per_s) if t.items != t.ops else "",
        fmt_mean(lat),
        *(fmt_ns(lat.get(k)) for k in ("p50", "p95", "p99", "max")),
    ]


def task_notes(t: TaskRecord) -> list[str]:
    """What a per-task row notes beside its numbers: how the index was
    built, failed and skipped operations, a task cut short."""
    notes = ["index built during upload"] if t.index_build == "during_insert" else []
    notes += [
        f"{k}={n}"
        for k, d in (("errors", t.errors), ("skipped", t.skipped))
        if (n := sum(d.values()))
    ]
    return notes + ([] if t.complete else ["partial"])


def run_rows(rec: RunRecord) -> list[list[str | Text]]:
    rows: list[list[str | Text]] = []
    for task in rec.tasks:
        if task.unsupported is not None:
            rows.append([task.name, *["-"] * 10, Text(task.unsupported, "dim")])
            continue
        recall, notes = _recall_text(task)
        notes = [f"{k}={v}" for k, v in (task.search or {}).items()] + notes + task_notes(task)
        rows.append([task.name, *task_cells(task), recall, " ".join(notes)])
    return rows


def run_table(rec: RunRecord | dict[str, Any], width: int = 160) -> Table:
    """One record as a table fitted to ``width``; a hand-made record may
    lack any field but run_id (what it lacks shows as "?"). Numbers are
    formatted as the report formats them (``fmt_rate``, ``fmt_ns``,
    recall to 4 places); recall has its own column."""
    rec = records.parse(rec)
    rows = run_rows(rec)
    used = [
        i
        for i, col in enumerate(RUN_COLUMNS)
        if col not in ("docs/s", "recall", "note") or any(_plain(r[i]) for r in rows)
    ]
    return fitted_table(
        [RUN_COLUMNS[i] for i in used],
        [[r[i] for i in used] for r in rows],
        width,
        ["l" if RUN_COLUMNS[i] in ("task", "note") else "r" for i in used],
        title=run_title(rec),
        caption=Text(f"error: {rec.error}", "red") if rec.error else None,
    )


def docs_per_s(rec: RunRecord) -> float | None:
    """The run's own documents per second, where it counts them (ingest:
    to the last acknowledgment or until the engine holds every document):
    what ranks runs whose batches differ."""
    return records.as_number(rec.metrics.get("docs_per_s"))


def run_summary(rec: RunRecord | dict[str, Any]) -> dict[str, Any]:
    """What one line says of a run, as data (``--json``): its headline
    task's throughput and latency, its recall (the range over a sweep)."""
    from storebench.report.data import store_label
    from storebench.run.progress import record_seconds

    rec = records.parse(rec)
    head = rec.headline_task()
    recalls = [
        v
        for t in rec.tasks
        if t.measured and not t.filter
        for v in [t.number(k) for k in t.score_keys(RECALL)[:1]]
        if v is not None
    ]
    return {
        "run_id": rec.run_id,
        "scenario": rec.scenario,
        "workload": rec.workload,
        "store": store_label(rec),
        "grid_point": rec.grid_point,
        "search_sweep": rec.search_sweep,
        "repeat": rec.repeat,
        "status": rec.status,
        "error": rec.error,
        "headline": head.name if head else None,
        "ops_per_s": head.ops_per_s if head else None,
        # documents per second where the run counts them (ingest: batches differ)
        "docs_per_s": docs_per_s(rec),
        "p50_ns": head.latency_ns.get("p50") if head else None,
        "p99_ns": head.latency_ns.get("p99") if head else None,
        "recall_key": next((k for t in rec.tasks for k in t.score_keys(RECALL)), None),
        "recall_min": min(recalls) if recalls else None,
        "recall_max": max(recalls) if recalls else None,
        "seconds": record_seconds(rec),
    }


def run_line(rec: RunRecord | dict[str, Any], width: int = 160, prefix: str = "") -> Text:
    """A run on one line of at most ``width`` columns: status,
    configuration, the headline task's ops/s and p50/p99, recall, time, run
    id; the parts that do not fit are left out whole, the least telling
    first (a number is never cut)."""
    s = run_summary(rec)
    # a grid key's last part says enough here (index.m -> m)
    point = (f"{k.rsplit('.', 1)[-1]}={v}" for k, v in s["grid_point"].items())
    config = " ".join([s["store"], *point])
    parts: list[tuple[int, Text]] = []  # (priority, text), shown in this order
    if prefix:
        parts.append((0, Text(prefix)))
    parts.append((0, Text(s["status"], STATUS_STYLE.get(s["status"], ""))))
    parts.append((0, Text(config, "bold")))
    if s["headline"]:
        rate = (s["docs_per_s"], "docs/s") if s["docs_per_s"] else (s["ops_per_s"], "ops/s")
        parts.append((1, Text(f"{s['headline']}: {fmt_rate(rate[0])} {rate[1]}")))
        parts.append((2, Text(f"p50 {fmt_ns(s['p50_ns'])}")))
        parts.append((2, Text(f"p99 {fmt_ns(s['p99_ns'])}")))
    if s["recall_min"] is not None:
        lo, hi = (catalogue.text(s["recall_key"], s[x]) for x in ("recall_min", "recall_max"))
        value = lo if lo == hi else f"{lo}-{hi}"
        parts.append((1, Text(f"{s['recall_key']} {value}")))
    if s["search_sweep"]:
        n = 1
        for values in s["search_sweep"].values():
            n *= len(values)
        parts.append((4, Text(f"({n} settings)", "dim")))
    if s["seconds"] is not None:
        parts.append((4, Text(f"{s['seconds']:.1f}s", "dim")))
    parts.append((5, Text(s["run_id"].rsplit("-", 1)[-1], "dim")))
    if s["status"] != "ok" and s["error"]:
        parts.append((6, Text(s["error"].split("\n")[0], "red")))
    shown = list(range(len(parts)))
    while sum(len(parts[i][1]) + 2 for i in shown) - 2 > width:
        droppable = [i for i in shown if parts[i][0] > 0]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda i: (parts[i][0], i)))
    line = Text("  ").join(parts[i][1] for i in shown)
    line.no_wrap = True
    line.overflow = "fold"
    return line


# --- printing -----------------------------------------------------------------------


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader closed the pipe (``| head``): rich would exit 1; the
        command line ends quietly with 141 instead (``cli.Group``)."""
        self.quiet = True
        raise BrokenPipeError


def make_console(quiet: bool = False, columns_env: bool = False) -> Console:
    """The terminal's width; a pipe or a file gets 160 (wide enough for the
    tables), or ``COLUMNS`` where set with ``columns_env`` (for tables
    fitted to the width, ``fitted_table``)."""
    console = _Console(quiet=quiet)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "") if columns_env else ""
    width = int(columns) if columns.isdigit() and int(columns) > 0 else 160
    return _Console(width=width, quiet=quiet)


def print_records(
    recs: Iterable[RunRecord | dict[str, Any]],
    console: Console | None = None,
    full: bool = True,
) -> None:
    """Each record as a table (``full``), else as one line."""
    console = console or make_console()
    for rec in recs:
        if full:
            console.print(run_table(rec, console.width))
            console.print()
        else:
            console.print(run_line(rec, console.width))


def study_tables(recs: Sequence[RunRecord | dict[str, Any]]) -> list[Any]:
    """Each workload's own report tables (the studies' shapes, as the
    Markdown report shows them), for one run as for many; a workload with
    no table of its own gets the shared ones (each task per configuration,
    the run metrics): ``views.Table`` blocks."""
    from storebench.report.views import ALL, ViewInput, view_blocks, views_for
    from storebench.report.views import Table as ViewTable

    by_workload: dict[str, list[RunRecord]] = {}
    for rec in records.parse_all(recs):
        by_workload.setdefault(str(rec.workload), []).append(rec)
    out = []
    for workload, mine in by_workload.items():
        v = ViewInput(workload, mine)
        tables = [view for view in views_for(workload) if not view.needs_plots]
        own = [view for view in tables if view.workload != ALL]
        for view in own or tables:
            out += [b for b in view_blocks(view, v) if isinstance(b, ViewTable)]
    return out


def print_study_tables(
    recs: Sequence[RunRecord | dict[str, Any]], console: Console | None = None
) -> None:
    """After a run (and in ``show``): the study's tables, fitted."""
    console = console or make_console()
    for block in study_tables(recs):
        console.print(
            fitted_table(
                block.columns,
                block.rows,
                console.width,
                block.aligns(),
                title=block.title,
                caption=block.note or None,
            )
        )
        console.print()


def tables_json(recs: Sequence[RunRecord | dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"title": b.title, "columns": b.columns, "rows": b.rows, "note": b.note}
        for b in study_tables(recs)
    ]
