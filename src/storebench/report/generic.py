"""Views every workload gets: recall vs throughput (for tasks that measure a
recall), a per-task table per configuration, latency percentiles from the
HDR histograms, latency vs throughput over concurrency, spread across repeats."""

from __future__ import annotations

from typing import Any

from storebench.report import plots
from storebench.report.data import Config, Spread, TaskSummary, percentiles
from storebench.report.terminal import fmt_ns, fmt_rate
from storebench.report.views import ALL, Block, Table, Text, ViewInput, distinct, register

CLIENTS = "params.clients"


def timed_tasks(configs: list[Config], min_ops: int = 2) -> list[str]:
    """Tasks with a latency histogram and at least ``min_ops`` operations."""
    names: list[str] = []
    for c in configs:
        for name in c.tasks():
            ts = c.task(name)
            if name in names or ts.unsupported:
                continue
            if any(t.get("histogram") and t.get("ops", 0) >= min_ops for t in ts.measured):
                names.append(name)
    return names


def _spread_note(s: Spread | None, what: str) -> str:
    if s is None or s.n < 2:
        return ""
    return f"{what} ±{s.rel_range * 50:.0f}% over {s.n}"


def task_row(ts: TaskSummary) -> list[str]:
    if ts.unsupported:
        return [ts.name, *["-"] * 10, "not supported: " + ts.unsupported]
    first = ts.measured[0] if ts.measured else {}
    ops = ts.spread("ops_per_s")
    items = ts.spread("items_per_s")

    def lat(k: str) -> str:
        s = ts.latency(k)
        return fmt_ns(s.median) if s else "-"

    notes = []
    for k in ts.recall_keys:
        r = ts.spread(k)
        if r:
            notes.append(f"{k}={r.median:.3f}")
    if ts.errors:
        notes.append(f"errors={ts.errors}")
    if not ts.complete:
        notes.append("partial")
    if n := _spread_note(ops, "ops/s"):
        notes.append(n)
    same = first.get("items") == first.get("ops")
    return [
        ts.name,
        str(first.get("clients", 1)),
        f"{int(first.get('ops', 0)):,}",
        fmt_rate(ops.median if ops else None),
        "" if same else fmt_rate(items.median if items else None),
        lat("mean"),
        lat("p50"),
        lat("p95"),
        lat("p99"),
        lat("max"),
        str(len(ts.measured)),
        " ".join(notes),
    ]


TASK_COLUMNS = [
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
    "runs",
    "note",
]


@register(ALL, "recall_qps", "Recall vs throughput", needs_plots=True)
def recall_vs_qps(v: ViewInput) -> list[Block]:
    """Each configuration is a point (median over repeats); each store's
    Pareto front joins the points no other point of that store beats on both
    recall and queries per second."""
    configs = v.configs()
    found: list[tuple[str, str]] = []  # (task, recall key)
    for c in configs:
        for name in c.tasks():
            for k in c.task(name).recall_keys:
                if (name, k) not in found:
                    found.append((name, k))
    blocks: list[Block] = []
    for task, rkey in found:
        stores = distinct([c.engine for c in configs])
        fig = plots.new_figure(7.0, 4.4)
        ax = fig.axes[0]
        rows = []
        for i, store in enumerate(stores):
            pts = []
            for c in configs:
                if c.engine != store:
                    continue
                ts = c.task(task)
                r, q = ts.spread(rkey), ts.spread("ops_per_s")
                if r and q:
                    pts.append((r.median, q.median))
                    rows.append([c.label, f"{r.median:.4f}", fmt_rate(q.median), str(r.n)])
            if not pts:
                continue
            st = plots.style(i)
            ax.scatter(
                [p[0] for p in pts], [p[1] for p in pts], color=st["color"], marker=st["marker"]
            )
            front = plots.pareto_front(pts)
            ax.plot(
                [p[0] for p in front],
                [p[1] for p in front],
                drawstyle="steps-post",
                color=st["color"],
                marker=st["marker"],
                label=plots.plain(store),
            )
        if not rows:
            continue
        ax.set_xlabel(plots.plain(rkey.replace("recall", "Recall")))
        ax.set_ylabel(plots.plain(f"{task}: queries per second"))
        plots.rate_axis(ax, "y")
        recalls = [float(r[1]) for r in rows]
        left = max(0.0, min(recalls) - max(0.02, (1.0 - min(recalls)) * 0.1))
        ax.set_xlim(left, 1.0 + (1.0 - left) * 0.04)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(plots.plain(f"{v.workload} · {task}: {rkey} vs QPS, Pareto front per store"))
        plots.legend(ax, len(stores))
        blocks.append(
            plots.render(
                fig,
                v.name(f"recall-qps-{task}"),
                f"{task}: {rkey} vs QPS",
                "Up and to the right is better. Lines: each store's Pareto front.",
            )
        )
        blocks.append(Table(f"{task}: points", ["configuration", rkey, "QPS", "runs"], rows))
    return blocks


