"""The recall-target tuner: the smallest value of one search parameter that
reaches a recall, by doubling then bisection, with a check that recall did
not fall as the value grew.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Tuning:
    """The smallest value reaching the target, and every probe made."""

    param: str
    target: float
    value: int | None  # None: not reached up to the maximum
    recall: float | None  # recall at ``value`` (or at the best probe)
    probes: list[tuple[int, float]] = field(default_factory=list)  # sorted by value
    monotone: bool = True
    violations: list[tuple[int, int]] = field(default_factory=list)  # (lower, higher) pairs
    reached: bool = True

    @property
    def best(self) -> int:
        """``value``, else the probe with the highest recall."""
        if self.value is not None:
            return self.value
        return max(self.probes, key=lambda pr: (pr[1], -pr[0]))[0]

    def record(self) -> dict[str, Any]:
        return {
            "param": self.param,
            "target": self.target,
            "value": self.value,
            "recall": self.recall,
            "reached": self.reached,
            "monotone": self.monotone,
            "violations": [list(v) for v in self.violations],
            "probes": [[v, r] for v, r in self.probes],
        }


def tune(
    recall_of: Callable[[int], float],
    target: float,
    start: int,
    maximum: int,
    param: str = "ef",
    tolerance: float = 0.002,
) -> Tuning:
    """Smallest integer ``v`` in [start, maximum] with ``recall_of(v) >= target``.

    Doubles from ``start`` until the target is reached (or ``maximum`` is
    probed), then bisects between the last value below the target and the
    first one above it. Bisection assumes recall does not fall as ``v``
    grows; every probe is kept and the assumption is checked afterwards: a
    probe whose recall is lower than a smaller value's by more than
    ``tolerance`` is a violation and marks the result not monotone."""
    if start < 1 or maximum < start:
        raise ValueError(f"tuning range [{start}, {maximum}] is empty")
    probes: dict[int, float] = {}
    target_ = target - 1e-9  # a mean of per-query recalls carries rounding

    def at(v: int) -> float:
        if v not in probes:
            probes[v] = float(recall_of(v))
        return probes[v]

    lo: int | None = None
    hi: int | None = None
    v = start
    while True:
        if at(v) >= target_:
            hi = v
            break
        lo = v
        if v >= maximum:
            break
        v = min(v * 2, maximum)
    if hi is not None and lo is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if at(mid) >= target_:
                hi = mid
            else:
                lo = mid
    pts = sorted(probes.items())
    violations = []
    best_below = -math.inf
    best_at = 0
    for v_, r in pts:
        if r < best_below - tolerance:
            violations.append((best_at, v_))
        if r > best_below:
            best_below, best_at = r, v_
    t = Tuning(param, target, hi, None, pts, not violations, violations, hi is not None)
    t.recall = probes[t.best]
    return t
