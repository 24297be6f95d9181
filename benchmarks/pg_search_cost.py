"""pgvector search: storebench's client cost per query against a minimal psycopg loop.

One managed PostgreSQL + pgvector (``servers/postgres.py``, tuned to the
machine) holds ``--n`` random vectors of ``--dim`` (100,000 x 128) under an
HNSW index (m=16, ef_construction=64); every search runs with
``hnsw.ef_search`` = 100 and k = 100, one query vector per request, for
``--duration`` seconds per point after ``--warmup`` seconds, at each client
count of ``--clients`` (1, 2, 4):

- **storebench**: the vector workloads' search op (``SearchFactory``: what
  ``search`` and ``tune`` time) through the driver, on the executor ``auto``
  picks for that many clients and, where that is not already it, on
  processes. Client CPU is the driver's (each client's over its measured
  window), QPS its ops over the window.
- **psycopg loop**: N processes, each a connection with a binary dumper for
  numpy vectors (what pgvector-python registers) and a binary cursor, doing
  ``cur.execute(sql, (vec,)); cur.fetchall()`` in a loop (psycopg prepares
  the statement after 5 runs). ``sql`` is the plainest form,
  ``SELECT id FROM t ORDER BY v <-> %s LIMIT k`` (ids only: less to decode
  than storebench's ids with distances), and with ``--baseline both`` also
  storebench's own statement, to tell the query's cost from the client's.
  Client CPU is each process's CPU time over its loop, QPS the sum of the
  processes' rates.

Points alternate (the order rotates each ``--repeat``); each is printed with
its ratio to the psycopg loop (id-only SQL) measured in the same round, and
the 1-minute load average when it ended: the machine is shared by client
and server (and anything else running), so compare ratios, not absolutes.
VectorDBBench is not installed here; its pgvector client is the psycopg loop
above in form (prepared, binary, ``fetchall``, ids only).

    python benchmarks/pg_search_cost.py [--n 100000] [--dim 128] [--clients 1,2,4]
        [--duration 5] [--warmup 1] [--repeat 2] [--baseline plain|both]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from storebench.data.batch import DocBatch
from storebench.data.shared import Shared
from storebench.driver import Driver, Task
from storebench.driver.choice import choose_executor
from storebench.driver.core import cpu_count
from storebench.stores.base import StoreSpec
from storebench.stores.params import HnswIndex, HnswSearch
from storebench.workloads.vector.ops import SearchFactory

K = 100
EF = 100
NAME = "pg_search_cost"


@dataclass
class Point:
    qps: float
    client_us: float  # client CPU per query
    load: float  # 1-minute load average at its end


# --- the minimal psycopg loop --------------------------------------------------


def _loop_client(
    url: str, sql: str, qpath: str, c: int, warmup: float, duration: float, go: Any, out: Any
) -> None:
    import psycopg
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    conn = psycopg.connect(url, autocommit=True)
    oid = conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0]  # type: ignore[index]

    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            v = np.asarray(obj, ">f4")
            return len(v).to_bytes(2, "big") + b"\0\0" + v.tobytes()

    VectorDumper.oid = oid
    conn.adapters.register_dumper(np.ndarray, VectorDumper)
    conn.execute(f"SET hnsw.ef_search = {EF}")
    cur = conn.cursor(binary=True)
    queries = np.load(qpath)
    nq = len(queries)
    i = c * 7919
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        cur.execute(sql, (queries[i % nq],))
        cur.fetchall()
        i += 1
    go.wait()
    ops = 0
    t0, c0 = time.perf_counter(), time.process_time()
    end = t0 + duration
    while True:
        cur.execute(sql, (queries[i % nq],))
        cur.fetchall()
        i += 1
        ops += 1
        if time.perf_counter() >= end:
            break
    out.put((ops, time.perf_counter() - t0, time.process_time() - c0))
    conn.close()


def psycopg_loop(
    url: str, sql: str, qpath: str, clients: int, warmup: float, duration: float
) -> Point:
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_loop_client, args=(url, sql, qpath, c, warmup, duration, go, out))
        for c in range(clients)
    ]
    for p in procs:
        p.start()
    time.sleep(0.5 + warmup)  # all connected and warm before the window opens
    go.set()
    got = [out.get(timeout=120 + warmup + duration) for _ in procs]
    for p in procs:
        p.join()
    ops = sum(g[0] for g in got)
    return Point(
        qps=sum(g[0] / g[1] for g in got),
        client_us=sum(g[2] for g in got) / ops * 1e6,
        load=os.getloadavg()[0],
    )


# --- storebench's search op ------------------------------------------------------


def storebench_search(
    coll: Any,
    queries: Shared,
    clients: int,
    executor: str,
    warmup: float,
    duration: float,
    client: str = "python",
) -> Point:
    task = Task(
        "search",
        SearchFactory(queries, K, setting=HnswSearch(ef=EF)),
        clients=clients,
        duration_s=duration,
        warmup_s=warmup,
        executor=executor,
        client=client,
    )
    stats, _ = Driver().run(task, coll)
    # a thread client's CPU time is its process's: thread clients of one
    # process each report all of it
    cpu_s = stats.cpu_s / clients if executor == "threads" else stats.cpu_s
    return Point(
        qps=stats.ops / (stats.elapsed_ns / 1e9),
        client_us=cpu_s / stats.ops * 1e6,
        load=os.getloadavg()[0],
    )


# --- set-up and table ---------------------------------------------------------------


def load(store: Any, n: int, dim: int) -> Any:
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((n, dim), dtype=np.float32)
    schema = DocBatch(np.arange(1), {}, vecs[:1]).schema("l2")
    coll = store.create_collection(NAME, schema)
    t0 = time.perf_counter()
    for s in range(0, n, 10_000):
        e = min(s + 10_000, n)
        coll.insert(DocBatch(np.arange(s, e, dtype=np.int64), {}, vecs[s:e]))
    t1 = time.perf_counter()
    coll.build_index(HnswIndex(m=16, ef_construct=64))
    t2 = time.perf_counter()
    print(f"loaded {n:,} x {dim} in {t1 - t0:.1f} s, HNSW built in {t2 - t1:.1f} s", flush=True)
    coll.set_search_params(HnswSearch(ef=EF))
    return coll


def main() -> None:
    from storebench.servers.postgres import PostgresServer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--clients", default="1,2,4")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds measured per point")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--baseline", choices=["plain", "both"], default="plain")
    ap.add_argument(
        "--native",
        action="store_true",
        help="also storebench with client native (its compiled loop, thread clients)",
    )
    args = ap.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    print(f"load average at start: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    server = PostgresServer().start()
    work = Path(tempfile.mkdtemp(prefix="pg-search-cost-"))
    store = StoreSpec("pgvector", server.url).open()
    try:
        coll = load(store, args.n, args.dim)
        qs = np.random.default_rng(1).standard_normal((args.queries, args.dim), dtype=np.float32)
        queries = Shared(qs, work / "queries.npy")
        table = f'"{coll.name}"'
        sqls = {"psycopg loop": f"SELECT id FROM {table} ORDER BY v <-> %s LIMIT {K}"}
        if args.baseline == "both":
            sqls["psycopg loop, our SQL"] = coll._knn_sql(K, "", "%s")
        results: dict[tuple[str, int], list[Point]] = {}
        for r in range(args.repeat):
            for c in counts:
                auto = choose_executor(store, None, "auto", c)
                runs: list[tuple[str, Any]] = [
                    (
                        f"storebench ({auto})",
                        lambda c=c, e=auto: storebench_search(
                            coll, queries, c, e, args.warmup, args.duration
                        ),
                    )
                ]
                if auto != "processes":
                    runs.append(
                        (
                            "storebench (processes)",
                            lambda c=c: storebench_search(
                                coll, queries, c, "processes", args.warmup, args.duration
                            ),
                        )
                    )
                if args.native:
                    runs.append(
                        (
                            "storebench native (threads)",
                            lambda c=c: storebench_search(
                                coll, queries, c, "threads", args.warmup, args.duration, "native"
                            ),
                        )
                    )
                for label, sql in sqls.items():
                    runs.append(
                        (
                            label,
                            lambda c=c, sql=sql: psycopg_loop(
                                server.url, sql, queries.path, c, args.warmup, args.duration
                            ),
                        )
                    )
                shift = (r + counts.index(c)) % len(runs)
                for label, fn in runs[shift:] + runs[:shift]:
                    p = fn()
                    results.setdefault((label, c), []).append(p)
                    print(
                        f"round {r + 1} c={c} {label}: {p.qps:,.0f} q/s, "
                        f"{p.client_us:.0f} us client CPU/query, load {p.load:.2f}",
                        flush=True,
                    )
        print_table(results, counts, args)
    finally:
        store.close()
        server.stop()
    print(f"load average at end: {Path('/proc/loadavg').read_text().strip()}")


def print_table(results: dict[tuple[str, int], list[Point]], counts: list[int], args: Any) -> None:
    t = Table(
        title=f"pgvector search, {args.n:,} x {args.dim}, HNSW m=16 ef_construction=64, "
        f"ef_search={EF}, k={K}, {args.duration:g} s per point, {args.repeat} round(s), "
        f"{cpu_count()} cores (medians; ratios per round, then their median)"
    )
    for col in ("clients", "client", "q/s", "client us/query", "q/s ratio", "CPU ratio", "load"):
        t.add_column(col, justify="left" if col == "client" else "right")
    for c in counts:
        base = results[("psycopg loop", c)]
        for (label, cc), pts in results.items():
            if cc != c:
                continue
            qr = statistics.median(p.qps / b.qps for p, b in zip(pts, base, strict=True))
            cr = statistics.median(
                p.client_us / b.client_us for p, b in zip(pts, base, strict=True)
            )
            t.add_row(
                str(c),
                label,
                f"{statistics.median(p.qps for p in pts):,.0f}",
                f"{statistics.median(p.client_us for p in pts):.0f}",
                f"{qr:.2f}",
                f"{cr:.2f}",
                " ".join(f"{p.load:.1f}" for p in pts),
            )
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
