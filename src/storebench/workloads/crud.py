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

from typing import Any, Literal

import numpy as np
from pydantic import Field

from storebench.data import synthetic
from storebench.data.batch import DocBatch
from storebench.data.shared import Shared
from storebench.data.truth import GroundTruth, recall_at_k
from storebench.driver import FnOp, Op, Task
from storebench.errors import NotSupported, TaskFailed, UserError
from storebench.stores.base import Capability, Collection
from storebench.stores.filters import Cmp
from storebench.workloads.base import Params, RunContext, Workload

TAG = "tags.i"


class CrudParams(Params):
    dataset: str | None = Field(
        None, description="a dataset name or path (`storebench dataset list`); default synthetic"
    )
    n: int = Field(10_000, ge=1, description="documents created (with a dataset: at most its size)")
    dim: int = Field(128, ge=1, description="embedding dimension")
    metric: Literal["l2", "ip", "cosine"] = "l2"
    data: Literal["clustered", "uniform"] = "clustered"
    batch_size: int = Field(1_000, ge=1, description="documents per insert call")
    ops: int = Field(1_000, ge=1, description="operations per task (read, update, ...)")
    warmup: int = Field(10, ge=0, description="untimed operations per client before each task")
    clients: int = Field(1, ge=1)
    k: int = Field(10, ge=1, description="neighbours per find-by-vector")
    tag_values: int | None = Field(
        None, ge=1, description="tags.i is uniform in [0, tag_values); default n"
    )
    seed: int = 0


# --- operation factories (module level: picklable for process clients) -------


class _Inserts(Op):
    def __init__(self, ids: Shared, tags: Shared, vecs: Shared, batch: int, coll: Collection):
        self.insert = coll.insert
        ids_a, tags_a, vecs_a = ids.array, tags.array, vecs.array
        self.batches = [
            DocBatch(ids_a[s : s + batch], {TAG: tags_a[s : s + batch]}, vecs_a[s : s + batch])
            for s in range(0, len(ids_a), batch)
        ]

    def __call__(self, i: int) -> None:
        self.insert(self.batches[i])


class InsertFactory:
    def __init__(self, ids: Shared, tags: Shared, vecs: Shared, batch: int):
        self.args = (ids, tags, vecs, batch)

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        return _Inserts(*self.args, coll)


class PoolFactory:
    """Op i applies ``method`` to ``pool[i % len(pool)]`` (warm-up i < 0
    wraps to the pool's end)."""

    def __init__(self, method: str, pool: list[Any]):
        self.method = method
        self.pool = pool

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        fn = getattr(coll, self.method)
        pool = self.pool
        m = len(pool)
        return FnOp(lambda i: fn(pool[i % m]))


class _Searches(Op):
    def __init__(self, coll: Collection, queries: Shared, k: int):
        self.search = coll.search
        self.q = np.ascontiguousarray(queries.array)
        self.k = k
        self.found = np.full((len(self.q), k), -1, np.int64)
        self.seen = np.zeros(len(self.q), bool)

    def __call__(self, i: int) -> None:
        j = i % len(self.q)
        self.found[j] = self.search(self.q[j : j + 1], self.k).ids[0]
        self.seen[j] = True

    def finish(self) -> Any:
        return self.found, self.seen


class SearchFactory:
    def __init__(self, queries: Shared, k: int):
        self.queries = queries
        self.k = k

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        return _Searches(coll, self.queries, self.k)


# --- data ----------------------------------------------------------------------


class CrudData:
    """The documents, queries and ground truth: synthetic (DocArray's shape:
    uniform ``tags.i``, clustered vectors) or a dataset's."""

    def __init__(self, p: CrudParams):
        self.p = p
        self.ds = None
        if p.dataset is not None:
            from storebench.data import datasets

            self.ds = datasets.load(p.dataset)
            if self.ds.nq == 0:
                raise UserError("the dataset has no queries for find by vector", where=self.ds.name)
            self.n = min(p.n, self.ds.n) if "n" in p.model_fields_set else self.ds.n
            self.ids = np.asarray(self.ds.ids[: self.n])
            self.vecs = self.ds.vectors if self.n == self.ds.n else self.ds.vectors[: self.n]
            self.metric = self.ds.metric
            if TAG in self.ds.fields:  # a copy: updates change it
                self.tags = np.array(self.ds.fields[TAG][: self.n], dtype=np.int64)
            else:
                self.tags = synthetic.uniform_ints(self.n, 0, p.tag_values or self.n, p.seed)
            self.describe = {
                "dataset": self.ds.name,
                "n": self.n,
                "dim": self.ds.dim,
                "metric": self.metric,
            }
        else:
            self.n = p.n
            self.ids = np.arange(p.n, dtype=np.int64)
            self.tags = synthetic.uniform_ints(p.n, 0, p.tag_values or p.n, p.seed)
            self.vecs = synthetic.vectors(p.n, p.dim, p.data, p.seed)
            self.metric = p.metric
            self.describe = {
                "synthetic": p.data,
                "n": p.n,
                "dim": p.dim,
                "metric": p.metric,
                "seed": p.seed,
            }

    def queries(self, count: int) -> np.ndarray:
        if self.ds is not None:
            return np.ascontiguousarray(self.ds.queries[: min(count, self.ds.nq)])
        return synthetic.vectors(count, self.p.dim, self.p.data, self.p.seed + 1)

    def truth(self, live: np.ndarray, queries: np.ndarray, k: int) -> GroundTruth:
        """Exact neighbours among the documents still alive (cached on disk
        for datasets)."""
        if self.ds is not None:
            mask = np.zeros(self.ds.n, bool)
            mask[: self.n] = live
            return self.ds.truth(k, where=mask, nq=len(queries))
        return GroundTruth.compute(self.ids[live], self.vecs[live], queries, k, self.metric)


