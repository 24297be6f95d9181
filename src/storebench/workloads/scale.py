"""``scale``: the Milvus evaluation's data-size doubling.

One collection grows n, 2n, 4n, ... (``steps`` sizes). At each size: the
new documents are uploaded (timed), the index rebuilt (timed; an engine
that indexes on insert already holds most of it), the count checked, the
search parameter tuned again for ``target_recall`` (unless ``tune: false``:
then the store's own search parameters), and latency and throughput
measured at each of ``clients`` (the study: 1 and 10 threads). Ground truth
is exact at each size, over the documents loaded so far.

The study grew a cluster with the data (65M to 1B vectors, three to
forty-eight nodes); here one engine holds every size, so the figures show
how one node's latency and QPS change with its data.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from storebench.stores.base import Store
from storebench.workloads.base import MemoryNeed, RunContext, TimeModel
from storebench.workloads.tune import TuneParams, TuneWorkload, tune_setting
from storebench.workloads.vector.data import resolve_dataset
from storebench.workloads.vector.params import search_memory
from storebench.workloads.vector.run import SearchRun


class ScaleParams(TuneParams):
    n: int = Field(2_500, ge=1, description="the first size; each step doubles it")
    steps: int = Field(3, ge=1, description="sizes n, 2n, 4n, ... (this many)")
    tune: bool = Field(True, description="tune the search parameter again at each size")
    clients: list[int] | None = Field(
        default_factory=lambda: [1, 4], description="client counts measured at each size"
    )

    def sizes(self) -> list[int]:
        return [self.n * 2**i for i in range(self.steps)]


class ScaleWorkload(TuneWorkload):
    name = "scale"
    Params = ScaleParams  # type: ignore[assignment]

    @classmethod
    def resolve(cls, p: ScaleParams, stated: frozenset[str]) -> ScaleParams:  # type: ignore[override]
        # with a dataset, the largest size fits it: n is the first of the doublings
        return resolve_dataset(p, stated, doublings=p.steps - 1)

    @classmethod
    def memory(cls, p: ScaleParams) -> MemoryNeed:  # type: ignore[override]
        # the largest size (its truth replaces the smaller sizes')
        return search_memory(p, n=p.sizes()[-1], keys=("n", "steps", "dim"))

    @classmethod
    def time_model(cls, p: ScaleParams, settings: int, store: type[Store] | None) -> TimeModel:  # type: ignore[override]
        # each size built, tuned and measured anew (tune: false probes once)
        return sum((cls.size_time(p, size, store) for size in p.sizes()), TimeModel())

    def run(self, ctx: RunContext, p: ScaleParams) -> None:  # type: ignore[override]
        sizes = p.sizes()
        r = SearchRun(ctx, p, "scale", n=sizes[-1])
        steps: list[dict[str, Any]] = []
        ctx.metrics["sizes"] = sizes
        ctx.metrics["scale"] = steps
        for size in sizes:
            step: dict[str, Any] = {"n": size}
            steps.append(step)
            r.upload(size, name=f"upload n={size}")
            step["upload_s"] = ctx.tasks[-1].elapsed_s
            r.build_index(f"build_index n={size}", step)
            r.reset_truth()
            if p.tune:
                setting, found = tune_setting(ctx, r, p)
                step["tune"] = found
            else:
                setting = ctx.search
                r.apply(setting)
            step["search"] = setting.given()
            ctx.headline, _ = r.curve(setting, p.client_counts(), f"n={size}", "setting", n=size)
