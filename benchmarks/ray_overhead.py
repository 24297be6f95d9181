"""The cost of the Ray layer: processes vs Ray actors, same clients, one machine.

Times get-by-id with the same number of clients on the null store (the
harness's ceiling) and on a managed Redis (a real round trip), once with the
``processes`` executor and once with ``ray`` (a local Ray on 127.0.0.1 that
this script starts and stops). For each it prints the measured throughput
and latency, and the wall time of a whole task as the driver sees it (client
start, store open, barrier, results back): the fixed cost per task, which is
where Ray's overhead shows (its timed loop is the same code).

    python benchmarks/ray_overhead.py [--clients 2] [--ops 200000] [--redis-ops 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from storebench.data.batch import DocBatch
from storebench.driver import Driver, FnOp, Task
from storebench.driver.choice import executors_released, setup_executor
from storebench.driver.core import cpu_count
from storebench.stores.base import StoreSpec
from storebench.stores.opening import open_store

DOCS = 1_000


class Get:
    """get(one id) over a pool of prepared id arrays."""

    def __call__(self, coll, c, clients):
        pool = [np.array([i], np.int64) for i in range(DOCS)]
        get = coll.get
        return FnOp(lambda i: get(pool[i % DOCS]))


def measure(coll, executors: list[str], clients: int, ops: int, repeats: int) -> dict[str, list]:
    """Each executor ``repeats`` times, interleaved (a busy machine's load
    drifts over minutes: back-to-back blocks would compare different loads)."""
    out: dict[str, list] = {e: [] for e in executors}
    for _ in range(repeats):
        for executor in executors:
            task = Task("get", Get(), clients=clients, ops=ops * clients, warmup_ops=100)
            t0 = time.perf_counter()
            stats, _ = Driver(executor=executor).run(task, coll)
            wall = time.perf_counter() - t0
            out[executor].append(
                (
                    stats.ops_per_s,
                    stats.latency.percentile(50),
                    stats.latency.percentile(99),
                    wall,
                    stats.elapsed_ns / 1e9,
                )
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--ops", type=int, default=200_000, help="null-store ops per client")
    ap.add_argument("--redis-ops", type=int, default=20_000, help="Redis ops per client")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    docs = DocBatch(
        np.arange(DOCS, dtype=np.int64),
        {"tags.i": rng.integers(0, 50, DOCS)},
        rng.random((DOCS, 16), dtype=np.float32),
    )
    table = Table(
        title=f"processes vs ray: get-by-id, {args.clients} clients, {cpu_count()} cores, "
        f"{args.repeats} runs each interleaved (medians; wall = whole task incl. client start)"
    )
    for col in (
        "store",
        "executor",
        "ops",
        "ops/s best",
        "ops/s median",
        "p50 median",
        "p99 median",
        "task wall s",
        "measured s",
    ):
        table.add_column(col, justify="right")
    stores = [
        ("null", StoreSpec("null"), args.ops),
        ("redis (managed)", StoreSpec("redis"), args.redis_ops),
    ]
    with executors_released():
        t0 = time.perf_counter()
        setup_executor("ray", {"ray_address": "local"})
        for label, spec, ops in stores:
            opened = open_store(spec)  # redis without a URL: a managed server on 127.0.0.1
            store = opened.store
            try:
                coll = store.create_collection("overhead", docs.schema())
                coll.insert(docs)
                if label == "null":  # the first Ray task: start and client actors
                    measure(coll, ["ray"], args.clients, 1_000, 1)
                    print(f"local Ray start and first task: {time.perf_counter() - t0:.1f} s")
                runs = measure(coll, ["processes", "ray"], args.clients, ops, args.repeats)
                for executor, rows in runs.items():
                    best = max(rows)
                    table.add_row(
                        label,
                        executor,
                        f"{ops * args.clients:,}",
                        f"{best[0]:,.0f}",
                        f"{statistics.median(r[0] for r in rows):,.0f}",
                        f"{statistics.median(r[1] for r in rows) / 1e3:,.1f} us",
                        f"{statistics.median(r[2] for r in rows) / 1e3:,.1f} us",
                        f"{statistics.median(r[3] for r in rows):.2f}",
                        f"{statistics.median(r[4] for r in rows):.3f}",
                    )
                coll.drop()
            finally:
                opened.close()
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
