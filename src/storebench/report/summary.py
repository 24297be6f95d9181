"""The report's first screen: per workload (study), its headline table, a
few sentences generated from the numbers (who leads, by what ratio, where a
spread makes the ranking uncertain) and the run conditions; a warning block
when any run failed or was flagged busy or noisy; and the footprint (peak
server memory, data size, bytes per vector) in a table and one chart.

Every number here is computed from the records the views read, with their
semantics: a configuration's value is its chosen run's (``data.pick``),
cautions are ``data.cautions``. The renderers only render.

One module (~600 lines) on purpose: the first screen's sections read the
same entries and lead (``entries``, ``lead``); split, the sentences and the
tables they describe could disagree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from storebench.measure import noise
from storebench.report import plots
from storebench.report.data import (
    Config,
    Pick,
    Record,
    Spread,
    cautions,
    clients_text,
    configurations,
    safe_text,
    short_key,
    store_label,
    varying_keys,
)
from storebench.report.footprint import (
    FOOTPRINT_COLUMNS,
    FOOTPRINT_NOTE,
    VECTOR_WORKLOADS,
    Footprint,
    fmt_bytes,
    footprint,
    footprint_cells,
)
from storebench.report.terminal import docs_per_s, fmt_latency, fmt_rate
from storebench.report.views import Block, Figure, Section, Table, Text, distinct, repeats_note
from storebench.results import scores as catalogue
from storebench.results.records import TaskRecord, as_number
from storebench.results.scores import RECALL

# search: the recall a setting must reach to be ranked (the tune scenario's
# default target; tune records carry their own)
TARGET_RECALL = 0.95


# --- ranking -------------------------------------------------------------------------


@dataclass
class Entry:
    """One configuration as the summary ranks it: the chosen run's value
    of the workload's headline number, its spread over the runs."""

    config: Config
    pick: Pick
    value: float | None
    spread: Spread | None
    recall: float | None = None
    ranked: bool = True  # e.g. below the target recall: shown, not ranked
    why_not: str = ""
    cautions: list[str] = field(default_factory=list)

    @property
    def engine(self) -> str:
        return store_label(self.config.first)

    @property
    def run(self) -> Record:
        return self.pick.run

    @property
    def recall_text(self) -> str:
        return "-" if self.recall is None else f"{self.recall:.4f}"


@dataclass
class Lead:
    leader: Entry
    others: list[Entry]  # the best configuration of each other engine, best first
    uncertain: list[str]  # why the leader's place is not sure

    @property
    def ratio(self) -> float | None:
        """The leader's value over the runner-up's."""
        if not self.others or not self.others[0].value:
            return None
        return (self.leader.value or 0.0) / self.others[0].value


def lead(entries: list[Entry]) -> Lead | None:
    """The best ranked configuration of each engine, ordered by value; the
    leader's place is uncertain where it or the runner-up is cautioned
    (``data.cautions``) or their ranges over the repeats overlap."""
    best: dict[str, Entry] = {}
    for e in entries:
        if not e.ranked or e.value is None:
            continue
        if e.engine not in best or e.value > (best[e.engine].value or 0.0):
            best[e.engine] = e
    ranked = sorted(best.values(), key=lambda e: -(e.value or 0.0))
    if not ranked:
        return None
    first, others = ranked[0], ranked[1:]
    why: list[str] = []
    if others:
        second = others[0]
        for e in (first, second):
            if e.cautions:
                why.append(f"{e.config.label}: {', '.join(e.cautions)}")
        if (
            first.spread is not None
            and second.spread is not None
            and first.spread.n > 1
            and second.spread.n > 1
            and first.spread.min <= second.spread.max
        ):
            why.append(
                f"the repeats of {first.config.label} and {second.config.label} overlap "
                f"({fmt_rate(first.spread.min)} to {fmt_rate(first.spread.max)} against "
                f"{fmt_rate(second.spread.min)} to {fmt_rate(second.spread.max)})"
            )
    return Lead(first, others, why)


