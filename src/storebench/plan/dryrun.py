"""``storebench run --dry-run``: the plan as it would run (runs, stores,
parameters, what each run starts), its estimated time and memory; nothing
is started, connected to or written."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from storebench.errors import UserError
from storebench.plan import memory
from storebench.plan.scenario import Run, Scenario
from storebench.results import records
from storebench.results.records import RunRecord
from storebench.run.progress import MIN_WORK_S, Sweep, fmt_duration, record_seconds
from storebench.stores.base import redact_url, store_class
from storebench.stores.opening import servers_started
from storebench.workloads.base import TimeModel, workload_class


def what_starts(run: Run) -> str:
    """What opening the run's store starts or reaches, and its clients."""
    spec = run.spec
    cls = store_class(spec.engine)
    form = cls.url_form
    if spec.url is not None:
        where = f"connects to {redact_url(spec.url)}"
    elif form is None:
        where = "in this process"
    elif form.path:
        where = "a private temporary directory"
    else:
        nodes = servers_started(spec)
        where = f"a managed cluster of {nodes} nodes" if nodes > 1 else "a managed server"
    executor = workload_class(run.workload).executor(run.params, cls, run.executor)
    return f"{where}; clients as {executor}"


def history(scenario: Scenario, results_dir: Path) -> list[RunRecord]:
    """Earlier ok records of this scenario's workload (for the time
    estimate), from the results file the run would append to."""
    path = Path(results_dir) / f"{scenario.file.name}.jsonl"
    if not path.is_file():
        return []
    try:
        return [r for r in records.read(path) if r.ok and r.workload == scenario.file.workload]
    except Exception:  # an unreadable file: no history, the run itself would say why
        return []


def time_model(
    workload: str, params: Any, sweep: Mapping[str, list[Any]] | None, engine: str
) -> TimeModel:
    """The workload's own model of a run's time (``Workload.time_model``):
    ``params`` its model or, from a record, a mapping; a workload or an
    engine this install lacks (an old record's) counts as nothing known."""
    try:
        cls = workload_class(workload)
    except UserError:
        return TimeModel()
    try:
        store = store_class(engine)
    except UserError:
        store = None
    if isinstance(params, Mapping):  # a record's: its keys of today, defaults for the rest
        fields = cls.Params.model_fields
        params = cls.Params.model_construct(**{k: v for k, v in params.items() if k in fields})
    settings = math.prod(len(v) for v in (sweep or {}).values()) or 1
    return cls.time_model(params, settings, store)


def slowdown(options: Mapping[str, Any]) -> float:
    """How much longer an engine's work takes on nodes held to a CPU quota
    below one core (``node_cpus``): each node indexes its own copy or
    share at the quota's pace."""
    cpus = options.get("node_cpus")
    return 1.0 / min(1.0, float(cpus)) if cpus else 1.0


def estimate(runs: Sequence[Run], history: Iterable[RunRecord] = ()) -> Sweep:
    """The time estimates of a plan's ``runs`` (``progress.Sweep``), with
    earlier ok records of the same workloads as ``history``."""
    models = [time_model(r.workload, r.params, r.sweep, r.spec.engine) for r in runs]
    planned = [
        (
            r.spec.engine,
            r.workload,
            max(m.work_s * slowdown(r.spec.options), MIN_WORK_S),
            # each node a start of its own, at its engine's pace
            servers_started(r.spec) * store_class(r.spec.engine).pace.start,
        )
        for r, m in zip(runs, models, strict=True)
    ]
    past = []
    for rec in history:
        seconds = record_seconds(rec)
        if rec.ok and seconds is not None:
            m = time_model(str(rec.workload), rec.params, rec.search_sweep, rec.store.engine)
            work = max(m.work_s * slowdown(rec.store.options), MIN_WORK_S)
            past.append((rec.store.engine, str(rec.workload), work, max(0.0, seconds - m.fixed_s)))
    return Sweep(planned, past, [m.fixed_s for m in models])


def summary(scenario: Scenario, runs: Sequence[Run], results_dir: Path) -> dict[str, Any]:
    """The plan as data (``--dry-run --json``), with its estimates."""
    sweep = estimate(runs, history(scenario, results_dir))
    need = memory.largest(runs)
    common = runs[0].params.model_dump() if runs else {}
    return {
        "scenario": scenario.file.name,
        "workload": scenario.file.workload,
        "runs": [
            {
                "store": r.spec.engine,
                "url": redact_url(r.spec.url),
                "options": r.spec.describe()["options"],
                "grid_point": r.grid_point,
                "search_sweep": r.sweep,
                "not_applicable": list(r.not_applicable),
                "repeat": r.repeat,
                "starts": what_starts(r),
                "estimated_s": round(sweep.estimate(i), 2),
            }
            for i, r in enumerate(runs)
        ],
        "params": common,
        "estimated_s": round(sweep.total(), 2),
        "estimate_from": "earlier runs" if sweep.measured() else "rough priors (no earlier runs)",
        "memory_bytes": need[0] if need else None,
        "memory_available_bytes": memory.available(),
        "results": str(Path(results_dir) / f"{scenario.file.name}.jsonl"),
    }


def print_plan(info: dict[str, Any], runs: Sequence[Run], console: Any) -> None:
    from storebench.report.terminal import fitted_table

    sweep_rows = [
        [
            str(i + 1),
            r["store"],
            " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in r["grid_point"].items()) or "-",
            " ".join(f"{k}={','.join(map(str, v))}" for k, v in r["search_sweep"].items()) or "-",
            str(r["repeat"] + 1),
            r["starts"],
            fmt_duration(r["estimated_s"]),
        ]
        for i, r in enumerate(info["runs"])
    ]
    console.print(
        fitted_table(
            ["#", "store", "grid point", "search sweep", "repeat", "starts", "est. time"],
            sweep_rows,
            console.width,
            ["r", "l", "l", "l", "r", "l", "r"],
            title=f"plan: {info['scenario']} ({info['workload']}), {len(runs)} run(s)",
            priorities=[4, 0, 1, 2, 3, 0, 1],
        )
    )
    params = ", ".join(f"{k}={v}" for k, v in info["params"].items() if v is not None)
    console.print(f"parameters: {params}", soft_wrap=False, overflow="fold")
    options = {r["store"]: r["options"] for r in info["runs"] if r["options"]}
    for engine, opts in options.items():
        console.print(f"options of {engine}: {opts}", overflow="fold")
    need = info["memory_bytes"]
    mem = (
        f"about {memory.fmt_bytes(need)} at the largest run"
        f" ({memory.fmt_bytes(info['memory_available_bytes'])} available)"
        if need
        else "not estimated by this workload"
    )
    console.print(
        f"estimated time: {fmt_duration(info['estimated_s'])} ({info['estimate_from']}); "
        f"memory: {mem}",
        overflow="fold",
    )
    console.print(f"dry run: nothing started; results would go to {info['results']}")
