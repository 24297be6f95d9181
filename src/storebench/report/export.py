"""Flat rows, one per run x task, for CSV, Parquet and pandas (a sweep's
upload and index build once per run, not once per search setting).

Run fields come first under dotted names (``store.engine``, ``params.n``,
``versions.engine``, ``machine.cores_logical``, ``metrics.recall@10``), then
the task's own fields (``task``, ``ops_per_s``, ``latency_ns.p99``,
``errors.Timeout``, ``recall@10``, ``histogram``). A run with no tasks (it
failed before measuring) is one row with an empty ``task``, so nothing is lost.
A task's per-interval ``series`` is not a column (``write_hdr`` exports it).

``write_hdr`` writes HdrHistogram interval logs instead, one per run x task,
which HdrHistogram's own tools (HistogramLogProcessor, HdrHistogram
Analyzer, the ``hdrhistogram`` package's log reader) read.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from storebench.errors import UserError
from storebench.report.data import (
    AGGREGATIONS,
    Record,
    configurations,
    load,
    safe_mapping,
    safe_text,
)
from storebench.results import records
from storebench.results.records import TaskRecord

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
    out["config"] = records.config_id(rec)
    out["best"] = out["median"] = None
    d["metrics"] = {**(d.get("metrics") or {}), **rec.scores}  # metrics.recall@10
    for part in ("store", "params", "grid_point", "versions", "machine", "metrics"):
        sub: dict[str, Any] = {}
        _flatten(part, safe_mapping(d.get(part) or {}), sub)
        out.update(sub)
    return out


def task_fields(task: TaskRecord, taken: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"task": task.name}
    flat: dict[str, Any] = {}
    for k, v in task.to_dict().items():
        if k in ("name", "series"):
            continue
        if k == "scores":  # recall@10, not scores.recall@10
            flat.update(v)
        elif isinstance(v, dict):  # latency_ns, service_ns, errors, skipped, search, ...
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
            json.dumps(v.settings[0].search, sort_keys=True): records.config_id(v)
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


# --- HdrHistogram interval logs ------------------------------------------------------


def hdr_intervals(task: TaskRecord) -> list[tuple[float, float, str, int]]:
    """(start s from the task's start, length s, encoded histogram, max ns)
    per interval of the task's HDR series; a task recorded without one (an
    older record, a one-shot phase) is one interval of its whole histogram."""
    from storebench.measure.metrics import Histogram

    series = task.series or {}
    hdr = series.get("hdr")
    if not hdr:
        if not task.histogram:
            return []
        h = Histogram.decode(task.histogram)
        return [(0.0, task.elapsed_s, task.histogram, int(h.hdr.max_value))]
    step = float(series["hdr_interval_s"])
    per = max(1, round(step / float(series["interval_s"])))
    maxs = series.get("latency_ns", {}).get("max") or []
    empty = Histogram().encode()
    out = []
    for i, encoded in enumerate(hdr):
        start = i * step
        length = step if i < len(hdr) - 1 else max(task.elapsed_s - start, 0.0)
        top = max(maxs[i * per : (i + 1) * per], default=0)
        out.append((start, length, encoded or empty, int(top)))
    return out


def _hdr_name(rec: Record, task: TaskRecord, taken: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{rec.run_id}.{task.name}")
    name, k = f"{stem}.hlog", 2
    while name in taken:  # a sweep measures a task name once per setting
        name, k = f"{stem}-{k}.hlog", k + 1
    taken.add(name)
    return name


def write_hdr(recs: Iterable[Record | dict[str, Any]], out: Path) -> int:
    """One HdrHistogram interval log (``<run id>.<task>.hlog``, log format
    1.2: timestamps relative to the task's start, latencies in ns, the max
    column in ms as the standard tools expect) per run x task into the
    directory ``out`` (made if missing); returns how many were written."""
    from hdrh.log import HistogramLogWriter

    out.mkdir(exist_ok=True)
    written = 0
    for rec in records.parse_all(recs):
        taken: set[str] = set()
        for t in rec.tasks:
            intervals = hdr_intervals(t)
            if not intervals:
                continue
            start = t.start_unix or _epoch(rec.started_at)
            with open(out / _hdr_name(rec, t, taken), "w", encoding="utf-8") as f:
                log = HistogramLogWriter(f)
                log.output_comment(
                    f"[storebench {safe_text(rec.scenario or '?')} run {rec.run_id} "
                    f"{safe_text(rec.store.engine)} task {safe_text(t.name)}, values in ns]"
                )
                log.output_log_format_version()
                when = datetime.fromtimestamp(start, UTC).isoformat(" ")
                f.write(f"#[StartTime: {start:.3f} (seconds since epoch), {when}]\n")
                f.write(f"#[BaseTime: {start:.3f} (seconds since epoch)]\n")
                log.output_legend()
                for s, length, encoded, top in intervals:
                    f.write(f"{s:.3f},{length:.3f},{top / 1e6:.3f},{encoded}\n")
            written += 1
    return written


def _epoch(iso: str | None) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else 0.0
    except ValueError:
        return 0.0
