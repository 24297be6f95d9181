"""What every report view reads: records loaded from result files, grouped
into *configurations* (runs whose parameters are the same, whatever their
repeat), labelled by what varies, with spreads and HDR-derived uncertainty.

Nothing here needs matplotlib or pandas: ``storebench compare`` and the CSV
export run on the core install.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from storebench import results
from storebench.errors import UserError
from storebench.metrics import Histogram
from storebench.redaction import MASK, is_secret_key, redact

Record = dict[str, Any]

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
    """Records of result files (or directories of ``*.jsonl``), in file order."""
    if isinstance(paths, str | Path):
        paths = [paths]
    recs = [r for p in paths for r in results.read(Path(p))]
    for r in recs:
        store = r.get("store") or {}
        if isinstance(store, dict):
            r["store"] = safe_mapping(store)
    return expand_sweeps(recs)


def expand_sweeps(recs: Iterable[Record]) -> list[Record]:
    """A run that swept search parameters (one index build, several ``ef``)
    becomes one record per setting: its store's search parameters include the
    setting and its tasks are the shared ones plus that setting's. Every view
    then sees one configuration per (build, search setting)."""
    out: list[Record] = []
    for r in recs:
        tasks = r.get("tasks") or []
        settings: list[dict[str, Any]] = []
        for t in tasks:
            s = t.get("search")
            if isinstance(s, dict) and s and s not in settings:
                settings.append(s)
        if len(settings) < 2:
            out.append(r)
            continue
        for s in settings:
            c = dict(r)
            store = dict(r.get("store") or {})
            store["search"] = {**(store.get("search") or {}), **s}
            c["store"] = store
            c["tasks"] = [t for t in tasks if not t.get("search") or t.get("search") == s]
            c["search_sweep"] = {}
            out.append(c)
    return out


def load_nonempty(paths: Iterable[str | Path]) -> list[Record]:
    recs = load(list(paths))
    if not recs:
        raise UserError("no result records in " + ", ".join(str(p) for p in paths))
    return recs


# --- identity and grouping -------------------------------------------------------


def private_location(url: Any) -> bool:
    """A path an embedded store made for itself (``storebench-*`` temporary
    directory) rather than one the user gave: it differs run by run, so it
    is not part of what makes a configuration."""
    if not isinstance(url, str) or "://" in url:
        return False
    # the directory itself (Store.private_dir) or a file in it
    return any(part.startswith("storebench-") for part in Path(url).parts)


def identity(rec: Record) -> dict[str, Any]:
    """The parameters that make a run what it is, flattened to dotted keys:
    the record's ``key`` without ``repeat``. (Records keep the store's
    resolved location, so a private temporary path is left out.)"""
    store = rec.get("store") or {}
    url = store.get("url")
    out: dict[str, Any] = {
        "scenario": rec.get("scenario"),
        "workload": rec.get("workload"),
        "mode": rec.get("mode"),
        "store.engine": store.get("engine"),
        "store.url": None if private_location(url) else url,
    }
    for part in ("options", "index", "search"):
        for k, v in sorted((store.get(part) or {}).items()):
            out[f"store.{part}.{k}"] = v
    for k, v in sorted((rec.get("params") or {}).items()):
        out[f"params.{k}"] = v
    return out


def _digest(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def config_id(rec: Record, drop: Iterable[str] = ()) -> str:
    ident = identity(rec)
    for k in drop:
        ident.pop(k, None)
    return _digest(ident)


def store_label(rec: Record) -> str:
    store = rec.get("store") or {}
    label = str(store.get("engine", "?"))
    url = store.get("url")
    if url and "://" in str(url):
        label += " " + safe_text(url)
    return label


def varying_keys(recs: Sequence[Record], prefixes: tuple[str, ...] = ()) -> list[str]:
    """Identity keys whose values differ among ``recs`` (in first-seen order)."""
    seen: dict[str, set[str]] = {}
    idents = [identity(r) for r in recs]
    keys: list[str] = []
    for ident in idents:
        for k in ident:
            if k not in seen:
                seen[k] = set()
                keys.append(k)
    for ident in idents:
        for k in keys:
            seen[k].add(json.dumps(ident.get(k), sort_keys=True, default=str))
    return [k for k in keys if len(seen[k]) > 1 and (not prefixes or k.startswith(prefixes))]


def short_key(k: str) -> str:
    if k == "store.engine":
        return "store"
    for p in ("params.", "store.index.", "store.search.", "store.options."):
        if k.startswith(p):
            return k[len(p) :]
    return k


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
        return str((self.first.get("store") or {}).get("engine", "?"))

    def param(self, dotted: str) -> Any:
        return identity(self.first).get(dotted)

    def tasks(self) -> list[str]:
        """Task names in the order the runs did them."""
        names: list[str] = []
        for r in self.runs:
            for t in r.get("tasks") or []:
                if t.get("name") not in names:
                    names.append(t["name"])
        return names

    def task_records(self, name: str) -> list[dict[str, Any]]:
        out = []
        for r in self.runs:
            for t in r.get("tasks") or []:
                if t.get("name") == name:
                    out.append(t)
                    break
        return out

    def task(self, name: str) -> TaskSummary:
        return TaskSummary.of(name, self.task_records(name))

    def metric(self, name: str) -> Spread | None:
        vals = [
            float(r["metrics"][name])
            for r in self.runs
            if isinstance((r.get("metrics") or {}).get(name), int | float)
        ]
        return Spread.of(vals) if vals else None


def group(recs: Sequence[Record], drop: Iterable[str] = ()) -> list[Config]:
    """Configurations in first-seen order, labelled by store and by the
    parameters that vary among ``recs``."""
    drop = tuple(drop)
    by: dict[str, Config] = {}
    for r in recs:
        cid = config_id(r, drop)
        by.setdefault(cid, Config(cid, [])).runs.append(r)
    configs = list(by.values())
    vary = [k for k in varying_keys(recs) if k not in drop and k != "store.engine"]
    for c in configs:
        ident = identity(c.first)
        parts = [store_label(c.first)]
        parts += [f"{short_key(k)}={ident.get(k)}" for k in vary if k in ident and k != "store.url"]
        c.label = " ".join(parts)
    return configs


def ok_runs(recs: Iterable[Record]) -> list[Record]:
    return [r for r in recs if r.get("status") == "ok"]


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


def merged_histogram(texts: Iterable[str | None]) -> Histogram | None:
    """Histograms of several runs merged exactly (bucket counts added)."""
    out: Histogram | None = None
    for t in texts:
        if not t:
            continue
        h = histogram(t)
        if out is None:
            out = Histogram()
        out.merge(h)
    return out


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


def percentile(h: Histogram, p: float) -> int:
    return percentiles(h, [p])[0]


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


LATENCY_KEYS = ("min", "mean", "p50", "p90", "p95", "p99", "p99.9", "max")


@dataclass
class TaskSummary:
    """One task over the runs of a configuration."""

    name: str
    tasks: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def of(name: str, tasks: list[dict[str, Any]]) -> TaskSummary:
        return TaskSummary(name, tasks)

    @property
    def unsupported(self) -> str | None:
        for t in self.tasks:
            if "unsupported" in t:
                return str(t["unsupported"])
        return None

    @property
    def measured(self) -> list[dict[str, Any]]:
        return [t for t in self.tasks if "unsupported" not in t]

    def spread(self, field_: str) -> Spread | None:
        """A top-level numeric field (ops_per_s, items_per_s, elapsed_s, recall@10...)."""
        vals = [t[field_] for t in self.measured if isinstance(t.get(field_), int | float)]
        return Spread.of(vals) if vals else None

    def latency(self, key: str) -> Spread | None:
        vals: list[float] = [
            float((t.get("latency_ns") or {})[key])
            for t in self.measured
            if isinstance((t.get("latency_ns") or {}).get(key), int | float)
        ]
        return Spread.of(vals) if vals else None

    def histogram(self) -> Histogram | None:
        return merged_histogram(t.get("histogram") for t in self.measured)

    def value(self, field_: str) -> float | None:
        s = self.latency(field_[4:]) if field_.startswith("lat_") else self.spread(field_)
        return s.median if s else None

    @property
    def recall_keys(self) -> list[str]:
        keys: list[str] = []
        for t in self.measured:
            keys += [k for k in t if k.startswith("recall@") and k not in keys]
        return keys

    @property
    def complete(self) -> bool:
        return all(t.get("complete", True) for t in self.measured)

    @property
    def errors(self) -> int:
        return sum(sum((t.get("errors") or {}).values()) for t in self.measured)
