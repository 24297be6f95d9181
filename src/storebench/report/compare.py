"""``storebench compare A B``: metric by metric ratios between two sets of runs.

Runs are matched by configuration. Parameters that are constant within A and
within B but differ between them (the engine, a parameter, the mode) are what
is being compared, so they are left out of the matching: comparing a memory
results file with an sqlite one pairs runs with equal parameters; comparing
yesterday's file with today's pairs equal configurations.

Each value carries an interval: over repeats, min..max of the runs; for a
single run, a ~95% interval from its HDR histogram (order statistics for a
percentile, the standard error of the mean for throughput) or, for recall,
a binomial one. A difference whose intervals overlap is flagged as noise.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from storebench.errors import UserError
from storebench.report.data import (
    Z95,
    Config,
    Record,
    TaskSummary,
    group,
    identity,
    mean_rel_uncertainty,
    ok_runs,
    percentile_interval,
    short_key,
    varying_keys,
)

PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0))


@dataclass
class Interval:
    value: float
    lo: float
    hi: float
    runs: int
    basis: str  # "repeats", "hdr", "binomial" or "none"

    def overlaps(self, other: Interval) -> bool:
        return self.lo <= other.hi and other.lo <= self.hi


@dataclass
class Row:
    pair: str
    task: str
    metric: str
    a: Interval
    b: Interval
    ratio: float | None  # B / A
    verdict: str  # better | worse | noise | same
    higher_is_better: bool


@dataclass
class Comparison:
    differ: dict[str, tuple[Any, Any]]
    rows: list[Row] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    runs_a: int = 0
    runs_b: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "differ": {k: list(v) for k, v in self.differ.items()},
                "rows": [asdict(r) for r in self.rows],
                "only_a": self.only_a,
                "only_b": self.only_b,
            },
            indent=1,
            default=str,
        )

    @property
    def worse(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "worse"]


# --- selecting runs ----------------------------------------------------------------

ALIASES = {"store": "store.engine", "engine": "store.engine", "run": "run_id"}


def _lookup(rec: Record, key: str) -> Any:
    key = ALIASES.get(key, key)
    ident = identity(rec)
    if key in ident:
        return ident[key]
    cur: Any = rec
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            cur = None
            break
        cur = cur[part]
    if cur is None and "." not in key:
        return (rec.get("params") or {}).get(key)
    return cur


def select(recs: list[Record], where: list[str]) -> list[Record]:
    """Records matching every KEY=VALUE (dotted keys into the record or
    its parameters; ``store=`` is the engine; ``run_id=`` matches a prefix)."""
    out = recs
    for cond in where:
        if "=" not in cond:
            raise UserError(f"expected KEY=VALUE, got {cond!r}", where="--a/--b")
        key, want = (s.strip() for s in cond.split("=", 1))
        if ALIASES.get(key, key) == "run_id":
            out = [r for r in out if str(r.get("run_id", "")).startswith(want)]
        else:
            out = [r for r in out if _text(_lookup(r, key)) == want]
    return out


def _text(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


# --- intervals ---------------------------------------------------------------------


def _throughput(ts: TaskSummary) -> Interval | None:
    s = ts.spread("ops_per_s")
    if not s:
        return None
    if s.n > 1:
        return Interval(s.median, s.min, s.max, s.n, "repeats")
    h = ts.histogram()
    rel = mean_rel_uncertainty(h) if h is not None else math.nan
    if not math.isfinite(rel):
        return Interval(s.median, s.median, s.median, 1, "none")
    # throughput goes as 1 / mean latency: the mean's interval, inverted
    hi = s.median / (1 - rel) if rel < 1 else math.inf
    return Interval(s.median, s.median / (1 + rel), hi, 1, "hdr")


def _percentile(ts: TaskSummary, key: str, p: float) -> Interval | None:
    s = ts.latency(key)
    if not s:
        return None
    if s.n > 1:
        return Interval(s.median, s.min, s.max, s.n, "repeats")
    h = ts.histogram()
    if h is None or not h.count:
        return Interval(s.median, s.median, s.median, 1, "none")
    lo, hi = percentile_interval(h, p)
    return Interval(s.median, min(lo, s.median), max(hi, s.median), 1, "hdr")


def _recall(ts: TaskSummary, key: str) -> Interval | None:
    s = ts.spread(key)
    if not s:
        return None
    if s.n > 1:
        return Interval(s.median, s.min, s.max, s.n, "repeats")
    t = ts.measured[0]
    try:
        k = int(key.split("@", 1)[1])
    except (IndexError, ValueError):
        k = 1
    trials = max(1, int(t.get("items") or t.get("ops") or 1)) * k
    r = s.median
    half = Z95 * math.sqrt(max(r * (1 - r), 0.0) / trials)
    return Interval(r, max(0.0, r - half), min(1.0, r + half), 1, "binomial")


def _verdict(a: Interval, b: Interval, higher_is_better: bool) -> str:
    if a.value == b.value:
        return "same"
    if a.overlaps(b):
        return "noise"
    return "better" if (b.value > a.value) == higher_is_better else "worse"


def _rows(pair: str, ca: Config, cb: Config) -> list[Row]:
    out = []
    tasks = [t for t in ca.tasks() if t in cb.tasks()]
    for name in tasks:
        ta, tb = ca.task(name), cb.task(name)
        if ta.unsupported or tb.unsupported or not ta.measured or not tb.measured:
            continue
        metrics: list[tuple[str, Interval | None, Interval | None, bool]] = [
            ("ops/s", _throughput(ta), _throughput(tb), True)
        ]
        for key, p in PERCENTILES:
            metrics.append((key, _percentile(ta, key, p), _percentile(tb, key, p), False))
        for rk in ta.recall_keys:
            if rk in tb.recall_keys:
                metrics.append((rk, _recall(ta, rk), _recall(tb, rk), True))
        for metric, ia, ib, hib in metrics:
            if ia is None or ib is None:
                continue
            ratio = ib.value / ia.value if ia.value else None
            out.append(Row(pair, name, metric, ia, ib, ratio, _verdict(ia, ib, hib), hib))
    return out


# --- matching ----------------------------------------------------------------------


def _constant(recs: list[Record], key: str) -> tuple[bool, Any]:
    vals = {json.dumps(identity(r).get(key), sort_keys=True, default=str) for r in recs}
    if len(vals) == 1:
        return True, json.loads(vals.pop())
    return False, None


def compare(a_recs: list[Record], b_recs: list[Record]) -> Comparison:
    a_ok, b_ok = ok_runs(a_recs), ok_runs(b_recs)
    if not a_ok or not b_ok:
        side = "A" if not a_ok else "B"
        raise UserError(f"{side} has no ok runs to compare", where="compare")
    keys: list[str] = []
    for r in a_ok + b_ok:
        keys += [k for k in identity(r) if k not in keys]
    differ: dict[str, tuple[Any, Any]] = {}
    for k in keys:
        const_a, va = _constant(a_ok, k)
        const_b, vb = _constant(b_ok, k)
        if const_a and const_b and va != vb:
            differ[k] = (va, vb)
    drop = tuple(differ)
    ga = {c.id: c for c in group(a_ok, drop)}
    gb = {c.id: c for c in group(b_ok, drop)}
    vary = [k for k in varying_keys(a_ok + b_ok) if k not in drop]
    comp = Comparison(differ, runs_a=len(a_ok), runs_b=len(b_ok))
    for cid, ca in ga.items():
        if cid not in gb:
            comp.only_a.append(_label(ca, vary))
            continue
        comp.rows += _rows(_label(ca, vary), ca, gb[cid])
    comp.only_b = [_label(c, vary) for cid, c in gb.items() if cid not in ga]
    return comp


def _label(c: Config, vary: list[str]) -> str:
    """What tells this pair from the others (the compared keys left out)."""
    ident = identity(c.first)
    parts = [f"{short_key(k)}={ident.get(k)}" for k in vary if k in ident]
    return " ".join(parts) or "all runs"


def describe_differ(differ: dict[str, tuple[Any, Any]]) -> str:
    if not differ:
        return "A and B have the same parameters (e.g. two sessions of one scenario)"
    return "A and B differ in " + "; ".join(
        f"{short_key(k)}: {va} → {vb}" for k, (va, vb) in differ.items()
    )
