"""Views of the vector search workloads: ``search`` (the Redis study's
recall-vs-QPS table, QPS per client count), ``tune`` (latency and QPS at
the target recall, the tuner's probes), ``scale`` (the same as the data
doubles), and for all three: latency vs throughput over the in-run client
counts, recall per filter selectivity, client CPU and the engine's own time.

Repeats of a configuration are one row: throughput is the best of the runs
(the study kept the best of three) and latency the lowest, each with its
spread, half the range relative to the median (``±4%``).

These workloads measure client counts and search settings inside one run,
so their own ``recall_qps`` and ``concurrency`` views take the place of the
shared ones (which compare runs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storebench.report import plots
from storebench.report.data import (
    Config,
    Spread,
    TaskSummary,
    group,
    identity,
    short_key,
    varying_keys,
)
from storebench.report.terminal import fmt_ns, fmt_rate
from storebench.report.views import Block, Table, Text, ViewInput, distinct, register

WORKLOADS = ("search", "tune", "scale")
BEST_NOTE = (
    "Best of the runs of a configuration (highest QPS, lowest latency), "
    "± half the range over the runs relative to the median."
)


# --- what the records hold -----------------------------------------------------------


def configs_of(v: ViewInput) -> list[Config]:
    """Configurations of the ok runs, repeats together. A managed server's
    URL (a new port and password each run) is not part of a configuration,
    so repeats against managed servers group as repeats."""
    recs = []
    for r in v.ok:
        if (r.get("server") or {}).get("managed"):
            r = dict(r)
            r["store"] = dict(r.get("store") or {}) | {"url": None}
        recs.append(r)
    return group(recs)


@dataclass
class Point:
    """One measured search task of a configuration, over its repeats."""

    config: Config
    name: str
    clients: int
    setting: dict[str, Any]
    filter: str | None
    selectivity: float | None
    n: int | None
    ts: TaskSummary

    @property
    def family(self) -> tuple[str, str, str, Any]:
        """Points that differ only in clients."""
        return (
            self.config.id,
            json.dumps(self.setting, sort_keys=True),
            str(self.filter),
            self.n,
        )

    @property
    def setting_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.setting.items()) or "-"

    def label(self) -> str:
        parts = [self.config.label]
        if self.n is not None:
            parts.append(f"n={self.n:,}")
        if self.setting and not all(
            f"{k}={v}" in self.config.label.split() for k, v in self.setting.items()
        ):
            parts.append(self.setting_text)
        if self.filter:
            parts.append(self.filter)
        return " ".join(parts)


def points(c: Config) -> list[Point]:
    out = []
    seen: set[str] = set()
    for run in c.runs:
        for t in run.get("tasks") or []:
            name = t.get("name")
            if t.get("phase") != "search" or name in seen:
                continue
            seen.add(name)
            out.append(
                Point(
                    c,
                    name,
                    int(t.get("clients", 1)),
                    dict(t.get("search") or t.get("setting") or {}),
                    t.get("filter"),
                    t.get("selectivity"),
                    t.get("n"),
                    c.task(name),
                )
            )
    return out


def families(pts: list[Point]) -> list[list[Point]]:
    by: dict[tuple[str, str, str, Any], list[Point]] = {}
    for p in pts:
        by.setdefault(p.family, []).append(p)
    return [sorted(f, key=lambda p: p.clients) for f in by.values()]


def recall_key(ts: TaskSummary) -> str | None:
    keys = ts.recall_keys
    return keys[0] if keys else None


def value(ts: TaskSummary, field: str, higher: bool) -> float | None:
    """Best over the runs of a task field (ops_per_s, recall@k, ...) or a
    latency (``lat_mean``)."""
    s = _spread(ts, field)
    if s is None:
        return None
    return s.max if higher else s.min


def _spread(ts: TaskSummary, field: str) -> Spread | None:
    return ts.latency(field[4:]) if field.startswith("lat_") else ts.spread(field)


def best(ts: TaskSummary, field: str, higher: bool, fmt: Callable[[float], str]) -> str:
    s = _spread(ts, field)
    if s is None:
        return "-"
    text = fmt(s.max if higher else s.min)
    if s.n > 1:
        text += f" ±{s.rel_range * 50:.0f}%"
    return text


def qps(ts: TaskSummary) -> str:
    return best(ts, "ops_per_s", True, fmt_rate)


def lat(ts: TaskSummary, key: str = "mean") -> str:
    return best(ts, f"lat_{key}", False, fmt_ns)


def ratio(ts: TaskSummary, key: str) -> str:
    s = ts.spread(key)
    return f"{s.median:.4f}" if s else "-"


def index_keys(v: ViewInput) -> list[str]:
    """The index parameters (and workload parameters) that vary among the runs."""
    return [
        k
        for k in varying_keys(v.ok, ("store.index.", "params.", "mode"))
        if k not in ("params.clients",)
    ]


def ident_cells(c: Config, keys: list[str]) -> list[str]:
    ident = identity(c.first)
    return ["-" if ident.get(k) is None else str(ident.get(k)) for k in keys]


def run_metric(c: Config, key: str) -> str:
    s = c.metric(key)
    if s is None:
        return "-"
    text = f"{s.min:.2f}s"
    if s.n > 1:
        text += f" ±{s.rel_range * 50:.0f}%"
    return text


# --- search -----------------------------------------------------------------------


@register("search", "search_table", "Recall vs QPS per configuration (the Redis study's table)")
def search_table(v: ViewInput) -> list[Block]:
    configs = configs_of(v)
    keys = index_keys(v)
    blocks: list[Block] = []
    for store in distinct([c.engine for c in configs]):
        mine = [c for c in configs if c.engine == store]
        all_clients = sorted({p.clients for c in mine for p in points(c) if not p.filter})
        rows = []
        rkey = None
        for c in mine:
            for fam in families([p for p in points(c) if not p.filter]):
                by = {p.clients: p for p in fam}
                one = by[min(by)]
                rkey = rkey or recall_key(one.ts)
                pkey = rkey.replace("recall", "precision") if rkey else None
                row = ident_cells(c, keys) + [fam[0].setting_text]
                row += [ratio(one.ts, rkey) if rkey else "-", ratio(one.ts, pkey) if pkey else "-"]
                row += [lat(one.ts, "mean"), lat(one.ts, "p95")] if one.clients == 1 else ["-"] * 2
                row += [qps(by[n].ts) if n in by else "-" for n in all_clients]
                row += [run_metric(c, "upload_s"), run_metric(c, "index_s"), str(len(c.runs))]
                rows.append(row)
        if not rows:
            continue
        rk = (rkey or "recall@k").replace("recall", "Recall")
        header = [short_key(k) for k in keys] + ["search", rk, rk.replace("Recall", "Precision")]
        header += ["mean (1 client)", "p95 (1 client)"]
        header += [f"QPS {n} client{'s' if n > 1 else ''}" for n in all_clients]
        header += ["upload", "index", "runs"]
        blocks.append(Table(store, header, rows))
    if blocks:
        blocks.insert(0, Text(BEST_NOTE + " Upload and index: wall time, shortest run."))
    return blocks


@register("search", "qps_clients", "QPS per client count")
def qps_clients(v: ViewInput) -> list[Block]:
    rows = []
    counts: list[int] = []
    fams = [f for c in configs_of(v) for f in families([p for p in points(c) if not p.filter])]
    for f in fams:
        counts += [p.clients for p in f if p.clients not in counts]
    counts.sort()
    for f in fams:
        by = {p.clients: p for p in f}
        row = [f[0].label()] + [qps(by[n].ts) if n in by else "-" for n in counts]
        lo, hi = by[min(by)], by[max(by)]
        q0, q1 = value(lo.ts, "ops_per_s", True), value(hi.ts, "ops_per_s", True)
        row.append(f"{q1 / q0:.2f}x" if q0 and q1 and hi is not lo else "-")
        sat = [str(p.clients) for p in f if _saturated(p.ts)]
        row.append(", ".join(sat) or "-")
        rows.append(row)
    if not rows or len(counts) < 2:
        return []
    header = ["configuration", *(f"{n} client{'s' if n > 1 else ''}" for n in counts)]
    header += [f"{counts[-1]} / {counts[0]}", "client saturated at"]
    return [
        Text(BEST_NOTE + " Client saturated: the clients' CPU reached 90% of what they can use."),
        Table("QPS", header, rows),
    ]


def _saturated(ts: TaskSummary) -> bool:
    return any(t.get("client_saturated") for t in ts.measured)


# --- shared by the three ---------------------------------------------------------------


def recall_qps(v: ViewInput) -> list[Block]:
    """Recall against QPS, one panel per client count, one point per
    configuration and search setting, each store's Pareto front."""
    configs = configs_of(v)
    pts = [p for c in configs for p in points(c) if not p.filter]
    counts = sorted({p.clients for p in pts})
    if not pts:
        return []
    rkey = next((recall_key(p.ts) for p in pts if recall_key(p.ts)), None)
    if rkey is None:
        return []
    stores = distinct([p.config.engine for p in pts])
    nrows, ncols = plots.grid_shape(len(counts), 2)
    fig = plots.new_figure(5.0 * ncols, 3.6 * nrows + 0.6, nrows, ncols)
    axs = plots.axes(fig)
    rows = []
    for ax, n in zip(axs, counts, strict=False):
        for i, store in enumerate(stores):
            xy = []
            for p in pts:
                if p.clients != n or p.config.engine != store:
                    continue
                r, q = value(p.ts, rkey, True), value(p.ts, "ops_per_s", True)
                if r is None or not q:
                    continue
                xy.append((r, q))
                rows.append([p.label(), str(n), f"{r:.4f}", qps(p.ts), str(len(p.ts.measured))])
            if not xy:
                continue
            st = plots.style(i)
            ax.scatter([x for x, _ in xy], [y for _, y in xy], color=st["color"], s=14)
            front = plots.pareto_front(xy)
            ax.plot(
                [x for x, _ in front],
                [y for _, y in front],
                drawstyle="steps-post",
                color=st["color"],
                marker=st["marker"],
                label=plots.plain(store),
            )
        ax.set_title(f"{n} client{'s' if n > 1 else ''}", fontsize="medium")
        ax.set_xlabel(plots.plain(rkey.replace("recall", "Recall")))
        ax.set_ylabel("queries per second")
        plots.rate_axis(ax, "y")
        ax.grid(True, which="both", alpha=0.3)
        plots.legend(ax, len(stores))
    plots.hide_unused(fig, len(counts))
    fig.suptitle(plots.plain(f"{v.workload}: {rkey} vs QPS (best of runs), Pareto front per store"))
    return [
        plots.render(
            fig,
            v.name("recall-qps"),
            f"{rkey} vs QPS",
            "Up and to the right is better; lines: each store's Pareto front.",
        ),
        Table("Points", ["configuration", "clients", rkey, "QPS", "runs"], rows),
    ]


