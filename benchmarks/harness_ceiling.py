"""The harness's own ceiling: the driver timing the null store.

For 1, 2 and 4 clients, as threads and as processes, it times get-by-id on
the null store (which does nothing) and prints the throughput and the cost of
one operation as the driver sees it. A bare loop calling the same null op
without any timing gives the call's own cost; the difference is the
harness's overhead per operation (clock reads, latency store, progress slot,
stop check). Target: <= 200 ns per op on one client. The closed loop runs
compiled where the native client's module is installed (``make bench``
builds it), else in Python (about three times the cost per op); the last
line says which ran.

    python benchmarks/harness_ceiling.py [--ops N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from storebench.data.batch import Schema
from storebench.driver import Driver, FnOp, Task, loops
from storebench.driver.core import cpu_count
from storebench.stores.base import StoreSpec


class NullGet:
    def __call__(self, coll, c, clients):
        ids = np.zeros(1, np.int64)
        get = coll.get
        return FnOp(lambda i: get(ids))


def bare_loop_ns(coll, n: int) -> float:
    op = NullGet()(coll, 0, 1).call
    t0 = time.perf_counter_ns()
    for i in range(n):
        op(i)
    return (time.perf_counter_ns() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2_000_000, help="operations per client")
    args = ap.parse_args()
    coll = StoreSpec("null").open().create_collection("ceiling", Schema())
    bare = min(bare_loop_ns(coll, args.ops // 4) for _ in range(3))
    table = Table(
        title=f"harness ceiling: null store get-by-id, {args.ops:,} ops per client, {cpu_count()} cores"
    )
    for col in (
        "executor",
        "clients",
        "ops/s",
        "ns/op per client",
        "harness overhead ns/op",
        "p50",
        "p99",
    ):
        table.add_column(col, justify="right")
    driver = Driver()
    for executor in ("threads", "processes"):
        for clients in (1, 2, 4):
            task = Task(
                "get",
                NullGet(),
                clients=clients,
                ops=args.ops * clients,
                warmup_ops=10_000,
                executor=executor,
            )
            stats, _ = driver.run(task, coll)
            per_op = clients * 1e9 / stats.ops_per_s
            table.add_row(
                executor,
                str(clients),
                f"{stats.ops_per_s:,.0f}",
                f"{per_op:,.0f}",
                f"{per_op - bare:,.0f}",
                f"{stats.latency.percentile(50)} ns",
                f"{stats.latency.percentile(99)} ns",
            )
    Console(width=140).print(table)
    print(f"bare loop (null get, no timing): {bare:.0f} ns/op")
    print(f"closed loop: {'compiled' if loops.compiled is not None else 'Python'}")


if __name__ == "__main__":
    main()
