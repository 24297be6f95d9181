"""Client CPU per request of storebench's client models, side by side.

On one managed PostgreSQL and one managed Redis (started here), ``--count``
single-document inserts (ingest's documents: 10 string attributes) by
``--clients`` clients, one request in flight each (pipeline 1), into a
fresh collection per run, through the driver as the ingest workload runs
them, with each client model in turn, alternated ``--repeat`` times:

- ``threads``: a thread per client, the store's sync client;
- ``processes``: a process per client (spawned before the clock starts);
- ``async/asyncio``, ``async/uvloop``: coroutines on one event loop in
  this process (the ``async`` executor), on the store's async view
  (asyncpg; Redis: an asyncio stream with hiredis);
- ``async-inline/uvloop``: the same loop running the sync client's call
  inline (what the executor does for an op without ``acall``): shows what
  that costs an I/O-bound store;
- ``asyncpg-raw/uvloop`` (postgres, where asyncpg is importable): the same
  prepared INSERT, same rows, on a bare asyncpg connection: the floor a
  view on asyncpg could reach.

Printed per engine and model: requests/s and client CPU per request (the
task's client CPU over its measured window, ``client_cpu_s``), best of the repeats and the median, and the load average as
each engine's runs end. Alternating the models within one run keeps a
shared machine's load from favouring one.

    python benchmarks/client_models.py [--count 20000] [--clients 8]
        [--repeat 3] [--engines postgres,redis]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

from storebench.driver import Driver, Op, Task
from storebench.driver.aio import AsyncExecutor
from storebench.stores.base import Collection, StoreSpec
from storebench.stores.opening import open_store
from storebench.stores.sql import pgvector
from storebench.workloads.ingest import IngestParams, Inserts, make_schema

ENGINES = {"postgres": "pgvector", "redis": "redis"}
MODELS = [
    "threads",
    "processes",
    "async/asyncio",
    "async/uvloop",
    "async-inline/uvloop",
    "asyncpg-raw/uvloop",
]


class _SyncOnly(Op):
    """An op's sync call alone: the async executor then runs it inline."""

    def __init__(self, op: Op):
        self.op = op

    def __call__(self, i: int) -> None:
        self.op.call(i)

    @property
    def call(self) -> Any:
        return self.op.call


class SyncOnly:
    def __init__(self, factory: Any):
        self.factory = factory

    def __call__(self, coll: Collection, c: int, lanes: int) -> Op:
        return _SyncOnly(self.factory(coll, c, lanes))


class _Asyncpg(Op):
    """Postgres inserts of the ingest op's batches, one prepared statement
    (the store's own SQL) on an asyncpg connection."""

    def __init__(self, op: Any, coll: Any):
        self.op, self.coll = op, coll

    def __call__(self, i: int) -> None:
        raise NotImplementedError("asyncpg: async clients only")

    async def aopen(self) -> None:
        import asyncpg

        self.conn = await asyncpg.connect(self.coll.store.spec.url)
        first = self.op.args[0]
        self.stmt = await self.conn.prepare(self.coll._insert_sql(first))
        self.params = [self.coll._insert_params(d) for d in self.op.args]

    async def acall(self, i: int) -> None:
        await self.stmt.fetch(*self.params[i // self.op.lanes])

    async def aclose(self) -> None:
        await self.conn.close()


class Asyncpg:
    def __init__(self, factory: Any):
        self.factory = factory

    def __call__(self, coll: Collection, c: int, lanes: int) -> Op:
        return _Asyncpg(self.factory(coll, c, lanes), coll)


def one(store: Any, model: str, p: IngestParams, k: int) -> tuple[float, float]:
    """(requests/s, client CPU us per request) of one run of ``model``."""
    executor, _, loop = model.partition("/")
    inline = executor == "async-inline"
    coll = store.create_collection(f"sb_models_{k}", make_schema(p))
    try:
        factory: Any = Inserts(p)
        if inline:
            factory = SyncOnly(factory)
        if executor == "asyncpg-raw":
            factory, executor = Asyncpg(factory), "async"
        AsyncExecutor.event_loop = loop or "auto"
        AsyncExecutor.workers = 0
        task = Task(
            "insert",
            factory,
            clients=p.concurrency,
            ops=p.count,
            executor="async" if inline else executor,
        )
        stats, _ = Driver().run(task, coll)
        if coll.count() != p.count:
            raise SystemExit(f"{model}: {coll.count()} of {p.count} documents written")
        return stats.ops_per_s, stats.cpu_s / stats.ops * 1e6
    finally:
        coll.drop()


def usable(model: str, engine: str) -> bool:
    if model.startswith("asyncpg-raw"):
        return engine == "postgres" and pgvector._asyncpg is not None
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--count", type=int, default=20_000, help="documents per run")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="runs per model, alternated")
    ap.add_argument("--engines", default="postgres,redis", help=f"of {', '.join(ENGINES)}")
    ap.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    a = ap.parse_args(argv)
    models = a.models.split(",")
    p = IngestParams(count=a.count, concurrency=a.clients, complexity=10)
    print(
        f"{a.count} single-document inserts, {a.clients} clients x pipeline 1, best of {a.repeat}"
    )
    print(
        f"{'engine':9} {'model':22} {'req/s best':>10} {'median':>8} {'us/req best':>11} {'median':>7}"
    )
    k = 0
    for name in a.engines.split(","):
        opened = open_store(StoreSpec(ENGINES[name]))
        try:
            mine = [m for m in models if usable(m, name)]
            got: dict[str, list[tuple[float, float]]] = {m: [] for m in mine}
            for r in range(a.repeat):
                order = mine if r % 2 == 0 else mine[::-1]
                for m in order:
                    got[m].append(one(opened.store, m, p, k))
                    k += 1
            for m in mine:
                rps = [x for x, _ in got[m]]
                us = [y for _, y in got[m]]
                print(
                    f"{name:9} {m:22} {max(rps):10,.0f} {statistics.median(rps):8,.0f}"
                    f" {min(us):11.1f} {statistics.median(us):7.1f}"
                )
            print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            opened.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
