"""What a managed server uses while a phase runs: its processes' peak RSS
and CPU time (a cluster's also per node), and its data directories' size, sampled in a thread beside
the driver's measurements (outside the timed loops) and added to each
task's record by ``RunContext``."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil


def directory_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


class ResourceSampler:
    """Samples server RSS, CPU time and data-directory size in a thread while a
    phase runs; ``stop`` returns peak/last figures for the record."""

    def __init__(
        self,
        procs: Callable[[], list[psutil.Process]],
        datadirs: list[Path],
        node_cpu: Callable[[], dict[str, float]] | None = None,
        interval_s: float = 0.5,
    ):
        self._procs = procs
        self._dirs = datadirs
        self._node_cpu = node_cpu
        self._interval = interval_s
        self._stop = threading.Event()
        self._peak_rss = 0
        self._cpu0 = self._cpu()
        # (wall time, each node's CPU so far): a task's share is read off it
        self._nodes: list[tuple[float, dict[str, float]]] = []
        self._sample_nodes()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="resource-sampler")
        self._thread.start()

    def _cpu(self) -> float:
        """CPU seconds of the server's processes, including children they
        have reaped: a server that forks a process per connection (Postgres)
        has backends start and exit within a phase, and their time lands in
        the parent's ``children_*`` times when it waits for them."""
        total = 0.0
        for p in self._procs():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        return total

    def _rss(self) -> int:
        total = 0
        for p in self._procs():
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total

    def _sample_nodes(self) -> None:
        if self._node_cpu is not None:
            self._nodes.append((time.time(), self._node_cpu()))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._peak_rss = max(self._peak_rss, self._rss())
            self._sample_nodes()

    def node_cpu_during(self, start_unix: float | None, seconds: float) -> dict[str, float] | None:
        """Each node's CPU seconds between ``start_unix`` and ``seconds``
        later (a task's measured window, inside the phase), interpolated
        between samples; None without per-node sampling."""
        if self._node_cpu is None or start_unix is None or len(self._nodes) < 2:
            return None
        times = np.array([t for t, _ in self._nodes])
        out = {}
        for node in self._nodes[0][1]:
            cpu = np.array([n.get(node, np.nan) for _, n in self._nodes])
            at = np.interp([start_unix, start_unix + seconds], times, cpu)
            out[node] = round(float(at[1] - at[0]), 3)
        return out

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        self._peak_rss = max(self._peak_rss, self._rss())
        out: dict[str, Any] = {
            "server_peak_rss_bytes": self._peak_rss,
            "server_cpu_s": round(self._cpu() - self._cpu0, 3),
            # the whole phase (client setup and warm-up too), which is longer
            # than the measured elapsed time: per-second figures divide by this
            "server_sampled_s": round(time.perf_counter() - self._t0, 3),
        }
        if self._dirs:
            out["server_data_bytes"] = sum(directory_size(d) for d in self._dirs)
        self._sample_nodes()
        return out


def _threads(pid: int | str = "self") -> int:
    """A process's OS threads (``Threads:`` of /proc/PID/status; 0 if gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class ThreadPeak:
    """The most OS threads the clients held at once while a task ran: this
    process's (its own sampler thread included) plus its client processes'
    (Python children started through ``multiprocessing``: process clients,
    async workers; a managed server is not one). Sampled every
    ``interval_s`` on a thread of its own, outside the timed loops, from
    /proc (Linux; elsewhere ``stop`` gives None)."""

    def __init__(self, interval_s: float = 0.1):
        self._interval = interval_s
        self._peak = 0
        self._clients: dict[int, bool] = {}  # child pid -> is a client process
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="thread-peak")
        if os.path.exists("/proc/self/status"):
            self._thread.start()

    def _is_client(self, p: psutil.Process) -> bool:
        known = self._clients.get(p.pid)
        if known is None:
            try:
                known = any("multiprocessing" in a for a in p.cmdline())
            except psutil.Error:
                known = False
            self._clients[p.pid] = known
        return known

    def count(self) -> int:
        n = _threads()
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process().children():
                if self._is_client(p):
                    n += _threads(p.pid)
        return n

    def _loop(self) -> None:
        self._peak = self.count()
        while not self._stop.wait(self._interval):
            self._peak = max(self._peak, self.count())

    def stop(self) -> int | None:
        if not self._thread.is_alive():
            return None
        self._stop.set()
        self._thread.join()
        return self._peak
