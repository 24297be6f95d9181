"""``storebench compare A B``: metric by metric ratios between two sets of runs.

Runs are matched by configuration. Parameters that are constant within A and
within B but differ between them (the engine, a parameter, the mode) are what
is being compared, so they are left out of the matching: comparing a memory
results file with an sqlite one pairs runs with equal parameters; comparing
yesterday's file with today's pairs equal configurations.

Each side's value is its chosen run's, the same run the report's row shows
(``data.pick``: best by default, or median), and carries an interval: over
repeats, min..max of the runs; for a single run, a ~95% interval from its
HDR histogram (order statistics for a percentile, the standard error of the
mean for throughput) or, for recall, a binomial one. A difference whose
intervals overlap is noise; a timing's difference beyond them but under
``MIN_DIFFERENCE`` is no difference worth a verdict (``same``). Tasks that are not the same work on
the two sides (an index built during the upload against a separate build)
are not ranked: ``unlike``, with the reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from storebench.errors import UserError
from storebench.report.data import (
    DEFAULT_AGGREGATION,
    Z95,
    Config,
    Record,
    TaskSummary,
    cautions,
    expand_sweeps,
    fastest_ns,
    group,
    histogram,
    mean_rel_uncertainty,
    naming_keys,
    ok_runs,
    percentile_interval,
    run_count,
    short_key,
)
from storebench.results import scores as catalogue
from storebench.results.records import TaskRecord

PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0))
# the least relative difference of a timing (ops/s, a latency) that gets a
# verdict, even beyond its intervals: repeats on one machine drift this much
MIN_DIFFERENCE = 0.05
TIMINGS = ("ops/s", *(key for key, _ in PERCENTILES))
SUMMARY_METRICS = ("ops/s", "p95")  # a task's timings in a summary (scores: headline_score)


def headline_score(metric: str) -> bool:
    """A score a summary shows (recall, not the peers' rules nor precision:
    they move with it)."""
    score = catalogue.of(metric)
    return score is not None and score.priority == 1


def overall(rows: list[Row]) -> str:
    """One verdict for several rows (a pair's summary): ``better`` /
    ``worse`` when every decisive one says so, ``mixed`` when they disagree,
    else ``noise`` if any overlap, ``unlike`` if not ranked, else ``same``."""
    decisive = {r.verdict for r in rows if r.verdict in ("better", "worse")}
    if len(decisive) == 2:
        return "mixed"
    if decisive:
        return decisive.pop()
    for verdict in ("noise", "unlike"):
        if any(r.verdict == verdict for r in rows):
            return verdict
    return "same"


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
    a: Interval | None
    b: Interval | None
    ratio: float | None  # B / A
    verdict: str  # better | worse | noise | same | unlike
    higher_is_better: bool
    why: str = ""  # unlike: why the two are not ranked

    @property
    def timing(self) -> bool:
        """A figure of time (it moves with the machine's load), not a score."""
        return self.metric in TIMINGS


@dataclass
class Pair:
    """Two configurations compared, and the run each side's values are from."""

    label: str
    a: str  # e.g. "best of 3 by ops/s of search c=4"
    b: str
    run_a: str
    run_b: str
    caution_a: list[str] = field(default_factory=list)  # data.cautions
    caution_b: list[str] = field(default_factory=list)
    headline: str = ""  # the task that ranks A's repeats: the pair's summary row is its
    config: dict[str, Any] = field(default_factory=dict)  # its label's keys and values

    @property
    def cautioned(self) -> bool:
        return bool(self.caution_a or self.caution_b)

    def summary(self, rows: list[Row]) -> list[Row]:
        """The pair's headline task's rows (its ops/s, p95 and headline
        score, or its ``unlike``) out of ``rows``: what a one-line summary
        of the pair says."""
        return [
            r
            for r in rows
            if r.pair == self.label
            and r.task == self.headline
            and (r.metric in SUMMARY_METRICS or r.verdict == "unlike" or headline_score(r.metric))
        ]


@dataclass
class Comparison:
    differ: dict[str, tuple[Any, Any]]
    rows: list[Row] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    runs_a: int = 0
    runs_b: int = 0
    how: str = DEFAULT_AGGREGATION
    pairs: list[Pair] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(
            {
                "aggregation": self.how,
                "runs_a": self.runs_a,
                "runs_b": self.runs_b,
                "differ": {k: list(v) for k, v in self.differ.items()},
                "pairs": [asdict(p) for p in self.pairs],
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
    ident = rec.identity()
    if key in ident:
        return ident[key]
    cur: Any = rec.to_dict()
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            cur = None
            break
        cur = cur[part]
    if cur is None and "." not in key:
        return rec.params.get(key)
    return cur


def select(recs: list[Record], where: list[str]) -> list[Record]:
    """Records matching every KEY=VALUE (dotted keys into the record or
    its parameters; ``store=`` is the engine; ``run_id=`` matches a prefix);
    a sweep's run per search setting (``search.ef=64``)."""
    out = expand_sweeps(recs)
    for cond in where:
        if "=" not in cond:
            raise UserError(f"expected KEY=VALUE, got {cond!r}", where="--a/--b")
        key, want = (s.strip() for s in cond.split("=", 1))
        if ALIASES.get(key, key) == "run_id":
            out = [r for r in out if r.run_id.startswith(want)]
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


OneRun = Callable[[float, TaskRecord], "Interval"]  # a single run's interval of a value


def _interval(
    ts: TaskSummary,
    t: TaskRecord | None,
    key: str,
    one_run: OneRun,
) -> Interval | None:
    """The chosen run's value of ``key`` (``t``'s): min..max over the
    repeats, else the interval ``one_run`` gives a single run."""
    v = t.number(key) if t is not None else None
    s = ts.spread(key)
    if v is None or s is None or t is None:
        return None
    if s.n > 1:
        return Interval(v, s.min, s.max, s.n, "repeats")
    return one_run(v, t)


def _throughput(v: float, t: TaskRecord) -> Interval:
    h = histogram(t.histogram) if t.histogram else None
    rel = mean_rel_uncertainty(h) if h is not None else math.nan
    if h is None or not math.isfinite(rel):
        return Interval(v, v, v, 1, "none")
    # throughput goes as 1 / mean latency: the mean's interval, inverted. A
    # few long stalls make the normal interval reach a mean of zero; but the
    # mean is never below the fastest op, so throughput is at most v times
    # mean / fastest (a 21x gap between two short runs is not "noise")
    hi = v / (1 - rel) if rel < 1 else math.inf
    fastest = fastest_ns(h)
    if fastest > 0:
        hi = min(hi, v * (h.sum_ns / h.count) / fastest)
    return Interval(v, v / (1 + rel), max(hi, v), 1, "hdr")


def _percentile(p: float) -> OneRun:
    def one_run(v: float, t: TaskRecord) -> Interval:
        h = histogram(t.histogram) if t.histogram else None
        if h is None or not h.count:
            return Interval(v, v, v, 1, "none")
        lo, hi = percentile_interval(h, p)
        return Interval(v, min(lo, v), max(hi, v), 1, "hdr")

    return one_run


def _score(key: str) -> OneRun:
    """A score of one run (a fraction of hits): binomial over the queries'
    k places each."""

    def one_run(r: float, t: TaskRecord) -> Interval:
        score = catalogue.of(key)
        if score is None or score.unit != "fraction":
            return Interval(r, r, r, 1, "none")
        trials = max(1, int(t.items or t.ops or 1)) * (catalogue.k_of(key) or 1)
        half = Z95 * math.sqrt(max(r * (1 - r), 0.0) / trials)
        return Interval(r, max(0.0, r - half), min(1.0, r + half), 1, "binomial")

    return one_run


def _verdict(a: Interval, b: Interval, higher_is_better: bool, timing: bool = True) -> str:
    if a.value == b.value:
        return "same"
    if a.overlaps(b):
        return "noise"
    if timing and abs(b.value - a.value) < MIN_DIFFERENCE * abs(a.value):
        return "same"
    return "better" if (b.value > a.value) == higher_is_better else "worse"


INDEX_PHASES = ("upload", "index")


def unlike(a: Record, b: Record, t: TaskRecord) -> str:
    """Why a task of A's run and B's are not ranked against each other ("" if
    they can be): an engine that indexes as documents arrive has its index
    build inside its upload and no build step, so neither its upload nor its
    index step is the same work as a separate build's."""
    if t.phase not in INDEX_PHASES or a.index_during_insert == b.index_during_insert:
        return ""
    during, built = (a, b) if a.index_during_insert else (b, a)
    return (
        f"unlike: {during.store.engine} indexes during its upload (no build step); "
        f"{built.store.engine} builds its index in a separate step"
    )


def _rows(pair: str, ca: Config, cb: Config, how: str) -> tuple[Pair, list[Row]]:
    pa, pb = ca.pick(how), cb.pick(how)
    ra, rb = pa.run, pb.run
    out = []
    tasks = [t for t in ca.tasks() if t in cb.tasks()]
    for name in tasks:
        ta, tb = ca.task(name), cb.task(name)
        xa, xb = ra.task(name), rb.task(name)
        if ta.unsupported or tb.unsupported or not ta.measured or not tb.measured:
            continue
        if xa is None or xb is None or not xa.measured or not xb.measured:
            continue
        why = unlike(ra, rb, xa)
        if why:
            out.append(Row(pair, name, "-", None, None, None, "unlike", True, why))
            continue
        # (metric, its key, one run's interval, higher is better)
        metrics: list[tuple[str, str, OneRun, bool]] = [("ops/s", "ops_per_s", _throughput, True)]
        metrics += [(k, f"latency_ns.{k}", _percentile(p), False) for k, p in PERCENTILES]
        for sk in xa.score_keys():
            if sk in xb.scores and (score := catalogue.of(sk)) is not None:
                metrics.append((sk, sk, _score(sk), score.higher_is_better))
        for metric, key, one_run, hib in metrics:
            ia, ib = _interval(ta, xa, key, one_run), _interval(tb, xb, key, one_run)
            if ia is None or ib is None:
                continue
            ratio = ib.value / ia.value if ia.value else None
            verdict = _verdict(ia, ib, hib, metric in TIMINGS)
            out.append(Row(pair, name, metric, ia, ib, ratio, verdict, hib))
    head = ra.headline_task()
    return Pair(
        pair,
        pa.describe(),
        pb.describe(),
        pa.run_short,
        pb.run_short,
        cautions(ca),
        cautions(cb),
        head.name if head is not None else "",
    ), out


# --- matching ----------------------------------------------------------------------


def _constant(recs: list[Record], key: str) -> tuple[bool, Any]:
    vals = {json.dumps(r.identity().get(key), sort_keys=True, default=str) for r in recs}
    if len(vals) == 1:
        return True, json.loads(vals.pop())
    return False, None


def compare(
    a_recs: list[Record], b_recs: list[Record], how: str = DEFAULT_AGGREGATION
) -> Comparison:
    """B against A, configuration by configuration; each side's values are
    its chosen run's (``how``: ``data.pick``, as the report's rows)."""
    a_ok, b_ok = expand_sweeps(ok_runs(a_recs)), expand_sweeps(ok_runs(b_recs))
    if not a_ok or not b_ok:
        side = "A" if not a_ok else "B"
        raise UserError(f"{side} has no ok runs to compare", where="compare")
    keys: list[str] = []
    for r in a_ok + b_ok:
        keys += [k for k in r.identity() if k not in keys]
    differ: dict[str, tuple[Any, Any]] = {}
    for k in keys:
        const_a, va = _constant(a_ok, k)
        const_b, vb = _constant(b_ok, k)
        if const_a and const_b and va != vb:
            differ[k] = (va, vb)
    drop = tuple(differ)
    if "store.engine" in differ:  # an engine's version differs with it
        differ.pop("versions.engine", None)
    ga = {c.id: c for c in group(a_ok, drop)}
    gb = {c.id: c for c in group(b_ok, drop)}
    vary = naming_keys(a_ok + b_ok, drop)
    comp = Comparison(differ, runs_a=run_count(a_ok), runs_b=run_count(b_ok), how=how)
    for cid, ca in ga.items():
        if cid not in gb:
            comp.only_a.append(_label(ca, vary))
            continue
        pair, rows = _rows(_label(ca, vary), ca, gb[cid], how)
        pair.config = _config(ca, vary)
        comp.pairs.append(pair)
        comp.rows += rows
    comp.only_b = [_label(c, vary) for cid, c in gb.items() if cid not in ga]
    return comp


def _config(c: Config, vary: list[str]) -> dict[str, Any]:
    """What tells this pair from the others (the compared keys left out), by
    short key: ``{"store": "hnswlib", "m": 16}``."""
    ident = c.first.identity()
    return {short_key(k): ident.get(k) for k in vary if k in ident}


def _label(c: Config, vary: list[str]) -> str:
    """``_config`` in words: ``store=hnswlib m=16``."""
    return " ".join(f"{k}={v}" for k, v in _config(c, vary).items()) or "all runs"


def describe_differ(differ: dict[str, tuple[Any, Any]]) -> str:
    if not differ:
        return "A and B have the same parameters (e.g. two sessions of one scenario)"
    return "A and B differ in " + "; ".join(
        f"{short_key(k)}: {va} → {vb}" for k, (va, vb) in differ.items()
    )
