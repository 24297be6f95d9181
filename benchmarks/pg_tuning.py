"""The managed PostgreSQL's HNSW build at the machine's tuning vs initdb's
defaults, on the same data (issue 20).

Each round starts a fresh managed server (``tuning: machine`` or
``tuning: initdb``), loads the same ``--n`` x ``--dim`` clustered vectors
(binary COPY, 5,000 a batch) and times ``build_index`` (``CREATE INDEX ...
USING hnsw`` with m=16, ef_construction=64, then ``ANALYZE``). The two
configurations alternate (A B A B ...) so a change in the machine's load
hits both alike. Prints each build's seconds with the settings in force
(read back from the server, as the run record has them) and the load
average around it, then the median of each and their ratio.

    python benchmarks/pg_tuning.py [--n 100000] [--dim 128] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from storebench.data import synthetic
from storebench.data.batch import DocBatch
from storebench.stores.base import StoreSpec
from storebench.stores.opening import open_store
from storebench.stores.params import HnswIndex

SHOWN = (
    "shared_buffers",
    "maintenance_work_mem",
    "max_parallel_maintenance_workers",
    "effective_cache_size",
)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def build_once(tuning: str, docs: DocBatch, index: HnswIndex) -> tuple[float, dict[str, str]]:
    with open_store(StoreSpec("pgvector", options={"tuning": tuning})) as opened:
        settings = (opened.server_facts() or {}).get("settings", {})
        coll = opened.store.create_collection("sb_pg_tuning", docs.schema())
        for part in docs.batches(5000):
            coll.insert(part)
        t0 = time.perf_counter()
        coll.build_index(index)
        return time.perf_counter() - t0, settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="A B pairs")
    args = ap.parse_args()
    import numpy as np

    vecs = synthetic.vectors(args.n, args.dim, "clustered", seed=7)
    docs = DocBatch(np.arange(args.n, dtype=np.int64), {}, vecs)
    index = HnswIndex(m=16, ef_construct=64)
    print(f"HNSW build of {args.n} x {args.dim} (m=16, ef_construction=64), A B alternated")
    times: dict[str, list[float]] = {"machine": [], "initdb": []}
    for r in range(args.rounds):
        for tuning in ("machine", "initdb"):
            before = loadavg()
            secs, settings = build_once(tuning, docs, index)
            times[tuning].append(secs)
            shown = ", ".join(f"{k}={settings.get(k, '?')}" for k in SHOWN)
            print(
                f"round {r + 1} {tuning:8s} build {secs:7.2f} s  [{shown}]  "
                f"load {before} -> {loadavg()}",
                flush=True,
            )
    tuned, default = (statistics.median(times[k]) for k in ("machine", "initdb"))
    print(
        f"median build: machine {tuned:.2f} s, initdb {default:.2f} s; "
        f"initdb / machine = {default / tuned:.2f}x; load now {loadavg()}"
    )


if __name__ == "__main__":
    main()
