"""``tune``: the Milvus evaluation's latency and throughput at a target recall.

After the same load, index build and count check as ``search``, the search
parameter (``tune_param``, ``ef`` by default) is tuned: the smallest value
whose recall@k over the query set reaches ``target_recall`` (0.95), by
doubling from ``tune_start`` (default k) and then bisecting, every probe
kept and recall checked to be monotone in the parameter. At that setting:
single-client latency (mean, p50, p95, p99), then throughput and latency
at each concurrency 1, 2, 4, ... up to ``max_clients`` (the study: 100
clients, 60 s each after 30 s of warm-up): the latency vs throughput curve,
with QPS at the highest concurrency as the study's throughput figure.

A store without the parameter (exact search) is measured as it is, and the
record says so. ``search.X`` grid keys are ignored here: tuning chooses.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from storebench.errors import UserError
from storebench.stores.base import Capability, Store
from storebench.stores.params import SearchParams
from storebench.workloads.base import RunContext, TimeModel, load_time, search_time
from storebench.workloads.vector.params import VectorParams, powers_of_two
from storebench.workloads.vector.run import SearchRun, VectorWorkload
from storebench.workloads.vector.tuning import tune


class TuneParams(VectorParams):
    target_recall: float = Field(0.95, gt=0, le=1, description="recall@k to reach")
    tune_param: str = Field("ef", description="the search parameter tuned (ef, nprobe, ...)")
    tune_start: int | None = Field(None, ge=1, description="first value probed; default k")
    tune_max: int = Field(4096, ge=1, description="largest value probed")
    tune_tolerance: float = Field(
        0.002, ge=0, description="a recall drop larger than this as the value grows is a violation"
    )
    max_clients: int = Field(
        100, ge=1, description="concurrency goes 1, 2, 4, ... up to this (the study: 100)"
    )
    clients: list[int] | None = Field(
        None, description="client counts measured; default 1, 2, 4, ... max_clients"
    )

    def client_counts(self) -> list[int]:
        return list(self.clients) if self.clients else powers_of_two(self.max_clients)


def tune_setting(ctx: RunContext, r: SearchRun, p: TuneParams) -> tuple[SearchParams, Any]:
    """The setting to measure at, and what tuning found (recorded)."""
    base = ctx.search
    if (
        not ctx.store.supports(Capability.SEARCH_PARAMS)
        or p.tune_param not in ctx.store.Search.names()
    ):
        recall = r.recall_at(base)
        return base, {
            "param": None,
            "target": p.target_recall,
            "recall": recall,
            "reached": recall >= p.target_recall,
            "note": f"{ctx.store.engine} has no search parameter {p.tune_param}: measured as it is",
        }
    start = p.tune_start or p.k
    if start > p.tune_max:
        raise UserError(f"tune_start {start} is above tune_max {p.tune_max}", where="tune_max")
    t = tune(
        lambda v: r.recall_at(base.with_(**{p.tune_param: v})),
        p.target_recall,
        start,
        p.tune_max,
        p.tune_param,
        p.tune_tolerance,
    )
    setting = base.with_(**{p.tune_param: t.best})
    r.apply(setting)
    return setting, t.record()


# untimed recall probes a tuning makes (doubling, then bisecting), typically
PROBES = 6


class TuneWorkload(VectorWorkload):
    name = "tune"
    Params = TuneParams

    @classmethod
    def time_model(cls, p: TuneParams, settings: int, store: type[Store] | None) -> TimeModel:
        return cls.size_time(p, p.n, store)

    @classmethod
    def size_time(cls, p: TuneParams, n: float, store: type[Store] | None) -> TimeModel:
        """Load and build ``n`` documents, tune (recall probes over every
        query), then the curve: a task per client count and selectivity."""
        tunes = store is not None and p.tune_param in store.Search.names()
        probes = search_time(p.queries, n, store) * (PROBES if tunes else 1)
        tasks = len(p.client_counts()) + len(p.labels)
        return load_time(n, store) + probes + cls.measured_time(p, n, store) * tasks

    def run(self, ctx: RunContext, p: TuneParams) -> None:
        r = SearchRun(ctx, p, "tune")
        r.upload(r.data.n)
        ctx.metrics["upload_s"] = ctx.tasks[-1].elapsed_s
        r.build_index()
        setting, found = tune_setting(ctx, r, p)
        ctx.metrics["tune"] = found
        if found.get("param"):
            ctx.metrics[f"tuned_{found['param']}"] = found["value"]
        ctx.metrics[f"recall@{p.k}_tuned"] = found["recall"]
        ctx.headline, _ = r.curve(setting, p.client_counts(), "", "setting")