def concurrency(v: ViewInput) -> list[Block]:
    """Latency against throughput as the client count grows inside a run:
    one line per configuration and setting, points labelled with clients."""
    fams = [
        f
        for c in configs_of(v)
        for f in families([p for p in points(c) if not p.filter])
        if len(f) > 1
    ]
    if not fams:
        return []
    fig = plots.new_figure(7.0, 4.6)
    ax = fig.axes[0]
    rows = []
    for i, f in enumerate(fams):
        xs, mean, p99 = [], [], []
        for p in f:
            q = value(p.ts, "ops_per_s", True)
            m, t = p.ts.latency("mean"), p.ts.latency("p99")
            if not q or m is None or t is None:
                continue
            xs.append(q)
            mean.append(m.median)
            p99.append(t.median)
            rows.append([f[0].label(), str(p.clients), qps(p.ts), lat(p.ts, "mean")])
            rows[-1] += [lat(p.ts, "p50"), lat(p.ts, "p99"), "yes" if _saturated(p.ts) else ""]
            ax.annotate(
                str(p.clients), (q, m.median), textcoords="offset points", xytext=(3, 3), fontsize=7
            )
        if not xs:
            continue
        st = plots.style(i)
        ax.plot(
            xs, mean, color=st["color"], marker=st["marker"], label=plots.short([f[0].label()])[0]
        )
        ax.plot(xs, p99, color=st["color"], marker=st["marker"], ls="--", alpha=0.5)
    plots.fmt_ns_axis(ax, "y")
    plots.rate_axis(ax, "x")
    ax.set_xlabel("queries per second")
    ax.set_ylabel("latency")
    ax.grid(True, which="both", alpha=0.3)
    plots.legend(ax, len(fams))
    ax.set_title(plots.plain(f"{v.workload}: latency vs throughput (numbers: clients)"))
    return [
        plots.render(
            fig,
            v.name("concurrency"),
            "Latency vs throughput over concurrency",
            "Solid: mean latency, dashed: p99; each point one client count (best QPS of the runs).",
        ),
        Table(
            "Points",
            ["configuration", "clients", "QPS", "mean", "p50", "p99", "client saturated"],
            rows,
        ),
    ]


