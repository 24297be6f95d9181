"""Flat rows, one per run x task, for CSV, Parquet and pandas (a sweep's
upload and index build once per run, not once per search setting).

Run fields come first under dotted names (``store.engine``, ``params.n``,
``versions.engine``, ``machine.cores_logical``, ``metrics.recall@10``), then
the task's own fields (``task``, ``ops_per_s``, ``latency_ns.p99``,
``errors.Timeout``, ``recall@10``, ``histogram``). A run with no tasks (it
failed before measuring) is one row with an empty ``task``, so nothing is lost.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from storebench import records
from storebench.errors import UserError
from storebench.records import TaskRecord
from storebench.report.data import (
    AGGREGATIONS,
    Record,
    config_id,
    configurations,
    load,
    safe_mapping,
    safe_text,
)

RUN_FIELDS = (
    "run_id",
    "key",
    "scenario",
    "workload",
    "mode",
    "repeat",
    "status",
    "error",
    "started_at",
    "finished_at",
)


def _flatten(prefix: str, d: Any, out: dict[str, Any]) -> None:
    if isinstance(d, dict):
        for k, v in d.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(d, list):
        out[prefix] = json.dumps(d, default=str)
    elif isinstance(d, str):
        out[prefix] = safe_text(d)
    else:
        out[prefix] = d


def run_fields(rec: Record) -> dict[str, Any]:
    d = rec.to_dict()
    out: dict[str, Any] = {}
    for k in RUN_FIELDS:
        v = d.get(k)
        out[k] = safe_text(v) if isinstance(v, str) else v
    out["config"] = config_id(rec)
    out["best"] = out["median"] = None
    for part in ("store", "params", "grid_point", "versions", "machine", "metrics"):
        sub: dict[str, Any] = {}
        _flatten(part, safe_mapping(d.get(part) or {}), sub)
        out.update(sub)
    return out


def task_fields(task: TaskRecord, taken: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"task": task.name}
    flat: dict[str, Any] = {}
    for k, v in task.to_dict().items():
        if k == "name":
            continue
        if isinstance(v, dict):  # latency_ns, service_ns, errors, skipped, search, ...
            _flatten(k, v, flat)
            if k == "errors":
                flat["errors_total"] = sum(x for x in v.values() if isinstance(x, int | float))
        elif isinstance(v, list):
            flat[k] = json.dumps(v, default=str)
        else:
            flat[k] = safe_text(v) if isinstance(v, str) and k != "histogram" else v
    for k, v in flat.items():
        out[f"task.{k}" if k in taken else k] = v
    return out


def chosen_runs(recs: list[Record]) -> dict[str, dict[str, str]]:
    """For each configuration (a sweep per setting): the run id each
    aggregation shows (``data.pick``, as the report and compare)."""
    out: dict[str, dict[str, str]] = {}
    for c in configurations(recs):
        out[c.id] = {how: c.pick(how).run.run_id for how in AGGREGATIONS}
    return out


def table(recs: Iterable[Record | dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, columns): one row per run x task (a run's own tasks once,
    whatever its search settings), run columns first, then task columns,
    each in first-seen order. ``config`` is the configuration the task
    measured: a sweep's search task, its setting's; a shared task (upload,
    index build), the run's. ``best`` / ``median``: whether the row's run is
    the one the report and compare show for that configuration (empty for a
    sweep's shared tasks: each setting's row shows its own chosen run's)."""
    recs = records.parse_all(recs)
    chosen = chosen_runs(recs)
    out = []
    run_cols: dict[str, None] = {}
    task_cols: dict[str, None] = {"task": None}
    for rec in recs:
        base = run_fields(rec)
        run_cols.update(dict.fromkeys(base))
        setting_config = {
            json.dumps(v.settings[0].search, sort_keys=True): config_id(v)
            for v in rec.per_setting()
            if v is not rec and v.settings
        }
        if not rec.tasks:
            out.append({**base, "task": None})
        for t in rec.tasks:
            row = dict(base)
            if t.search:
                row["config"] = setting_config.get(
                    json.dumps(t.search, sort_keys=True), row["config"]
                )
            picks = chosen.get(row["config"])
            if picks is not None:
                row["best"] = picks["best"] == rec.run_id
                row["median"] = picks["median"] == rec.run_id
            tf = task_fields(t, set(base))
            task_cols.update(dict.fromkeys(tf))
            out.append({**row, **tf})
    return out, [*run_cols, *(k for k in task_cols if k not in run_cols)]


def rows(recs: Iterable[Record | dict[str, Any]]) -> list[dict[str, Any]]:
    return table(recs)[0]


def frames(paths: str | Path | Iterable[str | Path]) -> Any:
    """A pandas DataFrame with one row per run x task of the result files
    (or directories of ``*.jsonl``) at ``paths``."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise UserError("frames need pandas: pip install 'storebench[report]'") from exc
    rs, cols = table(load(paths))
    return pd.DataFrame(rs, columns=cols)


def write_csv(recs: Iterable[Record | dict[str, Any]], out: Path) -> int:
    rs, cols = table(recs)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rs:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    return len(rs)


def write_parquet(recs: Iterable[Record | dict[str, Any]], out: Path) -> int:
    try:
        import pandas as pd
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise UserError(
            "Parquet export needs pandas and pyarrow: pip install 'storebench[report]'"
        ) from exc
    rs, cols = table(recs)
    df = pd.DataFrame(rs, columns=cols)
    # a column that mixes numbers and text (rare: a parameter given both ways)
    # becomes text, so Arrow can type it
    for c in df.columns:
        if df[c].dtype == object:
            kinds = {type(x) for x in df[c] if x is not None and x == x}
            if len(kinds) > 1:
                df[c] = df[c].map(lambda x: None if x is None else str(x))
    df.to_parquet(out, index=False)
    return len(rs)
