"""Executes a plan: for each run, open the store, run the workload, write
the record. Whatever happens (an error, Ctrl-C, SIGTERM), the record is
written with what was measured and a status that says how the run ended;
collections the run created are dropped and its temporary files removed.

Signals (``interrupts``): the first SIGINT or SIGTERM stops the clients and
ends the run as ``interrupted``; its clean-up and record are shielded, so a
first signal arriving there waits for them. A second signal exits at once:
the record of the run in progress is still written (here, ``_Recorder``),
managed servers are killed and temporary directories removed.

A store that cannot be opened (a URL that points nowhere, a server that
does not start) fails its first run; the plan's other runs on that store
are not tried: each is recorded as ``skipped``, with that failure as the
reason."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from storebench.common import interrupts, leftovers
from storebench.common.redaction import redact_obj
from storebench.driver import Driver, Interrupted
from storebench.driver.choice import choose_executor, executors_released, setup_executor
from storebench.driver.executors import Executor
from storebench.errors import StorebenchError, signal_name
from storebench.measure import noise
from storebench.measure.metrics import DEFAULT_INTERVAL_S
from storebench.plan import memory, outputs
from storebench.plan.scenario import Run, Scenario
from storebench.results import files as results
from storebench.results import records
from storebench.results.records import RECORD_VERSION, RunRecord, StoreInfo
from storebench.run.progress import NoProgress
from storebench.stores.base import Collection, StoreSpec
from storebench.stores.opening import OpenStore, open_store
from storebench.workloads.base import RunContext, workload_class

log = logging.getLogger("storebench")
DYING_SERVER_S = 2.0  # a failed run waits this long for a managed server that is exiting


def _store_info(run: Run, spec: StoreSpec) -> StoreInfo:
    """The record's store: the run's, as ``spec`` (the run's, or the opened
    store's with the defaults it filled in and a managed server's url) shows
    it, and whether the user gave the url."""
    return StoreInfo.model_validate(
        run.store_info() | spec.describe() | {"url_given": run.spec.url is not None}
    )


def _base_record(run: Run, run_id: str) -> RunRecord:
    return RunRecord(
        record_version=RECORD_VERSION,
        run_id=run_id,
        key=run.key,
        scenario=run.scenario,
        workload=run.workload,
        mode=run.mode,
        repeat=run.repeat,
        store=_store_info(run, run.spec),
        params=run.params.model_dump(),
        grid_point=run.grid_point,
        search_sweep=run.sweep,
        not_applicable=list(run.not_applicable),
        status="running",
        error=None,
        started_at=results.now_iso(),
        versions={"storebench": results.storebench_version()},
        machine=results.machine_facts(),
    )


def planned(run: Run) -> RunRecord:
    """The record a planned run starts with (for ``--resume``: its
    configuration, less what only running tells, ``records.plan_id``)."""
    record = _base_record(run, "planned")
    known = workload_class(run.workload).data_identity(run.params)
    if known:
        record.metrics["data"] = known
    return record


def drop_collections(colls: list[Collection]) -> list[str]:
    """Drop a run's collections newest first: a later collection may
    reference an earlier one (comments -> posts -> users; in a graph store
    its edges point at the earlier one's nodes), so it goes first. A failed
    drop does not keep the others; returns what failed, for the record."""
    failed: list[str] = []
    for coll in reversed(colls):
        try:
            coll.drop()
        except Exception as exc:
            log.warning("could not drop collection %s: %s", coll.name, exc)
            failed.append(f"{coll.name}: {type(exc).__name__}: {exc}")
    return failed


class _Recorder:
    """Writes each run's record to the scenario's file, once: at the end of
    the run's clean-up, or, when a second signal ends storebench before
    that, from the hard exit with what the run had measured by then. Until
    the store is closed, a hard exit also releases it and kills its managed
    server (``OpenStore.abandon``)."""

    def __init__(self, path: Path | None):
        self.path = path  # None: the caller writes the record execute returns
        self.record: RunRecord | None = None  # the run in progress, not yet written
        self.ctx: RunContext | None = None
        self.opened: OpenStore | None = None

    def begin(self, record: RunRecord | dict[str, Any] | None) -> None:
        self.record = None if record is None else records.parse(record)
        self.ctx, self.opened = None, None

    def write(self, record: RunRecord) -> None:
        with interrupts.exclusive():  # a hard exit waits for this write
            if self.path is not None:
                results.append(self.path, record)
            self.record = None

    def at_hard_exit(self) -> None:
        """From the signal watcher thread (the main thread goes on meanwhile,
        until the process ends)."""
        if self.record is not None and self.path is not None:
            rec = self.record.model_copy()
            if rec.status == "running":
                rec.status = "interrupted"
                rec.error = f"interrupted by {interrupts.first_signal() or 'SIGINT'}"
            rec.error = f"{rec.error}; storebench exited at once on a second signal"
            if self.ctx is not None:
                _take(rec, self.ctx)
            rec.finished_at = results.now_iso()
            results.append(self.path, _typed(rec))
            self.record = None
        if self.ctx is not None:
            self.ctx.remove_workdir()
        if self.opened is not None:
            self.opened.abandon()


def _take(rec: RunRecord, ctx: RunContext) -> None:
    """What the workload recorded so far, into the run's record."""
    rec.tasks = [records.parse_task(t) for t in ctx.tasks]
    rec.metrics = dict(ctx.metrics)
    rec.settings = list(ctx.setting_results)
    rec.headline = ctx.run_headline()
    rec.machine_load = noise.summary((t.name, t.machine_load) for t in rec.tasks)


def _typed(rec: RunRecord) -> RunRecord:
    """The record validated again (what was assigned field by field, and
    tasks appended as dicts, typed)."""
    return RunRecord.model_validate(rec.to_dict())


def execute(
    run: Run,
    progress: Any = None,
    recorder: _Recorder | None = None,
    unopened: set[str] | None = None,
) -> tuple[RunRecord, KeyboardInterrupt | None]:
    """Run one plan point; always returns a complete record (never raises on
    a failed run) and the interrupt that ended it, if one did (the caller
    re-raises it after the record is kept). With a ``recorder`` the record
    is written before the store closes (a managed server's stop can take
    seconds) and kept for a hard exit meanwhile. A run whose store could not
    be opened adds its key to ``unopened``."""
    run_id = results.new_run_id()
    record = _base_record(run, run_id)
    recorder = recorder or _Recorder(None)
    recorder.begin(record)  # the same object: a hard exit writes what it holds
    opened = None
    ctx = None
    executor: type[Executor] | None = None
    interrupt: KeyboardInterrupt | None = None
    try:
        try:
            log.info(
                "run %s: %s on %s %s", run_id, run.workload, run.spec.engine, run.grid_point or ""
            )
            # a managed server starts here when the spec has no url
            opened = recorder.opened = open_store(run.spec)
            store, server = opened.store, opened.server
            record.versions.update(store.versions())
            # with defaults the store filled in (and the managed server's url)
            record.store = _store_info(run, store.spec)
            executor = setup_executor(choose_executor(store, run.executor), run.driver)
            driver = Driver(
                progress,
                run.executor,
                server.processes if server else None,
                run.driver.get("interval_s", DEFAULT_INTERVAL_S),
            )
            ctx = recorder.ctx = RunContext(
                run_id, store, driver, run.mode, run.index, run.search, run.searches, server=server
            )
            workload_class(run.workload)().run(ctx, run.params)
            record.status = "ok"
        except Interrupted as exc:
            interrupts.acknowledge()
            record.status, record.error = "interrupted", str(exc)
            interrupt = interrupts.interrupt_for(signal.Signals[exc.signal])
        except KeyboardInterrupt as exc:
            interrupts.acknowledge()
            record.status, record.error = "interrupted", f"interrupted by {signal_name(exc)}"
            interrupt = exc
        except StorebenchError as exc:
            record.status, record.error = "failed", str(exc)
        except Exception as exc:  # an engine or library error: keep the trace's last line
            record.status = "failed"
            record.error = f"{type(exc).__name__}: {exc}"
            record.traceback = traceback.format_exc(limit=8)
        finally:
            with interrupts.shielded():  # a first signal now waits for the record
                record = _finish(record, opened, executor, ctx, recorder)
    except KeyboardInterrupt as exc:  # a signal during the clean-up, raised after it
        interrupts.acknowledge()
        interrupt = interrupt or exc
    # engine errors often echo the URL: no secret goes on to the terminal or a file
    if opened is None and record.status == "failed" and unopened is not None:
        unopened.add(run.key)  # the store's other runs would fail alike
    return records.parse(redact_obj(record.to_dict())), interrupt


def run_label(run: Run) -> str:
    """A run's configuration in a few words (the sweep's progress line)."""
    point = (f"{k.rsplit('.', 1)[-1]}={v}" for k, v in run.grid_point.items())  # index.m: m
    return " ".join([run.spec.engine, *point])


def _store_of(run: Run) -> str:
    """Which store a run opens: its other runs differ in index parameters only."""
    spec = run.spec
    return json.dumps([spec.engine, spec.url, spec.options], sort_keys=True, default=str)


def skipped(run: Run, failed: RunRecord) -> RunRecord:
    """The record of a run not tried: its store failed to open in ``failed``."""
    record = _base_record(run, results.new_run_id())
    record.status = "skipped"
    record.error = (
        f"not run: {run.spec.engine} could not be opened in run {failed.run_id}: {failed.error}"
    )
    record.finished_at = record.started_at
    return records.parse(redact_obj(record.to_dict()))


def _finish(
    record: RunRecord,
    opened: OpenStore | None,
    executor: type[Executor] | None,
    ctx: RunContext | None,
    recorder: _Recorder,
) -> RunRecord:
    """A run's clean-up: complete the record, drop the run's collections,
    write the record (with a real recorder), close the store (then its
    managed server)."""
    if record.status == "running":  # an interrupt between the steps above
        record.status = "interrupted"
        record.error = f"interrupted by {interrupts.first_signal() or 'SIGINT'}"
    log.info("run %s: %s; cleaning up", record.run_id, record.status)
    if opened is not None:
        if record.status != "ok":  # was the server's death the cause? (it may still be dying)
            health = opened.health(wait_s=DYING_SERVER_S)
            if health:
                record.error = f"{record.error}; {health}"
        record.server = opened.server_facts()
        if ctx is not None:  # before the collections go
            try:
                record.topology = opened.store.topology([c.name for c in ctx.collections])
            except Exception as exc:
                log.warning("could not read the cluster's topology: %s", exc)
    if executor is not None:  # where the clients ran (a cluster's shape)
        record.executor = executor.describe()
    if ctx is not None:
        try:  # the clients kept between tasks end before the collections and the store
            ctx.driver.close()
        except Exception as exc:
            log.warning("could not stop the run's clients: %s", exc)
        _take(record, ctx)
        failed_drops = drop_collections(ctx.collections)
        if failed_drops:
            record.cleanup_errors = failed_drops
        ctx.remove_workdir()
    record.finished_at = results.now_iso()
    record = _typed(record)
    recorder.write(record)
    if opened is not None:
        with contextlib.suppress(Exception):
            opened.close()
    recorder.begin(None)
    return record


def run_scenario(
    scenario: Scenario,
    results_dir: Path,
    progress: Any = None,
    resume: bool = False,
    on_record: Callable[[RunRecord], None] | None = None,
    results_flag: str = "results_dir",
) -> list[RunRecord]:
    """Run every point of the plan, appending each record as it completes.
    Before any run: the results directory is checked (``results_flag``
    names it in the error), so a run never ends with a record it cannot
    write, and so is the memory the largest run needs (unless
    ``driver.memory_check`` is off). ``resume``: a planned run is skipped
    when an ok record of the same configuration and repeat is in the
    scenario's file (``records.plan_id``: never the address of a managed
    server or a private directory)."""
    progress = progress or NoProgress()
    path = Path(results_dir) / f"{scenario.file.name}.jsonl"
    outputs.check_results(results_dir, path.name, f"{results_flag} {results_dir}")
    plan = scenario.plan()
    if scenario.file.driver.memory_check:
        memory.check(scenario, plan)
    leftovers.remove()  # what a hard-killed earlier run left
    done: set[tuple[str, int]] = set()
    if resume and path.exists():
        done = {records.plan_id(r) for r in records.read(path) if r.ok}
    todo = [run for run in plan if not (done and records.plan_id(planned(run)) in done)]
    if hasattr(progress, "plan"):  # the sweep line's ETA: earlier records, then these runs
        from storebench.plan.dryrun import estimate

        try:
            earlier = list(records.read(path)) if path.exists() else []
        except StorebenchError:  # a file we only append to need not be readable
            earlier = []
        progress.plan(estimate(todo, [r for r in earlier if r.workload == scenario.file.workload]))
    out = []
    recorder = _Recorder(path)
    unopened: dict[str, RunRecord] = {}  # store -> the record of its failed open
    # executors_released: e.g. a local Ray cluster the runs started stops
    with (
        interrupts.handled(),
        interrupts.at_hard_exit(recorder.at_hard_exit),
        executors_released(),
    ):
        for i, run in enumerate(todo):
            if hasattr(progress, "run_started"):
                progress.run_started(i, run_label(run))
            t0 = time.monotonic()
            failed = unopened.get(_store_of(run))
            interrupt = None
            if failed is not None:
                rec = skipped(run, failed)
                recorder.write(rec)
            else:
                not_opened: set[str] = set()
                try:
                    rec, interrupt = execute(run, progress, recorder, not_opened)
                finally:
                    recorder.begin(None)  # an interrupt before its run began: nothing to write
                if not_opened:
                    unopened[_store_of(run)] = rec
            out.append(rec)
            if hasattr(progress, "run_finished") and rec.ok:
                progress.run_finished(i, time.monotonic() - t0)
            if on_record:
                on_record(rec)
            if interrupt is not None:
                raise interrupt
    return out
