"""The ``storebench`` command line."""

from __future__ import annotations

import logging
import os
import sys
from collections import Counter
from pathlib import Path

import click

from storebench import interrupts, redaction
from storebench.errors import StorebenchError, UserError
from storebench.records import RunRecord
from storebench.results import storebench_version


class Group(click.Group):
    """Turns every user error into one line on stderr and exit status 2; an
    interrupt into status 130 (SIGINT) or 143 (SIGTERM), a second signal
    ending the process at once (``storebench.interrupts``); a reader that
    closed the pipe (``storebench compare ... | head``) into a quiet 141."""

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
            interrupts.acknowledge()
            click.echo("storebench: interrupted", err=True)
            sys.exit(interrupts.exit_status(exc))
        except BrokenPipeError:
            # what is still buffered for stdout goes nowhere, quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(interrupts.BROKEN_PIPE_STATUS)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(storebench_version(), prog_name="storebench")
@click.option("-v", "--verbose", is_flag=True, help="Log each phase and task to stderr.")
def cli(verbose: bool) -> None:
    """Benchmarks for document, vector and graph stores."""
    if verbose:
        logging.basicConfig(level=logging.INFO, format="storebench: %(message)s", stream=sys.stderr)
        redaction.guard_handlers(logging.getLogger().handlers)  # every logger's lines


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
@click.option("--resume", is_flag=True, help="Skip runs that already have an ok record.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bars (default: when stderr is a terminal).",
)
def run(
    scenario: str,
    stores: tuple[str, ...],
    sets: tuple[str, ...],
    results_dir: str,
    resume: bool,
    progress: bool | None,
) -> None:
    """Run SCENARIO (a built-in name or a YAML file) and print its tables."""
    from storebench.progress import make_progress
    from storebench.report.terminal import make_console, print_records
    from storebench.runner import run_scenario
    from storebench.scenario import Scenario
    from storebench.stores.config import one_line

    redaction.remember(*(s.partition("=")[2] for s in stores))  # before any message
    sc = Scenario.load(scenario, list(sets), list(stores))
    console = make_console()
    bar = make_progress(progress)

    def on_record(rec: RunRecord) -> None:
        if rec.status == "skipped":  # nothing measured; the failure that skipped it shows
            return
        print_records([rec], console)
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
        interrupts.acknowledge()
        bar.close()
        click.echo(f"storebench: interrupted; measurements so far are in {results_dir}/", err=True)
        sys.exit(interrupts.exit_status(exc))
    finally:
        bar.close()
    if len(records) > 1 or any(r.search_sweep for r in records):
        from storebench.report.terminal import print_study_tables

        print_study_tables(records, console)  # the study's own table shapes
    not_ok = Counter(r.status for r in records if not r.ok)
    detail = f" ({', '.join(f'{n} {s}' for s, n in not_ok.items())})" if not_ok else ""
    click.echo(
        f"{len(records)} run(s), {sum(not_ok.values())} not ok{detail}; "
        f"results in {Path(results_dir) / (sc.file.name + '.jsonl')}",
        err=True,
    )
    if not_ok:
        sys.exit(1)


@cli.command()
@click.argument("scenario")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
def init(scenario: str, path: str | None) -> None:
    """Write built-in SCENARIO's file to PATH (default SCENARIO.yaml) to edit."""
    from storebench.scenario import resolve

    source = resolve(scenario)
    target = Path(path or f"{scenario}.yaml")
    if target.exists():
        raise UserError("already exists; storebench does not overwrite it", where=str(target))
    target.write_text(source.read_text())
    click.echo(f"wrote {target}; run it with: storebench run {target}", err=True)


@cli.command(name="list")
@click.argument("what", type=click.Choice(["stores", "scenarios", "workloads", "executors"]))
def list_(what: str) -> None:
    """List the stores, scenarios, workloads or executors this install has."""
    from rich.table import Table

    from storebench.report.terminal import make_console

    console = make_console()
    if what == "stores":
        from storebench.stores.base import engine_names, store_class

        t = Table("store", "available", "client mode", "search", "capabilities")
        for name in engine_names():
            try:
                cls = store_class(name)
            except UserError as exc:
                t.add_row(name, "no", "", "", str(exc).split(": ", 2)[-1])
                continue
            caps = ", ".join(sorted(str(c) for c in cls.capabilities))
            search = "-" if "search" not in caps else "exact" if cls.exact else "approximate"
            t.add_row(name, "yes", cls.client_mode, search, caps)
        console.print(t)
    elif what == "scenarios":
        from storebench.scenario import Scenario, builtin_names

        t = Table("scenario", "workload", "description")
        for name in builtin_names():
            sc = Scenario.load(name)
            t.add_row(name, sc.file.workload, sc.file.description)
        console.print(t)
    elif what == "workloads":
        from storebench.workloads.base import workload_names

        for name in workload_names():
            console.print(name)
    else:
        from storebench.driver import executor_names

        for name in executor_names():
            console.print(name)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--last", type=int, default=None, help="Only the last N records.")
@click.option(
    "--over-time", is_flag=True, help="Also each task's ops/s and p99 per interval (sparklines)."
)
def show(paths: tuple[str, ...], last: int | None, over_time: bool) -> None:
    """Print result records (files or directories of *.jsonl) as tables."""
    from storebench import records as rec
    from storebench.report.terminal import print_records

    records = rec.load(paths)
    if last is not None:
        records = records[-last:]
    print_records(records)
    if over_time:
        from storebench.report.timeline import print_sparklines

        print_sparklines(records)


from storebench.cli_report import compare, export, report  # noqa: E402

cli.add_command(report)
cli.add_command(compare)
cli.add_command(export)

from storebench.cli_dataset import dataset  # noqa: E402

cli.add_command(dataset)


def main() -> None:
    redaction.guard_process()  # tracebacks and warnings Python prints, redacted
    interrupts.handle_until_exit()  # click's own parsing and the exit too
    try:
        cli(prog_name="storebench")
    finally:
        interrupts.finishing()
