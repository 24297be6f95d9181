"""What every report view reads: records loaded from result files, grouped
into *configurations* (``records.config_identity``: runs whose parameters
are the same, whatever their repeat), labelled by what varies; the one
aggregation (``pick``: the run a configuration's row shows, best or
median); spreads and HDR-derived uncertainty.

Nothing here needs matplotlib or pandas: ``storebench compare`` and the CSV
export run on the core install.

One module (~500 lines) on purpose: it is the single home of what a view
reads (loading, grouping, the one aggregation, the numbers); split, every
view would import several halves of one idea.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from storebench.common.redaction import MASK, is_secret_key, redact
from storebench.errors import UserError
from storebench.measure import noise
from storebench.measure.metrics import Histogram
from storebench.results import records
from storebench.results import scores as catalogue
from storebench.results.records import RunRecord, TaskRecord
from storebench.results.scores import Score

Record = RunRecord

# --- safe text -------------------------------------------------------------------


def safe_text(value: Any) -> str:
    """``value`` as text with every secret removed (``redaction.redact``:
    records are redacted when written and read; this is the last line)."""
    return redact(value)


def safe_mapping(d: Any) -> Any:
    """A copy of a (nested) mapping with secret-looking keys masked and every
    string redacted."""
    if isinstance(d, dict):
        return {
            k: (MASK if is_secret_key(str(k)) and v not in (None, "") else safe_mapping(v))
            for k, v in d.items()
        }
    if isinstance(d, list):
        return [safe_mapping(v) for v in d]
    if isinstance(d, str):
        return safe_text(d)
    return d


# --- loading ---------------------------------------------------------------------


def load(paths: str | Path | Iterable[str | Path]) -> list[Record]:
    """Records of result files (or directories of ``*.jsonl``), in file
    order, one per run (``expand_sweeps`` splits a sweep per setting)."""
    recs = records.load(paths)
    for r in recs:
        r.store = r.store.model_validate(safe_mapping(r.store.to_dict()))
    return recs


def expand_sweeps(recs: Iterable[Record | dict[str, Any]]) -> list[Record]:
    """A run that swept search parameters (one index build, several ``ef``)
    becomes one record per setting (``RunRecord.per_setting``): every view
    then sees one configuration per (build, search setting)."""
    return [x for r in records.parse_all(recs) for x in r.per_setting()]


def load_nonempty(paths: Iterable[str | Path]) -> list[Record]:
    recs = load(list(paths))
    if not recs:
        raise UserError("no result records in " + ", ".join(str(p) for p in paths))
    return recs


def run_count(recs: Iterable[Record]) -> int:
    """Runs (a sweep's per-setting records are one run)."""
    return len({r.run_id for r in recs})


# --- identity and grouping -------------------------------------------------------


def store_label(rec: Record) -> str:
    """The engine, and the url where it identifies the configuration (one
    the user gave; never a managed server's new port)."""
    label = rec.store.engine
    url = rec.store.url
    if url and "://" in url and records.url_identifies(rec):
        label += " " + safe_text(url)
    return label


def varying_keys(recs: Sequence[Record], prefixes: tuple[str, ...] = ()) -> list[str]:
    """Identity keys whose values differ among ``recs`` (in first-seen order);
    an engine's version only where it differs for one engine (else the
    engine says it)."""
    seen: dict[str, set[str]] = {}
    idents = [r.identity() for r in recs]
    keys: list[str] = []
    for ident in idents:
        for k in ident:
            if k not in seen:
                seen[k] = set()
                keys.append(k)
    for ident in idents:
        for k in keys:
            seen[k].add(json.dumps(ident.get(k), sort_keys=True, default=str))
    out = [k for k in keys if len(seen[k]) > 1 and (not prefixes or k.startswith(prefixes))]
    if "versions.engine" in out:
        per_engine: dict[Any, set[Any]] = {}
        for ident in idents:
            per_engine.setdefault(ident.get("store.engine"), set()).add(
                ident.get("versions.engine")
            )
        if all(len(v) == 1 for v in per_engine.values()):
            out.remove("versions.engine")
    return out


SHORT = {"store.engine": "store", "versions.engine": "engine version", "store.url": "url"}


def short_key(k: str) -> str:
    if k in SHORT:
        return SHORT[k]
    for p in ("params.", "store.index.", "store.search.", "store.options.", "dataset."):
        if k.startswith(p):
            return k[len(p) :]
    return k


# --- one aggregation ---------------------------------------------------------------

AGGREGATIONS = ("best", "median")
DEFAULT_AGGREGATION = "best"


def headline_value(rec: Record) -> float | None:
    t = rec.headline_task()
    return t.ops_per_s if t is not None else None


@dataclass(frozen=True)
class Pick:
    """The run a configuration's row shows: every number in the row is this
    run's. ``best``: the highest ops/s of its headline task; ``median``: the
    median run by that ops/s (with an even count, the lower of the middle
    two)."""

    how: str
    run: Record
    runs: int  # runs of the configuration
    criterion: str  # what ranked them

    @property
    def run_short(self) -> str:
        return short_run(self.run.run_id)

    def describe(self) -> str:
        if self.runs == 1:
            return "1 run"
        return f"{self.how} of {self.runs} by {self.criterion}"


def clients_text(n: int) -> str:
    """A client count as a table or a sentence says it: "1 client", "4 clients"."""
    return f"{n} client{'s' if n != 1 else ''}"


def short_run(run_id: str) -> str:
    """A run id as tables show it: its random part (unique in practice)."""
    return run_id.rsplit("-", 1)[-1] if "-" in run_id else run_id


def pick(runs: Sequence[Record], how: str = DEFAULT_AGGREGATION) -> Pick:
    if how not in AGGREGATIONS:
        raise UserError(f"unknown aggregation {how!r} (known: {', '.join(AGGREGATIONS)})")
    ranked = [(v, i, r) for i, r in enumerate(runs) if (v := headline_value(r)) is not None]
    if not ranked:
        return Pick(how, runs[0], len(runs), "run order (no headline task measured)")
    head = ranked[0][2].headline_task()
    criterion = f"ops/s of {head.name if head else '?'}"
    if how == "best":
        chosen = max(ranked, key=lambda x: (x[0], -x[1]))[2]
    else:
        ordered = sorted(ranked, key=lambda x: (x[0], x[1]))
        chosen = ordered[(len(ordered) - 1) // 2][2]
    return Pick(how, chosen, len(runs), criterion)


def aggregation_note(how: str) -> str:
    """What a table's rows are, for every view and ``compare`` alike."""
    which = (
        "the best run (the highest ops/s of the configuration's headline task: the "
        "search at the most clients, find by vector, the insert)"
        if how == "best"
        else "the median run by the ops/s of the configuration's headline task (with an "
        "even number of runs, the lower of the middle two)"
    )
    return (
        f"Repeats of a configuration are one row, and every number in it is from one run: "
        f"{which}, named by its run id. ± is half the range over the runs, "
        "relative to the median."
    )


@dataclass
class Config:
    """Runs of one configuration (all repeats, from any file)."""

    id: str
    runs: list[Record]
    label: str = ""

    @property
    def first(self) -> Record:
        return self.runs[0]

    @property
    def engine(self) -> str:
        return self.first.store.engine

    def pick(self, how: str = DEFAULT_AGGREGATION) -> Pick:
        return pick(self.runs, how)

    def tasks(self) -> list[str]:
        """Task names in the order the runs did them."""
        names: list[str] = []
        for r in self.runs:
            for t in r.tasks:
                if t.name not in names:
                    names.append(t.name)
        return names

    def task(self, name: str) -> TaskSummary:
        """The task over the runs that did it."""
        return TaskSummary(name, [t for r in self.runs if (t := r.task(name)) is not None])

    def metric(self, name: str) -> Spread | None:
        vals = [v for r in self.runs if (v := records.as_number(r.metrics.get(name))) is not None]
        return Spread.of(vals) if vals else None


def cautions(c: Config) -> list[str]:
    """Why a configuration's numbers are less sure than their intervals say:
    runs on a busy machine (``noise.busy``: other processes' CPU), or repeats
    whose headline ops/s spread beyond ``noise.SPREAD_LIMIT``. Report and
    compare both show these beside the numbers."""
    out = []
    busy = [r for r in c.runs if (r.machine_load or {}).get("busy")]
    if busy:
        cores = [
            float(v)
            for r in busy
            if isinstance(v := (r.machine_load or {}).get("other_cpu_cores"), int | float)
        ]
        worst = f" (other processes up to {max(cores):.1f} cores)" if cores else ""
        out.append(f"{len(busy)} of {len(c.runs)} run(s) on a busy machine{worst}")
    values = [v for r in c.runs if (v := headline_value(r)) is not None]
    if len(values) > 1:
        half = Spread.of(values).rel_range / 2
        if half > noise.SPREAD_LIMIT:
            out.append(f"repeats spread ±{half:.0%} in ops/s (over ±{noise.SPREAD_LIMIT:.0%})")
    return out


def naming_keys(recs: Sequence[Record], drop: Iterable[str] = ()) -> list[str]:
    """The identity keys that tell ``recs``' configurations apart (but those
    in ``drop``): a key only some stores have (memory has no ef_construct)
    names a configuration where its value differs among those that have it."""
    drop = tuple(drop)
    idents = [r.identity() for r in recs]
    return [
        k
        for k in varying_keys(recs)
        if k not in drop
        and len({json.dumps(i[k], default=str) for i in idents if i.get(k) is not None}) > 1
    ]


def group(recs: Sequence[Record], drop: Iterable[str] = ()) -> list[Config]:
    """Configurations in first-seen order, labelled by store and by the
    parameters that vary among ``recs`` (per-setting records: see
    ``expand_sweeps``)."""
    drop = tuple(drop)
    by: dict[str, Config] = {}
    for r in recs:
        cid = records.config_id(r, drop)
        by.setdefault(cid, Config(cid, [])).runs.append(r)
    configs = list(by.values())
    vary = [k for k in naming_keys(recs, drop) if k != "store.engine"]
    for c in configs:
        ident = c.first.identity()
        parts = [store_label(c.first)]
        parts += [f"{short_key(k)}={ident.get(k)}" for k in vary if k in ident and k != "store.url"]
        c.label = " ".join(dict.fromkeys(parts))  # params.n and dataset.n: one n=2500
    return configs


def configurations(recs: Sequence[Record], drop: Iterable[str] = ()) -> list[Config]:
    """The configurations of the ok runs, a sweep split per setting."""
    return group(expand_sweeps(ok_runs(recs)), drop)


def ok_runs(recs: Iterable[Record]) -> list[Record]:
    return [r for r in records.parse_all(recs) if r.ok]


# --- numbers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """min / median / max of a value over repeated runs."""

    values: tuple[float, ...]

    @staticmethod
    def of(values: Iterable[float]) -> Spread:
        return Spread(tuple(float(v) for v in values))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return float(statistics.median(self.values))

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def rel_range(self) -> float:
        """(max - min) / median: the spread relative to the value."""
        m = self.median
        return (self.max - self.min) / abs(m) if m else 0.0


def _median_values(h: Histogram) -> tuple[np.ndarray, np.ndarray]:
    """(counts, median equivalent value) of the non-empty buckets."""
    counts = np.ctypeslib.as_array(h.hdr.counts)[: h.hdr.counts_len]
    nz = np.flatnonzero(counts)
    hdr = h.hdr
    vals = np.array(
        [hdr._hdr_median_equiv_value(hdr.get_value_from_index(int(i))) for i in nz], np.float64
    )
    return counts[nz].astype(np.float64), vals


def fastest_ns(h: Histogram) -> float:
    """A lower bound of the fastest latency: its bucket's lowest value."""
    counts = np.ctypeslib.as_array(h.hdr.counts)[: h.hdr.counts_len]
    nz = np.flatnonzero(counts)
    if not nz.size:
        return 0.0
    return float(h.hdr.get_lowest_equivalent_value(h.hdr.get_value_from_index(int(nz[0]))))


@lru_cache(maxsize=1024)
def histogram(text: str) -> Histogram:
    """The task's HDR histogram, decoded once per distinct text.

    Same result as ``Histogram.decode`` (tested so), but the mean is computed
    over the non-empty buckets in numpy: HdrHistogram's own ``get_mean_value``
    walks every bucket in Python (~50 ms a histogram; a grid has hundreds)."""
    h = Histogram()
    h.hdr.decode_and_add(text)
    h._counts = np.ctypeslib.as_array(h.hdr.counts)
    if h.count:
        c, v = _median_values(h)
        h.sum_ns = int(round(float((c * v).sum()) / h.count * h.count))
    return h


def stddev(h: Histogram) -> float:
    """Standard deviation as HdrHistogram computes it (bucket median values)."""
    if not h.count:
        return 0.0
    c, v = _median_values(h)
    mean = float((c * v).sum()) / h.count
    return math.sqrt(float((c * (v - mean) ** 2).sum()) / h.count)


def percentiles(h: Histogram, ps: Iterable[float]) -> list[int]:
    """``h.percentile(p)`` for many p at once, in numpy (HdrHistogram's own
    lookup walks every bucket in Python for each call). Same values, tested so."""
    hdr = h.hdr
    total = h.count
    ps = list(ps)
    if not total:
        return [0] * len(ps)
    cum = np.cumsum(np.ctypeslib.as_array(hdr.counts)[: hdr.counts_len])
    out = []
    for p in ps:
        target = max(int(min(p, 100.0) * total / 100 + 0.5), 1)
        idx = int(np.searchsorted(cum, target, side="left"))
        if idx >= hdr.counts_len:
            out.append(0)
            continue
        v = hdr.get_value_from_index(idx)
        out.append(
            int(hdr.get_highest_equivalent_value(v) if p else hdr.get_lowest_equivalent_value(v))
        )
    return out


Z95 = 1.96


def percentile_interval(h: Histogram, p: float, z: float = Z95) -> tuple[float, float]:
    """A distribution-free ~95% interval for the p-th percentile of the
    population the histogram sampled: the values at ranks n*q +- z*sqrt(n*q*(1-q))
    (order statistics), widened by the histogram's own resolution."""
    n = h.count
    if not n:
        return (math.nan, math.nan)
    q = p / 100.0
    half = z * math.sqrt(q * (1.0 - q) / n)
    lo, hi = percentiles(h, [max(0.0, (q - half) * 100.0), min(100.0, (q + half) * 100.0)])
    res = 10.0**-(3)  # 3 significant figures
    return (lo * (1 - res), hi * (1 + res))


def mean_rel_uncertainty(h: Histogram, z: float = Z95) -> float:
    """Relative ~95% half-width of the mean latency: z * sd / (mean * sqrt(n))."""
    n = h.count
    if n < 2:
        return math.inf
    mean = h.sum_ns / n
    if not mean:
        return 0.0
    return z * stddev(h) / (mean * math.sqrt(n))


@dataclass
class TaskSummary:
    """One task over the runs of a configuration (its spread; a row's
    numbers come from the chosen run's own ``TaskRecord``)."""

    name: str
    tasks: list[TaskRecord] = field(default_factory=list)

    @property
    def unsupported(self) -> str | None:
        for t in self.tasks:
            if t.unsupported is not None:
                return t.unsupported
        return None

    @property
    def measured(self) -> list[TaskRecord]:
        return [t for t in self.tasks if t.measured]

    def spread(self, field_: str) -> Spread | None:
        """A numeric field (ops_per_s, items_per_s, elapsed_s, recall@10...)."""
        vals = [v for t in self.measured if (v := t.number(field_)) is not None]
        return Spread.of(vals) if vals else None

    def latency(self, key: str) -> Spread | None:
        return self.spread(f"latency_ns.{key}")

    def score_keys(self, score: Score | None = None) -> list[str]:
        """The score keys its runs hold (of ``score`` only, if given)."""
        return catalogue.ordered((k for t in self.measured for k in t.scores), score)
