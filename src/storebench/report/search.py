"""Views of the vector search workloads: ``search`` (the Redis study's
recall-vs-QPS table, QPS per client count), ``tune`` (latency and QPS at
the target recall, the tuner's probes), ``scale`` (the same as the data
doubles), and for all three: latency vs throughput over the in-run client
counts, recall per filter selectivity, client CPU and the engine's own time.

Repeats of a configuration are one row, every number of it from one run
(``data.pick``: by default the best, the highest QPS at the most clients;
the study kept the best of three), each with its spread over the runs,
half the range relative to the median (``±4%``).

These workloads measure client counts and search settings inside one run,
so their own ``recall_qps`` and ``concurrency`` views take the place of the
shared ones (which compare runs).

One module (~770 lines) on purpose: the search, tune and scale views read
their records through the same ``Point`` and share the recall-vs-QPS,
concurrency, filter and client/engine views; the per-workload sections
(``# --- search``, ``tune``, ``scale``) are the cut if it grows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storebench.report import plots
from storebench.report.data import (
    Config,
    Pick,
    Record,
    TaskSummary,
    aggregation_note,
    clients_text,
    headline_value,
    short_key,
    short_run,
    varying_keys,
)
from storebench.report.footprint import (
    FOOTPRINT_COLUMNS,
    FOOTPRINT_NOTE,
    footprint,
    footprint_cells,
)
from storebench.report.terminal import fmt_ns, fmt_rate
from storebench.report.views import Block, Table, Text, ViewInput, distinct, register, stalls
from storebench.results import scores as catalogue
from storebench.results.records import TaskRecord
from storebench.results.scores import RECALL, Score

WORKLOADS = ("search", "tune", "scale")


# --- what the records hold -----------------------------------------------------------


@dataclass
class Point:
    """One measured search task of a configuration: the chosen run's record
    of it (``pick``), and its spread over the runs (``ts``)."""

    config: Config
    name: str
    clients: int
    setting: dict[str, Any]
    filter: str | None
    selectivity: float | None
    n: int | None
    pick: Pick
    ts: TaskSummary

    @property
    def t(self) -> TaskRecord | None:
        """The chosen run's record of this task."""
        t = self.pick.run.task(self.name)
        return t if t is not None and t.measured else None

    def number(self, field: str) -> float | None:
        t = self.t
        return t.number(field) if t is not None else None

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


def points(v: ViewInput, c: Config) -> list[Point]:
    chosen = v.pick(c)
    out = []
    seen: set[str] = set()
    for run in [chosen.run, *c.runs]:
        for t in run.tasks:
            if t.phase != "search" or t.name in seen:
                continue
            seen.add(t.name)
            out.append(
                Point(
                    c,
                    t.name,
                    t.clients,
                    dict(t.search or t.setting or {}),
                    t.filter,
                    t.selectivity,
                    t.n,
                    chosen,
                    c.task(t.name),
                )
            )
    return out


def families(v: ViewInput, configs: list[Config]) -> list[list[Point]]:
    """The unfiltered points of ``configs`` by family (points that differ
    only in clients), each by clients."""
    by: dict[tuple[str, str, str, Any], list[Point]] = {}
    for p in (p for c in configs for p in points(v, c) if not p.filter):
        by.setdefault(p.family, []).append(p)
    return [sorted(f, key=lambda p: p.clients) for f in by.values()]


def qps_cells(by: dict[int, Point], counts: list[int]) -> list[str]:
    """QPS at each client count (``by``: a family's points by clients)."""
    return [qps(by[n]) if n in by else "-" for n in counts]


def score_keys(p: Point, score: Score | None = None) -> list[str]:
    return p.t.score_keys(score) if p.t is not None else p.ts.score_keys(score)


def recall_key(p: Point) -> str | None:
    return next(iter(score_keys(p, RECALL)), None)


def shown(p: Point, field: str, fmt: Callable[[float], str]) -> str:
    """The chosen run's value, ± half the range over the runs relative to
    the median (``lat_mean``: a latency)."""
    v = p.number(f"latency_ns.{field[4:]}" if field.startswith("lat_") else field)
    if v is None:
        return "-"
    text = fmt(v)
    s = p.ts.latency(field[4:]) if field.startswith("lat_") else p.ts.spread(field)
    if s is not None and s.n > 1:
        text += f" ±{s.rel_range * 50:.0f}%"
    return text


