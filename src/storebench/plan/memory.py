"""The memory a run needs, estimated from the plan and held against what
this machine has available (``runner.run_scenario``, before the first run):
a run that cannot fit is refused before anything starts, instead of failing after minutes of data generation with a
``MemoryError`` (or being killed by the kernel's OOM killer, for a size the
allocator grants but RAM cannot hold).

A run's estimate is the sum of:

- the workload's own arrays (``Workload.memory``): generated data, queries,
  exact ground truth with its scratch, per-client objects. A dataset's
  columns are memory-mapped from its files and not counted;
- the store's share (``Store.memory_use``): what an in-process engine keeps
  in this process, or a managed server (started here, so on this machine)
  keeps in its own; a server given by URL is not counted (it may be
  elsewhere, and its memory is its own to manage);
- the files a run shares with its clients, where the temporary directory is
  a tmpfs (its files are RAM).

Runs go one after another, so the plan's need is its largest run's. The
machine's available memory is ``psutil``'s (what can be had without
swapping), lowered to the headroom under this process's cgroup memory limit
where there is one (a container). ``driver.memory_check: false`` (or
``--set driver.memory_check=false``) skips the check."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from storebench.stores.base import store_class
from storebench.workloads.base import workload_class

if TYPE_CHECKING:
    from storebench.plan.scenario import Run, Scenario

OVERRIDE = "--set driver.memory_check=false"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _cgroup_value(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _inactive_file(stat: Path, key: str) -> int:
    """Page cache the kernel can drop (counted in a cgroup's usage)."""
    try:
        for line in stat.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_headroom(
    cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """Bytes left under this process's cgroup memory limit (v2 or v1), or
    None without a limit below the machine's memory."""
    try:
        lines = cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if controllers == "":  # v2
            files = ("memory.max", "memory.current", "memory.stat", "inactive_file")
            bases = [root / rel.lstrip("/"), root]
        elif "memory" in controllers.split(","):  # v1
            files = (
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "memory.stat",
                "total_inactive_file",
            )
            bases = [root / "memory" / rel.lstrip("/"), root / "memory"]
        else:
            continue
        for base in bases:  # inside a container the mount is its own group
            limit = _cgroup_value(base / files[0])
            usage = _cgroup_value(base / files[1])
            if limit is None or usage is None:
                continue
            if limit >= psutil.virtual_memory().total:
                break  # no limit of its own
            return max(0, limit - usage + _inactive_file(base / files[2], files[3]))
    return None


def available() -> int:
    """Bytes this process can still take without swapping or being killed."""
    free = int(psutil.virtual_memory().available)
    headroom = cgroup_headroom()
    return free if headroom is None else min(free, headroom)


def _tmpfs(path: str) -> bool:
    """Whether ``path`` is on a file system held in RAM."""
    path = os.path.realpath(path)
    best, kind = "", ""
    for part in psutil.disk_partitions(all=True):
        mp = part.mountpoint.rstrip("/") or "/"
        if (path == mp or path.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best):
            best, kind = mp, part.fstype
    return kind in ("tmpfs", "ramfs")


def estimate(run: Run, shared_in_ram: bool) -> tuple[dict[str, int], tuple[str, ...]] | None:
    """A run's memory by part, and the parameters that set it (None: the
    workload does not estimate it)."""
    need = workload_class(run.workload).memory(run.params)
    if need is None:
        return None
    parts = {k: v for k, v in need.parts.items() if v}
    per_doc, fixed = store_class(run.spec.engine).memory_use(
        run.spec, run.index, need.dim, need.field_bytes
    )
    if need.docs * per_doc + fixed:
        parts["store"] = need.docs * per_doc + fixed
    if shared_in_ram and need.shared:
        parts["shared files (tmpfs)"] = need.shared
    return parts, need.keys


def largest(runs: Sequence[Run]) -> tuple[int, Run, dict[str, int], tuple[str, ...]] | None:
    """The run that needs the most memory: its need, the run, its parts and
    the parameters that set it (None: no workload here estimates it)."""
    shared_in_ram = _tmpfs(tempfile.gettempdir())
    worst: tuple[int, Run, dict[str, int], tuple[str, ...]] | None = None
    seen: set[tuple[Any, ...]] = set()
    for run in runs:
        sig = (run.workload, run.spec.engine, str(run.store_info()), str(run.params))
        if sig in seen:  # repeats and search sweeps: the same estimate
            continue
        seen.add(sig)
        est = estimate(run, shared_in_ram)
        if est is not None and (worst is None or sum(est[0].values()) > worst[0]):
            worst = (sum(est[0].values()), run, *est)
    return worst


def check(scenario: Scenario, runs: list[Run]) -> None:
    """Refuse the plan if its largest run needs more memory than this
    machine has available, naming the parameter that sets the size."""
    worst = largest(runs)
    if worst is None:
        return
    need, run, parts, keys = worst
    have = available()
    if need <= have:
        return
    detail = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in parts.items())
    raise scenario.error(
        _loc(scenario, run, keys),
        f"a run on {run.spec.engine} needs about {fmt_bytes(need)} of memory ({detail}); "
        f"this machine has {fmt_bytes(have)} available; {OVERRIDE} to run anyway",
    )


def _loc(scenario: Scenario, run: Run, keys: tuple[str, ...]) -> tuple[str, ...]:
    """Where to point: of ``keys`` the user set (``--set``, a grid axis, else
    the file's params), the one whose default would shrink the need most
    (``n=200 dim=1000000000`` is dim's doing); else the first of ``keys``."""
    grid = scenario.file.grid

    def flag(key: str) -> tuple[str, ...] | None:
        if f"params.{key}" in scenario.overrides:
            return ("params", key)
        return next((("grid", g) for g in (key, f"params.{key}") if g in grid), None)

    in_file = {k: ("params", k) for k in keys if k in scenario.file.params}
    for found in ({k: at for k in keys if (at := flag(k))}, in_file):
        if found:
            return found[min(found, key=lambda k: _need_at_default(run, k))]
    return ("params", keys[0])


def _need_at_default(run: Run, key: str) -> int:
    """The run's need with parameter ``key`` back at its default."""
    field = type(run.params).model_fields.get(key)
    update = {} if field is None else {key: field.get_default(call_default_factory=True)}
    params = run.params.model_copy(update=update)
    est = estimate(dataclasses.replace(run, params=params), _tmpfs(tempfile.gettempdir()))
    return 0 if est is None else sum(est[0].values())