# --- per workload: what its headline is -----------------------------------------------


def _rate_field(workload: str) -> str:
    """The number a workload ranks by: documents/s for ingest (batches
    differ between configurations), else the headline task's ops/s."""
    return "items_per_s" if workload == "ingest" else "ops_per_s"


def _recall_of(run: Record) -> float | None:
    """The setting's own recall (as the study tables show it); for scale,
    the headline task's (its size's)."""
    t = run.headline_task()
    from_task = next(
        (x for k in (t.score_keys(RECALL) if t else []) if (x := t.number(k)) is not None), None
    )
    if run.workload == "scale" and from_task is not None:
        return from_task
    own = as_number(run.scores.get(catalogue.first(run.scores) or ""))
    return own if own is not None else from_task


def _target(run: Record) -> float:
    t = run.metrics.get("tune")
    if isinstance(t, dict) and as_number(t.get("target")) is not None:
        return float(t["target"])
    return TARGET_RECALL


def entries(workload: str, recs: list[Record], how: str) -> list[Entry]:
    out = []
    rate = _rate_field(workload)
    for c in configurations(recs):
        pk = c.pick(how)
        t = pk.run.headline_task()
        value = t.number(rate) if t is not None else None
        spread = c.task(t.name).spread(rate) if t is not None else None
        if workload == "ingest" and (docs := docs_per_s(pk.run)) is not None:
            value, spread = docs, c.metric("docs_per_s")
        e = Entry(c, pk, value, spread, cautions=cautions(c))
        if workload in VECTOR_WORKLOADS:
            e.recall = _recall_of(pk.run)
            target = _target(pk.run)
            if e.recall is not None and e.recall < target:
                e.ranked, e.why_not = False, f"recall {e.recall:.4f} < {target:g}"
        out.append(e)
    return out


def _one_client(run: Record) -> TaskRecord | None:
    """The single-client task of the headline's search setting (and size,
    for scale): its latency."""
    head = run.headline_task()
    for t in run.tasks:
        if (
            t.measured
            and t.phase == "search"
            and t.clients == 1
            and not t.filter
            and (head is None or (t.search == head.search and t.n == head.n))
        ):
            return t
    return None


def _columns(workload: str, ents: list[Entry]) -> Callable[[Entry], dict[str, str]]:
    """The study's own headline cells of an entry, by column."""
    rate_name = "docs/s" if _rate_field(workload) == "items_per_s" else "ops/s"
    head = next((e.run.headline_task() for e in ents), None)
    qps = "QPS" + (f" ({clients_text(head.clients)})" if head is not None else "")
    if workload in ("search", "scale"):

        def search_row(e: Entry) -> dict[str, str]:
            t, one = e.run.headline_task(), _one_client(e.run)
            chosen = (t.search or t.setting or {}) if t is not None else {}
            return {
                "search": " ".join(f"{k}={v}" for k, v in chosen.items()) or "-",
                "recall": e.recall_text,
                qps: fmt_rate(e.value),
                "p50 (1 client)": fmt_latency(one, "p50"),
                "p99 (1 client)": fmt_latency(one, "p99"),
            }

        return search_row
    if workload == "tune":

        def tune_row(e: Entry) -> dict[str, str]:
            tun = e.run.metrics.get("tune") or {}
            one = _one_client(e.run)
            return {
                "tuned": f"{tun.get('param')}={tun.get('value')}" if tun.get("param") else "-",
                "recall": e.recall_text,
                "mean (1 client)": fmt_latency(one, "mean"),
                "p99 (1 client)": fmt_latency(one, "p99"),
                qps: fmt_rate(e.value),
            }

        return tune_row
    if workload == "crud":
        from storebench.report.crud import RATE_COLUMNS, rate_cells

        for e in ents:
            e.recall = _recall_of(e.run)
        return lambda e: {
            "recall": e.recall_text,
            **dict(zip(RATE_COLUMNS, rate_cells(e.config, e.run), strict=True)),
        }
    # social (agdb's table: per operation), ingest and the rest: each task's
    # mean latency beside the ranked rate
    names = distinct([t.name for e in ents for t in e.run.tasks if t.measured and t.histogram])[:6]

    def generic_row(e: Entry) -> dict[str, str]:
        t = e.run.headline_task()
        means = {f"{n} mean": fmt_latency(e.run.task(n), "mean") for n in names}
        return {"headline task": t.name if t else "-", rate_name: fmt_rate(e.value), **means}

    return generic_row


