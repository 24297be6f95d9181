"""``ingest``: the ArangoDB insert study (arangob's ``document`` test case).

``count`` documents of ``complexity`` string attributes (``test1`` ..
``testN``, each ``string_size`` bytes) are inserted into one collection by
``concurrency`` clients, ``batch_size`` documents per request, with up to
``inflight`` requests outstanding per client. Reported per request and per
document: ops/s, elapsed time and latency percentiles; then a count check.

``inflight`` > 1 runs that many request streams per client, each on its own
connection (the driver's lanes), so each client has that many requests in
flight. ``pipeline`` > 1 sends that many requests at once on one connection
(``Collection.insert_pipelined``: Redis pipelines, libpq pipeline mode): each
timed operation is then one pipeline, so latency is per pipeline, and the
record gives requests/s and documents/s beside pipelines/s. A store without
the ``pipeline`` capability records the insert task as unsupported; it is
never done another way. The two multiply: a client has ``inflight x
pipeline`` requests outstanding.

``executor`` (the vector workloads' parameter; ``IngestWorkload.executor``):
``threads`` or ``processes`` as asked; ``auto`` is the run's or the store's
choice (threads), not the vector workloads' processes for several clients:
here threads measured faster (``AUTO_PROCESSES``). With processes each one
rebuilds its lane's batches before the clock starts, and their exit falls in
the settle window (below). The insert task records the executor and the
client CPU beside the wall time (``client_cpu_per_s``, ``client_saturated``).

``client``: ``python`` times the store's Python client; ``native`` the
same requests prepared by the store (``Collection.native_insert``) and sent
by the compiled loop (``driver/native.py``), where the Python client's CPU
per request would be what is measured; ``auto``: native where the store
and the installed extension have it. The insert task records ``client``.

arangob's ``--async`` had the server acknowledge before doing the work. Here
the insert task ends at the last acknowledgment; then ``settle`` waits, by
polling the engine's own count (no fixed sleep, at most
``settle_timeout_s``), until the engine holds every document, timed as a task
of its own from the last acknowledgment (its ``call_s`` is the polling
alone; the rest is the driver's few milliseconds in between). By default the
run's elapsed time and documents/s include it (``metrics.counted:
completed``); ``mode: compat`` stops the clock at the last acknowledgment as
arangob did (``counted: acknowledged``) and records ``settle`` beside it. Engines that acknowledge before a write is visible
(Elasticsearch and OpenSearch until a refresh) show it there; a store option
such as Postgres ``synchronous_commit=off`` changes durability, not
visibility, and the record names the options used.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from pydantic import Field

from storebench.data.batch import DocBatch, Schema
from storebench.driver import Op, Task, native
from storebench.driver.choice import ExecutorChoice, choose_executor
from storebench.driver.native import ClientChoice
from storebench.errors import NotSupported, TaskFailed
from storebench.results.records import TaskRecord
from storebench.stores.base import AsyncView, Capability, Collection, Store
from storebench.workloads.base import (
    MemoryNeed,
    Params,
    RunContext,
    TimeModel,
    ViewsOp,
    Workload,
    load_time,
)
from storebench.workloads.vector.accounting import client_accounting


class IngestParams(Params):
    count: int = Field(100_000, ge=1, description="documents inserted (arangob --requests)")
    concurrency: int = Field(1, ge=1, description="clients (arangob --concurrency)")
    batch_size: int = Field(1, ge=1, description="documents per request (arangob --batch-size)")
    inflight: int = Field(1, ge=1, description="requests each client keeps outstanding")
    complexity: int = Field(
        10, ge=0, description="string attributes per document (arangob --complexity)"
    )
    string_size: int = Field(15, ge=1, description="bytes per string attribute")
    pipeline: int = Field(
        1, ge=1, description="requests sent together on one connection per operation (1: off)"
    )
    settle_timeout_s: float = Field(
        60.0, gt=0, description="longest wait for the engine to hold every document"
    )
    executor: ExecutorChoice = Field(
        "auto", description="threads | processes; auto: the run's or the store's choice"
    )
    client: ClientChoice = Field(
        "auto",
        description="auto (the compiled loop where the store has it, else python) | python | native",
    )

    @property
    def requests(self) -> int:
        return -(-self.count // self.batch_size)

    @property
    def ops(self) -> int:
        """Timed operations: requests, or pipelines of ``pipeline`` requests."""
        return -(-self.requests // self.pipeline)


# executor auto: several clients as processes (as the vector workloads do)?
# Not here. Measured on 2 cores against managed servers on the same machine
# (20,000 one-document requests, 8 clients, benchmarks/ingest_native.py with
# --executor processes, then threads, a minute apart):
# threads 49k vs processes 28k requests/s on Redis (pipeline 16: 84k vs 76k),
# 12.8k vs 9.8k on PostgreSQL (16: 50k vs 39k); sqlite (default scenario,
# 50,000 documents) 39-218k vs 28-44k documents/s. Process clients use more
# CPU per request (31.8 vs 19.5 us on Redis: eight interpreters on two
# cores beside the server), and the executor reaps them (0.1-1.4 s of
# interpreter exits) between the last acknowledgment and the settle poll,
# which the default mode counts. Once a client's Python is the limit and
# there are cores to spare (client_saturated on a larger machine), processes
# may pay: executor: processes, or set this True.
AUTO_PROCESSES = False


def make_schema(p: IngestParams) -> Schema:
    return Schema({f"test{j + 1}": "str" for j in range(p.complexity)})


class _Inserts(ViewsOp):
    """Request r inserts documents [r*batch, (r+1)*batch); operation i sends
    requests [i*pipeline, (i+1)*pipeline): one ``insert``, or one
    ``insert_pipelined`` of them. A lane runs operations lane, lane+lanes,
    ...; it prepares just those batches (views of one shared column per
    attribute) before timing starts."""

    def __init__(self, coll: Collection, p: IngestParams, lane: int, lanes: int):
        self.lanes = lanes
        value = ("some test value" * (p.string_size // 15 + 1))[: p.string_size]
        ids = np.arange(p.count, dtype=np.int64)
        col = np.full(p.count, value, dtype=object)
        docs = DocBatch(ids, {f"test{j + 1}": col for j in range(p.complexity)})
        b, w, n = p.batch_size, p.pipeline, p.requests
        mine = range(lane, p.ops, lanes)
        self.coll = coll
        self.colls = (coll,)
        self.pipelined = w > 1
        self.args: list[Any]
        if w == 1:
            self.send: Callable[[Any], None] = coll.insert
            self.args = [docs.slice(i * b, (i + 1) * b) for i in mine]
        else:
            self.send = coll.insert_pipelined
            self.args = [
                [docs.slice(r * b, (r + 1) * b) for r in range(i * w, min((i + 1) * w, n))]
                for i in mine
            ]

    def __call__(self, i: int) -> None:
        self.send(self.args[i // self.lanes])

    def native(self) -> Any:
        """The same requests for the native loop: op j sends ``args[j]``."""
        return self.coll.native_insert([a if self.pipelined else [a] for a in self.args])

    def opened(self, view: AsyncView) -> None:  # type: ignore[override]
        self.asend = view.insert_pipelined if self.pipelined else view.insert

    async def acall(self, i: int) -> None:
        await self.asend(self.args[i // self.lanes])


_POLL_S = 0.002  # between count polls while the engine settles


def settled(coll: Collection, want: int, timeout_s: float) -> tuple[int, int]:
    """Polls the engine's count until it holds ``want`` documents or
    ``timeout_s`` passed; returns (last count, polls). The deadline limits
    waiting; the driver times the call."""
    give_up = time.monotonic() + timeout_s
    pause = threading.Event()
    polls = 0
    while True:
        held = coll.count()
        polls += 1
        if held >= want or time.monotonic() >= give_up:
            return held, polls
        pause.wait(_POLL_S)  # a poll interval, not a guess at the engine's time


class Inserts:
    def __init__(self, p: IngestParams):
        self.p = p
        # the ops this factory made, freed with it: their prepared batches
        # (one object per request) are released after the run, not between
        # the last acknowledgment and the settle poll
        self.made: list[Op] = []

    def __call__(self, coll: Collection, c: int, lanes: int) -> Op:
        op = _Inserts(coll, self.p, c, lanes)
        self.made.append(op)
        return op


class IngestWorkload(Workload):
    name = "ingest"
    Params = IngestParams
    requires = frozenset({Capability.INSERT})

    @classmethod
    def memory(cls, p: IngestParams) -> MemoryNeed:
        # each lane makes the ids and a column of references over every
        # document, then a batch of views (a DocBatch) per request it sends
        lanes = p.concurrency * p.inflight
        per_request = 500 + 150 * (p.complexity + 1)
        return MemoryNeed(
            {"data": lanes * p.count * 16 + p.requests * per_request},
            ("count", "concurrency", "inflight", "complexity", "batch_size"),
            p.count,
            0,
            p.complexity * p.string_size,
        )

    @classmethod
    def time_model(cls, p: IngestParams, settings: int, store: type[Store] | None) -> TimeModel:
        """A request per batch, each carrying its first document; the
        batch's other documents at the rate of a batched insert."""
        return load_time(p.count - p.requests, None) + TimeModel.requests(p.requests)

    @classmethod
    def executor(cls, p: IngestParams, store: Store | type[Store], run_executor: str | None) -> str:
        # threads unless asked (or the run's executor): see AUTO_PROCESSES
        lanes = p.concurrency * p.inflight
        return choose_executor(
            store, run_executor, p.executor, lanes, auto_processes=AUTO_PROCESSES
        )

    def run(self, ctx: RunContext, p: IngestParams) -> None:
        if p.pipeline > 1:
            try:
                ctx.store.require({Capability.PIPELINE})
            except NotSupported as exc:  # recorded, never done another way
                ctx.unsupported("insert", exc)
                return
        compat = ctx.mode == "compat"
        coll = ctx.collection("ingest", make_schema(p))
        try:
            client = native.resolve(p.client, coll, "insert")
        except NotSupported as exc:  # recorded, never done another way
            ctx.unsupported("insert", exc)
            return
        # held until the end of the run: the ops it made are freed after settle
        task = Task(
            "insert",
            Inserts(p),
            clients=p.concurrency,
            inflight=p.inflight,
            ops=p.ops,
            items_per_op=p.batch_size * p.pipeline,
            executor=self.executor(p, ctx.store, ctx.driver.executor),
            client=client,
        )
        executor = ctx.executor_name(task)

        def rates(rec: TaskRecord, _: Any) -> dict[str, Any]:
            wall = rec.elapsed_s
            done = rec.complete and wall > 0
            return {
                "docs": p.count,
                "requests": p.requests,
                "docs_per_s": p.count / wall if done else None,
                "requests_per_s": p.requests / wall if done else None,
                # client CPU beside the wall time: is the client the bound?
                **client_accounting(rec, executor, p.concurrency),
            }

        stats, _ = ctx.measure(
            task,
            coll,
            rates,
            pipeline=p.pipeline,
            # one timed operation is one request, or one pipeline of them
            latency_per="pipeline" if p.pipeline > 1 else "request",
            executor=executor,
            client=client,
        )
        insert_s = stats.elapsed_ns / 1e9

        # until the engine holds every document: its own count, polled; timed
        # from the last acknowledgment (the insert task's end), so the
        # driver's bookkeeping in between is not lost
        held, polls = ctx.once(
            "settle",
            lambda: settled(coll, p.count, p.settle_timeout_s),
            since_ns=stats.end_ns,
            derive=lambda rec, out: {"held": out[0], "polls": out[1]},
            counted=not compat,
            # clients on other machines' clocks: from the first poll instead
            timed_from="last acknowledgment" if stats.end_ns is not None else "first poll",
        )
        settle_s = ctx.tasks[-1].elapsed_s
        ctx.headline = "insert"
        if held != p.count:
            raise TaskFailed(
                f"count check: {ctx.store.engine} holds {held} of {p.count} documents"
                f" ({settle_s:.3g} s after the last acknowledgment)"
            )
        # default: done when the engine holds them all; compat (arangob):
        # done at the last acknowledgment
        elapsed = insert_s if compat else insert_s + settle_s
        ctx.metrics["counted"] = "acknowledged" if compat else "completed"
        if compat:
            ctx.metrics["method"] = (
                "compat: the clock stops at the last acknowledgment (arangob); "
                "settle is recorded, not counted"
            )
        ctx.metrics["elapsed_s"] = elapsed
        ctx.metrics["settle_s"] = settle_s
        ctx.metrics["docs_per_s"] = p.count / elapsed if stats.complete else None
        ctx.metrics["requests_per_s"] = p.requests / elapsed if stats.complete else None
        if ctx.store.supports(Capability.SIZE):
            ctx.metrics["size_bytes"] = coll.size_bytes()
