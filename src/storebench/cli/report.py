"""``storebench report``, ``compare`` and ``export``: what to do with results.

Heavy libraries (matplotlib, pandas, pyarrow: the ``report`` extra) are
imported inside the commands, so the rest of the CLI starts fast and works
without them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from storebench.errors import UserError

# which run of a configuration the numbers are from: report and compare alike
AGGREGATE = click.option(
    "--aggregate",
    "how",
    type=click.Choice(["best", "median"]),
    default="best",
    show_default=True,
    help="Repeats of a configuration: show the best run (highest ops/s of its headline "
    "task) or the median run; every number of a row is that run's.",
)


def _fmt_value(metric: str, v: float) -> str:
    from storebench.report.terminal import fmt_ns, fmt_rate
    from storebench.results import scores

    if scores.of(metric) is not None:
        return f"{v:.4f}"
    if metric == "ops/s":
        return fmt_rate(v) or "0"
    return fmt_ns(v)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(),
    help="Directory for report.md, report.html and plots/ (made if missing; its parent must exist).",
)
@click.option("--title", default="storebench report", show_default=True)
@click.option(
    "--recall-axis",
    type=click.Choice(["logit", "linear"]),
    default="logit",
    show_default=True,
    help="Recall axes of the charts: logit-style (0.9, 0.99, 0.999 evenly apart) or linear.",
)
@AGGREGATE
def report(paths: tuple[str, ...], out_dir: str, title: str, recall_axis: str, how: str) -> None:
    """Markdown tables, plots (PNG and SVG) and one self-contained HTML page
    from result files or directories of *.jsonl."""
    import contextlib

    from storebench.plan.outputs import check_dir
    from storebench.report import build, plots
    from storebench.report.data import load_nonempty
    from storebench.run.progress import make_progress

    check_dir(out_dir, f"--out {out_dir}")
    plots.require()
    progress = make_progress()
    stage = contextlib.ExitStack()

    def step(name: str) -> None:  # one status line: the stage now being built
        stage.close()
        stage.enter_context(progress.phase(f"report: {name}"))

    try:
        step("reading results")
        recs = load_nonempty(paths)
        written = build.write(recs, Path(out_dir), title, how, recall_axis, step)
    finally:
        stage.close()
        progress.close()
    click.echo(f"{written.markdown}")
    click.echo(f"{written.html}")
    click.echo(
        f"storebench: {len(recs)} run(s); {len(written.plots)} plot files in {Path(out_dir) / 'plots'}",
        err=True,
    )


@click.command()
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option(
    "--a",
    "a_where",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only A's runs with this value, e.g. store=memory, clients=2, run_id=2026... (repeatable).",
)
@click.option("--b", "b_where", multiple=True, metavar="KEY=VALUE", help="The same for B.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--fail-worse", is_flag=True, help="Exit with status 1 when B is worse beyond the noise."
)
@AGGREGATE
def compare(
    a: str,
    b: str,
    a_where: tuple[str, ...],
    b_where: tuple[str, ...],
    as_json: bool,
    fail_worse: bool,
    how: str,
) -> None:
    """Compare runs B against runs A (B/A): per pair of configurations its
    throughput, p95 and scores with a verdict; -v: every percentile, with
    each side's interval.

    A and B are result files or directories; the same path twice with --a
    and --b filters compares two slices of one file."""
    from storebench.report.compare import compare as do_compare
    from storebench.report.compare import describe_differ, select
    from storebench.report.data import load
    from storebench.report.terminal import make_console

    ra = select(load(a), list(a_where))
    rb = select(load(b), list(b_where))
    if not ra:
        raise UserError("no runs match", where=f"A ({a} {' '.join(a_where)})".strip())
    if not rb:
        raise UserError("no runs match", where=f"B ({b} {' '.join(b_where)})".strip())
    comp = do_compare(ra, rb, how)
    if as_json:
        click.echo(comp.to_json())
    else:
        console = make_console(columns_env=True)
        head = f"A: {a} ({comp.runs_a} ok runs)  B: {b} ({comp.runs_b} ok runs)\n" + (
            describe_differ(comp.differ)
        )
        full = bool(click.get_current_context().find_root().meta.get("storebench.verbose"))
        for part in compare_output(comp, head, console.width, full):
            console.print(part, markup=False, highlight=False)
    if fail_worse and comp.worse:
        sys.exit(1)


STYLE = {
    "better": "green",
    "worse": "bold red",
    "mixed": "yellow",
    "noise": "dim",
    "same": "dim",
    "unlike": "yellow",
}
# the default output's budget, in lines: what goes past one screen waits for -v
SCREEN_LINES = 40


def verdict_word(row: Any) -> str:
    """A row's verdict as the table says it: faster / slower for a timing."""
    if row.timing and row.verdict in DECISIVE:
        return "faster" if row.verdict == "better" else "slower"
    return row.verdict


