"""A managed server's own CPU quota and memory limit (Linux control groups).

On a small machine a cluster of k nodes x c cores shows the shape of its
scaling curve only if each node gets c cores and no more: ``NodeGroup``
makes one control group per node, with a CPU quota (``cpus``: 0.25 is a
quarter of one core, CFS bandwidth; applied by ``apply_cpu_quota``) and a
memory limit, and reads the CPU
time the node actually used from it (its processes, reaped children
included, exactly). Both cgroup versions exist in the wild: v2 (one
hierarchy, ``cpu.max``, ``memory.max``, ``cpu.stat``) and v1 (a hierarchy
per controller, ``cpu.cfs_quota_us``, ``memory.limit_in_bytes``,
``cpuacct.usage``). Each group is made below the one storebench runs in,
named as the server's private directory (``storebench-<engine>-*``, unique).

Setting a quota needs write access to the hierarchy (root, or a delegated
subtree). Without it ``NodeGroup`` raises ``NoQuota`` with the reason and
the caller runs the node unlimited, saying so in the record.

A process joins its group from the parent, right after it started (a server
running as an unprivileged user could not move itself); the parent then
moves whatever the process group forked meanwhile, twice, so that every
later process inherits the group.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000


class NoQuota(Exception):
    """Control groups cannot be used here; the message says why."""


def _mounts() -> dict[str, Path]:
    """Each v1 controller's mount point (cpu, cpuacct, memory)."""
    out: dict[str, Path] = {}
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            _dev, where, kind, opts, *_ = line.split()
            if kind == "cgroup":
                for c in opts.split(","):
                    if c in ("cpu", "cpuacct", "memory"):
                        out.setdefault(c, Path(where))
    return out


def _own(controller: str) -> str:
    """The group this process is in, for a v1 ``controller`` ("" for v2)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _n, ctrls, path = line.rstrip("\n").split(":", 2)
            if controller in ctrls.split(",") or (controller == "" and ctrls == ""):
                return path.lstrip("/")
    return ""


class NodeGroup:
    """One node's control group(s), made with its limits; ``remove`` them
    once its processes are gone."""

    def __init__(self, name: str, cpus: float | None, memory_bytes: int | None):
        self.cpus, self.memory_bytes = cpus, memory_bytes
        self.dirs: list[Path] = []
        self._usage: tuple[Path, str] | None = None  # file, and how to read it
        self._quota: tuple[Path, str] | None = None  # file, and what sets the quota
        leaf = name
        try:
            if (ROOT / "cgroup.controllers").exists():
                self._make_v2(leaf)
            else:
                self._make_v1(leaf)
        except OSError as exc:
            self.remove()
            raise NoQuota(
                f"cannot set a CPU quota or memory limit here ({exc.strerror}: {exc.filename})"
            ) from None

    def _make_v2(self, leaf: str) -> None:
        parent = ROOT / _own("")
        wanted = {"cpu"} | ({"memory"} if self.memory_bytes else set())
        missing = wanted - set((parent / "cgroup.subtree_control").read_text().split())
        if missing:  # enabling a controller for our children: only where delegated
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
        d = parent / leaf
        d.mkdir()
        self.dirs.append(d)
        if self.memory_bytes:
            (d / "memory.max").write_text(str(self.memory_bytes))
        self._usage = (d / "cpu.stat", "v2")
        self._quota = (d / "cpu.max", f"{round((self.cpus or 0) * CFS_PERIOD_US)} {CFS_PERIOD_US}")

    def _make_v1(self, leaf: str) -> None:
        mounts = _mounts()
        if "cpu" not in mounts or "cpuacct" not in mounts:
            raise NoQuota("no cpu and cpuacct control groups mounted (cgroup v1 or v2)")
        made: dict[str, Path] = {}
        for c in ("cpu", "cpuacct", "memory"):
            if c == "memory" and not self.memory_bytes:
                continue
            d = mounts[c] / _own(c) / leaf
            if d not in made.values():  # controllers mounted together share a directory
                d.mkdir()
                self.dirs.append(d)
            made[c] = d
        (made["cpu"] / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        self._quota = (
            made["cpu"] / "cpu.cfs_quota_us",
            str(round((self.cpus or 0) * CFS_PERIOD_US)),
        )
        if self.memory_bytes:
            (made["memory"] / "memory.limit_in_bytes").write_text(str(self.memory_bytes))
        self._usage = (made["cpuacct"] / "cpuacct.usage", "v1")

    def apply_cpu_quota(self) -> None:
        """The CPU quota, from now on (a server gets it once it is ready)."""
        if self.cpus and self._quota is not None:
            path, value = self._quota
            path.write_text(value)

    def join(self, pid: int) -> None:
        """Move ``pid`` and its process group into this group (see the
        module's docstring)."""
        for _ in range(2):
            for p in [pid, *_group_members(pid)]:
                for d in self.dirs:
                    with contextlib.suppress(ProcessLookupError, OSError):
                        (d / "cgroup.procs").write_text(str(p))

    def cpu_seconds(self) -> float:
        """CPU time the group's processes used so far (reaped children too)."""
        if self._usage is None:
            return 0.0
        path, kind = self._usage
        try:
            text = path.read_text()
        except OSError:
            return 0.0
        if kind == "v1":
            return int(text) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        return 0.0

    def describe(self) -> dict[str, str]:
        """The limits, for the record."""
        out = {}
        if self.cpus:
            out["cpu_quota_cores"] = f"{self.cpus:g}"
        if self.memory_bytes:
            out["memory_limit_bytes"] = str(self.memory_bytes)
        return out

    def remove(self) -> None:
        """The groups, once empty (a process still in them: retried briefly)."""
        for d in reversed(self.dirs):
            remove_group(d)
        self.dirs = []


def remove_group(d: Path) -> None:
    """An empty control group directory (its processes may still be exiting)."""
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)  # a killed process leaves its group when reaped


def _group_members(pgid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(entry.path, "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                    out.append(int(entry.name))
    return out