def filtered(v: ViewInput) -> list[Block]:
    """Recall, precision and latency per filter selectivity, against the
    filtered ground truth (post-filtering engines lose recall at 1%)."""
    rows = []
    sel: list[float] = []
    fams: list[tuple[str, dict[float, Point]]] = []
    for c in configs_of(v):
        groups: dict[tuple[str, Any], dict[float, Point]] = {}
        for p in points(c):
            if p.filter is None or p.selectivity is None:
                continue
            groups.setdefault((p.setting_text, p.n), {})[p.selectivity] = p
            if p.selectivity not in sel:
                sel.append(p.selectivity)
        for ps in groups.values():
            first = next(iter(ps.values()))
            label = first.label().replace(f" {first.filter}", "")
            fams.append((label, ps))
    if not fams:
        return []
    sel.sort()
    for label, ps in fams:
        row = [label]
        for s in sel:
            q = ps.get(s)
            if q is None:
                row += ["-", "-", "-"]
                continue
            rk = recall_key(q.ts)
            row += [
                ratio(q.ts, rk) if rk else "-",
                ratio(q.ts, rk.replace("recall", "precision")) if rk else "-",
                lat(q.ts, "p50"),
            ]
        rows.append(row)
    header = ["configuration"]
    for s in sel:
        pct = f"{s * 100:g}%"
        header += [f"recall {pct}", f"precision {pct}", f"p50 {pct}"]
    return [
        Text(
            "Each selectivity is a label matching that fraction of the documents; recall is "
            "against the exact neighbours among them. Precision counts hits among the results "
            "returned, so an engine that returns fewer than k is not penalised there."
        ),
        Table("Filtered search", header, rows),
    ]


