"""What a managed server uses while a phase runs: its processes' peak RSS
and CPU time, and its data directory's size, sampled in a thread beside
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
        datadir: Path | None,
        interval_s: float = 0.5,
    ):
        self._procs = procs
        self._dir = datadir
        self._interval = interval_s
        self._stop = threading.Event()
        self._peak_rss = 0
        self._cpu0 = self._cpu()
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

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._peak_rss = max(self._peak_rss, self._rss())

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
        if self._dir is not None:
            out["server_data_bytes"] = directory_size(self._dir)
        return out
