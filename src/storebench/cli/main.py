"""The ``storebench`` command line."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from storebench.common import interrupts, redaction
from storebench.errors import StorebenchError, UserError
from storebench.results.files import storebench_version
from storebench.results.records import RunRecord


class Group(click.Group):
    """Turns every user error into one line on stderr and exit status 2; an
    interrupt into status 130 (SIGINT) or 143 (SIGTERM), a second signal
    ending the process at once (``storebench.common.interrupts``); a reader that
    closed the pipe (``storebench compare ... | head``) into a quiet 141."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:  # click would say "Aborted!" for an interrupt while it parses
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt as exc:
            interrupts.exit_interrupted(exc)

    def invoke(self, ctx: click.Context) -> object:
        try:
            with interrupts.handled():
                out = super().invoke(ctx)
                sys.stdout.flush()  # a closed pipe shows here, not at exit
                return out
        except (UserError, StorebenchError) as exc:
            click.echo(f"storebench: error: {redaction.redact(exc)}", err=True)
            sys.exit(2)
        except KeyboardInterrupt as exc:
            interrupts.exit_interrupted(exc)
        except BrokenPipeError:
            # what is still buffered for stdout goes nowhere, quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(interrupts.BROKEN_PIPE_STATUS)


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.find_root().meta.get("storebench.verbose"):
        ctx.find_root().meta["storebench.verbose"] = True
        logging.basicConfig(level=logging.INFO, format="storebench: %(message)s", stream=sys.stderr)
        redaction.guard_handlers(logging.getLogger().handlers)  # every logger's lines


def _set_quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_root().meta["storebench.quiet"] = True


def global_options() -> list[click.Option]:
    """``-v`` and ``-q``, accepted before the command and after it alike."""
    return [
        click.Option(flags, is_flag=True, expose_value=False, callback=set_, help=help_)
        for flags, set_, help_ in (
            (
                ["-v", "--verbose"],
                _set_verbose,
                "Log each phase and task to stderr; full per-run tables.",
            ),
            (["-q", "--quiet"], _set_quiet, "Print only errors (and what --json asks for)."),
        )
    ]


def verbose() -> bool:
    return bool(click.get_current_context().find_root().meta.get("storebench.verbose"))


def quiet() -> bool:
    return bool(click.get_current_context().find_root().meta.get("storebench.quiet"))


def print_json(obj: object) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(storebench_version(), prog_name="storebench")
def cli() -> None:
    """Benchmarks for document, vector and graph stores."""


cli.params += global_options()