# --- sentences and conditions ------------------------------------------------------------


def _what(workload: str, ents: list[Entry]) -> str:
    t = next((t for e in ents if (t := e.run.headline_task()) is not None), None)
    if workload in VECTOR_WORKLOADS:
        target = _target(ents[0].run) if ents else TARGET_RECALL
        at = f" at {clients_text(t.clients)}" if t is not None else ""
        return f"QPS{at} with recall ≥ {target:g}"
    if workload == "ingest":
        counted = distinct([e.run.metrics.get("counted") for e in ents]) if ents else []
        how = f" (counted: {counted[0]})" if len(counted) == 1 and counted[0] else ""
        return f"documents per second{how}"
    return f"ops/s of {t.name}" if t is not None else "ops/s"


def sentences(workload: str, ents: list[Entry], ld: Lead | None) -> list[str]:
    what = _what(workload, ents)
    out: list[str] = []
    if ld is None:
        if ents:
            out.append(
                f"No configuration is ranked by {what}: "
                + "; ".join(f"{e.config.label}: {e.why_not or 'not measured'}" for e in ents)
                + "."
            )
        return out
    first = ld.leader
    if not ld.others:
        out.append(
            f"Only {first.engine} is ranked by {what}: {fmt_rate(first.value)} at best "
            f"({first.config.label})."
        )
    else:
        second = ld.others[0]
        out.append(
            f"{first.engine} leads by {what}: {fmt_rate(first.value)} ({first.config.label}), "
            f"{ld.ratio:.2f}x {second.engine}'s {fmt_rate(second.value)} "
            f"({second.config.label})."
        )
        if len(ld.others) > 1:
            out.append(
                "Then "
                + ", ".join(
                    f"{e.engine} {fmt_rate(e.value)} ({(e.value or 0) / (first.value or 1):.2f}x "
                    "the leader)"
                    for e in ld.others[1:]
                )
                + "."
            )
        once = [e.config.label for e in (first, second) if e.spread is None or e.spread.n < 2]
        if ld.uncertain:
            out.append("The ranking is uncertain: " + "; ".join(ld.uncertain) + ".")
        elif once:
            out.append(
                f"{' and '.join(once)} ran once: the spread over repeats is unknown (set "
                "repeats to see whether the ranking holds)."
            )
        else:
            out.append(
                "The ranking holds over the repeats: neither configuration is cautioned and "
                "their ranges do not overlap."
            )
    left = [e for e in ents if not e.ranked]
    if left:
        out.append(
            f"Not ranked: {len(left)} configuration(s) below the target recall (e.g. "
            f"{left[0].config.label}: {left[0].why_not})."
        )
    return out


def conditions(recs: list[Record]) -> str:
    """Machine, load and mode the runs had, in one line."""
    machines = distinct(
        [
            f"{safe_text(r.machine.get('cpu_model') or '?')}, "
            f"{r.machine.get('cores_logical', '?')} cores"
            for r in recs
        ]
    )
    loads = [r.machine_load or {} for r in recs]
    busy = [ld for ld in loads if ld.get("busy")]
    other = [v for ld in loads if (v := as_number(ld.get("other_cpu_cores"))) is not None]
    load1 = [v for ld in loads if (v := as_number(ld.get("load_1m_max"))) is not None]
    load = f"{len(busy)} of {len(recs)} run(s) on a busy machine" if busy else "no run flagged busy"
    if other:
        load += f" (other processes up to {max(other):.1f} cores"
        load += f", load average up to {max(load1):.2f})" if load1 else ")"
    elif load1:
        load += f" (load average up to {max(load1):.2f})"
    modes = ", ".join(distinct([safe_text(r.mode) for r in recs]))
    return f"Conditions: {'; '.join(machines)}; {load}; mode {modes}."


