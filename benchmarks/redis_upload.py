"""Redis vector upload: straight into HNSW, or FLAT and a rebuild, against the server's own time.

One managed Redis (``servers/redis.py``). Each round loads ``--n`` synthetic
clustered vectors of ``--dim`` (the vector workloads' data, seed 0) the way
a vector run does (``SearchRun.upload``: ``--clients`` uploaders, batches of
``--batch`` documents, each batch's HSETs pipelined, executor ``auto``) and
then calls ``build_index`` with HNSW m=16, ef_construction=64, both ways:

- **hnsw**: the collection created with those index parameters (what a run
  does): its HNSW index takes each document as its HSET arrives, and
  ``build_index`` finds it complete (the record: built during the upload);
- **flat+rebuild**: the collection created without them (a FLAT index, as
  every run did before), then ``build_index`` drops it and indexes the
  loaded hashes anew in HNSW.

The server's own insertion time is the floor: ``INFO commandstats``' usec of
HSET (reset before each upload) in the hnsw mode, where each HSET inserts
into the graph (the search module indexes a write before it replies). Printed
per mode: upload and index seconds, their sum, the HSET usec, and the sum
over the floor of the same round. Modes alternate which goes first each
round; the 1-minute load average is printed with each.

    python benchmarks/redis_upload.py [--n 100000] [--dim 128] [--clients 4]
        [--batch 1000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from storebench.data.shared import Shared
from storebench.driver import Driver, Task
from storebench.stores.base import StoreSpec
from storebench.stores.params import HnswIndex
from storebench.workloads.vector.data import VectorData
from storebench.workloads.vector.ops import InsertFactory
from storebench.workloads.vector.params import VectorParams

INDEX = HnswIndex(m=16, ef_construct=64)


def one(store, data: VectorData, shared, mode: str, r: int, args) -> dict[str, float]:
    name = f"upload_{mode.replace('+', '_')}_{r}"
    schema = data_schema(data)
    coll = store.create_collection(name, schema, INDEX if mode == "hnsw" else None)
    client = store.client
    client.config_resetstat()
    task = Task(
        "upload",
        InsertFactory(*shared, args.batch),
        clients=args.clients,
        ops=-(-args.n // args.batch),
        items_per_op=args.batch,
        executor="auto",
    )
    stats, _ = Driver().run(task, coll)
    upload_s = stats.elapsed_ns / 1e9
    hset_s = client.info("commandstats")["cmdstat_hset"]["usec"] / 1e6
    t0 = time.perf_counter()
    built = coll.build_index(INDEX)
    index_s = time.perf_counter() - t0
    assert coll.count() == args.n
    info = coll._info()
    assert any(b"HNSW" in a for a in info["attributes"])
    coll.drop()
    return {
        "upload_s": upload_s,
        "index_s": index_s,
        "total_s": upload_s + index_s,
        "hset_s": hset_s,
        "built": float(bool(built)),
        "load": os.getloadavg()[0],
    }


def data_schema(data: VectorData):
    from storebench.data.batch import DocBatch

    first = DocBatch(data.ids[:1], {f: c[:1] for f, c in data.fields.items()}, data.vecs[:1])
    return first.schema("l2")


def main() -> None:
    from storebench.servers.redis import RedisServer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    print(f"load average at start: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    data = VectorData(VectorParams(n=args.n, dim=args.dim))
    work = Path(tempfile.mkdtemp(prefix="redis-upload-"))
    shared = (
        Shared(data.ids, work / "ids.npy"),
        {f: Shared(c, work / f"f{i}.npy") for i, (f, c) in enumerate(data.fields.items())},
        Shared(data.vecs, work / "vecs.npy"),
    )
    server = RedisServer().start()
    store = StoreSpec("redis", server.url).open()
    rows: dict[str, list[dict[str, float]]] = {"hnsw": [], "flat+rebuild": []}
    try:
        for r in range(args.repeat):
            modes = list(rows) if r % 2 == 0 else list(rows)[::-1]
            for mode in modes:
                got = one(store, data, shared, mode, r, args)
                rows[mode].append(got)
                print(
                    f"round {r + 1} {mode}: upload {got['upload_s']:.1f} s + index "
                    f"{got['index_s']:.1f} s = {got['total_s']:.1f} s; HSET usec "
                    f"{got['hset_s']:.1f} s; load {got['load']:.1f}",
                    flush=True,
                )
    finally:
        store.close()
        server.stop()
    floors = [g["hset_s"] for g in rows["hnsw"]]
    t = Table(
        title=f"Redis upload of {args.n:,} x {args.dim}, {args.clients} uploaders, batches of "
        f"{args.batch}, HNSW m=16 ef_construction=64, {args.repeat} round(s) (medians)"
    )
    for col in ("mode", "upload s", "index s", "total s", "HSET usec s", "total / floor", "load"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for mode, got in rows.items():
        med = {k: statistics.median(g[k] for g in got) for k in got[0]}
        ratio = statistics.median(g["total_s"] / f for g, f in zip(got, floors, strict=True))
        t.add_row(
            mode,
            f"{med['upload_s']:.1f}",
            f"{med['index_s']:.2f}" + (" (built during upload)" if not med["built"] else ""),
            f"{med['total_s']:.1f}",
            f"{med['hset_s']:.1f}",
            f"{ratio:.2f}",
            " ".join(f"{g['load']:.1f}" for g in got),
        )
    Console(width=160).print(t)
    print("floor: the hnsw mode's HSET usec (INFO commandstats), each round's own")
    print(f"load average at end: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