# --- the workload ------------------------------------------------------------


class CrudWorkload(Workload):
    name = "crud"
    Params = CrudParams
    requires = frozenset({Capability.INSERT, Capability.SEARCH})

    @classmethod
    def check(cls, p: CrudParams) -> None:
        if p.dataset is not None:
            from storebench.data import datasets

            ds = datasets.load(p.dataset)
            if ds.nq == 0:
                raise UserError(f"{ds.name} has no queries for find by vector", where="dataset")

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
        data = CrudData(p)
        n, ids, tags, vecs = data.n, data.ids, data.tags, data.vecs
        ctx.metrics["data"] = data.describe
        docs = DocBatch(ids, {TAG: tags}, vecs)
        coll = ctx.collection("crud", docs.schema(data.metric, indexed=(TAG,)))
        common: dict[str, Any] = {"clients": p.clients, "warmup_ops": warmup}
        pool = ops + warmup * p.clients  # distinct arguments for every op

        # create
        batch_size = batch_size or n
        n_batches = -(-n // batch_size)
        shared = (ctx.share("ids", ids), ctx.share("tags", tags), ctx.share("vecs", vecs))
        ctx.measure(
            Task(
                "create",
                InsertFactory(*shared, batch_size),
                clients=min(p.clients, n_batches),
                ops=n_batches,
                items_per_op=batch_size,
            ),
            coll,
        )
        held = coll.count()
        if held != n:
            raise TaskFailed(
                f"count check after create: {ctx.store.engine} holds {held} of {n} documents"
            )
        if ctx.store.supports(Capability.SIZE):
            ctx.metrics["size_bytes_after_create"] = coll.size_bytes()
        if ctx.store.supports(Capability.INDEX):
            ctx.once("build_index", lambda: coll.build_index(ctx.store.spec.index), items=n)

        # read, update, delete by id: one document per op; ids cycle through a
        # random order, and deletes take distinct ids from at most half the set
        order = rng.permutation(n)
        read_ids = [order[j : j + 1] for j in range(min(pool, n))]
        self._task(ctx, coll, "read", "get", read_ids, ops, common)
        upd_rows = order[: min(pool, n)]
        new_tags = rng.integers(0, p.tag_values or n, len(upd_rows), dtype=np.int64)
        updates = [
            DocBatch(ids[r : r + 1], {TAG: new_tags[j : j + 1]}, vecs[r : r + 1])
            for j, r in enumerate(upd_rows)
        ]
        self._task(ctx, coll, "update", "update", updates, ops, common)
        tags[upd_rows] = new_tags
        del_rows = order[::-1][: min(pool, n // 2)]
        n_del = max(0, len(del_rows) - warmup * p.clients)
        deleted = self._task(
            ctx, coll, "delete", "delete", [ids[r : r + 1] for r in del_rows], n_del, common
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
        self._task(ctx, coll, "find_by_condition", "find", conditions, ops, common)

        # find by vector, once per search setting (the index is built once)
        queries = data.queries(min(p.ops, 10_000))
        truth = data.truth(live, queries, max(p.k, 100))
        shared_q = ctx.share("queries", queries)
        for setting in ctx.search_settings():
            if setting:
                coll.set_search_params(setting)
            extra = {"search": setting} if setting else {}
            if compat:  # one timed query, then recall over the whole query set
                ctx.measure(
                    Task("find_by_vector", SearchFactory(shared_q, p.k), ops=1), coll, **extra
                )
                _, payloads = ctx.measure(
                    Task(
                        "recall_queries", SearchFactory(shared_q, p.k), ops=len(queries), **common
                    ),
                    coll,
                    **extra,
                )
                timed = -2
            else:
                _, payloads = ctx.measure(
                    Task("find_by_vector", SearchFactory(shared_q, p.k), ops=ops, **common),
                    coll,
                    **extra,
                )
                timed = -1
            recall = _recall(payloads, truth, len(queries), p.k)
            ctx.tasks[timed][f"recall@{p.k}"] = recall
            ctx.metrics.setdefault(f"recall@{p.k}", recall)  # of the first setting
        if ctx.store.supports(Capability.SIZE):
            ctx.metrics["size_bytes"] = coll.size_bytes()

    @staticmethod
    def _task(
        ctx: RunContext,
        coll: Collection,
        name: str,
        method: str,
        pool: list[Any],
        ops: int,
        common: dict[str, Any],
    ) -> bool:
        """Time ``ops`` calls of ``coll.<method>`` over ``pool``; a method the
        store lacks is recorded as unsupported."""
        try:
            ctx.store.require({Capability(method)})
        except NotSupported as exc:
            ctx.unsupported(name, exc)
            return False
        if ops:
            ctx.measure(Task(name, PoolFactory(method, pool), ops=ops, **common), coll)
        return True


def _recall(payloads: list[Any], truth: GroundTruth, n_queries: int, k: int) -> float | None:
    """Mean recall@k over the queries the clients ran (each returns its rows)."""
    found = np.full((n_queries, k), -1, np.int64)
    seen = np.zeros(n_queries, bool)
    for rows, ran in payloads:
        found[ran] = rows[ran]
        seen |= ran
    if not seen.any():
        return None
    return float(
        recall_at_k(found[seen], GroundTruth(truth.ids[seen], truth.distances[seen]), k).mean()
    )