@cli.command()
@click.argument("scenario")
@click.option(
    "--store",
    "stores",
    multiple=True,
    metavar="ENGINE[=URL]",
    help="Run on this store instead of the scenario's (repeatable).",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario key, e.g. n=1000 or driver.executor=processes (repeatable).",
)
@click.option(
    "--results",
    "results_dir",
    default="results",
    show_default=True,
    type=click.Path(),  # checked before the run (outputs.check_results): one line
    help="Directory of result files (made if missing; its parent must exist).",
)
@click.option(
    "--store-option",
    "store_options",
    multiple=True,
    metavar="ENGINE.KEY=VALUE",
    help="Set a store option, e.g. pgvector.settings.shared_buffers=1GB "
    "(ENGINE. may be left off with one engine; checked by the store before the run; repeatable).",
)
@click.option("--resume", is_flag=True, help="Skip runs that already have an ok record.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bars (default: when stderr is a terminal).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan, its estimated time and memory; run, start and write nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout instead.")
def run(
    scenario: str,
    stores: tuple[str, ...],
    sets: tuple[str, ...],
    store_options: tuple[str, ...],
    results_dir: str,
    resume: bool,
    progress: bool | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Run SCENARIO (a built-in name or a YAML file) and print its tables:
    a line per run as it ends (a table each with -v), the study's tables last."""
    from storebench.plan.scenario import Scenario
    from storebench.report.terminal import make_console, print_records, run_summary
    from storebench.run.progress import make_progress
    from storebench.run.runner import run_scenario
    from storebench.stores.config import one_line

    redaction.remember(*(s.partition("=")[2] for s in stores))  # before any message
    sc = Scenario.load(scenario, list(sets), list(stores), store_options=list(store_options))
    console = make_console(quiet=quiet() or as_json, columns_env=True)
    if dry_run:
        from storebench.plan import dryrun, memory, outputs

        runs = sc.plan()
        # the checks a run makes before it starts: a run they refuse is refused here too
        results_file = f"{sc.file.name}.jsonl"
        outputs.check_results(results_dir, results_file, f"--results {results_dir}")
        if sc.file.driver.memory_check:
            memory.check(sc, runs)
        info = dryrun.summary(sc, runs, Path(results_dir))
        if as_json:
            print_json(info)
        else:
            dryrun.print_plan(info, runs, console)
        return
    bar = make_progress(False if quiet() else progress)
    # on one terminal, lines go above the live bars (else the bars' redraw hides them)
    lines = getattr(bar, "console", None) if console.is_terminal else None

    def on_record(rec: RunRecord) -> None:
        if rec.status == "skipped":  # nothing measured; the failure that skipped it shows
            return
        if not console.quiet:
            print_records([rec], lines or console, full=verbose())
        if rec.status == "failed":  # its cause, where a user looks first
            click.echo(
                f"storebench: run {rec.run_id} on {rec.store.engine} failed: "
                f"{one_line(redaction.redact(rec.error or ''), 500)}",
                err=True,
            )

    try:
        records = run_scenario(
            sc, Path(results_dir), bar, resume, on_record=on_record, results_flag="--results"
        )
    except KeyboardInterrupt as exc:
        bar.close()
        interrupts.exit_interrupted(exc, f"; measurements so far are in {results_dir}/")
    finally:
        bar.close()
    from storebench.report.terminal import print_study_tables, tables_json

    if not verbose() and records and not as_json:
        console.print()
    print_study_tables(records, console)  # the study's own table shapes, last
    not_ok = Counter(r.status for r in records if not r.ok)
    detail = f" ({', '.join(f'{n} {s}' for s, n in not_ok.items())})" if not_ok else ""
    results_file = Path(results_dir) / (sc.file.name + ".jsonl")
    if as_json:
        print_json(
            {
                "runs": [run_summary(r) for r in records],
                "tables": tables_json(records),
                "not_ok": dict(not_ok),
                "results": str(results_file),
            }
        )
    if not quiet():
        click.echo(
            f"{len(records)} run(s), {sum(not_ok.values())} not ok{detail}; "
            f"results in {results_file}",
            err=True,
        )
    if not_ok:
        sys.exit(1)


@cli.command()
@click.argument("scenario")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
def init(scenario: str, path: str | None) -> None:
    """Write built-in SCENARIO's file to PATH (default SCENARIO.yaml) to edit."""
    from storebench.plan.loading import resolve

    source = resolve(scenario)
    target = Path(path or f"{scenario}.yaml")
    if target.exists():
        raise UserError("already exists; storebench does not overwrite it", where=str(target))
    try:
        target.write_text(source.read_text())
    except OSError as exc:
        raise UserError(f"cannot write it: {exc.strerror}", where=str(target)) from None
    if not quiet():
        click.echo(f"wrote {target}; run it with: storebench run {target}", err=True)


@cli.command(name="list")
@click.argument("what", type=click.Choice(["stores", "scenarios", "workloads", "executors"]))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list on stdout.")
def list_(what: str, as_json: bool) -> None:
    """List the stores, scenarios, workloads or executors this install has."""
    from storebench.report.terminal import fitted_table, make_console

    console = make_console(quiet=quiet(), columns_env=True)
    columns: list[str] = []
    rows: list[list[str]] = []
    keep = [0, 1, 1]  # what a row is first; the other columns wrap before they go
    if what == "stores":
        from storebench.stores.base import engine_names, store_class

        columns = ["store", "available", "client mode", "search", "capabilities"]
        keep = [0, 3, 2, 1, 1]  # at 80 columns "available" goes first
        for name in engine_names():
            try:
                cls = store_class(name)
            except UserError as exc:
                rows.append([name, "no", "", "", str(exc).split(": ", 2)[-1]])
                continue
            caps = ", ".join(sorted(str(c) for c in cls.capabilities))
            search = "-" if "search" not in caps else "exact" if cls.exact else "approximate"
            rows.append([name, "yes", cls.client_mode, search, caps])
    elif what == "scenarios":
        import yaml

        from storebench.plan.loading import builtin_names, resolve

        # the files as written: listing needs no store's library (a run checks them)
        columns = ["scenario", "workload", "description"]
        for name in builtin_names():
            raw = yaml.safe_load(resolve(name).read_text(encoding="utf-8"))
            rows.append([name, raw["workload"], raw.get("description", "")])
    elif what == "workloads":
        from storebench.workloads.base import workload_names

        columns, rows = ["workload"], [[n] for n in workload_names()]
    else:
        from storebench.driver import executor_names

        columns, rows = ["executor"], [[n] for n in executor_names()]
    if as_json:
        print_json([dict(zip(columns, row, strict=True)) for row in rows])
    elif len(columns) == 1:
        for row in rows:
            console.print(row[0])
    else:
        console.print(
            fitted_table(columns, rows, console.width, ["l"] * len(columns), priorities=keep)
        )


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--last", type=int, default=None, help="Only the last N records.")
@click.option(
    "--over-time", is_flag=True, help="Also each task's ops/s and p99 per interval (sparklines)."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
def show(paths: tuple[str, ...], last: int | None, over_time: bool, as_json: bool) -> None:
    """Print result records (files or directories of *.jsonl) as ``run``
    does: a line per run (a table each with -v), the study's tables last."""
    from storebench.report.terminal import (
        make_console,
        print_records,
        print_study_tables,
        run_summary,
        tables_json,
    )
    from storebench.results import records as rec

    records = rec.load(paths)
    if last is not None:
        records = records[-last:]
    if as_json:
        print_json({"runs": [run_summary(r) for r in records], "tables": tables_json(records)})
        return
    console = make_console(quiet=quiet(), columns_env=True)
    print_records(records, console, full=verbose())
    if records and not verbose():
        console.print()
    print_study_tables(records, console)
    if over_time:
        from storebench.measure.metrics import MIN_POINTS
        from storebench.report.timeline import print_sparklines

        print_sparklines(records, console)
        short = [t.name for r in records for t in r.tasks if t.series and t.points() < MIN_POINTS]
        if short:  # a line of one or two blocks tells nothing over time
            console.print(
                f"too short to be seen over time (under {MIN_POINTS} intervals): "
                + ", ".join(dict.fromkeys(short)),
                markup=False,
                highlight=False,
            )


from storebench.cli.report import compare, export, report  # noqa: E402

cli.add_command(report)
cli.add_command(compare)
cli.add_command(export)

from storebench.cli.dataset import dataset  # noqa: E402

cli.add_command(dataset)


def _accept_global_options(group: click.Group) -> None:
    """Every command takes ``-v`` and ``-q`` after its name too."""
    for cmd in group.commands.values():
        cmd.params += global_options()
        if isinstance(cmd, click.Group):
            _accept_global_options(cmd)


_accept_global_options(cli)


def main() -> None:
    try:
        redaction.guard_process()  # tracebacks and warnings Python prints, redacted
        interrupts.handle_until_exit()  # click's own parsing and the exit too
    except KeyboardInterrupt as exc:
        interrupts.exit_interrupted(exc)
    try:
        cli(prog_name="storebench")
    finally:
        interrupts.finishing()