# --- the sections ----------------------------------------------------------------------


def warnings(recs: list[Record]) -> list[str]:
    """What makes the page's numbers less sure, in a few lines: runs not
    ok, configurations with busy runs or scattered repeats (``data.cautions``;
    each workload's details name them)."""
    out = []
    bad = [r for r in recs if not r.ok]
    if bad:
        kinds = ", ".join(f"{n} {s}" for s, n in Counter(safe_text(r.status) for r in bad).items())
        out.append(
            f"{len(bad)} of {len(recs)} run(s) did not finish ({kinds}): left out of the tables "
            "and charts; their errors are under Runs that did not finish."
        )
    for wl in distinct([str(r.workload) for r in recs]):
        configs = configurations([r for r in recs if str(r.workload) == wl])
        flagged = [(c, why) for c in configs if (why := cautions(c))]
        if not flagged:
            continue
        busy = sum(any("busy machine" in w for w in why) for _, why in flagged)
        spread = sum(any(w.startswith("repeats spread") for w in why) for _, why in flagged)
        parts = []
        if busy:
            parts.append(f"{busy} with runs on a busy machine")
        if spread:
            parts.append(f"{spread} whose repeats spread over ±{noise.SPREAD_LIMIT:.0%}")
        out.append(
            f"{wl}: {len(flagged)} of {len(configs)} configuration(s) cautioned "
            f"({', '.join(parts)}): "
            + ", ".join(safe_text(c.label) for c, _ in flagged[:6])
            + (f" and {len(flagged) - 6} more" if len(flagged) > 6 else "")
            + " (each named with its reason at the top of the workload's details). Rerun on a "
            "quiet machine, or with more repeats, before trusting a ranking they touch."
        )
    return out


def study(workload: str, recs: list[Record], how: str) -> Section:
    """A workload's summary: its sentences, headline table (one row per
    engine, its best configuration), and conditions."""
    ents = entries(workload, recs, how)
    ld = lead(ents)
    row = _columns(workload, ents)
    blocks: list[Block] = [Text(s, kind="lead") for s in sentences(workload, ents, ld)]
    if ld is not None:
        shown = [ld.leader, *ld.others]
        rows = [
            {
                "configuration": e.config.label,
                **row(e),
                "vs leader": f"{(e.value or 0.0) / (ld.leader.value or 1.0):.2f}x",
                "caution": "; ".join(e.cautions) or "-",
                **dict(zip(FOOTPRINT_COLUMNS, footprint_cells(footprint(e.run)), strict=True)),
                "runs": str(e.pick.runs),
                "run": e.pick.run_short,
            }
            for e in shown
        ]
        heads = len(rows[0]) - 8  # the study's own columns
        blocks.append(
            Table.of(
                f"{workload}: each engine's best configuration by {_what(workload, ents)}",
                rows,
                note=repeats_note([e.pick for e in shown]),
                align=["l", *["r"] * (heads + 1), "l", "r", "r", "r", "r", "l"],
            )
        )
    if workload == "ingest":
        blocks += matrix(ents)
    blocks.append(Text(conditions(recs)))
    return Section(f"summary-{plots.slug(workload)}", f"Summary: {workload}", blocks)


def matrix(ents: list[Entry]) -> list[Block]:
    """arangob's matrix: a row per store, a column per setting of what
    varies besides the store, each cell that configuration's ranked rate."""
    if not ents:
        return []
    keys = [
        k
        for k in varying_keys([e.config.first for e in ents])
        if k not in ("store.engine", "store.url", "versions.engine")
    ]
    if not keys:
        return []

    def column(e: Entry) -> str:
        ident = e.config.first.identity()
        return " ".join(f"{short_key(k)}={ident.get(k)}" for k in keys)

    cols = distinct([column(e) for e in ents])
    engines = distinct([e.engine for e in ents])
    cell = {(e.engine, column(e)): e for e in ents}
    rows = []
    for engine in engines:
        row = [engine]
        for col in cols:
            e = cell.get((engine, col))
            row.append("-" if e is None or e.value is None else fmt_rate(e.value))
        rows.append(row)
    return [Table("documents per second, per store and setting", ["store", *cols], rows)]