def client_engine(v: ViewInput) -> list[Block]:
    """Client CPU beside throughput, the saturation flag, and where the
    engine reports its own time, ours minus the engine's per call."""
    rows = []
    any_engine = False
    for c in configs_of(v):
        for p in points(c):
            t = p.ts.measured
            if not t:
                continue
            cpu = p.ts.spread("client_cpu_per_s")
            srv = p.ts.spread("server_cpu_per_s")
            ceiling = t[0].get("client_cpu_ceiling")
            eng = [x["engine"] for x in t if isinstance(x.get("engine"), dict)]
            ours = p.ts.latency("mean")
            emean = min(e["mean_ns"] for e in eng) if eng else None
            any_engine |= bool(eng)
            share = None
            if eng and ours:
                share = min(e.get("client_share_ns", float("inf")) for e in eng)
            rows.append(
                [
                    p.label(),
                    p.name,
                    qps(p.ts),
                    f"{cpu.median:.2f}" if cpu else "-",
                    f"{ceiling:g}" if isinstance(ceiling, int | float) else "-",
                    "yes" if _saturated(p.ts) else "",
                    f"{srv.median:.2f}" if srv else "-",
                    fmt_ns(ours.min) if ours else "-",
                    fmt_ns(emean) if emean is not None else "-",
                    fmt_ns(share) if share is not None else "-",
                ]
            )
    if not rows:
        return []
    note = (
        "Client CPU: cores' worth of CPU the client used per second of wall time; ceiling: "
        "what it can use (clients up to the cores; 1 for threads, one interpreter, unless "
        "their CPU shows work outside the GIL). "
        "Saturated: at 90% of the ceiling or more, the client, not the engine, limited the "
        "throughput (for an embedded engine the client process is the engine). Server CPU: a "
        "managed server's, sampled (processes alive at the task's start and end: PostgreSQL "
        "backends of process clients come and go within it and are missed)."
    )
    if any_engine:
        note += (
            " Engine mean: the engine's own time per call from its counters (Redis INFO "
            "commandstats), over the task including per-client warm-up calls; ours - engine: "
            "the client's and the network's share."
        )
    return [
        Text(note),
        Table(
            "Client and engine",
            [
                "configuration",
                "task",
                "QPS",
                "client CPU/s",
                "ceiling",
                "saturated",
                "server CPU/s",
                "our mean",
                "engine mean",
                "ours - engine",
            ],
            rows,
        ),
    ]


