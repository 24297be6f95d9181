"""Measurements: HDR latency histograms and per-task statistics.

Latencies are recorded by the driver into flat int64 arrays and added to an
HDR histogram in one vectorised step (same buckets as ``record_value``, tested
so). Histograms from many clients merge exactly by adding bucket counts, so a
merged p99 is the p99 of the union of all samples, never a max of p99s.
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


class Histogram:
    """An HDR histogram of nanosecond values."""

    def __init__(self) -> None:
        self.hdr = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_FIGURES)
        self._counts = np.ctypeslib.as_array(self.hdr.counts)
        self.sum_ns = 0  # exact sum, for an exact mean
        self.clamped = 0

    # --- recording -------------------------------------------------------------
    def _index(self, values: np.ndarray) -> np.ndarray:
        h = self.hdr
        # bit length of (v | sub_bucket_mask): exact in float64 below 2**53
        pow2ceiling = np.frexp((values | h.sub_bucket_mask).astype(np.float64))[1]
        bucket = pow2ceiling - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
        sub_bucket = values >> (bucket + h.unit_magnitude)
        return (
            ((bucket + 1) << h.sub_bucket_half_count_magnitude)
            + sub_bucket
            - h.sub_bucket_half_count
        )

    def record(self, values: np.ndarray) -> None:
        """Add many values (ns) at once."""
        v = np.asarray(values, dtype=np.int64)
        if v.size == 0:
            return
        over = v > HIGHEST_NS
        if over.any():
            self.clamped += int(over.sum())
            v = np.minimum(v, HIGHEST_NS)
        v = np.maximum(v, LOWEST_NS)
        self._counts += np.bincount(self._index(v), minlength=len(self._counts)).astype(
            self._counts.dtype
        )
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

    @property
    def ops_per_s(self) -> float:
        return self.ops / (self.elapsed_ns / 1e9) if self.elapsed_ns else 0.0

    @property
    def items_per_s(self) -> float:
        return self.items / (self.elapsed_ns / 1e9) if self.elapsed_ns else 0.0
