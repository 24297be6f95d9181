"""Over time: each run's throughput and p50/p99 per interval, its tasks laid
out on the run's clock with the one-shot phases (index build, settle, ...)
marked, so a stall, a compaction or a throughput collapse inside a task is
seen where the whole-task numbers average it away.

Reads each task's ``series`` (``metrics.Series.to_record``); records without
one (older records) have nothing to show here. ``sparklines`` is the
terminal's form (``storebench show --over-time``). Where the series has
them: an open loop's service time (latency without the queue: where both
rise the store slowed, where latency alone rises the queue grew), failed
operations per interval, and items/s for batched operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import median_high
from typing import Any

from storebench.report import plots
from storebench.report.data import group, ok_runs, short_run, store_label
from storebench.report.terminal import fmt_ns, fmt_rate
from storebench.report.views import ALL, Block, Table, Text, ViewInput, register
from storebench.results import records
from storebench.results.records import RunRecord, TaskRecord

MAX_RUNS = 8  # charts per report section: the configurations' chosen runs, in order
SPARK = "▁▂▃▄▅▆▇█"


@dataclass
class Span:
    """A task on its run's clock: seconds from the run's first task start."""

    task: TaskRecord
    start: float
    end: float

    @property
    def timed(self) -> bool:
        return bool(self.task.series and self.task.series.get("ops"))


def layout(run: RunRecord) -> list[Span]:
    """The run's measured tasks on one time line: by their recorded starts,
    else (clients on other machines' clocks) one after the other."""
    tasks = [t for t in run.tasks if t.measured and (t.series or t.elapsed_s)]
    if not tasks:
        return []
    if all(t.start_unix for t in tasks):
        t0 = min(t.start_unix or 0.0 for t in tasks)
        return [
            Span(t, (t.start_unix or 0.0) - t0, (t.start_unix or 0.0) - t0 + t.elapsed_s)
            for t in tasks
        ]
    out, at = [], 0.0
    for t in tasks:
        out.append(Span(t, at, at + t.elapsed_s))
        at += t.elapsed_s
    return out


def points(span: Span, key: str, of: str = "latency_ns") -> tuple[list[float], list[float]]:
    """(interval midpoints on the run's clock, values) of ``ops_per_s``, of
    ``errors`` per second, or of a percentile (``p50``, ``p99``, ``max``) of
    ``of`` (``latency_ns`` or ``service_ns``); empty intervals left out of
    the percentiles."""
    s = span.task.series or {}
    step = float(s.get("interval_s") or 1.0)
    ops = s.get("ops") or []
    rate = key in ("ops_per_s", "errors")
    values = s.get(key) if rate else (s.get(of) or {}).get(key)
    xs, ys = [], []
    for k, v in enumerate(values or []):
        if not rate and not ops[k]:
            continue
        a = span.start + k * step
        b = span.end if k == len(ops) - 1 else a + step  # the last runs to the task's end
        xs.append((a + b) / 2)
        ys.append(float(v) / (b - a) if key == "errors" else float(v))
    return xs, ys


def chosen_runs(v: ViewInput) -> list[tuple[str, RunRecord]]:
    """(label, whole run) of each configuration's chosen run, each run once
    (a sweep's settings are one run on one clock), labelled as the report
    labels configurations (``data.group``) of whole runs: its swept search
    settings are tasks on the run's time line."""
    whole = group(ok_runs(v.records))
    full = {r.run_id: (c.label, r) for c in whole for r in c.runs}
    out: list[tuple[str, RunRecord]] = []
    seen: set[str] = set()
    for c in v.configs():
        run_id = v.pick(c).run.run_id
        if run_id not in full or run_id in seen:
            continue
        seen.add(run_id)
        if any(s.timed for s in layout(full[run_id][1])):
            out.append(full[run_id])
    return out


@register(ALL, "timeline", "Throughput and latency over time", needs_plots=True)
def timeline_view(v: ViewInput) -> list[Block]:
    runs = chosen_runs(v)
    if not runs:
        return []
    shown = runs[:MAX_RUNS]
    fig = plots.new_figure(9.0, 3.0 * len(shown) + 1.4, 2 * len(shown), 1)
    axs = list(fig.axes)
    rows = []
    for i, (label, run) in enumerate(shown):
        rate_ax, lat_ax = axs[2 * i], axs[2 * i + 1]
        _draw(run, rate_ax, lat_ax)
        rate_ax.set_title(
            plots.plain(f"{label}  (run {short_run(run.run_id)})"), fontsize="medium", loc="left"
        )
        rows.extend(_rows(label, run))
    plots.figure_legend(fig, axs)
    fig.suptitle(plots.plain(f"{v.workload}: throughput and latency over time"))
    caption = (
        f"Per interval of each task (the {v.how} run of each configuration, each run once), "
        "on the run's clock; shaded: one-shot phases. p99 and p50 of the operations that "
        "ended in the interval, from the driver's per-interval HDR histograms; dotted: an "
        "open loop's service time (without the queue); triangles: failed operations per second."
    )
    if len(runs) > MAX_RUNS:
        caption += f" The first {MAX_RUNS} of {len(runs)} runs are shown."
    single = sum(len(s.task.series["ops"]) < 2 for _, run in shown for s in layout(run) if s.timed)
    note = (
        f"{single} task(s) of one interval left out: their numbers are the whole task's, "
        "in the tables above."
        if single
        else ""
    )
    chart = plots.render(fig, v.name("timeline"), "Throughput and latency over time", caption)
    if not rows:
        return [chart, Text(note)]
    return [
        chart,
        Table.of(
            "Intervals per task: steadiness and the worst interval",
            rows,
            align=["l", "l"] + ["r"] * 9,
            note=note,
        ),
    ]


def _draw(run: RunRecord, rate_ax: Any, lat_ax: Any) -> None:
    from matplotlib.ticker import LogLocator

    spans = layout(run)
    for span in spans:
        if not span.timed:
            for ax in (rate_ax, lat_ax):
                ax.axvspan(span.start, span.end, color="0.85", lw=0)
            rate_ax.annotate(
                plots.plain(span.task.name),
                (span.start, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize="x-small",
                color="0.4",
                va="top",
                rotation=90,
            )
            continue
        st = plots.style(span.task.name)  # a task looks the same in every run's panels
        color, marker = st["color"], st["marker"]
        xs, ys = points(span, "ops_per_s")
        rate_ax.plot(
            [x for x, y in zip(xs, ys, strict=True) if y > 0],
            [y for y in ys if y > 0],
            color=color,
            lw=1.2,
            marker=marker,
            ms=3,
            label=plots.plain(span.task.name),
        )
        # intervals where nothing completed: marked on the axis (a log scale has no 0)
        stalled = [x for x, y in zip(xs, ys, strict=True) if y <= 0]
        if stalled:
            rate_ax.plot(
                stalled,
                [0.0] * len(stalled),
                "x",
                color=color,
                transform=rate_ax.get_xaxis_transform(),
                clip_on=False,
            )
        xs, ys = points(span, "p99")
        lat_ax.plot(xs, ys, color=color, lw=1.2, marker=marker, ms=3)
        xs, ys = points(span, "p50")
        lat_ax.plot(xs, ys, color=color, lw=0.9, ls="--", marker=".", ms=2)
        xs, ys = points(span, "p99", "service_ns")
        if xs:  # an open loop: its service time, the queue left out
            lat_ax.plot(xs, ys, color=color, lw=1.0, ls=":", marker="+", ms=3)
        xs, ys = points(span, "errors")
        if any(ys):
            rate_ax.plot(
                [x for x, y in zip(xs, ys, strict=True) if y > 0],
                [y for y in ys if y > 0],
                color=color,
                ls="none",
                marker="v",
                ms=4,
                label=plots.plain(f"{span.task.name}: errors/s"),
            )
    plots.rate_axis(rate_ax, "y")
    rate_ax.set_ylabel("ops/s (x: none ended)")
    plots.fmt_ns_axis(lat_ax, "y")
    for ax in (rate_ax, lat_ax):  # decades only: a run's tasks span many
        ax.yaxis.set_major_locator(LogLocator(base=10))
    lat_ax.set_ylabel("p99 (solid), p50 (dashed),\nservice p99 (dotted)")
    lat_ax.set_xlabel("seconds from the run's first task")
    for ax in (rate_ax, lat_ax):
        ax.grid(True, alpha=0.3)


def _rows(label: str, run: RunRecord) -> list[dict[str, str]]:
    rows = []
    for span in layout(run):
        s = span.task.series or {}
        ops = s.get("ops") or []
        if not span.timed or len(ops) < 2:  # one interval: no steadiness to show
            continue
        rates = [float(r) for r in s.get("ops_per_s") or []] or [0.0]
        p99 = (s.get("latency_ns") or {}).get("p99") or []
        busy = [(x, k) for k, x in enumerate(p99) if ops[k]]
        worst, at = max(busy) if busy else (0, 0)
        step = float(s.get("interval_s") or 1.0)
        svc = (s.get("service_ns") or {}).get("p99") or []
        errors = s.get("errors") or []
        rows.append(
            {
                "configuration": label,
                "task": span.task.name,
                "intervals": str(len(ops)),
                **{
                    f"ops/s {k}": _rate(x)
                    for k, x in (
                        ("min", min(rates)),
                        ("median", median_high(rates)),
                        ("max", max(rates)),
                    )
                },
                "errors": _errors(errors, step),
                "service p99 median": (
                    fmt_ns(median_high([x for k, x in enumerate(svc) if ops[k]] or [0]))
                    if svc
                    else "-"
                ),
                "p99 median": fmt_ns(median_high([x for x, _ in busy] or [0])),
                "p99 worst": fmt_ns(worst),
                "worst at": f"{at * step:g}-{(at + 1) * step:g} s",
            }
        )
    return rows


def _errors(per_interval: Sequence[int], step: float) -> str:
    """A task's failed operations and the interval with most of them."""
    total = sum(per_interval)
    if not total:
        return "0"
    k = max(range(len(per_interval)), key=lambda i: per_interval[i])
    return f"{total:,} (most at {k * step:g}-{(k + 1) * step:g} s)"


# --- the terminal ------------------------------------------------------------------


def spark(values: Sequence[float], width: int, worst: bool = False) -> str:
    """``values`` as at most ``width`` block characters, lowest to highest;
    several values per character are averaged (``worst``: their max, so a
    spike is never smoothed away)."""
    if not values:
        return ""
    per = -(-len(values) // width)
    groups = [values[i : i + per] for i in range(0, len(values), per)]
    ys = [max(g) if worst else sum(g) / len(g) for g in groups]
    lo, hi = min(ys), max(ys)
    if hi <= lo:
        return SPARK[3] * len(ys)
    return "".join(SPARK[min(7, int((y - lo) / (hi - lo) * 8))] for y in ys)


def sparklines(run: RunRecord | dict[str, Any], width: int = 48) -> list[tuple[str, ...]]:
    """(task, throughput sparkline and range, p99 sparkline and range) per
    timed task that has a series (items/s where its operations carry
    batches); under it, where it has them, a line of its service time's p99
    (an open loop) and one of its failed operations per interval."""
    run = records.parse(run)
    out: list[tuple[str, ...]] = []
    for span in layout(run):
        if not span.timed:
            continue
        s = span.task.series or {}
        items = s.get("items_per_s")
        rates = [float(x) for x in items or s.get("ops_per_s") or []]
        unit = " items/s" if items else ""
        ops = s.get("ops") or []
        out.append(
            (
                span.task.name,
                f"{spark(rates, width)} {_rate(min(rates))}..{_rate(max(rates))}{unit}",
                _p99_line(s.get("latency_ns"), ops, width),
            )
        )
        if s.get("service_ns"):
            out.append(("  service time", "", _p99_line(s["service_ns"], ops, width)))
        errors = s.get("errors") or []
        if any(errors):
            out.append(
                ("  errors", f"{spark(errors, width, worst=True)} {sum(errors):,} in all", "")
            )
    return out


def _p99_line(latency: dict[str, Any] | None, ops: Sequence[int], width: int) -> str:
    given = (latency or {}).get("p99") or []
    p99 = [float(x) for x, n in zip(given, ops, strict=False) if n]  # busy intervals
    lo, hi = min(p99, default=0), max(p99, default=0)
    return f"{spark(p99, width, worst=True)} {fmt_ns(lo)}..{fmt_ns(hi)}"


def _rate(x: float) -> str:
    return fmt_rate(x) if x else "0"


def print_sparklines(recs: Iterable[RunRecord | dict[str, Any]], console: Any = None) -> None:
    """Each run's tasks over time, one line each: ops/s and p99 per interval."""
    from rich.table import Table as RichTable

    from storebench.report.terminal import make_console

    console = console or make_console()
    for rec in records.parse_all(recs):
        lines = sparklines(rec)
        if not lines:
            continue
        step = next((t.series.get("interval_s") for t in rec.tasks if t.series), 1.0)
        t = RichTable(
            title=f"{store_label(rec)} run {rec.run_id}: per {step:g} s interval",
            title_justify="left",
        )
        for col in ("task", "ops/s over time (min..max)", "p99 over time (min..max)"):
            t.add_column(col)
        for line in lines:
            t.add_row(*line)
        console.print(t)
        console.print()