# --- tune ---------------------------------------------------------------------------------


def _tuning(c: Config) -> dict[str, Any]:
    return (c.first.get("metrics") or {}).get("tune") or {}


@register("tune", "tune_table", "Latency and QPS at the target recall (the Milvus figures)")
def tune_table(v: ViewInput) -> list[Block]:
    rows = []
    keys = index_keys(v)
    for c in configs_of(v):
        tun = _tuning(c)
        pts = [p for p in points(c) if not p.filter]
        if not pts:
            continue
        by = {p.clients: p for p in pts}
        one, top = by[min(by)], by[max(by)]
        rk = recall_key(one.ts)
        values = distinct([(_tuning_of(r) or {}).get("value") for r in c.runs])
        row = [c.engine, *ident_cells(c, keys)]
        row += [
            str(tun.get("param") or "-"),
            ", ".join(str(x) for x in values if x is not None) or "-",
            f"{tun.get('target', 0):g}",
            ratio(one.ts, rk) if rk else "-",
            _flag(c),
        ]
        row += [lat(one.ts, k) for k in ("mean", "p50", "p95", "p99")]
        row += [qps(one.ts), str(top.clients), qps(top.ts), str(len(c.runs))]
        rows.append(row)
    if not rows:
        return []
    header = ["store", *(short_key(k) for k in keys)]
    header += ["param", "value", "target", "recall", "tuning"]
    header += ["mean", "p50", "p95", "p99", "QPS 1 client", "clients", "QPS", "runs"]
    return [
        Text(
            "The smallest search parameter reaching the target recall (doubling, then "
            "bisection), then latency with one client and QPS at the highest concurrency. "
            + BEST_NOTE
        ),
        Table("At the target recall", header, rows),
    ]


def _tuning_of(rec: dict[str, Any]) -> dict[str, Any] | None:
    return (rec.get("metrics") or {}).get("tune")


def _flag(c: Config) -> str:
    notes = []
    for r in c.runs:
        t = _tuning_of(r) or {}
        if t.get("param") is None:
            notes.append("no parameter")
        elif not t.get("reached", True):
            notes.append("target not reached")
        elif not t.get("monotone", True):
            notes.append("not monotone")
    return ", ".join(distinct(notes)) or "ok"