def qps(p: Point) -> str:
    return shown(p, "ops_per_s", fmt_rate)


def lat(p: Point, key: str = "mean") -> str:
    mean, p95 = (p.number(f"latency_ns.{k}") for k in ("mean", "p95"))
    mark = stalls(mean, p95) if key == "mean" else ""
    return shown(p, f"lat_{key}", lambda v: fmt_ns(v) + mark)


def ratio(p: Point, key: str | None) -> str:
    return catalogue.text(key, p.number(key)) if key else "-"


def index_keys(v: ViewInput) -> list[str]:
    """The index parameters (and workload parameters) that vary among the runs."""
    return [
        k
        for k in varying_keys(v.ok, ("store.index.", "params.", "mode", "versions."))
        if k not in ("params.clients",)
    ]


def ident_cells(c: Config, keys: list[str]) -> list[str]:
    ident = c.first.identity()
    return ["-" if ident.get(k) is None else str(ident.get(k)) for k in keys]


def phase_task(run: Record, phase: str, name: str | None = None) -> TaskRecord | None:
    for t in run.tasks:
        if t.measured and (t.name == name if name else t.phase == phase):
            return t
    return None


def seconds(t: TaskRecord | None) -> str:
    return "-" if t is None else f"{t.elapsed_s:.2f}s"


def index_cell(t: TaskRecord | None) -> str:
    """An index step: its time, or that the upload built the index."""
    if t is None:
        return "-"
    if t.index_build == "during_insert":
        return "during upload"
    return seconds(t)


# --- search -----------------------------------------------------------------------


@register("search", "search_table", "Recall vs QPS per configuration (the Redis study's table)")
def search_table(v: ViewInput) -> list[Block]:
    configs = v.configs()
    keys = index_keys(v)
    blocks: list[Block] = []
    for store in distinct([c.engine for c in configs]):
        mine = [c for c in configs if c.engine == store]
        fams = families(v, mine)
        all_clients = sorted({p.clients for f in fams for p in f})
        skeys = catalogue.ordered(k for f in fams for p in f for k in score_keys(p))
        rows = []
        for fam in fams:
            by = {p.clients: p for p in fam}
            one = by[min(by)]
            run = one.pick.run
            row = ident_cells(one.config, keys) + [fam[0].setting_text]
            # the setting's own scores (its 1-client task's)
            row += [_metric(run, one, k) for k in skeys]
            row += [lat(one, "mean"), lat(one, "p95")] if one.clients == 1 else ["-"] * 2
            row += qps_cells(by, all_clients)
            row += [
                seconds(phase_task(run, "upload")),
                index_cell(phase_task(run, "index")),
                *footprint_cells(footprint(run)),
                str(len(one.config.runs)),
                one.pick.run_short,
            ]
            rows.append(row)
        if not rows:
            continue
        header = [short_key(k) for k in keys] + ["search", *map(catalogue.title, skeys)]
        header += ["mean (1 client)", "p95 (1 client)"]
        header += [f"QPS {clients_text(n)}" for n in all_clients]
        header += ["upload", "index", *FOOTPRINT_COLUMNS, "runs", "run"]
        blocks.append(Table(store, header, rows))
    if blocks:
        blocks.insert(
            0,
            Text(
                aggregation_note(v.how) + " Upload and index: that run's wall time; "
                "during upload: the engine indexes as documents arrive (its upload time "
                "includes the index build). " + FOOTPRINT_NOTE
            ),
        )
    return blocks


def _metric(run: Record, p: Point, key: str) -> str:
    """A setting's score from the run's record of the setting, else from
    the point's task."""
    v = run.scores.get(key)
    return catalogue.text(key, v) if isinstance(v, int | float) else ratio(p, key)


