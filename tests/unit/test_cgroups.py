"""A managed server's CPU quota and memory limit (``servers.cgroups``): a
real process held to a quarter of a core uses about a quarter of a core,
the CPU it used is read from its group, and nothing of the group is left
after stop. Where control groups cannot be written, the server runs
unlimited and its settings say so."""

from __future__ import annotations

import os
import sys
import time

from storebench.servers.base import Server
from storebench.servers.cgroups import NodeGroup, NoQuota


class Spinner(Server):
    """A process that burns CPU until stopped."""

    name = "spinner"

    def command(self) -> list[str]:
        return [sys.executable, "-c", "while True: pass"]

    def ready(self) -> bool:
        return self.alive()


def _writable() -> bool:
    try:
        NodeGroup(f"storebench-probe-{os.getpid()}", 0.5, None).remove()
        return True
    except NoQuota:
        return False


def test_a_quarter_core_quota_holds_and_its_cpu_is_read_from_the_group() -> None:
    server = Spinner().limit(0.25, 256 << 20)
    server.start()
    try:
        if not _writable():
            assert server.group is None
            assert server.engine_settings["limits"].startswith("not applied: ")
            return
        assert server.group is not None
        dirs = list(server.group.dirs)
        assert server.engine_settings["cpu_quota_cores"] == "0.25"
        c0, t0 = server.node_cpu()["spinner"], time.monotonic()
        time.sleep(2.0)
        used = (server.node_cpu()["spinner"] - c0) / (time.monotonic() - t0)
        # unlimited it would take a whole core; held, a quarter (CFS periods of 100 ms)
        assert 0.1 < used < 0.4, used
    finally:
        server.stop()
    assert not [d for d in dirs if d.exists()], "a control group outlived stop()"


def test_without_a_quota_the_group_is_not_made() -> None:
    with Spinner() as server:
        assert server.group is None and "limits" not in server.engine_settings
        assert server.node_cpu()["spinner"] >= 0


def test_each_node_cpu_over_a_task_window_is_read_off_the_phase_samples() -> None:
    """A node busy only in the middle of a phase: its CPU over that window
    is the whole of it, and about nothing before."""
    from storebench.measure.resources import ResourceSampler

    server = Spinner().limit(0.25, None)
    server.start()
    try:
        sampler = ResourceSampler(server.processes, server.dirs, server.node_cpu, 0.05)
        t0 = time.time()
        time.sleep(1.0)
        sampler.stop()
        t1 = time.time()
        whole = sampler.node_cpu_during(t0, t1 - t0)["spinner"]
        half = sampler.node_cpu_during(t0 + 0.5, 0.5)["spinner"]
    finally:
        server.stop()
    assert whole > 0 and abs(half - whole / 2) < 0.25 * whole, (whole, half)
