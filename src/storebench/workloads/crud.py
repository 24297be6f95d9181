"""``crud``: the DocArray study's six tasks in their simple form.

Documents ``{id, tags.i: int, embedding: float32[dim]}``. Tasks, in order:
create (batched inserts), then a count check, index build where the engine
has one, read by id, update by id, delete by id, find by condition
(``tags.i == v``), find by vector (k nearest, Recall@k against exact ground
truth over the documents left after the deletes).

Updates write a new ``tags.i`` and the document's own embedding back, so the
engine does the full rewrite while the vectors, and so the ground truth, stay
known. Every task's arguments are prepared before timing starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from storebench.data.batch import DocBatch
from storebench.data.filters import Cmp
from storebench.driver import FnOp, Op, Task
from storebench.errors import NotSupported, TaskFailed
from storebench.results.records import TaskRecord
from storebench.stores.base import AsyncView, Capability, Collection, Store
from storebench.workloads.base import (
    OP_S,
    TASK_S,
    MemoryNeed,
    RunContext,
    TimeModel,
    ViewsOp,
    load_time,
    search_time,
)
from storebench.workloads.vector.data import TAG, VectorData, data_memory
from storebench.workloads.vector.ops import InsertFactory, SearchFactory, apply_setting
from storebench.workloads.vector.params import DataParams
from storebench.workloads.vector.run import VectorWorkload, build_index
from storebench.workloads.vector.scoring import score


class CrudParams(DataParams):
    batch_size: int = Field(1_000, ge=1, description="documents per insert call")
    ops: int = Field(1_000, ge=1, description="operations per task (read, update, ...)")
    warmup: int = Field(10, ge=0, description="untimed operations per client before each task")
    clients: int = Field(1, ge=1)
    k: int = Field(10, ge=1, description="neighbours per find-by-vector")
    tag_values: int | None = Field(
        None, ge=1, description="tags.i is uniform in [0, tag_values); default n"
    )


# --- operation factories (module level: picklable for process clients) -------


@dataclass(frozen=True, eq=False)
class PoolFactory:
    """Op i applies ``method`` to ``pool[i % len(pool)]`` (warm-up i < 0
    wraps to the pool's end)."""

    method: str
    pool: list[Any]

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        return _PoolOp(coll, self.method, self.pool)


class _PoolOp(ViewsOp, FnOp):
    """The sync op a plain function (the loop calls it directly); the async
    one the same method of the collection's async view (``Collection.aio``)."""

    def __init__(self, coll: Collection, method: str, pool: list[Any]):
        fn = getattr(coll, method)
        m = len(pool)
        super().__init__(lambda i: fn(pool[i % m]))
        self.colls, self.method, self.pool, self.m = (coll,), method, pool, m

    def opened(self, view: AsyncView) -> None:  # type: ignore[override]
        self.afn = getattr(view, self.method)

    async def acall(self, i: int) -> None:
        await self.afn(self.pool[i % self.m])


# --- the workload ------------------------------------------------------------


class CrudWorkload(VectorWorkload):
    name = "crud"
    Params = CrudParams

    @classmethod
    def memory(cls, p: CrudParams) -> MemoryNeed:
        # per document: the random order and the live tags (find by condition)
        return data_memory(
            p, queries=min(p.ops, 10_000), truths=1, truth_k=max(p.k, 100), tags=True, per_doc=16
        )

    @classmethod
    def time_model(cls, p: CrudParams, settings: int, store: type[Store] | None) -> TimeModel:
        """Create (and build), four tasks of ``ops`` by id or condition, and
        find by vector at each search setting."""
        ops = (p.ops + p.warmup * p.clients) * OP_S
        vector = search_time(p.ops + p.warmup * p.clients, p.n, store) * settings
        return load_time(p.n, store) + TimeModel(0.0, 4 * ops + 5 * TASK_S) + vector

    def run(self, ctx: RunContext, p: CrudParams) -> None:
        # compat: the study's own method: create is one extend() of all the
        # documents, then one untimed-warm-up-free operation per task.
        compat = ctx.mode == "compat"
        batch_size, ops, warmup = (None, 1, 0) if compat else (p.batch_size, p.ops, p.warmup)
        if compat:
            ctx.metrics["method"] = (
                "compat: create as one call of all documents, one operation per task, no warm-up"
            )
        rng = np.random.default_rng([p.seed, 7])
        data = VectorData(p, tags=True)
        n, ids, tags, vecs = data.n, data.ids, data.tags, data.vecs
        assert tags is not None
        ctx.metrics["data"] = data.describe
        docs = DocBatch(ids, {TAG: tags}, vecs)
        coll = ctx.collection("crud", docs.schema(data.metric, indexed=(TAG,)))
        common: dict[str, Any] = {"clients": p.clients, "warmup_ops": warmup}
        pool = ops + warmup * p.clients  # distinct arguments for every op

        def by_pool(name: str, method: str, args: list[Any], count: int, **task: Any) -> bool:
            """Time ``count`` calls of ``coll.<method>`` over ``args``; a method
            the store lacks is recorded as unsupported."""
            try:
                ctx.store.require({Capability(method)})
            except NotSupported as exc:
                ctx.unsupported(name, exc)
                return False
            if count:
                ctx.measure(Task(name, PoolFactory(method, args), ops=count, **task), coll)
            return True

        # create
        batch_size = batch_size or n
        n_batches = -(-n // batch_size)
        shared_ids, shared_vecs = ctx.share("ids", ids), ctx.share("vecs", vecs)
        ctx.measure(
            Task(
                "create",
                InsertFactory(shared_ids, {TAG: ctx.share("tags", tags)}, shared_vecs, batch_size),
                clients=min(p.clients, n_batches),
                ops=n_batches,
                items_per_op=batch_size,
            ),
            coll,
            phase="upload",
            items=n,  # the last batch may be short
        )
        held = coll.count()
        if held != n:
            raise TaskFailed(
                f"count check after create: {ctx.store.engine} holds {held} of {n} documents"
            )
        if ctx.store.supports(Capability.SIZE):
            ctx.metrics["size_bytes_after_create"] = coll.size_bytes()
        build_index(ctx, coll, n)

        # read, update, delete by id: one document per op; ids cycle through a
        # random order, and deletes take distinct ids from at most half the set
        order = rng.permutation(n)
        read_ids = [order[j : j + 1] for j in range(min(pool, n))]
        by_pool("read", "get", read_ids, ops, **common)
        upd_rows = order[: min(pool, n)]
        new_tags = rng.integers(0, p.tag_values or n, len(upd_rows), dtype=np.int64)
        updates = [
            DocBatch(ids[r : r + 1], {TAG: new_tags[j : j + 1]}, vecs[r : r + 1])
            for j, r in enumerate(upd_rows)
        ]
        by_pool("update", "update", updates, ops, **common)
        tags[upd_rows] = new_tags
        # deletes: distinct ids from at most half the set, planned so that every
        # one issued (warm-up included) is one the count check expects: with few
        # documents per client the warm-up shrinks first, then the clients
        avail = min(pool, n // 2)
        del_clients = max(1, min(p.clients, avail))
        del_warmup = min(warmup, max(0, avail - del_clients) // del_clients)
        n_del = min(ops, avail - del_warmup * del_clients)
        del_rows = order[::-1][: n_del + del_warmup * del_clients]
        deletes = [ids[r : r + 1] for r in del_rows]
        deleted = by_pool(
            "delete", "delete", deletes, n_del, clients=del_clients, warmup_ops=del_warmup
        )
        live = np.ones(n, bool)
        if deleted:
            live[del_rows] = False
            held = coll.count()
            if held != live.sum():
                raise TaskFailed(
                    f"count check after delete: {ctx.store.engine} holds {held} of {live.sum()} documents"
                )

        # find by condition: tags.i == a value some live document has
        values = rng.choice(tags[live], size=min(pool, 10_000))
        conditions = [Cmp(TAG, "eq", int(v)) for v in values]
        by_pool("find_by_condition", "find", conditions, ops, **common)

        # find by vector, once per search setting (the index is built once)
        queries = data.queries(min(p.ops, 10_000))
        data.describe["queries"] = len(queries)
        truth = data.truth(live, queries, max(p.k, 100))
        shared_q = ctx.share("queries", queries)

        def scored(rec: TaskRecord, payloads: list[Any]) -> dict[str, Any]:
            return {"scores": score(payloads, truth, p.k, data.distances_of(queries, live)).scores}

        for setting in ctx.searches:
            apply_setting(coll, setting)
            extra: dict[str, Any] = {"search": setting.given()} if setting.given() else {}
            search = SearchFactory(shared_q, p.k, setting=setting)
            # compat: one timed query, then recall over the whole query set
            timed = Task(
                "find_by_vector", search, ops=1 if compat else ops, **({} if compat else common)
            )
            ctx.measure(timed, coll, None if compat else scored, phase="search", **extra)
            if compat:
                recall = Task("recall_queries", search, ops=len(queries), **common)
                ctx.measure(recall, coll, scored, **extra)
            ctx.setting_done(setting, "find_by_vector", ctx.tasks[-1].scores)
        if ctx.store.supports(Capability.SIZE):
            ctx.metrics["size_bytes"] = coll.size_bytes()
