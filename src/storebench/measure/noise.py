"""How busy the machine was while a task ran, and whether that was too busy.

The driver samples around each task (``LoadSampler``, outside the timed
window): the 1-minute load average at its start and end, and the CPU time
that processes *other* than this run's used meanwhile: the whole machine's
busy time (``psutil.cpu_times()``: user, nice, system, irq, softirq) minus
the CPU time of this process, its children (client processes, a managed
server started as one, their reaped children included) and any other
processes the run owns (a managed server's), expressed in cores over the
sampled wall time. Steal time (a VM's CPU taken by other guests) is kept
beside it.

A task ran on a **busy** machine when other processes and steal took more
than ``BUSY_OTHER_CORES`` cores over it (``rates``, the one place the
threshold lives; reports and compare call ``busy`` on records). The load
average is recorded for context but does not decide: it counts this run's
own clients and server too, and remembers the previous minute. Over less than
``MIN_SPAN_S`` the clock-tick accounting (10 ms) is too coarse to judge: a
task's rates and ``busy`` are then None (its seconds are kept), and a run
is judged over all its tasks together (``summary``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psutil

BUSY_OTHER_CORES = 0.5  # other processes' CPU (+ steal), in cores, that makes a task "busy"
MIN_SPAN_S = 0.5  # shorter samples are not judged
# repeats of a configuration disagree when their headline ops/s spread more
# than this: ± (half the range, relative to the median), as tables show it
SPREAD_LIMIT = 0.25

Processes = Callable[[], list[psutil.Process]]


def _machine() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, steal seconds) since boot.
    Linux counts guest time inside user and nice: not added again."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return busy, getattr(t, "steal", 0.0)


def _descendants(pid: int) -> list[int] | None:
    """The pids below ``pid``, from Linux's per-thread ``children`` lists:
    a walk of the tree only, where psutil reads every process on the machine
    (milliseconds on a busy one, and the sample sits between a task's end
    and a phase timed from it). None where the kernel has no such lists."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except FileNotFoundError:
                if p == pid and tid == str(pid):
                    return None  # no CONFIG_PROC_CHILDREN
                continue
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _ours(extra: Processes | None) -> float:
    """CPU seconds of this process tree (and ``extra``'s processes), each
    process counted once, with the children it has reaped."""
    me = psutil.Process()
    procs = [me]
    pids = _descendants(me.pid)
    if pids is None:
        with contextlib.suppress(psutil.Error):
            procs += me.children(recursive=True)
    else:
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
    if extra is not None:
        with contextlib.suppress(Exception):
            procs += extra()
    seen: dict[int, float] = {}
    for p in procs:
        if p.pid in seen:
            continue
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            seen[p.pid] = t.user + t.system + t.children_user + t.children_system
    return sum(seen.values())


def _load1() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


class LoadSampler:
    """Started before a task, stopped after it: ``stop`` gives the task
    record's ``machine_load``. ``extra``: processes the run owns beyond this
    process tree (a managed server's)."""

    def __init__(self, extra: Processes | None = None):
        self.extra = extra
        self.load0 = _load1()
        self.busy0, self.steal0 = _machine()
        self.ours0 = _ours(extra)
        self.t0 = time.monotonic()

    def stop(self) -> dict[str, Any]:
        span = time.monotonic() - self.t0
        ours = _ours(self.extra) - self.ours0
        busy, steal = _machine()
        other = max(0.0, busy - self.busy0 - ours)
        steal = max(0.0, steal - self.steal0)
        out: dict[str, Any] = {
            "load_1m_start": self.load0,
            "load_1m_end": _load1(),
            "cores": psutil.cpu_count() or 1,
            "sampled_s": round(span, 4),
            "other_cpu_s": round(other, 3),
            "steal_s": round(steal, 3),
        }
        out |= rates(out)
        return out


def rates(load: Mapping[str, Any]) -> dict[str, Any]:
    """Cores' worth of other CPU and steal over the sample, and ``busy``
    (None over less than ``MIN_SPAN_S``: a 10 ms tick in 1 ms is not 10 cores)."""
    span = float(load.get("sampled_s") or 0.0)
    if span < MIN_SPAN_S:
        return {"other_cpu_cores": None, "steal_cores": None, "busy": None}
    other = float(load.get("other_cpu_s") or 0.0)
    steal = float(load.get("steal_s") or 0.0)
    return {
        "other_cpu_cores": round(other / span, 3),
        "steal_cores": round(steal / span, 3),
        "busy": (other + steal) / span > BUSY_OTHER_CORES,
    }


def busy(load: Mapping[str, Any] | None) -> bool | None:
    """Whether a task (its record's ``machine_load``) or a run (``summary``)
    ran on a busy machine: other processes and steal above
    ``BUSY_OTHER_CORES`` cores; None when not measured or too short to say."""
    return rates(load)["busy"] if load else None


def summary(tasks: Iterable[tuple[str, Mapping[str, Any] | None]]) -> dict[str, Any] | None:
    """A run's ``machine_load`` from its tasks' (name, machine_load): other
    CPU and steal over all its sampled tasks together, the highest load
    average seen, whether it was busy, and which tasks were."""
    loads = [(name, ld) for name, ld in tasks if ld]
    if not loads:
        return None
    seen = [v for _, ld in loads for v in (ld.get("load_1m_start"), ld.get("load_1m_end"))]
    out: dict[str, Any] = {
        "sampled_s": round(sum(float(ld.get("sampled_s") or 0) for _, ld in loads), 4),
        "other_cpu_s": round(sum(float(ld.get("other_cpu_s") or 0) for _, ld in loads), 3),
        "steal_s": round(sum(float(ld.get("steal_s") or 0) for _, ld in loads), 3),
        "load_1m_max": max((v for v in seen if v is not None), default=None),
    }
    out |= rates(out)
    out["busy_tasks"] = [name for name, ld in loads if busy(ld)]
    if out["busy_tasks"]:
        out["busy"] = True
    return out
