"""Executes a plan: for each run, open the store, run the workload, write
the record. Whatever happens (an error, Ctrl-C, SIGTERM), the record is
written with what was measured and a status that says how the run ended;
collections the run created are dropped and its temporary files removed."""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from storebench import results
from storebench.driver import Driver, Interrupted
from storebench.driver.executors import Executor, executors_released, setup_executor
from storebench.errors import StorebenchError, Terminated, signal_name
from storebench.progress import NoProgress
from storebench.redaction import redact_obj
from storebench.scenario import Run, Scenario
from storebench.stores.base import Collection
from storebench.workloads.base import RunContext, workload_class

log = logging.getLogger("storebench")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: Any) -> None:
        raise Terminated()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _base_record(run: Run, run_id: str) -> dict[str, Any]:
    return {
        "record_version": results.RECORD_VERSION,
        "run_id": run_id,
        "key": run.key,
        "scenario": run.scenario,
        "workload": run.workload,
        "mode": run.mode,
        "repeat": run.repeat,
        "store": run.spec.describe(),
        "params": run.params.model_dump(),
        "grid_point": run.grid_point,
        "search_sweep": run.sweep,
        "not_applicable": list(run.not_applicable),
        "status": "running",
        "error": None,
        "started_at": results.now_iso(),
        "versions": {"storebench": results.storebench_version()},
        "machine": results.machine_facts(),
    }


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


def execute(run: Run, progress: Any = None) -> dict[str, Any]:
    """Run one plan point; always returns a complete record (never raises on
    a failed run; re-raises KeyboardInterrupt after recording it)."""
    run_id = results.new_run_id()
    record = _base_record(run, run_id)
    store = None
    ctx = None
    executor: type[Executor] | None = None
    interrupt: KeyboardInterrupt | None = None
    log.info("run %s: %s on %s %s", run_id, run.workload, run.spec.engine, run.grid_point or "")
    try:
        store = run.spec.open()
        record["versions"].update(store.versions())
        record["store"] = store.spec.describe()  # with defaults the store filled in
        executor = setup_executor(run.executor or store.client_mode, run.driver)
        ctx = RunContext(run_id, store, Driver(progress, run.executor), run.mode, run.sweep)
        workload_class(run.workload)().run(ctx, run.params)
        record["status"] = "ok"
    except Interrupted as exc:
        record["status"], record["error"] = "interrupted", str(exc)
        interrupt = KeyboardInterrupt()
    except KeyboardInterrupt as exc:
        record["status"], record["error"] = "interrupted", f"interrupted by {signal_name(exc)}"
        interrupt = exc
    except StorebenchError as exc:
        record["status"], record["error"] = "failed", str(exc)
    except Exception as exc:  # an engine or library error: keep the trace's last line
        record["status"] = "failed"
        record["error"] = f"{type(exc).__name__}: {exc}"
        record["traceback"] = traceback.format_exc(limit=8)
    finally:
        if store is not None:
            health = store.health()
            if health and record["status"] != "ok":
                record["error"] = f"{record['error']}; {health}"
            record["server"] = store.server_facts()
        if executor is not None:  # where the clients ran (a cluster's shape)
            record["executor"] = executor.describe()
        if ctx is not None:
            record["tasks"] = ctx.tasks
            record["metrics"] = ctx.metrics
            failed_drops = drop_collections(ctx.collections)
            if failed_drops:
                record["cleanup_errors"] = failed_drops
            shutil.rmtree(ctx.workdir, ignore_errors=True)
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        record["finished_at"] = results.now_iso()
    # engine errors often echo the URL: no secret goes on to the terminal or a file
    record = redact_obj(record)
    if interrupt is not None:
        record["_interrupt"] = interrupt
    return record


def run_scenario(
    scenario: Scenario,
    results_dir: Path,
    progress: Any = None,
    resume: bool = False,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every point of the plan, appending each record as it completes."""
    progress = progress or NoProgress()
    path = Path(results_dir) / f"{scenario.file.name}.jsonl"
    done: set[str] = set()
    if resume and path.exists():
        done = {r["key"] for r in results.read(path) if r.get("status") == "ok"}
    records = []
    # executors_released: e.g. a local Ray cluster the runs started stops
    with sigterm_as_interrupt(), executors_released():
        for run in scenario.plan():
            if run.key in done:
                continue
            rec = execute(run, progress)
            interrupt = rec.pop("_interrupt", None)
            results.append(path, rec)
            records.append(rec)
            if on_record:
                on_record(rec)
            if interrupt is not None:
                raise interrupt
    return records