@register(
    "tune", "tune_probes", "Recall per search parameter (the tuner's probes)", needs_plots=True
)
def tune_probes(v: ViewInput) -> list[Block]:
    configs = [c for c in configs_of(v) if _tuning(c).get("probes")]
    if not configs:
        return []
    fig = plots.new_figure(7.0, 4.2)
    ax = fig.axes[0]
    rows = []
    target = None
    for i, c in enumerate(configs):
        t = _tuning(c)
        target = t.get("target", target)
        pts = sorted((int(x), float(r)) for x, r in t["probes"])
        st = plots.style(i)
        ax.plot(
            [x for x, _ in pts],
            [r for _, r in pts],
            color=st["color"],
            marker=st["marker"],
            label=plots.short([c.label])[0],
        )
        rows.append(
            [c.label, str(t.get("value")), " ".join(f"{x}:{r:.3f}" for x, r in pts), _flag(c)]
        )
    if target is not None:
        ax.axhline(target, color="#777", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(plots.plain(_tuning(configs[0]).get("param") or "parameter"))
    ax.set_ylabel("recall")
    ax.grid(True, which="both", alpha=0.3)
    plots.legend(ax, len(configs))
    ax.set_title("recall per probed value (dotted: the target)")
    return [
        plots.render(fig, v.name("tune-probes"), "Recall per probed value"),
        Table("Probes (first run)", ["configuration", "chosen", "value:recall", "tuning"], rows),
    ]


# --- scale --------------------------------------------------------------------------------


def _steps(c: Config) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for s in (c.first.get("metrics") or {}).get("scale") or []:
        out[int(s["n"])] = s
    return out


def _per_size(v: ViewInput) -> tuple[list[tuple[Config, int, dict[int, Point]]], list[int]]:
    """(configuration, size, points by clients) for each size, and the client counts."""
    counts: list[int] = []
    per: list[tuple[Config, int, dict[int, Point]]] = []
    for c in configs_of(v):
        by_n: dict[int, dict[int, Point]] = {}
        for p in points(c):
            if p.filter or p.n is None:
                continue
            by_n.setdefault(p.n, {})[p.clients] = p
            if p.clients not in counts:
                counts.append(p.clients)
        per += [(c, n, by_n[n]) for n in sorted(by_n)]
    return per, sorted(counts)


@register("scale", "scale_table", "Latency and QPS as the data doubles")
def scale_table(v: ViewInput) -> list[Block]:
    per, counts = _per_size(v)
    if not per:
        return []
    rows = []
    for c, n, by in per:
        step = _steps(c).get(n, {})
        tun = step.get("tune") or {}
        one = by[min(by)]
        rk = recall_key(one.ts)
        row = [c.label, f"{n:,}", _secs(c, f"upload n={n}"), _secs(c, f"build_index n={n}")]
        row += [one.setting_text, ratio(one.ts, rk) if rk else "-"]
        row += [lat(one.ts, "mean"), lat(one.ts, "p99")]
        row += [qps(by[k].ts) if k in by else "-" for k in counts]
        row.append("" if tun.get("reached", True) else "target not reached")
        rows.append(row)
    header = ["configuration", "n", "upload", "index", "search", "recall", "mean", "p99"]
    header += [f"QPS {k} client{'s' if k > 1 else ''}" for k in counts]
    header.append("note")
    return [
        Text(
            "Each size adds documents to the same collection and rebuilds the index; the "
            "search parameter is tuned again for the target recall at each size. Mean and p99: "
            "one client. " + BEST_NOTE
        ),
        Table("Per size", header, rows),
    ]


def _secs(c: Config, task: str) -> str:
    s = c.task(task).spread("elapsed_s")
    if s is None:
        return "-"
    return f"{s.min:.2f}s"


@register("scale", "scale_plot", "Latency and QPS per size", needs_plots=True)
def scale_plot(v: ViewInput) -> list[Block]:
    per, counts = _per_size(v)
    if not per:
        return []
    fig = plots.new_figure(9.0, 3.8, 1, 2)
    left, right = fig.axes
    configs = distinct([c.id for c, _, _ in per])
    for i, cid in enumerate(configs):
        mine = [(c, n, by) for c, n, by in per if c.id == cid]
        st = plots.style(i)
        label = plots.short([mine[0][0].label])[0]
        ns = [n for _, n, _ in mine]
        means = []
        for _, _, by in mine:
            m = by[min(by)].ts.latency("mean")
            means.append(m.min if m else float("nan"))
        left.plot(ns, means, color=st["color"], marker=st["marker"], label=label)
        for j, k in enumerate(counts):
            ys = [value(by[k].ts, "ops_per_s", True) if k in by else None for _, _, by in mine]
            right.plot(
                ns,
                [y if y else float("nan") for y in ys],
                color=st["color"],
                marker=plots.MARKERS[j % len(plots.MARKERS)],
                ls="-" if j == len(counts) - 1 else "--",
                label=f"{label} · {k} client{'s' if k > 1 else ''}",
            )
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("documents")
        ax.grid(True, which="both", alpha=0.3)
    plots.fmt_ns_axis(left, "y")
    left.set_title("mean latency, 1 client", fontsize="medium")
    plots.rate_axis(right, "y")
    right.set_title("QPS", fontsize="medium")
    right.legend(fontsize="x-small", frameon=False)
    return [plots.render(fig, v.name("scale"), "Latency and QPS per size")]


# the shared ones after each workload's headline views
for _w in WORKLOADS:
    register(_w, "recall_qps", "Recall vs throughput", needs_plots=True)(recall_qps)
    register(_w, "concurrency", "Latency vs throughput over concurrency", needs_plots=True)(
        concurrency
    )
    register(_w, "filtered", "Filtered search per selectivity")(filtered)
    register(_w, "client_engine", "Client CPU and engine-side time")(client_engine)
