"""Measurements: HDR latency histograms and per-task statistics.

Latencies are recorded by the driver into flat int64 arrays and added to an
HDR histogram in one vectorised step (same buckets as ``record_value``, tested
so). Histograms from many clients merge exactly by adding bucket counts, so a
merged p99 is the p99 of the union of all samples, never a max of p99s.

A ``Series`` is the same per interval of the task (by when each operation
ended): sparse bucket counts per interval, so a long task costs memory by the
buckets it used, not intervals x the histogram's 33k buckets; clients'
series merge exactly interval by interval. Beside the latencies each interval
counts its failed operations, and an open loop keeps a second series of its
service times (``TaskStats.service_series``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_NS = 1
HIGHEST_NS = 3_600 * 10**9  # one hour; longer values are clamped (and counted)
SIGNIFICANT_FIGURES = 3  # 0.1% value resolution
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


def _layout() -> HdrHistogram:
    return HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_FIGURES)


_HDR = _layout()  # the bucket layout every histogram here shares
BUCKETS = int(_HDR.counts_len)


def bucket_index(values: np.ndarray) -> np.ndarray:
    """The HDR counts index of each value (int64 ns within the trackable range)."""
    h = _HDR
    # bit length of (v | sub_bucket_mask): exact in float64 below 2**53
    pow2ceiling = np.frexp((values | h.sub_bucket_mask).astype(np.float64))[1]
    bucket = pow2ceiling - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub_bucket = values >> (bucket + h.unit_magnitude)
    return (
        ((bucket + 1) << h.sub_bucket_half_count_magnitude) + sub_bucket - h.sub_bucket_half_count
    )


def bucket_top(index: np.ndarray) -> np.ndarray:
    """The highest value of each counts index's bucket (what HDR reports as a
    percentile: ``get_highest_equivalent_value(get_value_from_index(i))``)."""
    h = _HDR
    bucket = (index >> h.sub_bucket_half_count_magnitude) - 1
    sub = (index & (h.sub_bucket_half_count - 1)) + h.sub_bucket_half_count
    first = bucket < 0
    sub = np.where(first, sub - h.sub_bucket_half_count, sub)
    bucket = np.where(first, 0, bucket)
    low = sub << (bucket + h.unit_magnitude)
    return low + (np.int64(1) << (bucket + h.unit_magnitude)) - 1


def _clamp(v: np.ndarray) -> tuple[np.ndarray, int]:
    """Values in the trackable range, and how many were over it."""
    over = int((v > HIGHEST_NS).sum())
    if over:
        v = np.minimum(v, HIGHEST_NS)
    return np.maximum(v, LOWEST_NS), over


class Histogram:
    """An HDR histogram of nanosecond values."""

    def __init__(self) -> None:
        self.hdr = _layout()
        self._counts = np.ctypeslib.as_array(self.hdr.counts)
        self.sum_ns = 0  # exact sum, for an exact mean
        self.clamped = 0

    # --- recording -------------------------------------------------------------
    def record(self, values: np.ndarray) -> None:
        """Add many values (ns) at once."""
        v = np.asarray(values, dtype=np.int64)
        if v.size == 0:
            return
        v, over = _clamp(v)
        self.clamped += over
        counts = np.bincount(bucket_index(v), minlength=len(self._counts))
        self._counts += counts.astype(self._counts.dtype)
        h = self.hdr
        h.total_count += int(v.size)
        h.min_value = min(h.min_value, int(v.min()))
        h.max_value = max(h.max_value, int(v.max()))
        self.sum_ns += int(v.sum())

    def merge(self, other: Histogram) -> None:
        self._counts += other._counts
        h, o = self.hdr, other.hdr
        if o.total_count:
            h.min_value = min(h.min_value, o.min_value)
            h.max_value = max(h.max_value, o.max_value)
        h.total_count += o.total_count
        self.sum_ns += other.sum_ns
        self.clamped += other.clamped

    # --- reading ---------------------------------------------------------------
    @property
    def count(self) -> int:
        return int(self.hdr.total_count)

    def percentile(self, p: float) -> int:
        return int(self.hdr.get_value_at_percentile(p)) if self.count else 0

    def summary(self) -> dict[str, float]:
        """min, mean, percentiles and max in nanoseconds."""
        if not self.count:
            return {}
        out: dict[str, float] = {"min": int(self.hdr.min_value), "mean": self.sum_ns / self.count}
        lo, hi = int(self.hdr.min_value), int(self.hdr.max_value)
        for p in PERCENTILES:
            # HDR reports a bucket's upper edge; keep it inside the observed range
            out[f"p{p:g}"] = min(max(self.percentile(p), lo), hi)
        out["max"] = int(self.hdr.max_value)
        return out

    def encode(self) -> str:
        """The standard HdrHistogram compressed base64 form (readable by every
        HdrHistogram implementation)."""
        return self.hdr.encode().decode("ascii")

    @staticmethod
    def decode(text: str) -> Histogram:
        h = Histogram()
        h.hdr.decode_and_add(text)
        h._counts = np.ctypeslib.as_array(h.hdr.counts)
        h.sum_ns = int(round(h.hdr.get_mean_value() * h.count))
        return h

    # pickling (process clients send histograms back): counts as a numpy array
    def __getstate__(self) -> dict[str, Any]:
        h = self.hdr
        nz = np.flatnonzero(self._counts)
        return {
            "nz": nz,
            "counts": self._counts[nz].copy(),
            "total": h.total_count,
            "min": h.min_value,
            "max": h.max_value,
            "sum": self.sum_ns,
            "clamped": self.clamped,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]
        self._counts[state["nz"]] = state["counts"]
        self.hdr.total_count = state["total"]
        self.hdr.min_value = state["min"]
        self.hdr.max_value = state["max"]
        self.sum_ns = state["sum"]
        self.clamped = state["clamped"]


# a task of a second gets its ten points over time (``show --over-time``);
# a long one's record keeps at most POINTS_MAX, its intervals merged
# (``Series.coarsened``): a minute at 0.1 s, an hour at 6 s
DEFAULT_INTERVAL_S = 0.1
MIN_POINTS = 10  # fewer: the task was too short to be seen over time
POINTS_MAX = 600
# the task's last interval runs to its end: a tail shorter than this fraction
# of an interval (the overshoot of the last operations past a deadline) joins
# the interval before it instead of showing as a noisy sliver
TAIL_FRACTION = 0.1
SERIES_PERCENTILES = (50.0, 99.0)  # kept per interval in the record
# The encoded HDR histograms a task's record keeps: one per interval while
# they fit in HDR_BYTES_MAX (a 60 s task of a wide latency spread at up to
# ~50k ops/s), else each of 2, 4, 8 ... intervals, merged exactly; at most
# HDR_INTERVALS_MAX of them. So an hour at 1 s stays under ~400 KB in all.
HDR_INTERVALS_MAX = 120
HDR_BYTES_MAX = 256 * 1024


class Series:
    """Per-interval HDR histograms of one task. Interval k holds the
    operations that ended in [k, k+1) x ``interval_ns`` after the start; the
    bucket counts are sparse (``keys`` = interval x BUCKETS + bucket index,
    sorted, with their ``counts``), beside each interval's exact min, max and
    sum, so merging clients' series is exact and so is the whole task's
    histogram rebuilt from them. ``errors`` counts the operations that failed
    in each interval (they have no latency)."""

    def __init__(self, interval_ns: int) -> None:
        self.interval_ns = int(interval_ns)
        self.keys = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)
        self.mins = np.zeros(0, np.int64)  # int64 max where an interval is empty
        self.maxs = np.zeros(0, np.int64)
        self.sums = np.zeros(0, np.int64)
        self.errors = np.zeros(0, np.int64)  # failed operations per interval
        self.clamped = 0

    @classmethod
    def of(
        cls,
        values: np.ndarray,
        ends: np.ndarray,
        start_ns: int,
        interval_ns: int,
        failed: np.ndarray | None = None,
    ) -> Series:
        """The series of operations with latency ``values`` that ended at
        ``ends`` (same clock as ``start_ns``); ``failed``: when the failed
        operations ended."""
        s = cls(interval_ns)
        if failed is not None and len(failed):
            kf = np.maximum((np.asarray(failed, np.int64) - start_ns) // s.interval_ns, 0)
            s._size(int(kf.max()) + 1)
            np.add.at(s.errors, kf, 1)
        v = np.asarray(values, np.int64)
        if not v.size:
            return s
        v, s.clamped = _clamp(v)
        k = np.maximum((np.asarray(ends, np.int64) - start_ns) // s.interval_ns, 0)
        if (k[1:] < k[:-1]).any():
            order = np.argsort(k, kind="stable")
            k, v = k[order], v[order]
        first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        idx = bucket_index(v)
        keys, counts = [], []
        for a, b in zip(first, np.r_[first[1:], len(v)], strict=True):
            c = np.bincount(idx[a:b])  # one interval: linear, no sort
            nz = np.flatnonzero(c)
            keys.append(k[a] * BUCKETS + nz)
            counts.append(c[nz])
        s.keys, s.counts = np.concatenate(keys), np.concatenate(counts).astype(np.int64)
        s._size(int(k[-1]) + 1)
        ks = k[first]
        s.mins[ks] = np.minimum.reduceat(v, first)
        s.maxs[ks] = np.maximum.reduceat(v, first)
        s.sums[ks] = np.add.reduceat(v, first)
        return s

    def _size(self, n: int) -> None:
        """Grow the per-interval arrays to n intervals."""
        m = len(self.mins)
        if n > m:
            pad = n - m
            self.mins = np.r_[self.mins, np.full(pad, np.iinfo(np.int64).max, np.int64)]
            self.maxs = np.r_[self.maxs, np.zeros(pad, np.int64)]
            self.sums = np.r_[self.sums, np.zeros(pad, np.int64)]
            self.errors = np.r_[self.errors, np.zeros(pad, np.int64)]

    def _set_counts(self, keys: np.ndarray, counts: np.ndarray) -> None:
        """Sparse counts summed per key (keys may repeat)."""
        self.keys, inv = np.unique(keys, return_inverse=True)
        self.counts = np.zeros(len(self.keys), np.int64)
        np.add.at(self.counts, inv, counts)

    def merge(self, *others: Series) -> None:
        """Add other series (of the same interval) in; many at once cost one
        pass over their counts, not one per series."""
        if any(o.interval_ns != self.interval_ns for o in others):
            raise ValueError("series of different intervals do not merge")
        self._set_counts(
            np.concatenate([self.keys, *(o.keys for o in others)]),
            np.concatenate([self.counts, *(o.counts for o in others)]),
        )
        for other in others:
            n = len(other.mins)
            self._size(n)
            self.mins[:n] = np.minimum(self.mins[:n], other.mins)
            self.maxs[:n] = np.maximum(self.maxs[:n], other.maxs)
            self.sums[:n] += other.sums
            self.errors[:n] += other.errors
            self.clamped += other.clamped

    def fit(self, elapsed_ns: int) -> None:
        """Span exactly the intervals of a task of ``elapsed_ns``: its last
        interval runs to the end (a short tail, see ``TAIL_FRACTION``, joins
        the one before)."""
        full, tail = divmod(int(elapsed_ns), self.interval_ns)
        n = max(1, full + (tail >= TAIL_FRACTION * self.interval_ns))
        self._size(n)
        if len(self.mins) > n:
            k = self.keys // BUCKETS
            self._set_counts(np.minimum(k, n - 1) * BUCKETS + self.keys % BUCKETS, self.counts)
            self.mins[n - 1] = self.mins[n - 1 :].min()
            self.maxs[n - 1] = self.maxs[n - 1 :].max()
            self.sums[n - 1] = self.sums[n - 1 :].sum()
            self.errors[n - 1] = self.errors[n - 1 :].sum()
            self.mins, self.maxs, self.sums = self.mins[:n], self.maxs[:n], self.sums[:n]
            self.errors = self.errors[:n]

    def coarsened(self, factor: int) -> Series:
        """The same operations in intervals ``factor`` times as long, merged
        exactly (the last may hold fewer of the old ones)."""
        out = Series(self.interval_ns * factor)
        k = self.keys // BUCKETS
        out._set_counts(k // factor * BUCKETS + self.keys % BUCKETS, self.counts)
        if len(self):
            first = np.arange(0, len(self), factor)
            out.mins = np.minimum.reduceat(self.mins, first)
            out.maxs = np.maximum.reduceat(self.maxs, first)
            out.sums = np.add.reduceat(self.sums, first)
            out.errors = np.add.reduceat(self.errors, first)
        out.clamped = self.clamped
        return out

    # --- reading ---------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.mins)

    def ops(self) -> np.ndarray:
        """Operations per interval."""
        out = np.zeros(len(self), np.int64)
        np.add.at(out, self.keys // BUCKETS, self.counts)
        return out

    def percentiles(self, ps: tuple[float, ...]) -> dict[float, np.ndarray]:
        """Each interval's percentiles as ``Histogram.summary`` gives them
        (HDR's value at the percentile, kept inside the interval's observed
        range); 0 for an empty interval."""
        n = len(self)
        k = self.keys // BUCKETS
        tot = self.ops()
        cum = np.cumsum(self.counts)
        first = np.searchsorted(k, np.arange(n), "left")
        before = np.where(first > 0, cum[np.maximum(first - 1, 0)], 0)
        empty = tot == 0
        out = {}
        for p in ps:
            # HDR's get_target_count_at_percentile, vectorised
            target = np.maximum((min(p, 100.0) * tot / 100 + 0.5).astype(np.int64), 1)
            pos = np.minimum(np.searchsorted(cum, before + target, "left"), len(cum) - 1)
            top = bucket_top(self.keys[pos] % BUCKETS) if len(cum) else np.zeros(n, np.int64)
            v = np.minimum(np.maximum(top, self.mins), self.maxs)
            out[p] = np.where(empty, 0, v)
        return out

    def latency_record(self) -> dict[str, list[int]]:
        """Each interval's p50, p99 and max (ns): the record's compact form."""
        pct = self.percentiles(SERIES_PERCENTILES)
        return {
            **{f"p{p:g}": pct[p].tolist() for p in SERIES_PERCENTILES},
            "max": self.maxs.tolist(),
        }

    def to_record(
        self, elapsed_ns: int, service: Series | None = None, items_per_op: float = 1.0
    ) -> dict[str, Any]:
        """The record's form: per interval its ops, ops/s and latency
        percentiles, and the standard encoded HDR histogram of each interval
        (of ``hdr_interval_s``: several intervals each past
        ``HDR_INTERVALS_MAX``). The last interval runs to the task's end.
        Only where they say something: ``errors`` per interval (any failed),
        ``items_per_s`` (ops carrying other than one item), ``service_ns``
        (an open loop's service times, percentiles as ``latency_ns``); past
        ``POINTS_MAX`` intervals, merged ones (``coarsened``)."""
        if len(self) > POINTS_MAX:
            factor = -(-len(self) // POINTS_MAX)
            coarse = self.coarsened(factor)
            if service is not None:
                service._size(len(self))
                service = service.coarsened(factor)
            return coarse.to_record(elapsed_ns, service, items_per_op)
        n = len(self)
        step_s = self.interval_ns / 1e9
        ops = self.ops()
        lengths = np.full(n, step_s)
        lengths[-1] = max(elapsed_ns / 1e9 - (n - 1) * step_s, 1e-9)
        group = -(-n // HDR_INTERVALS_MAX)
        while True:
            hdr = []
            for i in range(0, n, group):
                h = self.histogram(i, min(i + group, n))
                hdr.append(h.encode() if h.count else None)
            if group >= n or sum(len(x or "") for x in hdr) <= HDR_BYTES_MAX:
                break
            group *= 2
        out: dict[str, Any] = {
            "interval_s": step_s,
            "ops": ops.tolist(),
            "ops_per_s": [round(float(x), 1) for x in ops / lengths],
            "latency_ns": self.latency_record(),
        }
        if items_per_op != 1:
            out["items_per_s"] = [round(float(x), 1) for x in ops * items_per_op / lengths]
        if service is not None:
            service._size(n)
            out["service_ns"] = service.latency_record()
        if self.errors.any():
            out["errors"] = self.errors.tolist()
        return out | {"hdr_interval_s": step_s * group, "hdr": hdr}

    def histogram(self, first: int = 0, end: int | None = None) -> Histogram:
        """The exact histogram of intervals [first, end) (all by default:
        the whole task's, as ``Histogram.record`` of every value makes it)."""
        end = len(self) if end is None else end
        h = Histogram()
        if first == 0 and end >= len(self):
            h.clamped = self.clamped
        lo, hi = np.searchsorted(self.keys, [first * BUCKETS, end * BUCKETS])
        np.add.at(h._counts, self.keys[lo:hi] % BUCKETS, self.counts[lo:hi].astype(np.uint64))
        total = int(self.counts[lo:hi].sum())
        if total:
            h.hdr.total_count = total
            h.hdr.min_value = int(self.mins[first:end].min())
            h.hdr.max_value = int(self.maxs[first:end].max())
            h.sum_ns = int(self.sums[first:end].sum())
        return h


@dataclass
class TaskStats:
    """What one timed task measured, merged over its clients."""

    name: str
    clients: int = 1
    ops: int = 0  # completed operations
    items: int = 0  # documents or queries they carried (ops x batch)
    elapsed_ns: int = 0  # wall time of the measured phase, first start to last end
    latency: Histogram = field(default_factory=Histogram)
    service: Histogram | None = None  # open loop: time from actual start (no queueing)
    errors: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # ops that found nothing to do
    complete: bool = True  # False when interrupted or failed part-way
    cpu_s: float = 0.0  # client CPU (user + system) spent in the measured phase
    extra: dict[str, Any] = field(default_factory=dict)  # workload metrics (recall, ...)
    # the last client's end on the driver's clock (None: clients' clocks are
    # other machines'); for a phase timed from it (Driver.once since_ns)
    end_ns: int | None = None
    series: Series | None = None  # per interval (a timed task of the driver's loops)
    service_series: Series | None = None  # open loop: service times per interval
    start_unix: float | None = None  # the measured start, seconds since the epoch

    @property
    def ops_per_s(self) -> float:
        return self.ops / (self.elapsed_ns / 1e9) if self.elapsed_ns else 0.0

    @property
    def items_per_s(self) -> float:
        return self.items / (self.elapsed_ns / 1e9) if self.elapsed_ns else 0.0