@register("search", "qps_clients", "QPS per client count")
def qps_clients(v: ViewInput) -> list[Block]:
    rows = []
    fams = families(v, v.configs())
    counts = sorted({p.clients for f in fams for p in f})
    for f in fams:
        by = {p.clients: p for p in f}
        row = [f[0].label(), *qps_cells(by, counts)]
        lo, hi = by[min(by)], by[max(by)]
        q0, q1 = lo.number("ops_per_s"), hi.number("ops_per_s")
        row.append(f"{q1 / q0:.2f}x" if q0 and q1 and hi is not lo else "-")
        sat = [str(p.clients) for p in f if _saturated(p)]
        row.append(", ".join(sat) or "-")
        row.append(f[0].pick.run_short)
        rows.append(row)
    if not rows or len(counts) < 2:
        return []
    header = ["configuration", *map(clients_text, counts)]
    header += [f"{counts[-1]} / {counts[0]}", "client saturated at", "run"]
    return [
        Text(
            aggregation_note(v.how) + " Client saturated: in that run, the clients' CPU "
            "reached 90% of what they can use."
        ),
        Table("QPS", header, rows),
    ]


def _saturated(p: Point) -> bool:
    t = p.t
    return bool(t is not None and t.client_saturated)


# --- shared by the three ---------------------------------------------------------------


def recall_qps(v: ViewInput) -> list[Block]:
    """Recall against QPS, one panel per client count (one y range for all),
    one point per configuration and search setting with its spread over the
    repeats, each store's Pareto front labelled with its settings."""
    configs = v.configs()
    pts = [p for c in configs for p in points(v, c) if not p.filter]
    counts = sorted({p.clients for p in pts})
    if not pts:
        return []
    rkey = next((k for p in pts if (k := recall_key(p))), None)
    if rkey is None:
        return []
    stores = distinct([p.config.engine for p in pts])
    stores, rest = plots.keep_series(
        stores, lambda s: max((p.number("ops_per_s") or 0.0) for p in pts if p.config.engine == s)
    )
    fig, axs = plots.panels(len(counts), 2, (5.0, 3.6), 1.0)
    rows = []
    recalls: list[float] = []
    for ax, n in zip(axs, counts, strict=False):
        for store in distinct([p.config.engine for p in pts]):
            front = []
            # a store with several builds names the build too: "m=32 ef=16", not "ef=16" twice
            builds = len({p.config.label for p in pts if p.config.engine == store}) > 1
            for p in pts:
                if p.clients != n or p.config.engine != store:
                    continue
                r, q = p.number(rkey), p.number("ops_per_s")
                if r is None or not q:
                    continue
                rows.append(
                    [
                        p.label(),
                        str(n),
                        f"{r:.4f}",
                        qps(p),
                        str(len(p.ts.measured)),
                        p.pick.run_short,
                        "" if store in stores else "not drawn",
                    ]
                )
                if store in stores:
                    text = p.label().removeprefix(store).strip() if builds else p.setting_text
                    front.append((r, q, p.ts.spread("ops_per_s"), text))
            if front:
                recalls += [x for x, *_ in front]
                plots.pareto_series(ax, front, store, s=14)
        ax.set_title(clients_text(n), fontsize="medium")
        ax.set_xlabel(plots.plain(catalogue.title(rkey)))
        ax.set_ylabel("queries per second")
        plots.rate_axis(ax, "y")
        ax.grid(True, which="both", alpha=0.3)
        plots.legend(ax, len(stores))
    for ax in axs:
        plots.recall_axis(ax, recalls, "x")
    fig.suptitle(plots.plain(f"{v.workload}: {rkey} vs QPS ({v.how} run), Pareto front per store"))
    return [
        plots.render(
            fig,
            v.name("recall-qps"),
            f"{rkey} vs QPS",
            "Up and to the right is better. Lines: each store's Pareto front, its points "
            "labelled with their search setting (and build); bars: min to max QPS over the repeats; "
            "one y range for all panels; recall axis "
            + plots.recall_axis_note()
            + "."
            + plots.left_out(rest, "stores beyond the fastest 8"),
        ),
        Table("Points", ["configuration", "clients", rkey, "QPS", "runs", "run", "chart"], rows),
    ]


