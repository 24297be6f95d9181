"""``storebench report``: records -> sections (the registered views of each
workload, then the runs' metadata) -> report.md, report.html and plots/."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storebench.report.data import (
    DEFAULT_AGGREGATION,
    Record,
    aggregation_note,
    cautions,
    configurations,
    safe_mapping,
    safe_text,
    short_key,
    store_label,
    varying_keys,
)
from storebench.report.footprint import fmt_bytes
from storebench.report.plots import slug
from storebench.report.views import Figure, Section, Table, Text, ViewInput, distinct, run_views
from storebench.results import records
from storebench.results.files import now_iso, storebench_version
from storebench.results.records import as_number


@dataclass
class Written:
    markdown: Path
    html: Path
    plots: list[Path] = field(default_factory=list)


def _fmt(v: object) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True, default=str)
    return "-" if v is None else str(v)


def _duration(r: Record) -> str:
    from datetime import datetime

    try:
        a = datetime.fromisoformat(str(r.started_at))
        b = datetime.fromisoformat(str(r.finished_at))
    except ValueError:
        return "-"
    return f"{(b - a).total_seconds():.1f}s"


def _tally(values: list[Any]) -> list[tuple[Any, int]]:
    """Distinct values (as JSON reads them back) in first-seen order, each with its count."""
    seen = Counter(json.dumps(v, sort_keys=True, default=str) for v in values)
    return [(json.loads(key), n) for key, n in seen.items()]


def metadata_sections(recs: list[Record]) -> list[Section]:
    """Runs (status, versions, what varies), shared parameters, machines, failures."""
    out: list[Section] = []
    vary = [
        k for k in varying_keys(recs) if k not in ("store.engine", "store.url", "versions.engine")
    ]
    rows: list[dict[str, str]] = []
    classes = []
    for r in recs:
        ident = r.identity()
        err = safe_text(r.error)
        rows.append(
            {
                "run": safe_text(r.run_id),
                "scenario": safe_text(r.scenario),
                "workload": safe_text(r.workload),
                "store": store_label(r),
                "engine version": safe_text(r.versions.get("engine", "-")),
                "mode": safe_text(r.mode),
                "repeat": str(r.repeat),
                "varies": " ".join(
                    f"{short_key(k)}={_fmt(ident.get(k))}" for k in vary if k in ident
                ),
                "status": safe_text(r.status),
                "started": safe_text(r.started_at),
                "took": _duration(r),
                "error": err if len(err) <= 160 else err[:159] + "…",
            }
        )
        classes.append(str(r.status))
    align = ["l"] * 6 + ["r", "l", "l", "l", "r", "l"]
    out.append(Section("runs", "Runs", [Table.of("", rows, align=align, row_classes=classes)]))

    # parameters every run of a workload shares
    blocks: list[Table | Text | Figure] = []
    for wl in distinct([r.workload for r in recs]):
        mine = [r for r in recs if r.workload == wl]
        v = set(varying_keys(mine))
        shared: dict[str, object] = {}
        for k, val in mine[0].identity().items():
            if k not in v and k not in ("workload", "store.engine"):
                shared[k] = val
        prow = [[k, safe_text(_fmt(val))] for k, val in shared.items()]
        prow += [[k, "varies (see Runs)"] for k in v if k != "store.engine"]
        blocks.append(Table(f"{wl}", ["parameter", "value"], prow, align=["l", "l"]))
    out.append(Section("parameters", "Parameters", list(blocks)))

    # machines and versions
    mrows = []
    for m, n in _tally([r.machine for r in recs]):
        mrows.append(
            {
                "host": safe_text(m.get("hostname")),
                "CPU": safe_text(m.get("cpu_model")),
                "cores (phys / logical)": f"{m.get('cores_physical', '-')} / {m.get('cores_logical', '-')}",
                "memory": fmt_bytes(as_number(m.get("memory_bytes"))),
                **{k: safe_text(m.get(k.lower())) for k in ("OS", "Python", "numpy")},
                "runs": str(n),
            }
        )
    vrows = []
    for (label, ver), n in _tally([[store_label(r), safe_mapping(r.versions)] for r in recs]):
        vrows.append(
            [
                label,
                safe_text(ver.get("engine", "-")),
                safe_text(ver.get("storebench", "-")),
                ", ".join(
                    f"{k} {safe_text(x)}"
                    for k, x in ver.items()
                    if k not in ("engine", "storebench")
                ),
                str(n),
            ]
        )
    out.append(
        Section(
            "machine",
            "Machines and versions",
            [
                Table.of("Machines", mrows, align=["l", "l", "r", "r", "l", "l", "l", "r"]),
                Table(
                    "Versions",
                    ["store", "engine", "storebench", "client libraries", "runs"],
                    vrows,
                    align=["l", "l", "l", "l", "r"],
                ),
            ],
        )
    )

    bad = [r for r in recs if not r.ok]
    if bad:
        fblocks: list[Table | Text | Figure] = []
        for r in bad:
            fblocks.append(
                Text(
                    f"{safe_text(r.run_id)} · {store_label(r)} · "
                    f"{safe_text(r.status)}: {safe_text(r.error) or '(no message)'}"
                )
            )
            if r.traceback:
                fblocks.append(Text(safe_text(r.traceback), pre=True))
        out.append(Section("failures", "Runs that did not finish", fblocks))
    return out


def sections(
    recs: list[Record],
    plots: bool = True,
    how: str = DEFAULT_AGGREGATION,
    step: Callable[[str], None] | None = None,
) -> list[Section]:
    """The summary first (warnings, each study's answer, the footprint),
    then the details, folded: each workload's views, then the runs'
    metadata. ``step``: told what is being built (progress)."""
    from storebench.report.summary import summary_sections

    say = step or (lambda _: None)
    say("summary")
    out: list[Section] = summary_sections(recs, how, plots)
    for wl in distinct([str(r.workload) for r in recs]):
        say(f"{wl}: cautions")
        mine = [r for r in recs if str(r.workload) == wl]
        scen = ", ".join(distinct([safe_text(r.scenario) for r in mine]))
        n_ok = sum(r.ok for r in mine)
        head = Section(
            f"wl-{wl}",
            f"Details: workload {wl}" + (f" (scenario {scen})" if scen and scen != wl else ""),
            [
                Text(
                    f"{len(mine)} run(s), {n_ok} ok"
                    + (
                        f"; the {len(mine) - n_ok} not ok are listed under Runs and left out "
                        "of the tables and charts."
                        if n_ok < len(mine)
                        else "."
                    )
                    + " "
                    + aggregation_note(how)
                )
            ],
        )
        flagged = [(c.label, why) for c in configurations(mine) if (why := cautions(c))]
        if flagged:  # before any table: these rankings are less sure than they look
            head.blocks.append(
                Text(
                    "Caution: "
                    + "; ".join(f"{safe_text(label)}: {', '.join(why)}" for label, why in flagged)
                    + ". Read their numbers as noisy; rerun on a quiet machine to rank them.",
                    kind="warning",
                )
            )
        head.folded = True
        out.append(head)
        views = run_views(ViewInput(wl, mine, prefix=slug(wl), how=how), plots, step)
        lift_front(wl, out, views)
        out += views
    say("runs and machines")
    for s in metadata_sections(recs):
        s.folded = True
        out.append(s)
    return out


FRONT = "recall-qps"  # the recall/QPS front's figure name: {workload}-recall-qps[-task]


def lift_front(workload: str, summaries: list[Section], views: list[Section]) -> None:
    """The workload's first recall/QPS front moves from its (folded) view
    to the first screen: into the workload's summary, after its sentences
    (what tells settings apart, seen without opening anything)."""
    target = next((s for s in summaries if s.id == f"summary-{slug(workload)}"), None)
    for view in views if target is not None else []:
        for i, b in enumerate(view.blocks):
            if isinstance(b, Figure) and b.name.startswith(f"{slug(workload)}-{FRONT}"):
                view.blocks[i] = Text(f"{b.title}: the chart is under Summary: {workload}.")
                leads = [
                    k
                    for k, x in enumerate(target.blocks)
                    if isinstance(x, Text) and x.kind == "lead"
                ]
                target.blocks.insert(max(leads, default=-1) + 1, b)
                return


def summary(recs: list[Record]) -> tuple[list[str], list[tuple[str, str]]]:
    status = Counter(r.status for r in recs)
    stores = distinct(
        [f"{store_label(r)} {safe_text(r.versions.get('engine', ''))}".strip() for r in recs]
    )
    machines = distinct(
        [
            f"{safe_text(r.machine.get('hostname'))} "
            f"({safe_text(r.machine.get('cpu_model'))}, "
            f"{r.machine.get('cores_logical', '?')} cores)"
            for r in recs
        ]
    )
    times = sorted(str(r.started_at) for r in recs if r.started_at)
    intro = [
        f"{len(recs)} run(s) of "
        + ", ".join(distinct([safe_text(r.scenario) for r in recs]))
        + (f", {times[0][:16]} to {times[-1][:16]} UTC" if times else ""),
        "Stores: " + "; ".join(stores),
        "Machines: " + "; ".join(machines),
    ]
    badges = [(f"{n} {s}", s) for s, n in sorted(status.items())]
    modes = distinct([safe_text(r.mode) for r in recs])
    badges.append(("mode " + ", ".join(modes), "mode"))
    return intro, badges


def write(
    recs: list[Record] | list[dict[str, Any]],
    out_dir: Path,
    title: str = "storebench report",
    how: str = DEFAULT_AGGREGATION,
    recall_axis: str = "logit",
    step: Callable[[str], None] | None = None,
) -> Written:
    """Write report.md, report.html and plots/*.png|svg under ``out_dir``
    (one record per run; ``how``: which run of a configuration rows show;
    ``recall_axis``: logit or linear; ``step``: told each stage, for progress)."""
    from storebench.report import html, markdown, plots

    recs = records.parse_all(recs)
    out_dir = Path(out_dir)
    plots_dir = out_dir / "plots"
    out_dir.mkdir(exist_ok=True)  # never its parents (outputs.check_dir)
    plots_dir.mkdir(exist_ok=True)
    with plots.report_scope(recall_axis):
        secs = sections(recs, how=how, step=step)
    if step is not None:
        step("writing the pages")
    written = Written(out_dir / "report.md", out_dir / "report.html")
    for s in secs:
        for b in s.blocks:
            if isinstance(b, Figure):
                for ext, data in (("png", b.png), ("svg", b.svg.encode())):
                    p = plots_dir / f"{b.name}.{ext}"
                    _atomic_write(p, data)
                    written.plots.append(p)
    intro, badges = summary(recs)
    footer = f"storebench {storebench_version()} · generated {now_iso()} · self-contained: no external resources"
    _atomic_write(written.markdown, markdown.render(title, intro, secs).encode())
    _atomic_write(written.html, html.render(title, intro, badges, secs, footer).encode())
    return written


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
