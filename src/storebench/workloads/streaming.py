"""``streaming``: search while inserting (VectorDBBench's streaming cases).

The collection starts with ``start_fraction`` of the data (uploaded and
indexed, timed like ``search``). Then, stage by stage (``stages``: the
fractions of the data visible when each ends), the stage's documents are
inserted at a fixed rate: an open loop of ``insert_batch``-document inserts
timed from their intended start (a write that queues behind a slow one
counts its wait), run together with search clients (``Driver.run_mix``). A
stage's rows are split over the ``clients`` concurrencies in turn, so each
concurrency searches while a part of the stage is written: the QPS-latency
curve per stage.

The rate asked for is never lowered: each insert task records its target
and achieved documents/s, and ``sustained`` false where it achieved less
than 95% of the target (the engine, or the client, could not keep up).
The searches run for the planned time of the inserts; inserts that fall
behind run on after them, so each search task records ``inserting_share``,
the part of the inserts' time it ran beside (below 1: the rest of the stage
was written with no search running), and the stage its smallest.

The last batch of each stage is the lag probe: inserted alone, then the
engine is searched for its last vector until that document comes back (a
bounded wait, ``lag_timeout_s``): the lag is the time from the insert's
return until the document is found. Then the count check, and recall@k of
the query set at one client against the exact truth of the rows written so
far (the stage's visible set).
"""

from __future__ import annotations

import time
from typing import Any, cast

import numpy as np
from pydantic import Field, field_validator

from storebench.data.batch import DocBatch
from storebench.driver import Task
from storebench.errors import UserError
from storebench.results.records import TaskRecord
from storebench.results.scores import RECALL
from storebench.stores.base import Collection, Store
from storebench.stores.params import SearchParams
from storebench.workloads.base import TASK_S, RunContext, TimeModel, load_time, search_time
from storebench.workloads.vector.ops import InsertFactory, SearchFactory
from storebench.workloads.vector.params import VectorParams
from storebench.workloads.vector.run import SearchRun, VectorWorkload

SUSTAINED = 0.95  # achieved / target below this: the rate was not sustained


class StreamingParams(VectorParams):
    start_fraction: float = Field(
        0.5, ge=0.0, lt=1.0, description="fraction of the data loaded and indexed before streaming"
    )
    stages: list[float] = Field(
        default_factory=lambda: [0.8, 1.0],
        description="fractions of the data visible at the end of each stage (increasing, <= 1)",
    )
    insert_rate: float = Field(
        2_000, gt=0, description="target documents/s inserted while searching (open loop)"
    )
    insert_batch: int = Field(100, ge=1, description="documents per insert call while streaming")
    insert_clients: int = Field(1, ge=1, description="writers sharing the insert rate")
    clients: list[int] = Field(
        default_factory=lambda: [1, 4],
        description="search concurrencies, each in turn over a part of every stage",
    )
    min_search_s: float = Field(
        0.5, gt=0, description="shortest search task beside the inserts (at a very high rate)"
    )
    lag_timeout_s: float = Field(
        10.0, gt=0, description="longest wait for a written document to be found"
    )

    @field_validator("stages")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("give at least one stage")
        for a, b in zip(v, v[1:], strict=False):
            if not a < b:
                raise ValueError(f"stages must increase: {a} then {b}")
        if not (v[0] > 0.0 and v[-1] <= 1.0):
            raise ValueError("stages are fractions in (0, 1]")
        return v


def stage_label(fraction: float) -> str:
    return f"{fraction * 100:g}%"


POLL_S = 0.001  # between the lag probe's searches


def _until_found(coll: Collection, batch: DocBatch, k: int, timeout_s: float) -> dict[str, Any]:
    """Search for ``batch``'s last vector until its id comes back, at most
    ``timeout_s / POLL_S`` searches ``POLL_S`` apart (a bounded wait; the
    driver times the call: that time is the lag)."""
    want = int(batch.ids[-1])
    q = np.ascontiguousarray(batch.vectors[-1:])
    polls = max(1, int(timeout_s / POLL_S))
    for i in range(1, polls + 1):
        if want in coll.search(q, k).ids[0]:
            return {"visible": True, "polls": i}
        time.sleep(POLL_S)
    return {"visible": False, "polls": polls}


