"""``SearchRun``: the phases of one vector search run (load, index, count
check, measured searches at chosen settings and client counts, untimed
recall for tuning), which ``search``, ``tune`` and ``scale`` drive.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from storebench.data.filters import Cmp, Filter
from storebench.data.truth import GroundTruth
from storebench.driver import Task, native
from storebench.driver.choice import choose_executor
from storebench.errors import NotSupported, TaskFailed, UserError
from storebench.results.records import TaskRecord
from storebench.results.scores import RECALL
from storebench.stores.base import Capability, Collection, Store
from storebench.stores.params import SearchParams
from storebench.workloads.base import MemoryNeed, RunContext, TimeModel, Workload, search_time
from storebench.workloads.vector.accounting import client_accounting, engine_delta, index_fields
from storebench.workloads.vector.data import TRUTH_K, VectorData, check_dataset, resolve_dataset
from storebench.workloads.vector.ops import InsertFactory, SearchFactory, apply_setting
from storebench.workloads.vector.params import VectorParams, search_memory, task_name
from storebench.workloads.vector.scoring import DistancesOf, score, score_found


class VectorWorkload(Workload):
    """A workload on the vector data (search, tune, scale, streaming, crud):
    it inserts and searches, its dataset's facts are the run's, and it holds
    the data and an index in memory."""

    requires = frozenset({Capability.INSERT, Capability.SEARCH})

    @classmethod
    def measured_time(cls, p: Any, n: float, store: type[Store] | None) -> TimeModel:
        """One measured search task (``SearchRun.measure``) over ``n``
        documents: ``duration_s``, else the queries (or ``ops``) for at
        least ``min_window_s``; its warm-up seconds before it."""
        if p.duration_s:
            return TimeModel(p.duration_s + p.warmup_s)
        return search_time(p.ops or p.queries, n, store, p.min_window_s + p.warmup_s)

    @classmethod
    def resolve(cls, p: Any, stated: frozenset[str]) -> Any:
        return resolve_dataset(p, stated)

    @classmethod
    def check(cls, p: Any) -> None:
        check_dataset(p)

    @classmethod
    def memory(cls, p: Any) -> MemoryNeed:
        return search_memory(p)


def build_index(
    ctx: RunContext, coll: Collection, items: int, name: str = "build_index", **fields: Any
) -> TaskRecord | None:
    """Time the index build of ``items`` documents (the adapter returns once
    the engine says it is ready); None for a store without one (exact
    search). An engine that indexed during the upload builds nothing: the
    record says so (``index_build``) and has no build rate."""
    if not ctx.store.supports(Capability.INDEX):
        return None
    ctx.once(
        name,
        lambda: coll.build_index(ctx.index),
        items=items,
        derive=index_fields,
        phase="index",
        **fields,
    )
    return ctx.tasks[-1]


class SearchRun:
    """One run of a vector search workload: load, index, count check, then
    measured searches at chosen settings and client counts."""

    def __init__(self, ctx: RunContext, p: VectorParams, name: str, n: int | None = None):
        self.ctx = ctx
        self.p = p
        # n: the documents the run needs when not p.n (scale: its largest size)
        self.data = VectorData(p if n is None else p.model_copy(update={"n": n}), labels=p.labels)
        if n is not None and n > self.data.n:
            raise UserError(
                f"sizes up to {n:,} need that many documents; the data has {self.data.n:,}",
                where="steps",
            )
        self.k = p.k
        self.truth_k = max(p.k, TRUTH_K)
        ctx.metrics["data"] = self.data.describe
        first = self.data.rows(0, 1)
        self.coll = ctx.collection(
            name, first.schema(self.data.metric, indexed=tuple(self.data.labels))
        )
        self.shared_ids = ctx.share("ids", self.data.ids)
        self.shared_vecs = ctx.share("vecs", self.data.vecs)
        self.shared_fields = {
            f: ctx.share(f"field{i}", c) for i, (f, c) in enumerate(self.data.fields.items())
        }
        self.queries = self.data.queries(p.queries)
        self.data.describe["queries"] = len(self.queries)
        self.shared_q = ctx.share("queries", self.queries)
        self.loaded = 0
        self.truths: dict[str | None, GroundTruth] = {}
        self.lives: dict[str | None, np.ndarray] = {}  # the rows each truth covers

    # --- executors
    def executor(self, clients: int) -> str:
        """The task's executor: as asked, else processes for several clients
        where the store can serve them (queries reach them memory-mapped),
        else the run's or the store's (``choose_executor``)."""
        return choose_executor(self.ctx.store, self.ctx.driver.executor, self.p.executor, clients)

    # --- load, index, count
    def upload(self, stop: int, name: str = "upload") -> None:
        """Insert rows [loaded, stop) in batches by parallel uploaders."""
        p, ctx = self.p, self.ctx
        start = self.loaded
        batches = -(-(stop - start) // p.batch_size)
        clients = min(p.upload_clients or max(p.client_counts()), batches)
        task = Task(
            name,
            InsertFactory(
                self.shared_ids, self.shared_fields, self.shared_vecs, p.batch_size, start, stop
            ),
            clients=clients,
            ops=batches,
            items_per_op=p.batch_size,
            executor=self.executor(clients),
        )
        ctx.measure(
            task,
            self.coll,
            phase="upload",
            n=stop,
            items=stop - start,  # the last batch may be short
            executor=ctx.executor_name(task),
        )
        self.loaded = stop
        self.count_check(stop, f"after {name}")

    def count_check(self, expected: int, when: str) -> None:
        """The engine's own count must equal what was loaded: a run against a
        half-empty collection is a failed run, not a fast one."""
        held = self.coll.count()
        self.ctx.metrics.setdefault("count_checks", []).append(
            {"when": when, "expected": expected, "held": held}
        )
        if held != expected:
            raise TaskFailed(
                f"count check {when}: {self.ctx.store.engine} holds {held:,} of "
                f"{expected:,} documents"
            )

    def build_index(self, name: str = "build_index", into: dict[str, Any] | None = None) -> None:
        """``build_index`` of the loaded rows, then the count check, the
        collection's size and the index metrics, into the run's metrics
        (or a step's, ``into``): ``index`` says whether a build step built
        it or the upload did; ``index_s`` is the build's time, only where
        there was a build."""
        rec = build_index(self.ctx, self.coll, self.loaded, name, n=self.loaded)
        if rec is not None:
            self.count_check(self.loaded, f"after {name}")
        self.size(into)
        out = self.ctx.metrics if into is None else into
        if rec is not None and rec.index_build == "during_insert":
            out["index"] = "during upload"
        elif rec is not None:
            out |= {"index": "built", "index_s": rec.elapsed_s}

    def size(self, into: dict[str, Any] | None = None) -> int | None:
        """The collection's size as the store counts it (its data and indexes:
        a table with its indexes, keys with their index's memory) beside the
        vectors loaded, into the run's metrics (the latest) and ``into``:
        bytes per vector come from this, not from a server's data directory
        (an in-memory server's holds only its snapshots; a database's has its
        log and catalogs). None where the store cannot tell."""
        if not self.ctx.store.supports(Capability.SIZE):
            return None
        try:
            size = self.coll.size_bytes()
        except NotSupported:
            return None
        for out in (self.ctx.metrics, into or {}):
            out["size_bytes"] = size
            out["size_vectors"] = self.loaded
        return size

    # --- truth
    def truth(self, label: str | None) -> GroundTruth:
        """Exact neighbours among the loaded rows (those with the label)."""
        if label not in self.truths:
            live = np.zeros(self.data.n, bool)
            live[: self.loaded] = True
            if label is not None:
                live &= np.asarray(self.data.labels[label]) == label
            self.truths[label] = self.data.truth(live, self.queries, self.truth_k)
            self.lives[label] = live
        return self.truths[label]

    def distances_of(self, label: str | None) -> DistancesOf:
        """True distances of found ids, among the rows ``truth(label)`` covers."""
        return self.data.distances_of(self.queries, self.lives[label])

    def reset_truth(self) -> None:
        self.truths.clear()
        self.lives.clear()

    # --- search
    def apply(self, setting: SearchParams) -> None:
        apply_setting(self.coll, setting)

    def measure(
        self,
        name: str,
        setting: SearchParams,
        clients: int,
        label: str | None = None,
        setting_key: str = "search",
        **extra: Any,
    ) -> TaskRecord | None:
        """One measured search task; its record gets its scores,
        client CPU accounting and the engine's own time per call. The
        setting goes under ``setting_key``: ``search`` for a swept setting
        (reports then treat each as a configuration of its own), ``setting``
        for one the workload chose (tuned)."""
        p, ctx = self.p, self.ctx
        where: Filter | None = Cmp(label, "eq", label) if label is not None else None
        try:
            if where is not None:
                ctx.store.require({Capability.FILTERED_SEARCH})
            # native: unfiltered search only
            kind = "search" if where is None else "filtered search"
            client = native.resolve(p.client, self.coll, kind)
        except NotSupported as exc:
            ctx.unsupported(name, exc)
            return None
        truth = self.truth(label)
        task = Task(
            name,
            SearchFactory(self.shared_q, self.k, where, setting),
            clients=clients,
            ops=None if p.duration_s else (p.ops or len(self.queries)),
            duration_s=p.duration_s,
            warmup_ops=p.warmup,
            warmup_s=p.warmup_s,
            rate=p.rate,
            executor=self.executor(clients),
            min_duration_s=0.0 if p.duration_s else p.min_window_s,
            client=client,
        )
        executor = ctx.executor_name(task)
        extra = {"phase": "search", setting_key: setting.given(), "executor": executor} | extra
        extra["client"] = client
        if label is not None:
            extra |= {"filter": label, "selectivity": self.data.selectivity[label]}
        if p.rate is not None:
            extra["target_rate"] = p.rate
        before = ctx.store.engine_stats() if p.engine_time else None

        def scored(rec: TaskRecord, payloads: list[Any]) -> dict[str, Any]:
            s = score(payloads, truth, self.k, self.distances_of(label))
            out: dict[str, Any] = {
                "scores": s.scores,
                "queries_scored": s.queries,
                "short_answers": s.short,
            }
            out |= client_accounting(rec, executor, clients)
            after = ctx.store.engine_stats() if p.engine_time else None
            eng = engine_delta(before, after, "search", rec.latency_ns.get("mean"))
            if eng is not None:
                out["engine"] = eng
            return out

        ctx.measure(task, self.coll, scored, **extra)
        return ctx.tasks[-1]

    def recall_at(self, setting: SearchParams, label: str | None = None) -> float:
        """Recall@k at a setting, untimed (for tuning): every query, in
        batches, through the same search call."""
        self.apply(setting)
        truth = self.truth(label)
        # the search call's arguments after the queries: a filter only where there is one
        args = (self.k,) if label is None else (self.k, Cmp(label, "eq", label))
        found = np.full((len(self.queries), self.k), -1, np.int64)
        for s in range(0, len(self.queries), 100):
            q = self.queries[s : s + 100]
            found[s : s + len(q)] = self.coll.search(q, *args).ids[:, : self.k]
        fd = self.distances_of(label)(np.arange(len(found)), found)
        r = score_found(found, truth, self.k, fd, [RECALL]).of(RECALL)
        return 0.0 if r is None else r

    def curve(
        self,
        setting: SearchParams,
        clients: list[int],
        prefix: str = "",
        setting_key: str = "search",
        **extra: Any,
    ) -> tuple[str, list[TaskRecord | None]]:
        """Latency and throughput at each client count, then filtered
        search; returns the task at the most clients (runs are ranked by
        its QPS, the studies' figure) and the unfiltered tasks' records."""
        label = " ".join(x for x in (prefix, setting.label()) if x)
        recs = [
            self.measure(
                task_name("search", label, f"c={c}"), setting, c, None, setting_key, **extra
            )
            for c in clients
        ]
        self.filtered(setting, label, setting_key, **extra)
        return task_name("search", label, f"c={max(clients)}"), recs

    def filtered(
        self, setting: SearchParams, suffix: str, setting_key: str = "search", **extra: Any
    ) -> None:
        """Filtered search at each selectivity (recall against filtered truth)."""
        for label, s in self.data.selectivity.items():
            pct = f"{s * 100:g}%"
            self.measure(
                task_name("filtered", pct, suffix, f"c={self.p.filter_clients}"),
                setting,
                self.p.filter_clients,
                label,
                setting_key,
                **extra,
            )