def compare_output(comp: Any, head: str, width: int, full: bool) -> list[Any]:
    """What ``compare`` prints, in order: ``head``, a summary of one row per
    pair (of more than one), each pair's table of its tasks (``full``: every metric, with the
    intervals), the pairs found on one side only, the legend. Without
    ``full`` the output is one screen (``SCREEN_LINES``): the tasks' tables
    are left out when they would not fit, and a line says so and what -v
    adds."""
    from rich.text import Text

    # one pair's table is its own summary
    summary = [head, *([_summary_table(comp, width)] if len(comp.pairs) > 1 else [])]
    shown: set[tuple[str, str, str]] = set()
    tables: list[Any] = []
    for pair in comp.pairs:
        tables.append(_pair_table(comp, pair, full, width, shown))
        tables += _unlike_lines(comp, [pair])
    tail = [
        f"only in {side}: {label}"
        for side, labels in (("A", comp.only_a), ("B", comp.only_b))
        for label in labels
    ]
    if full or _lines([*summary, *tables, *tail, _legend(True)], width) <= SCREEN_LINES:
        legend = _legend(full)
        return [*summary, *tables, *tail, Text(legend, "dim")]
    return [
        *summary,
        *_unlike_lines(comp, comp.pairs),
        *tail,
        Text(_legend(False, tables=False), "dim"),
        _elsewhere(comp),
    ]