def concurrency(v: ViewInput) -> list[Block]:
    """Latency against throughput as the client count grows inside a run:
    one line per configuration and setting, points labelled with clients."""
    fams = [f for f in families(v, v.configs()) if len(f) > 1]
    if not fams:
        return []
    drawn, rest = plots.keep_series(
        fams,
        lambda f: max(p.number("ops_per_s") or 0.0 for p in f),
        group=lambda f: f[0].config.engine,
    )
    fig = plots.new_figure(7.0, 5.2)
    ax = fig.axes[0]
    rows = []
    for f in fams:
        pts = []
        for p in f:
            q, m, t = (p.number(k) for k in ("ops_per_s", "latency_ns.mean", "latency_ns.p99"))
            if not q or m is None or t is None:
                continue
            pts.append((p.clients, q, m, t))
            rows.append(
                {
                    "configuration": f[0].label(),
                    "clients": str(p.clients),
                    "QPS": qps(p),
                    **{k: lat(p, k) for k in ("mean", "p50", "p99")},
                    "client saturated": "yes" if _saturated(p) else "",
                    "run": p.pick.run_short,
                    "chart": "" if f in drawn else "not drawn",
                }
            )
        if pts and f in drawn:
            plots.latency_lines(ax, f[0].label(), pts, alpha=0.5)
    plots.fmt_ns_axis(ax, "y")
    plots.rate_axis(ax, "x")
    ax.set_xlabel("queries per second")
    ax.set_ylabel("latency")
    ax.grid(True, which="both", alpha=0.3)
    plots.legend(ax, len(drawn))
    ax.set_title(plots.plain(f"{v.workload}: latency vs throughput (numbers: clients)"))
    return [
        plots.render(
            fig,
            v.name("concurrency"),
            "Latency vs throughput over concurrency",
            f"Solid: mean latency, dashed: p99; each point one client count ({v.how} run), "
            "labelled with it."
            + plots.left_out([f[0].label() for f in rest], "beyond 8: each store's fastest first"),
        ),
        Table.of("Points", rows),
    ]


