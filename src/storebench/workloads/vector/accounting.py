"""What a measured task's record adds beside its timings: client CPU and
whether the client was the bottleneck, the engine's own time per call, and
the index build's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storebench.driver.core import cpu_count
from storebench.results.records import TaskRecord

SATURATED = 0.9  # client CPU at this fraction of its ceiling flags the client


def client_accounting(rec: TaskRecord, executor: str, clients: int) -> dict[str, Any]:
    """Client CPU beside the wall time, and whether the client was the bottleneck.

    The driver records each client's CPU time over its measured window: a
    process client's own; a thread or async client its share of its
    process's (the process's over its clients), so ``client_cpu_s`` is the
    client processes' CPU and the client CPU per wall second ``u`` is
    ``client_cpu_s / elapsed_s`` for every executor. Its ceiling ``c`` is
    ``min(clients, usable cores)`` for processes; for threads it is 1 (one
    interpreter: the GIL runs one thread's Python at a time) unless ``u``
    itself is above 1, which shows work outside the GIL (an embedded
    engine's search, on its own threads too): then the usable cores. The
    client is *saturated* when ``u >= 0.9 c``: adding server capacity would
    not raise the throughput. For an embedded store the client process is
    also the engine, so there it says the process is CPU-bound. An
    ``async`` client's ceiling is that of threads (one loop per process, one
    process unless ``driver.workers`` asks for more)."""
    wall, cpu = rec.elapsed_s, rec.client_cpu_s or 0.0
    lanes = clients * (rec.inflight or 1)
    if wall <= 0:
        return {}
    procs = executor == "processes"
    per_s = cpu / wall
    if procs:
        ceiling = float(min(lanes, cpu_count()))
    else:
        ceiling = float(cpu_count()) if per_s > 1.0 else 1.0
    out: dict[str, Any] = {
        "client_cpu_per_s": round(per_s, 4),
        "client_cpu_ceiling": ceiling,
        "client_saturated": per_s >= SATURATED * ceiling,
    }
    if rec.server_cpu_s is not None:
        # the sampler ran over the whole phase (setup, warm-up), not just the
        # measured part: divide by its own span where it recorded one
        out["server_cpu_per_s"] = round(rec.server_cpu_s / (rec.server_sampled_s or wall), 4)
    return out


def engine_delta(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    op: str,
    ours_ns: float | None,
) -> dict[str, Any] | None:
    """The engine's own time per call over a measured task, from its
    cumulative counters read before and after (``Store.engine_stats``)."""
    if not after or op not in after:
        return None
    b = (before or {}).get(op) or {"calls": 0, "time_s": 0.0}
    a = after[op]
    calls = int(a["calls"]) - int(b["calls"])
    spent = float(a["time_s"]) - float(b["time_s"])
    if calls <= 0:
        return None
    out: dict[str, Any] = {
        "command": a.get("command", op),
        "calls": calls,
        "time_s": round(spent, 6),
        "mean_ns": spent / calls * 1e9,
    }
    if ours_ns is not None:
        out["client_share_ns"] = ours_ns - out["mean_ns"]
    return out


def index_fields(rec: TaskRecord, built: bool | None) -> dict[str, Any]:
    """An index task's record from what ``build_index`` returned: False
    (the inserts built it) is a step that did no work: no items, no rates."""
    if built is False:
        return {"index_build": "during_insert", "items": 0, "ops_per_s": None}
    return {"index_build": "built", "ops_per_s": None}