@register(ALL, "tasks", "Per task, per configuration")
def tasks_table(v: ViewInput) -> list[Block]:
    blocks: list[Block] = []
    for c in v.configs():
        rows = [task_row(c.task(name)) for name in c.tasks()]
        if rows:
            blocks.append(
                Table(
                    c.label,
                    TASK_COLUMNS,
                    rows,
                    align=["l"] + ["r"] * 10 + ["l"],
                )
            )
    if blocks:
        blocks.insert(
            0,
            Text(
                "Latencies are per operation (median over repeats when a configuration "
                "ran more than once); ops/s is counted, never derived from latency."
            ),
        )
    return blocks


@register(ALL, "percentiles", "Latency percentiles per operation", needs_plots=True)
def percentile_view(v: ViewInput) -> list[Block]:
    """The HDR percentile curve of every task, one line per configuration
    (repeats merged bucket by bucket)."""
    configs = v.configs()
    names = timed_tasks(configs)
    if not names:
        return []
    nrows, ncols = plots.grid_shape(len(names))
    fig = plots.new_figure(4.2 * ncols, 3.2 * nrows + 0.6, nrows, ncols)
    axs = plots.axes(fig)
    rows = []
    for ax, name in zip(axs, names, strict=False):
        top = 0.0
        for i, c in enumerate(configs):
            h = c.task(name).histogram()
            if h is None or not h.count:
                continue
            xs, ys = plots.percentile_curve(h)
            top = max(top, xs[-1])
            st = plots.style(i)
            ax.plot(xs, ys, color=st["color"], label=plots.short([c.label])[0])
            rows.append(
                [
                    name,
                    c.label,
                    f"{h.count:,}",
                    *(fmt_ns(v) for v in percentiles(h, (50, 90, 99, 99.9))),
                    fmt_ns(h.hdr.max_value),
                ]
            )
        plots.fmt_ns_axis(ax, "y")
        plots.nines_axis(ax, top)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(plots.plain(name), fontsize="medium")
    plots.hide_unused(fig, len(names))
    handles, labels = axs[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(3, len(labels)))
    fig.suptitle(plots.plain(f"{v.workload}: latency by percentile (log scale)"))
    return [
        plots.render(
            fig,
            v.name("percentiles"),
            "Latency percentiles per operation",
            "From the merged HDR histograms; x: p90, p99, p99.9... (each step one more nine).",
        ),
        Table(
            "Percentiles from the histograms",
            ["task", "configuration", "ops", "p50", "p90", "p99", "p99.9", "max"],
            rows,
            align=["l", "l"] + ["r"] * 6,
        ),
    ]


