"""``ingest``: the ArangoDB insert study (arangob's ``document`` test case).

``count`` documents of ``complexity`` string attributes (``test1`` ..
``testN``, each ``string_size`` bytes) are inserted into one collection by
``concurrency`` clients, ``batch_size`` documents per request, with up to
``inflight`` requests outstanding per client. Reported per request and per
document: ops/s, elapsed time and latency percentiles; then a count check.

``inflight`` > 1 runs that many request streams per client, each on its own
connection (the driver's lanes), so each client has that many requests in
flight. Throughput counts completed requests. arangob's ``--async`` had the
server acknowledge before doing the work; that is an engine mode, not a
client one: where an engine has it, it is a store option (e.g. Postgres
``synchronous_commit=off``), and the record names the options used.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from storebench.data.batch import DocBatch, Schema
from storebench.driver import Op, Task
from storebench.errors import TaskFailed
from storebench.stores.base import Capability, Collection
from storebench.workloads.base import Params, RunContext, Workload


class IngestParams(Params):
    count: int = Field(100_000, ge=1, description="documents inserted (arangob --requests)")
    concurrency: int = Field(1, ge=1, description="clients (arangob --concurrency)")
    batch_size: int = Field(1, ge=1, description="documents per request (arangob --batch-size)")
    inflight: int = Field(1, ge=1, description="requests each client keeps outstanding")
    complexity: int = Field(
        10, ge=0, description="string attributes per document (arangob --complexity)"
    )
    string_size: int = Field(15, ge=1, description="bytes per string attribute")


def make_schema(p: IngestParams) -> Schema:
    return Schema({f"test{j + 1}": "str" for j in range(p.complexity)})


class _Inserts(Op):
    """Request i inserts documents [i*batch, (i+1)*batch). A lane runs
    requests lane, lane+lanes, ...; it prepares just those batches (views of
    one shared column per attribute) before timing starts."""

    def __init__(self, coll: Collection, p: IngestParams, lane: int, lanes: int):
        self.insert = coll.insert
        self.lanes = lanes
        value = ("some test value" * (p.string_size // 15 + 1))[: p.string_size]
        ids = np.arange(p.count, dtype=np.int64)
        col = np.full(p.count, value, dtype=object)
        docs = DocBatch(ids, {f"test{j + 1}": col for j in range(p.complexity)})
        b = p.batch_size
        self.batches = [
            docs.slice(i * b, (i + 1) * b) for i in range(lane, -(-p.count // b), lanes)
        ]

    def __call__(self, i: int) -> None:
        self.insert(self.batches[i // self.lanes])


class Inserts:
    def __init__(self, p: IngestParams):
        self.p = p

    def __call__(self, coll: Collection, c: int, lanes: int) -> Op:
        return _Inserts(coll, self.p, c, lanes)


class IngestWorkload(Workload):
    name = "ingest"
    Params = IngestParams
    requires = frozenset({Capability.INSERT})

    def run(self, ctx: RunContext, p: IngestParams) -> None:
        coll = ctx.collection("ingest", make_schema(p))
        requests = -(-p.count // p.batch_size)
        stats, _ = ctx.measure(
            Task(
                "insert",
                Inserts(p),
                clients=p.concurrency,
                inflight=p.inflight,
                ops=requests,
                items_per_op=p.batch_size,
            ),
            coll,
        )
        # per document: a request's latency spread over its documents
        ctx.tasks[-1]["docs"] = p.count
        ctx.tasks[-1]["docs_per_s"] = p.count / (stats.elapsed_ns / 1e9) if stats.complete else None
        held = coll.count()
        if held != p.count:
            raise TaskFailed(f"count check: {ctx.store.engine} holds {held} of {p.count} documents")
        ctx.metrics["docs_per_s"] = ctx.tasks[-1]["docs_per_s"]
        ctx.metrics["elapsed_s"] = stats.elapsed_ns / 1e9
        if ctx.store.supports(Capability.SIZE):
            ctx.metrics["size_bytes"] = coll.size_bytes()