def footprint_section(recs: list[Record], how: str, plots_on: bool) -> Section | None:
    """Peak server RSS, data size and bytes per vector of each
    configuration's chosen run: a table, and one chart."""
    rows: list[tuple[str, str, Footprint, str]] = []
    for wl in distinct([str(r.workload) for r in recs]):
        for c in configurations([r for r in recs if str(r.workload) == wl]):
            pk = c.pick(how)
            f = footprint(pk.run)
            if f.any:
                rows.append((f"{wl} · {c.label}", c.engine, f, pk.run_short))
    if not rows:
        return None
    blocks: list[Block] = [
        Text(FOOTPRINT_NOTE),
        Table(
            "Footprint",
            ["configuration", *FOOTPRINT_COLUMNS, "run"],
            [[label, *footprint_cells(f), run] for label, _, f, run in rows],
            align=["l", "r", "r", "r", "l"],
        ),
    ]
    chart = footprint_chart(rows) if plots_on else None
    if chart is not None:
        blocks.insert(1, chart)
    return Section("footprint", "Footprint", blocks)


def footprint_chart(rows: list[tuple[str, str, Footprint, str]]) -> Figure | None:
    """Horizontal bars per configuration, one panel per measure any run has
    (peak server RSS: none when every store is embedded; data size), one
    colour per store as in every chart. None: no measure to draw."""
    shown = rows[:24]
    measures = [
        (title, get)
        for title, get in (
            ("peak server RSS (MiB)", lambda f: f.peak_rss),
            ("data size (MiB)", lambda f: f.data_bytes),
        )
        if any(get(f) for _, _, f, _ in shown)
    ]
    if not measures:
        return None
    fig = plots.new_figure(4.5 * len(measures), 1.2 + 0.28 * len(shown), 1, len(measures))
    labels = plots.short([label for label, _, _, _ in shown], 48)
    for ax, (title, get) in zip(fig.axes, measures, strict=True):
        ys = list(range(len(shown)))
        raw = [get(f) for _, _, f, _ in shown]
        vals = [(x or 0.0) / 2**20 for x in raw]
        colours = [plots.style(engine)["color"] for _, engine, _, _ in shown]
        ax.barh(ys, vals, color=colours)
        for y, v, x in zip(ys, vals, raw, strict=True):
            ax.annotate(
                fmt_bytes(x),
                (v, y),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
        ax.set_yticks(ys, labels if ax is fig.axes[0] else [""] * len(ys), fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize="medium")
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_xlim(0, max(vals + [1.0]) * 1.25)
    caption = "Bars: each configuration's chosen run; - where not measured"
    caption += (
        " (an embedded store has no server)."
        if len(measures) == 2
        else "; no run had a server, so no server RSS."
    )
    if len(rows) > len(shown):
        caption += f" {len(rows) - len(shown)} more in the table."
    title = "Footprint: " + " and ".join(t.split(" (")[0] for t, _ in measures)
    return plots.render(fig, "footprint", title, caption)


def summary_sections(recs: list[Record], how: str, plots_on: bool = True) -> list[Section]:
    """The first screen: warnings, then each workload's summary."""
    out = []
    warn = warnings(recs)
    if warn:
        out.append(
            Section(
                "warnings",
                "Warnings",
                [Text(w, kind="warning") for w in warn],
            )
        )
    for wl in distinct([str(r.workload) for r in recs]):
        out.append(study(wl, [r for r in recs if str(r.workload) == wl], how))
    fp = footprint_section(recs, how, plots_on)
    if fp is not None:
        out.append(fp)
    return out
