"""``search``: the Redis study's method (Qdrant's vector-db-benchmark).

Phases, each timed on its own: upload (batched, parallel uploaders), index
build (the adapter returns when the engine says the index is ready), then a
count check (the engine's own count must equal the documents loaded: a
short load fails the run). Then, for each search setting (``search.X``
grid keys are swept inside the run, over one index build) and each client
count: the query set once (or ``ops`` queries, or ``duration_s``), closed
loop by default or open loop at ``rate``; recall@k and precision@k against
exact ground truth; client CPU beside the throughput; the engine's own time
per call where it reports one. ``labels`` adds filtered search per
selectivity, scored against filtered ground truth.

The study's grid is M x EF_CONSTRUCTION (one index each, ``index.m`` and
``index.ef_construct``) x EF (``search.ef``), each configuration run three
times (``repeats: 3``), the best kept: the report shows the best run (by
the QPS at the most clients, every number of its row from it) and the
spread. Each setting records its own recall and precision
(``RunContext.setting_done``).
"""

from __future__ import annotations

from pydantic import Field

from storebench.stores.base import Store
from storebench.workloads.base import RunContext, TimeModel, load_time
from storebench.workloads.vector.params import VectorParams
from storebench.workloads.vector.run import SearchRun, VectorWorkload
from storebench.workloads.vector.scoring import setting_scores


class SearchWorkloadParams(VectorParams):
    clients: list[int] = Field(
        default_factory=lambda: [1, 2, 4],
        description="client counts measured in turn (1: single-client latency)",
    )


class SearchWorkload(VectorWorkload):
    name = "search"
    Params = SearchWorkloadParams

    @classmethod
    def time_model(
        cls, p: SearchWorkloadParams, settings: int, store: type[Store] | None
    ) -> TimeModel:
        tasks = settings * (len(p.clients) + len(p.labels))
        return load_time(p.n, store) + cls.measured_time(p, p.n, store) * tasks

    def run(self, ctx: RunContext, p: SearchWorkloadParams) -> None:
        r = SearchRun(ctx, p, "search")
        r.upload(r.data.n)
        up = ctx.tasks[-1]
        ctx.metrics["upload_s"] = up.elapsed_s
        ctx.metrics["upload_docs_per_s"] = up.items_per_s
        r.build_index()
        for setting in ctx.searches:
            r.apply(setting)
            top, recs = r.curve(setting, p.clients)
            ctx.setting_done(setting, top, setting_scores(recs))
