"""Fixtures the driver's unit tests share."""

import pytest

from storebench.driver import loops


class VirtualClock:
    """The driver's clock, advanced only by the fake store's operations: a
    known latency is then exactly that, however busy the machine is (a
    preempted busy-wait would read longer), and a planted stall is exactly
    where it was planted. What this checks is the measurement code (timing
    around the call, histogram, percentiles, counted throughput, series),
    not the OS scheduler."""

    def __init__(self):
        self.now = 10**12

    def __call__(self):
        return self.now

    def spend(self, ns):
        self.now += ns


@pytest.fixture
def virtual_clock(monkeypatch):
    """The loops' clock made virtual from here on in the test (the
    compiled closed loop reads the real one, so the Python loop runs)."""
    vc = VirtualClock()
    monkeypatch.setattr(loops, "clock", vc)
    monkeypatch.setattr(loops, "compiled", None)
    return vc
