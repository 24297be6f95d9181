"""The streaming workload's view: per stage of ingestion, the inserts
(target and achieved rate, latency from the intended start), the searches
beside them per concurrency (QPS, p50, p99), recall against what was
visible at the stage's end, and the lag until a written document is found."""

from __future__ import annotations

from typing import Any

from storebench.report.data import aggregation_note
from storebench.report.footprint import (
    FOOTPRINT_COLUMNS,
    FOOTPRINT_NOTE,
    footprint,
    footprint_cells,
)
from storebench.report.terminal import fmt_latency, fmt_ns, fmt_rate
from storebench.report.views import Block, Table, Text, ViewInput, register
from storebench.results.records import TaskRecord

SHARE_FULL = 0.95  # a search beside less of the inserts' time than this is flagged


def _lag(stage: dict[str, Any], timeout: Any) -> str:
    if stage.get("lag_visible") is False:
        return f"> {timeout}s (not found)"
    lag = stage.get("lag_s")
    return "-" if lag is None else fmt_ns(lag * 1e9)


def _share(t: TaskRecord | None) -> str:
    """How much of the inserts' time the search ran beside."""
    share = t.inserting_share if t is not None else None
    if share is None:
        return "-"
    return f"{share:.0%}" + (" ONLY" if share < SHARE_FULL else "")


def _achieved(t: TaskRecord) -> str:
    got = t.achieved_rate
    text = fmt_rate(got) if got is not None else "-"
    return text if t.sustained is not False else f"{text} NOT SUSTAINED"


@register("streaming", "streaming_table", "Search while inserting, per stage")
def streaming_table(v: ViewInput) -> list[Block]:
    rows: list[dict[str, str]] = []
    for c in v.configs():
        run = v.pick(c).run
        tasks = {t.name: t for t in run.tasks}
        k = run.params.get("k", 10)
        timeout = run.params.get("lag_timeout_s", "?")
        for stage in run.metrics.get("stages") or []:
            recall = stage.get("recall")
            fp = footprint_cells(footprint(run, {"stage": stage.get("stage")}, stage))
            pairs = list(zip(stage.get("inserts") or [], stage.get("searches") or [], strict=False))
            for i, (ins_name, srch_name) in enumerate(pairs or [(None, None)]):
                ins, srch = tasks.get(ins_name or ""), tasks.get(srch_name or "")
                first = i == 0
                # a stage's first row says what the stage is; the rest continue it
                rows.append(
                    {
                        "configuration": c.label if first else "",
                        "stage": stage.get("label", "?") if first else "",
                        "visible": f"{stage.get('visible', 0):,}" if first else "",
                        "search clients": str(srch.clients) if srch is not None else "-",
                        "insert target/s": fmt_rate(ins.target_rate) if ins is not None else "-",
                        "insert achieved/s": _achieved(ins) if ins is not None else "-",
                        "insert p50": fmt_latency(ins, "p50"),
                        "insert p99": fmt_latency(ins, "p99"),
                        "insert service p50": fmt_latency(ins, "p50", "service_ns"),
                        "search QPS": fmt_rate(srch.ops_per_s) if srch is not None else "-",
                        "search p50": fmt_latency(srch, "p50"),
                        "search p99": fmt_latency(srch, "p99"),
                        "searched beside inserts": _share(srch),
                        f"recall@{k}": ""
                        if not first
                        else "-"
                        if recall is None
                        else f"{recall:.4f}",
                        "lag": _lag(stage, timeout) if first else "",
                        **dict(zip(FOOTPRINT_COLUMNS, fp if first else ["", "", ""], strict=True)),
                    }
                )
    if not rows:
        return []
    return [
        Text(
            "Each stage inserts its documents at the target rate (open loop: insert latency "
            "from the intended start) while search clients run, one concurrency over each part "
            "of the stage. Achieved below 95% of the target: NOT SUSTAINED (the target is never "
            "lowered). Insert service: the call's own time, without the wait of a call due "
            "while the one before ran. Searched beside inserts: the part of the inserts' time "
            "the search ran (it runs for the planned time; inserts that fall behind go on "
            "alone: below 95%, ONLY). "
            "Recall: the query set at one client after the stage, against the exact "
            "truth of the documents visible then. Lag: from an insert's return until the "
            "document is found by search. Footprint: at the stage's end (peak RSS of its "
            "tasks). " + aggregation_note(v.how) + " " + FOOTPRINT_NOTE
        ),
        Table.of("Per stage", rows),
    ]


@register("streaming", "streaming_plot", "QPS and latency per stage", needs_plots=True)
def streaming_plot(v: ViewInput) -> list[Block]:
    """The QPS-latency curve of each stage, one panel per stage: search QPS
    against p99 (solid) and p50 (dashed) while the stage was written, one
    point per concurrency, a line per configuration."""
    from storebench.report import plots

    per_stage: dict[str, list[tuple[str, list[TaskRecord]]]] = {}
    for c in v.configs():
        run = v.pick(c).run
        tasks = {t.name: t for t in run.tasks}
        for stage in run.metrics.get("stages") or []:
            pts = [tasks[n] for n in stage.get("searches") or [] if n in tasks]
            pts = [t for t in pts if t.ops_per_s and t.latency_ns]
            if pts:
                per_stage.setdefault(stage.get("label", "?"), []).append((c.label, pts))
    if not per_stage:
        return []
    fig = plots.new_figure(4.0 * len(per_stage) + 1.0, 4.2, 1, len(per_stage), sharey=True)
    for ax, (stage, lines) in zip(fig.axes, per_stage.items(), strict=True):
        for name, pts in lines:
            xs = [t.ops_per_s for t in pts]
            plots.line(ax, name, xs, [t.latency_ns.get("p99") for t in pts], ls="-")
            plots.line(ax, name, xs, [t.latency_ns.get("p50") for t in pts], ls="--", label=None)
            for t, x in zip(pts, xs, strict=True):
                ax.annotate(f"c={t.clients}", (x, t.latency_ns.get("p99")), fontsize="x-small")
        plots.rate_axis(ax, "x")
        plots.fmt_ns_axis(ax, "y")
        ax.set_title(f"while writing to {stage}", fontsize="medium")
        ax.set_xlabel("search QPS")
        ax.grid(True, which="both", alpha=0.3)
    plots.figure_legend(fig, fig.axes)
    return [
        plots.render(
            fig,
            v.name("stages"),
            "QPS and latency per stage",
            "p99 solid, p50 dashed; one point per search concurrency (c=).",
        )
    ]