def _lines(parts: list[Any], width: int) -> int:
    """How many lines ``parts`` take printed ``width`` wide."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    for part in parts:
        console.print(part, markup=False, highlight=False)
    return len(console.export_text().splitlines())


def _unlike_lines(comp: Any, pairs: list[Any]) -> list[Any]:
    """Why tasks are not ranked, a line per reason (a sweep's pairs share
    their upload's)."""
    from rich.text import Text

    labels = {p.label for p in pairs}
    why: dict[str, list[str]] = {}
    for r in comp.rows:
        if r.pair in labels and r.verdict == "unlike" and r.task not in why.setdefault(r.why, []):
            why[r.why].append(r.task)
    return [Text(f"{', '.join(tasks)}: {w}", STYLE["unlike"]) for w, tasks in why.items()]


def _summary_table(comp: Any, width: int) -> Any:
    """A row per pair: its headline task's ops/s (A, B and B/A), p95 (B/A)
    and headline score, and one verdict over them (``compare.overall``:
    faster / slower when the timings alone decide, mixed when they
    disagree); ``?`` where a cautioned pair's verdict rests on a timing.
    The task is a column only where the pairs' differ (else the title names
    it): a row stays one line."""
    from rich.text import Text

    from storebench.report.compare import overall
    from storebench.report.terminal import fitted_table

    scores = sorted(
        {r.metric for p in comp.pairs for r in p.summary(comp.rows) if not r.timing and r.a}
    )
    keys = list(dict.fromkeys(k for p in comp.pairs for k in p.config))
    configs = [[_text(p.config.get(k)) for k in keys] for p in comp.pairs]
    tasks = []
    for pair, config in zip(comp.pairs, configs, strict=True):
        # the task's name but what the configuration's columns say (a sweep's ef=64)
        said = {f"{k}={v}" for k, v in zip(keys, config, strict=True)}
        tasks.append(" ".join(w for w in pair.headline.split() if w not in said) or "-")
    one_task = len(set(tasks)) == 1
    rows = []
    for pair, config, task in zip(comp.pairs, configs, tasks, strict=True):
        got = pair.summary(comp.rows)
        by = {r.metric: r for r in got if r.a is not None and r.b is not None}
        ops, p95 = by.get("ops/s"), by.get("p95")
        verdict = overall(got)
        ranked = [r for r in got if r.verdict in DECISIVE]
        word = verdict
        if ranked and all(r.timing for r in ranked) and verdict in DECISIVE:
            word = "faster" if verdict == "better" else "slower"
        doubt = "?" if pair.cautioned and any(r.timing for r in ranked) else ""
        rows.append(
            [
                *config,
                *([] if one_task else [task]),
                _fmt_value("ops/s", ops.a.value) if ops and ops.a else "-",
                _fmt_value("ops/s", ops.b.value) if ops and ops.b else "-",
                f"{ops.ratio:.2f}" if ops and ops.ratio is not None else "-",
                f"{p95.ratio:.2f}" if p95 and p95.ratio is not None else "-",
                _score_change(next((r for r in by.values() if not r.timing), None)),
                Text(word + doubt, STYLE.get(verdict, "")),
            ]
        )
    score = scores[0] if len(scores) == 1 else "score"
    headers = [*keys, *([] if one_task else ["task"])]
    headers += ["ops/s A", "ops/s B", "B/A", "p95 B/A", score, "verdict"]
    aligns = ["l"] * (len(headers) - 6) + ["r"] * 5 + ["l"]
    # narrow: A's ops/s goes first (B's and B/A say it), then the task
    priorities = [0] * len(keys) + ([] if one_task else [3]) + [4, 1, 1, 1, 1, 0]
    caption = ""
    if cautioned := [p for p in comp.pairs if p.cautioned]:
        caption = (
            f"caution: {len(cautioned)} of {len(comp.pairs)} pair(s) ran on a busy machine or "
            "with scattered repeats: a verdict marked ? may not hold"
        )
    by_task = f"its headline task, {tasks[0]}" if one_task else "its headline task"
    title = Text(f"summary: {len(comp.pairs)} pairs, each by {by_task}", "bold")
    return fitted_table(headers, rows, width, aligns, title, caption or None, priorities)


def _text(v: Any) -> str:
    return "-" if v is None else str(v)


def _score_change(row: Any) -> str:
    """A score from A to B ("0.9010→0.9032"), or its one value when equal."""
    if row is None or row.a is None or row.b is None:
        return "-"
    a, b = _fmt_value(row.metric, row.a.value), _fmt_value(row.metric, row.b.value)
    return a if a == b else f"{a}→{b}"


def _elsewhere(comp: Any) -> str:
    """The line after a summary that stands for the tasks' tables: what they
    hold beyond the headline tasks, and that -v shows them."""
    from storebench.report.compare import SUMMARY_METRICS, headline_score

    heads = {(p.label, p.headline) for p in comp.pairs}
    others = [r for r in comp.rows if (r.pair, r.task) not in heads]
    counts: dict[str, int] = {}
    for r in others:
        if r.metric not in SUMMARY_METRICS and not headline_score(r.metric) and r.a is not None:
            continue  # -v's own rows
        word = verdict_word(r)
        counts[word] = counts.get(word, 0) + 1
    order = ("faster", "slower", "better", "worse", "noise", "same", "unlike")
    said = ", ".join(f"{counts[w]} {w}" for w in order if counts.get(w))
    tasks = f" (verdicts of the other tasks: {said})" if said else ""
    return f"-v: every task of each pair{tasks}, every percentile and the intervals"


def _pair_table(
    comp: Any, pair: Any, full: bool, width: int, shown: set[tuple[str, str, str]] | None = None
) -> Any:
    """One pair's rows (``full``: every metric, with intervals); the caption
    names the run each side's numbers are from. A task of the same two runs
    an earlier pair showed (a sweep's upload, under each of its settings) is
    in ``shown`` and left out."""
    from rich.text import Text

    from storebench.report.compare import SUMMARY_METRICS, headline_score
    from storebench.report.terminal import fitted_table

    shown = set() if shown is None else shown
    headers = ["task", "metric", "A", "B", "B/A", "verdict"]
    if full:
        headers[3:3] = ["A interval"]
        headers[5:5] = ["B interval"]
    rows = []
    for r in comp.rows:
        if r.pair != pair.label:
            continue
        if (pair.run_a, pair.run_b, r.task) in shown and not full:
            continue
        if r.a is None or r.b is None:  # unlike: said below the table
            rows.append([r.task, "-", "-", "-", "-", Text(r.verdict, STYLE["unlike"])])
            continue
        if not full and r.metric not in SUMMARY_METRICS and not headline_score(r.metric):
            continue
        # a score (recall on the same index and queries) does not move with the load
        doubt = "?" if pair.cautioned and r.timing and r.verdict in DECISIVE else ""
        cells = [
            r.task,
            r.metric,
            _fmt_value(r.metric, r.a.value),
            _fmt_value(r.metric, r.b.value),
            "-" if r.ratio is None else f"{r.ratio:.3f}",
            Text(verdict_word(r) + doubt, STYLE.get(r.verdict, "")),
        ]
        if full:
            cells[3:3] = [_interval(r.metric, r.a)]
            cells[5:5] = [_interval(r.metric, r.b)]
        rows.append(cells)
    shown.update((pair.run_a, pair.run_b, r.task) for r in comp.rows if r.pair == pair.label)
    caption = (
        f"A: run {pair.run_a} ({pair.a}), B: run {pair.run_b} ({pair.b}); "
        "every number is that run's"
    )
    notes = [f"A: {c}" for c in pair.caution_a] + [f"B: {c}" for c in pair.caution_b]
    if notes:  # a timing's ranking across a busy machine or scattered repeats is in doubt
        caption += f"\ncaution ({'; '.join(notes)}): a verdict marked ? may not hold"
    aligns = ["l", "l"] + ["r"] * (len(headers) - 3) + ["l"]
    priorities = [9 if h.endswith("interval") else 0 for h in headers]  # narrow: they go
    title = Text(pair.label, "bold")
    return fitted_table(headers, rows, width, aligns, title, caption, priorities)


def _legend(full: bool, tables: bool = True) -> str:
    """What the verdicts mean; and what -v adds, unless it is said apart
    (``tables``: the tasks' tables are shown)."""
    from storebench.report.compare import MIN_DIFFERENCE

    return (
        "faster/slower, better/worse: B differs from A beyond both sides' intervals "
        "(repeats: min..max of the runs; one run: ~95% from its HDR histogram, binomial "
        f"for a recall) and, for a timing, by at least {MIN_DIFFERENCE:.0%}; noise: the "
        f"intervals overlap; same: equal, or a timing within {MIN_DIFFERENCE:.0%}; "
        "mixed: the summary's figures disagree. "
        "? : measured on a busy machine or with scattered repeats."
        + ("" if full or not tables else " -v: every percentile and score, and the intervals.")
    )


DECISIVE = ("better", "worse")  # verdicts a caution puts in doubt


def _interval(metric: str, iv: object) -> str:
    from storebench.report.compare import Interval

    assert isinstance(iv, Interval)
    if iv.basis == "none":
        return "?"
    return f"{_fmt_value(metric, iv.lo)}..{_fmt_value(metric, iv.hi)} ({iv.basis})"


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "parquet", "hdr"]),
    default=None,
    help="Default: from the --out suffix (.csv or .parquet). hdr: one HdrHistogram "
    "interval log per run x task in the directory --out.",
)
@click.option(
    "--out", "out", required=True, type=click.Path(), help="Output file (its directory must exist)."
)
def export(paths: tuple[str, ...], fmt: str | None, out: str) -> None:
    """One row per run x task of the result files, as CSV or Parquet; or
    HdrHistogram interval logs (--format hdr)."""
    from storebench.plan.outputs import check_dir, check_file
    from storebench.report.data import load_nonempty
    from storebench.report.export import write_csv, write_hdr, write_parquet

    path = Path(out)
    if fmt == "hdr":
        check_dir(path, f"--out {out}")
        recs = load_nonempty(paths)
        n = write_hdr(recs, path)
        click.echo(f"{path}")
        click.echo(f"storebench: {n} HdrHistogram log(s) from {len(recs)} run(s)", err=True)
        return
    if fmt is None:
        fmt = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}.get(path.suffix.lower())
        if fmt is None:
            raise UserError(
                "give --format csv|parquet (or an --out ending .csv/.parquet)", where="--out"
            )
    check_file(path, f"--out {out}")
    recs = load_nonempty(paths)
    n = write_csv(recs, path) if fmt == "csv" else write_parquet(recs, path)
    click.echo(f"{path}")
    click.echo(f"storebench: {n} rows from {len(recs)} run(s)", err=True)
