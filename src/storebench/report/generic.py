"""Views every workload gets: recall vs throughput (for tasks that measure a
recall), a per-task table per configuration, latency percentiles from the
HDR histograms, latency vs throughput over concurrency, spread across repeats."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from storebench.report import plots
from storebench.report.data import (
    Config,
    Spread,
    TaskSummary,
    aggregation_note,
    headline_value,
    histogram,
    percentiles,
)
from storebench.report.terminal import RUN_COLUMNS, fmt_ns, fmt_rate, task_cells, task_notes
from storebench.report.views import ALL, Block, Table, Text, ViewInput, distinct, register
from storebench.results import scores as catalogue
from storebench.results.records import TaskRecord
from storebench.results.scores import RECALL

CLIENTS = "params.clients"


def timed_tasks(configs: list[Config], min_ops: int = 2) -> list[str]:
    """Tasks with a latency histogram and at least ``min_ops`` operations."""
    names: list[str] = []
    for c in configs:
        for name in c.tasks():
            ts = c.task(name)
            if name in names or ts.unsupported:
                continue
            if any(t.histogram and t.ops >= min_ops for t in ts.measured):
                names.append(name)
    return names


def task_row(ts: TaskSummary, t: TaskRecord | None, run: str = "") -> list[str]:
    """One task of the chosen run (``t``), with the spread over the runs (``ts``)."""
    if ts.unsupported or t is None or not t.measured:
        why = ts.unsupported or (t.unsupported if t is not None else None) or "not measured"
        return [ts.name, *["-"] * 10, "not supported: " + why if ts.unsupported else why, run]
    notes = [
        f"{k}={catalogue.text(k, t.scores[k])}" for k in t.score_keys() if t.number(k) is not None
    ]
    notes += task_notes(t)
    s = ts.spread("ops_per_s")
    if s is not None and s.n > 1:
        notes.append(f"ops/s ±{s.rel_range * 50:.0f}% over {s.n}")
    return [ts.name, *task_cells(t), str(len(ts.measured)), " ".join(notes), run]


TASK_COLUMNS = [*RUN_COLUMNS[:10], "runs", "note", "run"]


@register(ALL, "recall_qps", "Recall vs throughput", needs_plots=True)
def recall_vs_qps(v: ViewInput) -> list[Block]:
    """Each configuration is a point (its chosen run); each store's Pareto
    front joins the points no other point of that store beats on both
    recall and queries per second."""
    configs = v.configs()
    found: list[tuple[str, str]] = []  # (task, recall key)
    for c in configs:
        for name in c.tasks():
            for k in c.task(name).score_keys(RECALL):
                if (name, k) not in found:
                    found.append((name, k))
    blocks: list[Block] = []
    for task, rkey in found:
        stores = distinct([c.engine for c in configs])
        fig = plots.new_figure(7.0, 4.4)
        ax = fig.axes[0]
        rows = []
        for store in stores:
            drawn = store in stores[: plots.MAX_SERIES]
            pts = []
            for c in configs:
                if c.engine != store:
                    continue
                pk = v.pick(c)
                t = pk.run.task(task)
                r, q = (t.number(rkey), t.ops_per_s) if t is not None else (None, None)
                if r is not None and q:
                    name = c.label.removeprefix(store).strip()
                    pts.append((r, q, c.task(task).spread("ops_per_s"), name))
                    cells = [catalogue.text(rkey, r), fmt_rate(q), str(pk.runs), pk.run_short]
                    rows.append([c.label, *cells, "" if drawn else "not drawn"])
            if not pts or not drawn:
                continue
            plots.pareto_series(ax, pts, store, marker=plots.style(store)["marker"])
        if not rows:
            continue
        ax.set_xlabel(plots.plain(catalogue.title(rkey)))
        ax.set_ylabel(plots.plain(f"{task}: queries per second"))
        plots.rate_axis(ax, "y")
        plots.recall_axis(ax, [float(r[1]) for r in rows], "x")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(plots.plain(f"{v.workload} · {task}: {rkey} vs QPS, Pareto front per store"))
        plots.legend(ax, min(len(stores), plots.MAX_SERIES))
        blocks.append(
            plots.render(
                fig,
                v.name(f"recall-qps-{task}"),
                f"{task}: {rkey} vs QPS",
                "Up and to the right is better. Lines: each store's Pareto front, its points "
                "labelled with what varies; bars: min to max QPS over the repeats; recall axis "
                + plots.recall_axis_note()
                + "."
                + plots.left_out(stores[plots.MAX_SERIES :], "stores beyond the first 8"),
            )
        )
        blocks.append(
            Table(f"{task}: points", ["configuration", rkey, "QPS", "runs", "run", "chart"], rows)
        )
    return blocks


@register(ALL, "tasks", "Per task, per configuration")
def tasks_table(v: ViewInput) -> list[Block]:
    blocks: list[Block] = []
    for c in v.configs():
        pk = v.pick(c)
        rows = [task_row(c.task(name), pk.run.task(name), pk.run_short) for name in c.tasks()]
        if rows:
            blocks.append(
                Table(
                    c.label,
                    TASK_COLUMNS,
                    rows,
                    note=pk.describe(),
                    align=["l"] + ["r"] * 10 + ["l", "l"],
                )
            )
    if blocks:
        blocks.insert(
            0,
            Text(
                aggregation_note(v.how) + " Latencies are per operation; ops/s is counted, "
                "never derived from latency; a rate is - where the task did no such work."
            ),
        )
    return blocks


@register(ALL, "percentiles", "Latency percentiles per operation", needs_plots=True)
def percentile_view(v: ViewInput) -> list[Block]:
    """The HDR percentile curve of every task, one line per configuration
    (the histogram of its chosen run: ``data.pick``)."""
    configs = v.configs()
    names = timed_tasks(configs)
    if not names:
        return []
    fig, axs = plots.panels(len(names))
    rows = []
    left: list[str] = []
    for ax, name in zip(axs, names, strict=False):
        top = 0.0
        mine = []
        for c in configs:
            pk = v.pick(c)
            t = pk.run.task(name)
            h = histogram(t.histogram) if t is not None and t.histogram else None
            if h is not None and h.count:
                mine.append((c, pk, h))
        drawn, rest = plots.keep_series(
            mine, lambda x: headline_value(x[1].run) or 0.0, group=lambda x: x[0].engine
        )
        left += [c.label for c, _, _ in rest if c.label not in left]
        for c, pk, h in mine:
            if (c, pk, h) in drawn:
                xs, ys = plots.percentile_curve(h)
                top = max(top, xs[-1])
                plots.line(ax, c.label, xs, ys, markevery=[len(xs) - 1])
            # as the record's own percentiles: inside the exact min and max
            # it keeps (a bucket's top can pass them), so every table agrees
            t = pk.run.task(name)
            lat = t.latency_ns if t is not None else {}
            lo, hi = lat.get("min", 0), lat.get("max", h.hdr.max_value)
            rows.append(
                [
                    name,
                    c.label,
                    f"{h.count:,}",
                    *(fmt_ns(min(max(v, lo), hi)) for v in percentiles(h, (50, 90, 99, 99.9))),
                    fmt_ns(hi),
                    pk.run_short,
                    "" if (c, pk, h) in drawn else "not drawn",
                ]
            )
        plots.fmt_ns_axis(ax, "y")
        plots.nines_axis(ax, top)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(plots.plain(name), fontsize="medium")
    plots.figure_legend(fig, axs)
    fig.suptitle(plots.plain(f"{v.workload}: latency by percentile (log scale)"))
    return [
        plots.render(
            fig,
            v.name("percentiles"),
            "Latency percentiles per operation",
            f"From the HDR histogram of each configuration's {v.how} run; x: p90, p99, "
            "p99.9... (each step one more nine); the marker ends each line; one y range for "
            "all panels." + plots.left_out(left, "beyond 8 a panel: each store's fastest first"),
        ),
        Table(
            "Percentiles from the histograms",
            ["task", "configuration", "ops", "p50", "p90", "p99", "p99.9", "max", "run", "chart"],
            rows,
            align=["l", "l"] + ["r"] * 6 + ["l", "l"],
        ),
    ]


@register(ALL, "concurrency", "Latency vs throughput over concurrency", needs_plots=True)
def latency_vs_throughput(v: ViewInput) -> list[Block]:
    """Runs that differ only in ``clients``: throughput on x, p50 (dashed)
    and p99 (solid) latency on y, each point labelled with its clients."""
    fams = [
        f
        for f in v.configs(drop=(CLIENTS,))
        if len({json.dumps(r.params.get("clients")) for r in f.runs}) > 1
    ]
    if not fams:
        if any("clients" in r.params for r in v.ok):
            return [
                Text(
                    "No runs here differ only in clients: run the scenario again with other "
                    "--set clients=N values (or a grid over clients) to see this chart."
                )
            ]
        return []
    from storebench.report.data import group

    names = timed_tasks([c for f in fams for c in group(f.runs)])
    drawn, rest = plots.keep_series(
        fams, lambda f: max((headline_value(r) or 0.0) for r in f.runs), group=lambda f: f.engine
    )
    fig, axs = plots.panels(len(names))
    rows = []
    for ax, name in zip(axs, names, strict=False):
        for fam in fams:
            pts: list[tuple[Any, float, float, float]] = []
            for c in group(fam.runs):
                t = v.pick(c).run.task(name)
                if t is None:
                    continue
                p99, p50 = (t.number(f"latency_ns.{k}") for k in ("p99", "p50"))
                if t.ops_per_s and p50 is not None and p99 is not None:
                    pts.append((c.first.params.get("clients"), t.ops_per_s, p99, p50))
            pts.sort(key=lambda p: json.dumps(p[0]))
            for clients, x, p99, p50 in pts:
                rows.append(
                    {
                        "task": name,
                        "configuration": fam.label,
                        "clients": str(clients),
                        "ops/s": fmt_rate(x),
                        "p50": fmt_ns(p50),
                        "p99": fmt_ns(p99),
                        "chart": "" if fam in drawn else "not drawn",
                    }
                )
            if pts and fam in drawn:
                plots.latency_lines(ax, fam.label, pts, alpha=0.6)
        plots.fmt_ns_axis(ax, "y")
        plots.rate_axis(ax, "x")
        ax.set_xlabel("ops/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(plots.plain(name), fontsize="medium")
    plots.figure_legend(fig, axs)
    fig.suptitle(plots.plain(f"{v.workload}: latency vs throughput (numbers: clients)"))
    return [
        plots.render(
            fig,
            v.name("concurrency"),
            "Latency vs throughput over concurrency",
            f"Solid: p99, dashed: p50; each point one clients setting ({v.how} run), "
            "labelled with it; one y range for all panels."
            + plots.left_out([f.label for f in rest], "beyond 8: each store's fastest first"),
        ),
        Table.of("Points", rows, align=["l", "l", "r", "r", "r", "r", "l"]),
    ]


@register(ALL, "spread", "Spread across repeats")
def spread_table(v: ViewInput) -> list[Block]:
    configs = v.configs()
    rows = []
    for c in configs:
        if len(c.runs) < 2:
            continue
        for name in c.tasks():
            ts = c.task(name)
            if ts.unsupported or not ts.measured:
                continue
            cells = [c.label, name, str(len(ts.measured))]
            cells += _spread_cells(ts.spread("ops_per_s"), fmt_rate)
            rows.append(cells + _spread_cells(ts.latency("p99"), fmt_ns))
            for k in ts.score_keys():  # a score's spread in the ops/s columns
                if r := ts.spread(k):
                    scored = _spread_cells(r, partial(catalogue.text, k))
                    rows.append([c.label, f"{name} {k}", str(r.n), *scored, "", "", ""])
    if not rows:
        if configs:
            return [
                Text(
                    "Each configuration ran once, so there is no spread across repeats "
                    "(set repeats: N in the scenario); storebench compare then uses the "
                    "uncertainty the HDR histograms give."
                )
            ]
        return []
    return [
        Table(
            "min / median / max over runs of the same configuration",
            ["configuration", "task", "runs"]
            + [f"{what} {m}" for what in ("ops/s", "p99") for m in ("min", "median", "max")],
            rows,
            align=["l", "l"] + ["r"] * 7,
        )
    ]


def _spread_cells(s: Spread | None, fmt: Callable[[float], str]) -> list[str]:
    """min, median and max over the runs ("-" without them)."""
    return [fmt(x) for x in (s.min, s.median, s.max)] if s else ["-"] * 3


def _fmt_metric(key: str, v: Any) -> str:
    if isinstance(v, str):
        return v
    if catalogue.of(key):
        return catalogue.text(key, v)
    if "bytes" in key:
        return f"{v:,.0f}"
    if key.endswith("_per_s"):  # a rate, a time: as every table prints them
        return fmt_rate(v)
    if key.endswith("_s"):
        return fmt_ns(v * 1e9)
    if float(v).is_integer() and abs(v) >= 1:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def _shown(x: Any) -> bool:
    """A run metric for the table: a number, or a short word (``index:
    during upload``, ``counted: completed``), not a sentence."""
    if isinstance(x, bool):
        return False
    return isinstance(x, int | float) or (isinstance(x, str) and len(x) <= 24)


@register(ALL, "metrics", "Run metrics")
def run_metrics(v: ViewInput) -> list[Block]:
    """The workload's run-level metrics (sizes, recall, ...) of each
    configuration's chosen run; a sweep's recall is each setting's own."""
    configs = v.configs()
    keys: list[str] = []
    for c in configs:
        for r in c.runs:
            for k, x in (r.metrics | r.scores).items():
                if _shown(x) and k not in keys:
                    keys.append(k)
    if not keys:
        return []
    rows = []
    for c in configs:
        pk = v.pick(c)
        row = [c.label]
        for k in keys:
            x = (pk.run.metrics | pk.run.scores).get(k)
            row.append(_fmt_metric(k, x) if _shown(x) else "-")
        rows.append([*row, str(pk.runs), pk.run_short])
    return [Table("", ["configuration", *keys, "runs", "run"], rows, note=aggregation_note(v.how))]