@register(ALL, "concurrency", "Latency vs throughput over concurrency", needs_plots=True)
def latency_vs_throughput(v: ViewInput) -> list[Block]:
    """Runs that differ only in ``clients``: throughput on x, p50 (dashed)
    and p99 (solid) latency on y, each point labelled with its clients."""
    fams = [
        f
        for f in v.configs(drop=(CLIENTS,))
        if len({r.get("params", {}).get("clients") for r in f.runs}) > 1
    ]
    if not fams:
        if any("clients" in (r.get("params") or {}) for r in v.ok):
            return [
                Text(
                    "No runs here differ only in clients: run the scenario again with other "
                    "--set clients=N values (or a grid over clients) to see this chart."
                )
            ]
        return []
    from storebench.report.data import group

    names = timed_tasks([c for f in fams for c in group(f.runs)])
    nrows, ncols = plots.grid_shape(len(names))
    fig = plots.new_figure(4.2 * ncols, 3.2 * nrows + 0.6, nrows, ncols)
    axs = plots.axes(fig)
    rows = []
    for ax, name in zip(axs, names, strict=False):
        for i, fam in enumerate(fams):
            pts: list[tuple[int, Any, Any, Any]] = []
            for c in group(fam.runs):
                ts = c.task(name)
                q, p50, p99 = ts.spread("ops_per_s"), ts.latency("p50"), ts.latency("p99")
                if q and p50 and p99:
                    clients = c.first.get("params", {}).get("clients")
                    pts.append((clients, q.median, p50.median, p99.median))
            pts.sort(key=lambda p: p[0])
            if not pts:
                continue
            st = plots.style(i)
            xs = [p[1] for p in pts]
            ax.plot(
                xs, [p[3] for p in pts], color=st["color"], marker=st["marker"], label=fam.label
            )
            ax.plot(
                xs, [p[2] for p in pts], color=st["color"], marker=st["marker"], ls="--", alpha=0.6
            )
            for clients, x, _, y in pts:
                ax.annotate(
                    f"{clients}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7
                )
                rows.append([name, fam.label, str(clients), fmt_rate(x)])
                rows[-1] += [fmt_ns(_), fmt_ns(y)]
        plots.fmt_ns_axis(ax, "y")
        plots.rate_axis(ax, "x")
        ax.set_xlabel("ops/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(plots.plain(name), fontsize="medium")
    plots.hide_unused(fig, len(names))
    handles, labels = axs[0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles, plots.short(labels), loc="outside lower center", ncols=min(3, len(labels))
        )
    fig.suptitle(plots.plain(f"{v.workload}: latency vs throughput (numbers: clients)"))
    return [
        plots.render(
            fig,
            v.name("concurrency"),
            "Latency vs throughput over concurrency",
            "Solid: p99, dashed: p50; each point one clients setting, labelled with it.",
        ),
        Table(
            "Points",
            ["task", "configuration", "clients", "ops/s", "p50", "p99"],
            rows,
            align=["l", "l", "r", "r", "r", "r"],
        ),
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
            q, p99 = ts.spread("ops_per_s"), ts.latency("p99")
            cells = [c.label, name, str(len(ts.measured))]
            cells += [fmt_rate(q.min), fmt_rate(q.median), fmt_rate(q.max)] if q else ["-"] * 3
            cells += [fmt_ns(p99.min), fmt_ns(p99.median), fmt_ns(p99.max)] if p99 else ["-"] * 3
            rows.append(cells)
            for k in ts.recall_keys:
                r = ts.spread(k)
                if r:
                    rows.append(
                        [
                            c.label,
                            f"{name} {k}",
                            str(r.n),
                            f"{r.min:.4f}",
                            f"{r.median:.4f}",
                            f"{r.max:.4f}",
                            "",
                            "",
                            "",
                        ]
                    )
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
            [
                "configuration",
                "task",
                "runs",
                "ops/s min",
                "ops/s median",
                "ops/s max",
                "p99 min",
                "p99 median",
                "p99 max",
            ],
            rows,
            align=["l", "l"] + ["r"] * 7,
        )
    ]


def _fmt_metric(key: str, v: float) -> str:
    if key.startswith(("recall", "precision")):
        return f"{v:.4f}"
    if "bytes" in key:
        return f"{v:,.0f}"
    if float(v).is_integer() and abs(v) >= 1:
        return f"{v:,.0f}"
    return f"{v:.4g}"


@register(ALL, "metrics", "Run metrics")
def run_metrics(v: ViewInput) -> list[Block]:
    """The workload's run-level metrics (sizes, recall, ...): median over
    repeats, one row per configuration."""
    configs = v.configs()
    keys: list[str] = []
    for c in configs:
        for r in c.runs:
            for k, x in (r.get("metrics") or {}).items():
                if isinstance(x, int | float) and not isinstance(x, bool) and k not in keys:
                    keys.append(k)
    if not keys:
        return []
    rows = []
    for c in configs:
        row = [c.label]
        for k in keys:
            s = c.metric(k)
            row.append(_fmt_metric(k, s.median) if s else "-")
        rows.append([*row, str(len(c.runs))])
    return [Table("", ["configuration", *keys, "runs"], rows)]