def filtered(v: ViewInput) -> list[Block]:
    """The scores and latency per filter selectivity, against the
    filtered ground truth (post-filtering engines lose recall at 1%)."""
    rows = []
    sel: list[float] = []
    fams: list[tuple[str, dict[float, Point]]] = []
    for c in v.configs():
        groups: dict[tuple[str, Any], dict[float, Point]] = {}
        for p in points(v, c):
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
    pts = [q for _, ps in fams for q in ps.values()]
    kinds = [s for s in catalogue.CATALOGUE.values() if any(score_keys(q, s) for q in pts)]
    for label, ps in fams:
        row = [label]
        for s in sel:
            q = ps.get(s)
            if q is None:
                row += ["-"] * (len(kinds) + 1)
                continue
            row += [ratio(q, next(iter(score_keys(q, k)), None)) for k in kinds]
            row.append(lat(q, "p50"))
        row.append(next(iter(ps.values())).pick.run_short)
        rows.append(row)
    header = ["configuration"]
    for s in sel:
        pct = f"{s * 100:g}%"
        header += [*(f"{k.name} {pct}" for k in kinds), f"p50 {pct}"]
    header.append("run")
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
    engine reports its own time, ours minus the engine's per call: all of a
    row from one task of one run."""
    rows = []
    any_engine = False
    for c in v.configs():
        for p in points(v, c):
            t = p.t
            if t is None:
                continue
            eng = t.engine
            any_engine |= eng is not None
            ours = t.number("latency_ns.mean")
            share = eng.get("client_share_ns") if eng else None
            rows.append(
                {
                    "configuration": p.label(),
                    "task": p.name,
                    "QPS": qps(p),
                    "client CPU/s": _num(t.client_cpu_per_s, "{:.2f}"),
                    "ceiling": _num(t.client_cpu_ceiling, "{:g}"),
                    "saturated": "yes" if t.client_saturated else "",
                    "server CPU/s": _num(t.server_cpu_per_s, "{:.2f}"),
                    "our mean": fmt_ns(ours) if ours is not None else "-",
                    "engine mean": fmt_ns(eng["mean_ns"]) if eng else "-",
                    "ours - engine": fmt_ns(share) if share is not None else "-",
                    "run": p.pick.run_short,
                }
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
        "backends of process clients come and go within it and are missed). "
        "All of a row is one task of the run named (the CPU, its ceiling and the flag "
        "together)."
    )
    if any_engine:
        note += (
            " Engine mean: the engine's own time per call from its counters (Redis INFO "
            "commandstats), over the task including per-client warm-up calls; ours - engine: "
            "the client's and the network's share."
        )
    return [Text(note), Table.of("Client and engine", rows)]


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


# --- tune ---------------------------------------------------------------------------------


def _tuning_of(rec: Record) -> dict[str, Any]:
    t = rec.metrics.get("tune")
    return t if isinstance(t, dict) else {}


@register("tune", "tune_table", "Latency and QPS at the target recall (the Milvus figures)")
def tune_table(v: ViewInput) -> list[Block]:
    rows = []
    keys = index_keys(v)
    for c in v.configs():
        pts = [p for p in points(v, c) if not p.filter]
        if not pts:
            continue
        by = {p.clients: p for p in pts}
        one, top = by[min(by)], by[max(by)]
        tun = _tuning_of(one.pick.run)
        values = distinct([_tuning_of(r).get("value") for r in c.runs])
        row = [c.engine, *ident_cells(c, keys)]
        row += [
            str(tun.get("param") or "-"),
            str(tun.get("value") if tun.get("value") is not None else "-"),
            ", ".join(str(x) for x in values if x is not None) or "-",
            f"{tun.get('target', 0):g}",
            ratio(one, recall_key(one)),
            _flag(c),
        ]
        row += [lat(one, k) for k in ("mean", "p50", "p95", "p99")]
        row += [qps(one), str(top.clients), qps(top), *footprint_cells(footprint(one.pick.run))]
        row += [str(len(c.runs)), one.pick.run_short]
        rows.append(row)
    if not rows:
        return []
    header = ["store", *(short_key(k) for k in keys)]
    header += ["param", "value", "values (all runs)", "target", "recall", "tuning"]
    header += ["mean", "p50", "p95", "p99", "QPS 1 client", "clients", "QPS", *FOOTPRINT_COLUMNS]
    header += ["runs", "run"]
    return [
        Text(
            "The smallest search parameter reaching the target recall (doubling, then "
            "bisection), then latency with one client and QPS at the highest concurrency. "
            + aggregation_note(v.how)
            + " "
            + FOOTPRINT_NOTE
        ),
        Table("At the target recall", header, rows),
    ]


def _flag(c: Config) -> str:
    notes = []
    for r in c.runs:
        t = _tuning_of(r)
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
    chosen = [(c, v.pick(c).run) for c in v.configs()]
    chosen = [(c, r) for c, r in chosen if _tuning_of(r).get("probes")]
    if not chosen:
        return []
    fig = plots.new_figure(7.0, 4.2)
    ax = fig.axes[0]
    rows = []
    target = None
    drawn, rest = plots.keep_series(
        chosen, lambda cr: headline_value(cr[1]) or 0.0, group=lambda cr: cr[0].engine
    )
    recalls: list[float] = []
    for c, run in chosen:
        t = _tuning_of(run)
        target = t.get("target", target)
        pts = sorted((int(x), float(r)) for x, r in t["probes"])
        if (c, run) in drawn:
            recalls += [r for _, r in pts]
            plots.line(ax, c.label, [x for x, _ in pts], [r for _, r in pts])
        rows.append(
            [
                c.label,
                str(t.get("value")),
                " ".join(f"{x}:{r:.3f}" for x, r in pts),
                _flag(c),
                short_run(run.run_id),
            ]
        )
    if target is not None:
        ax.axhline(target, color="#777", ls=":", lw=1)
        recalls.append(float(target))
    ax.set_xscale("log", base=2)
    ax.set_xlabel(plots.plain(_tuning_of(chosen[0][1]).get("param") or "parameter"))
    ax.set_ylabel("recall")
    plots.recall_axis(ax, recalls, "y")
    ax.grid(True, which="both", alpha=0.3)
    plots.legend(ax, len(drawn))
    ax.set_title("recall per probed value (dotted: the target)")
    return [
        plots.render(
            fig,
            v.name("tune-probes"),
            "Recall per probed value",
            "Recall axis "
            + plots.recall_axis_note()
            + "."
            + plots.left_out([c.label for c, _ in rest], "beyond 8: each store's fastest first"),
        ),
        Table("Probes", ["configuration", "chosen", "value:recall", "tuning", "run"], rows),
    ]


# --- scale --------------------------------------------------------------------------------


def _steps(run: Record) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for s in run.metrics.get("scale") or []:
        out[int(s["n"])] = s
    return out


def _per_size(v: ViewInput) -> tuple[list[tuple[Config, int, dict[int, Point]]], list[int]]:
    """(configuration, size, points by clients) for each size, and the client counts."""
    counts: list[int] = []
    per: list[tuple[Config, int, dict[int, Point]]] = []
    for c in v.configs():
        by_n: dict[int, dict[int, Point]] = {}
        for p in points(v, c):
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
        one = by[min(by)]
        run = one.pick.run
        tun = _steps(run).get(n, {}).get("tune") or {}
        row = [
            c.label,
            f"{n:,}",
            seconds(phase_task(run, "upload", f"upload n={n}")),
            index_cell(phase_task(run, "index", f"build_index n={n}")),
        ]
        row += [one.setting_text, ratio(one, recall_key(one))]
        row += [lat(one, "mean"), lat(one, "p99")]
        row += qps_cells(by, counts)
        size = footprint(run, {"n": n}, _steps(run).get(n, {}))
        row += footprint_cells(size)
        row.append("" if tun.get("reached", True) else "target not reached")
        row.append(one.pick.run_short)
        rows.append(row)
    header = ["configuration", "n", "upload", "index", "search", "recall", "mean", "p99"]
    header += [f"QPS {clients_text(k)}" for k in counts]
    header += [*FOOTPRINT_COLUMNS, "note", "run"]
    return [
        Text(
            "Each size adds documents to the same collection and rebuilds the index; the "
            "search parameter is tuned again for the target recall at each size. Mean and p99: "
            "one client. Footprint: at that size (peak RSS of its tasks). "
            + aggregation_note(v.how)
            + " "
            + FOOTPRINT_NOTE
        ),
        Table("Per size", header, rows),
    ]


@register("scale", "scale_plot", "Latency and QPS per size", needs_plots=True)
def scale_plot(v: ViewInput) -> list[Block]:
    per, counts = _per_size(v)
    if not per:
        return []
    fig = plots.new_figure(9.0, 3.8, 1, 2)
    left, right = fig.axes
    configs = distinct([c.id for c, _, _ in per])
    for cid in configs:
        mine = [(c, n, by) for c, n, by in per if c.id == cid]
        label = plots.short([mine[0][0].label])[0]
        ns = [n for _, n, _ in mine]
        means = []
        for _, _, by in mine:
            m = by[min(by)].number("latency_ns.mean")
            means.append(m if m is not None else float("nan"))
        plots.line(left, mine[0][0].label, ns, means, ls="-")
        for j, k in enumerate(counts):
            ys = [by[k].number("ops_per_s") if k in by else None for _, _, by in mine]
            name = f"{label} · {clients_text(k)}"
            ls = "-" if j == len(counts) - 1 else "--"
            plots.line(right, name, ns, [y if y else float("nan") for y in ys], ls=ls, label=name)
    sizes = [n for _, n, _ in per]
    plots.doubling_axes(left, right, "documents", "mean latency, 1 client", right, sizes)
    return [plots.render(fig, v.name("scale"), "Latency and QPS per size")]


# the shared ones after each workload's headline views
for _w in WORKLOADS:
    register(_w, "recall_qps", "Recall vs throughput", needs_plots=True)(recall_qps)
    register(_w, "concurrency", "Latency vs throughput over concurrency", needs_plots=True)(
        concurrency
    )
    register(_w, "filtered", "Filtered search per selectivity")(filtered)
    register(_w, "client_engine", "Client CPU and engine-side time")(client_engine)