def _insert_fields(rec: TaskRecord, items: int, target: float) -> dict[str, Any]:
    """Achieved against target documents/s, never a lowered target. An open
    loop cannot run ahead of its schedule, so the achieved rate is the items
    over the longer of the planned time and the time taken: the target when
    the last insert returned in time, less by as much as the inserts fell
    behind."""
    planned_s = items / target
    taken_s = max(rec.elapsed_s, planned_s)
    achieved = items / taken_s if taken_s > 0 else None
    return {
        "items": items,
        "target_rate": target,
        "achieved_rate": achieved,
        "planned_s": planned_s,
        "sustained": achieved is not None and achieved >= SUSTAINED * target,
    }


def _beside(search: TaskRecord, insert: TaskRecord | None) -> dict[str, Any]:
    """The share of the inserts' time the search ran beside them (None where
    the clients' clocks are not the driver's)."""
    if insert is None or not (search.start_unix and insert.start_unix and insert.elapsed_s):
        return {}
    start = max(search.start_unix, insert.start_unix)
    end = min(search.start_unix + search.elapsed_s, insert.start_unix + insert.elapsed_s)
    return {"inserting_share": round(min(1.0, max(0.0, end - start) / insert.elapsed_s), 4)}


class StreamingWorkload(VectorWorkload):
    name = "streaming"
    Params = StreamingParams

    @classmethod
    def check(cls, p: StreamingParams) -> None:
        super().check(p)
        if p.stages[0] <= p.start_fraction:
            raise UserError(
                f"the first stage ({p.stages[0]}) must be above start_fraction "
                f"({p.start_fraction}): each stage writes documents",
                where="stages",
            )

    @classmethod
    def time_model(cls, p: StreamingParams, settings: int, store: type[Store] | None) -> TimeModel:
        """The first part loaded and built; then each stage's rows, split
        over the search concurrencies, inserted at ``insert_rate`` while the
        searches run (at least ``min_search_s`` each); a recall pass and a
        lag probe per stage."""
        total = load_time(p.n * p.start_fraction, store)
        loaded = p.start_fraction
        for fraction in p.stages:
            rows = p.n * max(fraction - loaded, 0.0)
            part_s = max(rows / len(p.clients) / p.insert_rate, p.min_search_s)
            total += TimeModel(part_s * len(p.clients), 2 * len(p.clients) * TASK_S)
            total += load_time(rows, store)
            total += search_time(p.queries * 2, p.n * fraction, store)
            loaded = max(loaded, fraction)
        return total

    def run(self, ctx: RunContext, p: StreamingParams) -> None:
        r = SearchRun(ctx, p, "streaming")
        n = r.data.n
        start = max(1, int(n * p.start_fraction))
        r.upload(start)
        r.build_index()
        settings = ctx.searches
        if len(settings) > 1:  # one stream of inserts cannot be replayed per setting
            raise UserError(
                f"streaming measures one search setting per run, not {len(settings)}: give "
                "each search.X one value (a grid over it sweeps inside one run)",
                where="grid",
            )
        setting = settings[0]
        r.apply(setting)
        stages: list[dict[str, Any]] = []
        ctx.metrics["stages"] = stages
        ctx.metrics["insert_rate"] = p.insert_rate
        for fraction in p.stages:
            target = max(int(n * fraction), r.loaded + 1) if fraction < 1 else n
            target = min(target, n)
            if target <= r.loaded:
                continue
            stages.append(self._stage(r, setting, fraction, target))
        # runs ranked by the search at the most clients while the last stage was written
        last = stages[-1]
        headline = last["searches"][-1] if last["searches"] else last["recall_task"]
        ctx.setting_done(setting, headline, {RECALL.key(p.k): last["recall"]})

    def _stage(
        self, r: SearchRun, setting: SearchParams, fraction: float, target: int
    ) -> dict[str, Any]:
        ctx, p = r.ctx, cast(StreamingParams, r.p)
        label = stage_label(fraction)
        probe = min(p.insert_batch, target - r.loaded)
        streamed = target - probe - r.loaded  # rows written beside the searches
        stage: dict[str, Any] = {"stage": fraction, "label": label, "visible": target}
        inserts, searches = [], []
        # the stage's rows split over the concurrencies, at batch boundaries
        batches = -(-streamed // p.insert_batch)
        parts = len(p.clients)
        cuts = [
            r.loaded + min(streamed, (batches * i // parts) * p.insert_batch)
            for i in range(parts + 1)
        ]
        for clients, lo, hi in zip(p.clients, cuts[:-1], cuts[1:], strict=True):
            if hi <= lo:
                continue
            ins, srch = self._mix(r, setting, fraction, clients, lo, hi)
            inserts.append(ins)
            searches.append(srch)
            r.loaded = hi
        # the lag probe: the stage's last batch, then search until it is found
        batch = r.data.rows(r.loaded, target)
        r.coll.insert(batch)
        lag = ctx.once(
            f"lag {label}",
            lambda: _until_found(r.coll, batch, p.k, p.lag_timeout_s),
            items=len(batch),
            derive=lambda rec, out: out | {"lag_s": rec.elapsed_s if out["visible"] else None},
            phase="lag",
            stage=fraction,
            n=target,
        )
        lag_s = ctx.tasks[-1].lag_s  # the lag task's time, when it was found
        r.loaded = target
        r.count_check(target, f"stage {label}")
        r.size(stage)
        r.reset_truth()  # the truth of what is visible now
        # named for what it runs: "recall 80%" would read as a recall of 80%
        scored = f"queries at {label}"
        rec = r.measure(scored, setting=setting, clients=1, stage=fraction, n=target)
        stage |= {
            "lag_s": lag_s,
            "lag_visible": lag["visible"],
            "recall": rec.scores.get(RECALL.key(p.k)) if rec is not None else None,
            "recall_task": scored,
            "inserts": [t.name for t in inserts],
            "searches": [t.name for t in searches],
        }
        shares = [t.inserting_share for t in searches]
        if shares and None not in shares:
            stage["inserting_share"] = min(shares)
        if inserts:
            items = sum(t.items for t in inserts)
            secs = sum(max(t.elapsed_s, t.planned_s or 0.0) for t in inserts)
            achieved = items / secs if secs > 0 else None
            stage |= {
                "target_rate": p.insert_rate,
                "achieved_rate": achieved,
                "sustained": all(t.sustained for t in inserts),
            }
        return stage

    def _mix(
        self, r: SearchRun, setting: SearchParams, fraction: float, clients: int, lo: int, hi: int
    ) -> tuple[TaskRecord, TaskRecord]:
        """Insert rows [lo, hi) at the target rate while ``clients`` search."""
        ctx, p = r.ctx, cast(StreamingParams, r.p)
        label = stage_label(fraction)
        ops = -(-(hi - lo) // p.insert_batch)
        planned_s = (hi - lo) / p.insert_rate
        executor = r.executor(clients + p.insert_clients)
        insert = Task(
            f"insert {label} c={clients}",
            InsertFactory(r.shared_ids, r.shared_fields, r.shared_vecs, p.insert_batch, lo, hi),
            clients=min(p.insert_clients, ops),
            ops=ops,
            rate=p.insert_rate / p.insert_batch,
            items_per_op=p.insert_batch,
            executor=executor,
        )
        search = Task(
            f"search {label} c={clients}",
            SearchFactory(r.shared_q, p.k, None, setting),
            clients=clients,
            duration_s=max(planned_s, p.min_search_s),
            warmup_ops=p.warmup,
            executor=executor,
        )

        inserted: dict[str, TaskRecord] = {}

        def derive(rec: TaskRecord, _: Any) -> dict[str, Any]:
            if rec.name == insert.name:  # derived first: the mix's order
                inserted["rec"] = rec
                return _insert_fields(rec, hi - lo, p.insert_rate)
            return _beside(rec, inserted.get("rec"))

        common = {"stage": fraction, "executor": ctx.executor_name(search)}
        ctx.measure_mix(
            [insert, search],
            r.coll,
            derive,
            per_task=[
                {"phase": "insert", "n": lo, "n_end": hi},
                {"phase": "search", "search": setting.given(), "n": lo, "n_end": hi},
            ],
            **common,
        )
        return ctx.tasks[-2], ctx.tasks[-1]
