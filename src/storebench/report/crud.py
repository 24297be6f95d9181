"""The crud workload's views: the DocArray study's two tables per store.

Latency (per operation) and rates (QPS for reads and
finds, DPS, documents per second, for writes), one row per configuration,
keyed by the HNSW parameters the study varied (m, ef_construct, ef) plus any
other parameter that varies among the runs. With repeats, a row is one run
(``data.pick``), named in its run column."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from storebench.report.data import (
    Config,
    Record,
    aggregation_note,
    short_key,
    varying_keys,
)
from storebench.report.footprint import FOOTPRINT_COLUMNS, footprint, footprint_cells
from storebench.report.terminal import fmt_ns, fmt_rate
from storebench.report.views import Block, Table, Text, ViewInput, distinct, register
from storebench.results import scores as catalogue
from storebench.results.records import TaskRecord
from storebench.results.scores import RECALL

STUDY_KEYS = ("store.index.m", "store.index.ef_construct", "store.search.ef")
TASKS = ("find_by_vector", "find_by_condition", "create", "read", "update", "delete")
WRITES = ("create", "update", "delete")  # rated in documents per second (DPS)
RATE_COLUMNS = [f"{t.replace('_', ' ')} {'DPS' if t in WRITES else 'QPS'}" for t in TASKS]


def _key_columns(v: ViewInput, configs: list[Config]) -> list[str]:
    """The study's index keys, then every other index/search key the store
    was given, then the workload parameters that vary."""
    keys = list(STUDY_KEYS)
    for c in configs:
        for k in c.first.identity():
            if k.startswith(("store.index.", "store.search.")) and k not in keys:
                keys.append(k)
    keys += [k for k in varying_keys(v.ok, ("params.", "mode", "versions.")) if k not in keys]
    return keys


def _recall_key(configs: list[Config]) -> str | None:
    for c in configs:
        for r in c.runs:
            if k := catalogue.first(r.scores):
                return k
        for k in c.task("find_by_vector").score_keys(RECALL):
            return k
    return None


def _n(configs: list[Config]) -> str:
    ns = distinct([c.first.identity().get("params.n") for c in configs])
    return f" {ns[0]:,}" if len(ns) == 1 and isinstance(ns[0], int) else ""


Cell = Callable[[TaskRecord], str]


def _cell(c: Config, run: Record, task: str, fn: Cell) -> str:
    if c.task(task).unsupported:
        return "n/s"
    t = run.task(task)
    if t is None or not t.measured:
        return "-"
    return fn(t)


def _lat(t: TaskRecord) -> str:
    return fmt_ns(t.number("latency_ns.p50"))


def _total(t: TaskRecord) -> str:
    return fmt_ns(t.elapsed_s * 1e9)


def _rate(t: TaskRecord) -> str:
    return fmt_rate(t.items_per_s if t.name in WRITES else t.ops_per_s)


def rate_cells(c: Config, run: Record) -> list[str]:
    """The study's rate of each task (``RATE_COLUMNS``) in ``run``."""
    return [_cell(c, run, t, _rate) for t in TASKS]


def _tables(v: ViewInput, kind: str) -> list[Block]:
    configs = v.configs()
    if not configs:
        return []
    keys = _key_columns(v, configs)
    rkey = _recall_key(configs)
    n = _n(configs)
    fns: list[Cell]
    if kind == "latency":
        cols = ["find by vector", "find by condition", f"create{n}", "read", "update", "delete"]
        fns = [_lat, _lat, _total, _lat, _lat, _lat]
    else:
        cols, fns = RATE_COLUMNS, [_rate] * len(TASKS)
    header = [short_key(k) for k in keys] + ([catalogue.title(rkey)] if rkey else [])
    header += cols + [*FOOTPRINT_COLUMNS, "runs", "run"]
    blocks: list[Block] = []
    for store in distinct([c.engine for c in configs]):
        mine = [c for c in configs if c.engine == store]
        rows = []
        for c in mine:
            pk = v.pick(c)
            ident = c.first.identity()
            row = ["-" if ident.get(k) is None else str(ident.get(k)) for k in keys]
            if rkey:
                row.append(catalogue.text(rkey, pk.run.scores.get(rkey)))  # the setting's own
            row += [_cell(c, pk.run, t, fn) for t, fn in zip(TASKS, fns, strict=True)]
            row += [*footprint_cells(footprint(pk.run)), str(pk.runs), pk.run_short]
            rows.append(row)
        note = ""
        if not any(k in c.first.identity() for c in mine for k in STUDY_KEYS):
            note = f"{store} searches exhaustively here: no m, ef_construct or ef."
        blocks.append(Table(store, header, rows, note))
    return blocks


def _noted(v: ViewInput, kind: str, note: str) -> list[Block]:
    blocks = _tables(v, kind)
    return [Text(note + aggregation_note(v.how)), *blocks] if blocks else blocks


for _kind, _title, _note in (
    (
        "latency",
        "Latency per operation (the DocArray table)",
        "Median latency of one operation; create: wall time to insert all "
        "documents. n/s: the store does not support the task. ",
    ),
    (
        "rates",
        "Throughput (the DocArray QPS / DPS table)",
        "Counted operations (QPS) or documents (DPS) per second of wall time, "
        "first client's start to last client's end. ",
    ),
):
    register("crud", f"crud_{_kind}", _title)(partial(_noted, kind=_kind, note=_note))
