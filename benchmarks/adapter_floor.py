"""The adapter's floor: each embedded engine's library called directly
against storebench's timed search op, on the same built index.

For every embedded engine with a search that is installed (hnswlib, faiss,
usearch, qdrant-edge, lancedb, chroma, sqlite-vec, duckdb, memory) it builds
one index (m=16, ef_construct=128 where the engine takes them), then per ef
(where the engine has one) times, one query per call, the library's own
search and the op the driver times in a search task (``SearchFactory``'s,
which calls the collection's ``search``). The two alternate in blocks
(A B, then B A, ...) so a change in the machine's load meets both; a
block is as many calls as take about 40 ms (``--block-ms``) at the
library's pace, so every line has its 30 blocks (``--blocks``) in seconds
whether a query takes 70 us or 17 ms; each figure is the median over
blocks of the time per query: CPU of the calling thread
(``time.thread_time``), CPU of the process (``time.process_time``: lancedb,
duckdb and chroma search partly on threads of their own) and wall.
Printed per engine and ef: each figure for both, storebench's over the
library's (the median of the blocks' ratios: block b of both sides made the
same calls next to each other in time, so this machine's changes of pace,
which last seconds, cancel in each ratio), the load average before and
after, and the verdict on the bound the adapter is held to: storebench's CPU
per query within 10% or 10 us of the library's, whichever is larger, read on
the process's CPU (the query's whole cost: what qdrant-edge, lancedb, duckdb
and chroma do on threads of their own is not on the calling thread's). The
verdict weighs the blocks' spread: a 95% interval for the median ratio, then
``within`` (all of it under the bound), ``OVER`` (all of it above) or
``unresolved`` (the bound inside it: more blocks, or a quieter machine, may
settle it). With ``--control``, first a line ``A/A`` per engine whose two
sides are both the library's search (at the first ef): how far from 1.00 two
equal sides read on this machine now, the resolution of the ratios below it.
With ``--get``, a line ``get`` per engine whose adapter's get calls its
library: one id per call, the library's own get against the collection's.
With ``--insert BATCH``, a line ``ins`` per engine whose library side is
here (hnswlib, usearch, faiss, qdrant-edge): batches of BATCH documents into
a new, empty index on each side (the library's made its way, with the same
parameters; hnswlib's with its capacity known up front, where the adapter
grows its index), 5 batches per block, figures per document.

Qdrant scans a segment below its full-scan threshold (10 MB of vectors)
instead of walking its graph, so ef changes nothing for qdrant-edge below
that size. The memory store's library is numpy: the same BLAS distances and
partial sort it calls.

qdrant-edge's binding answers with point objects whose fields it converts to
Python values only when they are read, so its library side reads what the
adapter needs (each point's id and score; a record's id and vector): that
conversion is the binding's, the arrays made from the values the adapter's.
hnswlib's, faiss's and usearch's get return the vectors alone (the
adapter's, the ids and fields too). Engines that search on threads of their
own spend more process CPU the longer the caller takes between queries:
with qdrant-edge (100,000 x 50, ef 16), 10 us of plain Python after the
library's call added about 32 us of process CPU per query; and
lancedb's synchronous API hands each query to its event-loop thread and back
several times, so its calling thread's CPU moves with the timing of those
hand-offs more than with the adapter's own few microseconds.

    nice python benchmarks/adapter_floor.py [--n 100000 --dim 50 --metric cosine]
        [--ef 16 64 256] [--blocks 30 --block-ms 40] [--engines hnswlib faiss ...] [--control]
        [--get] [--insert BATCH]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from storebench.data import synthetic
from storebench.data.batch import DocBatch, Schema
from storebench.data.shared import Shared
from storebench.data.truth import distances, top_k
from storebench.errors import UserError
from storebench.stores.base import Capability, Collection, StoreSpec
from storebench.workloads.vector.ops import SearchFactory

ENGINES = (
    "hnswlib",
    "faiss",
    "usearch",
    "qdrant-edge",
    "lancedb",
    "chroma",
    "sqlite-vec",
    "duckdb",
    "memory",
)
BUILD = {"m": 16, "ef_construct": 128}

# one query (a (1, d) float32 row) -> the library's answer, as the library
# gives it; made after the collection's ef is set
Direct = Callable[[np.ndarray], Any]


def _hnswlib(coll: Any, k: int, ef: int | None) -> Direct:
    ix = coll._ix  # the adapter's ef is set on it
    return lambda q: ix.knn_query(q, k=k)


def _faiss(coll: Any, k: int, ef: int | None) -> Direct:
    import faiss

    ix = coll._ix  # hnsw.efSearch is the adapter's ef
    if coll.schema.metric != "cosine":
        return lambda q: ix.search(q, k)

    def cosine(q: np.ndarray) -> Any:
        q = q.copy()
        faiss.normalize_L2(q)  # the index holds unit vectors under inner product
        return ix.search(q, k)

    return cosine


def _usearch(coll: Any, k: int, ef: int | None) -> Direct:
    ix = coll._ix  # expansion_search is the adapter's ef
    return lambda q: ix.search(q[0], k)


def _qdrant_edge(coll: Any, k: int, ef: int | None) -> Direct:
    import qdrant_edge as qe

    shard, params = coll._shard, qe.SearchParams(hnsw_ef=ef)

    def query(q: np.ndarray) -> Any:
        nearest = qe.Query.Nearest(q[0].tolist())
        req = qe.SearchRequest(
            query=nearest, limit=k, params=params, with_payload=False, with_vector=False
        )
        # the binding's search: a few microseconds under its query
        return [(p.id, p.score) for p in shard.search(req)]

    return query


def _lancedb(coll: Any, k: int, ef: int | None) -> Direct:
    from storebench.stores.vector import lancedb

    table, metric = coll._t, coll._metric
    columns = [lancedb._ID, "_distance"]  # what the adapter reads, not the vectors too

    def query(q: np.ndarray) -> Any:
        search = table.search(q[0]).distance_type(metric).limit(k)
        return (search if ef is None else search.ef(ef)).select(columns).to_arrow()

    return query


def _chroma(coll: Any, k: int, ef: int | None) -> Direct:
    c = coll._c  # reopened by the adapter with its ef
    return lambda q: c.query(query_embeddings=q, n_results=k, include=["distances"])


def _sqlite_vec(coll: Any, k: int, ef: int | None) -> Direct:
    db = coll._db
    sql = f"SELECT rowid, distance FROM {coll._v} WHERE embedding MATCH ? AND k = ?"
    sql += " ORDER BY distance"
    return lambda q: db.execute(sql, [q.tobytes(), k]).fetchall()


def _duckdb(coll: Any, k: int, ef: int | None) -> Direct:
    from storebench.stores.sql.sqlite import quote

    db = coll._db  # this thread's connection, hnsw_ef_search set on it
    d = f"{coll._dist}(vec, ?::{coll._qtype})"
    sql = f"SELECT id, {d} AS d FROM {quote(coll.name)} ORDER BY d LIMIT {k}"
    return lambda q: db.execute(sql, [q[0].tolist()]).fetchall()


def _memory(coll: Any, k: int, ef: int | None) -> Direct:
    c, metric = coll._c, coll.schema.metric  # numpy: BLAS distances, a partial sort
    return lambda q: top_k(distances(q, c.vecs[: c.n], metric, c.sq[: c.n]), k)


DIRECT: dict[str, Callable[[Any, int, int | None], Direct]] = {
    "hnswlib": _hnswlib,
    "faiss": _faiss,
    "usearch": _usearch,
    "qdrant-edge": _qdrant_edge,
    "lancedb": _lancedb,
    "chroma": _chroma,
    "sqlite-vec": _sqlite_vec,
    "duckdb": _duckdb,
    "memory": _memory,
}


# what each figure reads: the calling thread's CPU, the process's (an
# engine's own threads too), the wall clock
CLOCKS = {
    "thread cpu": time.thread_time_ns,
    "process cpu": time.process_time_ns,
    "wall": time.perf_counter_ns,
}


def per_query(calls: Callable[[int], Any], start: int, count: int) -> list[float]:
    """Microseconds per call of ``calls(i)`` for i in [start, start + count),
    by each of ``CLOCKS``."""
    before = [clock() for clock in CLOCKS.values()]
    for i in range(start, start + count):
        calls(i)
    after = [clock() for clock in CLOCKS.values()]
    return [(b - a) / count / 1e3 for a, b in zip(before, after, strict=True)]


def calls_per_block(call: Callable[[int], Any], seconds: float) -> int:
    """How many calls of ``call`` take ``seconds``, at the pace of untimed
    calls for a quarter of that (2 at least): a block lasts about as long
    for a 70 us search as for a 17 ms one, so a slow engine's line gets as
    many blocks as a fast one's in about the same time."""
    count, start = 0, time.perf_counter()
    while not count or time.perf_counter() - start < seconds / 4:
        call(count)
        count += 1
    return max(2, round(seconds * count / (time.perf_counter() - start)))


def alternated(
    sides: dict[str, Callable[[int], Any]], blocks: int, block: int
) -> dict[str, np.ndarray]:
    """Each side's time per call in each block by each clock (blocks x
    clocks), timed in alternating blocks of ``block`` calls (the order
    reversed every other block), after one untimed block each: block b of
    every side makes the same calls, next to each other in time."""
    got: dict[str, list[list[float]]] = {name: [] for name in sides}
    names = list(sides)
    for name in names:
        per_query(sides[name], 0, block)
    for b in range(blocks):
        for name in names if b % 2 == 0 else names[::-1]:
            got[name].append(per_query(sides[name], b * block, block))
    return {name: np.array(t) for name, t in got.items()}


# one id (a (1,) int64 array; ids are rows in ``build``'s collections) ->
# the document as the library gives it: the floor of ``get``, where the
# adapter's get reaches the library (the index libraries' is the column store)
GET: dict[str, Callable[[Any], Callable[[np.ndarray], Any]]] = {
    "hnswlib": lambda coll: coll._ix.get_items,
    "usearch": lambda coll: coll._ix.get,
    "faiss": lambda coll: coll._ix.reconstruct_batch,
    "qdrant-edge": lambda coll: (
        lambda ids: [(r.id, r.vector) for r in coll._shard.retrieve(ids.tolist(), False, True)]
    ),
}


def gets(coll: Any, n: int) -> dict[str, Callable[[int], Any]]:
    """Call i of each side gets id i mod n (``build``'s ids are 0..n-1)."""
    library, ids = GET[coll.store.engine](coll), np.arange(n, dtype=np.int64)
    return {
        "library": lambda i: library(ids[i % n : i % n + 1]),
        "storebench": lambda i: coll.get(ids[i % n : i % n + 1]),
    }


# a fresh index of the collection's kind and parameters, made the library's
# way -> one batch (ids, vectors) into it: the floor of ``insert``
def _hnswlib_insert(coll: Any, n: int) -> Callable[[np.ndarray, np.ndarray], Any]:
    import hnswlib

    ix = hnswlib.Index(space=coll.schema.metric, dim=coll._dim)  # its capacity known up front
    ix.init_index(max_elements=n, M=BUILD["m"], ef_construction=BUILD["ef_construct"])
    return lambda ids, vecs: ix.add_items(vecs, ids, num_threads=-1)


def _usearch_insert(coll: Any, n: int) -> Callable[[np.ndarray, np.ndarray], Any]:
    from usearch.index import Index

    from storebench.stores.ann.usearch import _METRIC

    ix = Index(
        ndim=coll._dim,
        metric=_METRIC[coll.schema.metric],
        dtype="f32",
        connectivity=BUILD["m"],
        expansion_add=BUILD["ef_construct"],
    )
    return lambda ids, vecs: ix.add(ids, vecs)


def _faiss_insert(coll: Any, n: int) -> Callable[[np.ndarray, np.ndarray], Any]:
    import faiss

    metric = faiss.METRIC_L2 if coll.schema.metric == "l2" else faiss.METRIC_INNER_PRODUCT
    ix = faiss.IndexHNSWFlat(coll._dim, BUILD["m"], metric)
    ix.hnsw.efConstruction = BUILD["ef_construct"]
    if coll.schema.metric != "cosine":
        return lambda ids, vecs: ix.add(vecs)

    def cosine(ids: np.ndarray, vecs: np.ndarray) -> Any:
        vecs = vecs.copy()
        faiss.normalize_L2(vecs)  # unit vectors under inner product, as the adapter's
        return ix.add(vecs)

    return cosine


def _qdrant_edge_insert(coll: Any, n: int) -> Callable[[np.ndarray, np.ndarray], Any]:
    import qdrant_edge as qe

    # in the store's directory, which goes when the store closes
    path = os.path.join(coll.store.local_path(), "floor_library")
    shard = qe.EdgeShard.create(path, coll.store._config(coll.schema, BUILD))

    def upsert(ids: np.ndarray, vecs: np.ndarray) -> Any:
        points = [qe.Point(i, v, {}) for i, v in zip(ids.tolist(), vecs.tolist(), strict=True)]
        return shard.update(qe.UpdateOperation.upsert_points(points))

    return upsert


INSERT: dict[str, Callable[[Any, int], Callable[[np.ndarray, np.ndarray], Any]]] = {
    "hnswlib": _hnswlib_insert,
    "usearch": _usearch_insert,
    "faiss": _faiss_insert,
    "qdrant-edge": _qdrant_edge_insert,
}


def inserts(store: Any, coll: Any, data: np.ndarray, batch: int) -> dict[str, Callable[[int], Any]]:
    """Each call of a side inserts its next batch of ``data`` (ids its rows)
    into an index of its own that starts empty: the library's, and a new
    collection of the same schema and parameters (its batches made before
    timing, as the insert workload's are)."""
    n = len(data)
    library = INSERT[store.engine](coll, n)
    ours = store.create_collection("floor_insert", coll.schema, store.Index(**BUILD))
    ids = np.arange(n, dtype=np.int64)
    batches = [DocBatch(ids[s : s + batch], {}, data[s : s + batch]) for s in range(0, n, batch)]
    mine, theirs = iter(batches), iter([(b.ids, b.vectors) for b in batches])
    return {
        "library": lambda i: library(*next(theirs)),
        "storebench": lambda i: ours.insert(next(mine)),
    }


def line(
    engine: str,
    what: str,
    sides: dict[str, Callable[[int], Any]],
    blocks: int,
    block: int,
    per: int = 1,
) -> None:
    """Time the library and storebench sides alternately and print their
    line (each figure per call / ``per``)."""
    load = os.getloadavg()[0]
    t = alternated(sides, blocks, block)
    lib, ours = np.median(t["library"], axis=0) / per, np.median(t["storebench"], axis=0) / per
    # block by block: a change in the machine's pace between blocks cancels
    ratio = np.median(t["storebench"] / t["library"], axis=0)
    figures = "".join(
        f"  {a:8,.1f} {b:8,.1f} {r:4.2f}" for a, b, r in zip(lib, ours, ratio, strict=True)
    )
    after = os.getloadavg()[0]
    p = list(CLOCKS).index("process cpu")
    lo, hi = median_interval(t["storebench"][:, p] / t["library"][:, p])
    bound = 1 + max(0.1, 10 / lib[p])  # 10%, or 10 us where that is more
    verdict = "within" if hi <= bound else "OVER" if lo > bound else "unresolved"
    verdict = f"  {lo:.2f}-{hi:.2f} of {bound:.2f}: {verdict}" if what != "A/A" else ""
    print(f"{engine:12} {what:>4}{figures}  {load:.1f}/{after:.1f}{verdict}", flush=True)


def median_interval(x: np.ndarray) -> tuple[float, float]:
    """A 95% (or wider) interval for the median of ``x``, from its order
    statistics (distribution-free: the count of values under the median is
    binomial(n, 1/2)); with fewer than 6 values, their range."""
    x, n = np.sort(x), len(x)
    # the j-th smallest and j-th largest hold the median between them with
    # chance 1 - 2 P(binomial < j): the largest j that keeps it >= 95%
    below, j = 0.0, 0  # below: P(binomial < j)
    while j < n // 2 and below + math.comb(n, j) / 2**n <= 0.025:
        below += math.comb(n, j) / 2**n
        j += 1
    lo = max(j, 1) - 1  # 0-based; no such j (under 6 values): the range
    return float(x[lo]), float(x[n - 1 - lo])


def build(engine: str, data: np.ndarray, metric: str) -> tuple[Any, Collection]:
    store = StoreSpec(engine).open()
    index = store.Index(**BUILD) if set(BUILD) <= set(store.Index.model_fields) else store.Index()
    coll = store.create_collection("floor", Schema(dim=int(data.shape[1]), metric=metric), index)
    for s in range(0, len(data), 10_000):
        rows = data[s : s + 10_000]
        coll.insert(DocBatch(np.arange(s, s + len(rows), dtype=np.int64), {}, rows))
    if Capability.INDEX in store.capabilities:
        coll.build_index(index)
    return store, coll


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="documents")
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--metric", default="cosine", choices=("l2", "ip", "cosine"))
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--ef", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--blocks", type=int, default=30, help="timed blocks per side")
    ap.add_argument(
        "--block-ms",
        type=float,
        default=40,
        help="a block's length (calls per block: the library's pace)",
    )
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument(
        "--control",
        action="store_true",
        help="also a line A/A per engine: the library on both sides (how far apart equal sides read)",
    )
    ap.add_argument("--get", action="store_true", help="also get by id, one id per call")
    ap.add_argument(
        "--insert",
        type=int,
        metavar="BATCH",
        help="also insert batches of BATCH documents into new, empty indexes (us per document)",
    )
    args = ap.parse_args()

    data = synthetic.vectors(args.n, args.dim)
    queries = synthetic.queries(10_000, args.dim)  # call i asks query i mod 10,000
    nq, block_s = len(queries), args.block_ms / 1e3
    print(
        f"adapter floor: {args.n:,} x {args.dim} {args.metric}, k={args.k}, "
        f"{args.blocks} blocks of {args.block_ms:g} ms per side, one client thread, us per query"
    )
    print("per figure: library, storebench, storebench / library")
    print(
        f"{'engine':12} {'ef':>4}"
        + "".join(f"  {c:>22}" for c in CLOCKS)
        + "  load before/after  bound"
    )
    with tempfile.TemporaryDirectory() as tmp:
        shared = Shared(queries, Path(tmp) / "queries.npy")
        for engine in args.engines:
            try:
                store, coll = build(engine, data, args.metric)
            except UserError as exc:  # its library is not installed
                print(f"{engine:12} {exc}")
                continue
            try:
                efs = args.ef if Capability.SEARCH_PARAMS in store.capabilities else [None]
                for ef in efs:
                    if ef is not None:
                        coll.set_search_params(store.Search.model_validate({"ef": ef}))
                    direct = DIRECT[engine](coll, args.k, ef)
                    library = lambda i, f=direct: f(queries[i % nq : i % nq + 1])  # noqa: E731
                    block = calls_per_block(library, block_s)
                    if args.control and ef == efs[0]:  # the library against itself
                        sides = {"library": library, "storebench": library}
                        line(engine, "A/A", sides, args.blocks, block)
                    # what the timed loop calls (``Op.call``)
                    sides = {
                        "library": library,
                        "storebench": SearchFactory(shared, args.k)(coll, 0, 1).call,
                    }
                    line(engine, str(ef or "-"), sides, args.blocks, block)
                if args.get and engine in GET:
                    sides = gets(coll, args.n)
                    block = calls_per_block(sides["library"], block_s)
                    line(engine, "get", sides, args.blocks, block)
                if args.insert and engine in INSERT:
                    # blocks of 5 batches, as many as the data holds after the untimed one
                    blocks = min(args.blocks, args.n // (5 * args.insert) - 1)
                    sides = inserts(store, coll, data, args.insert)
                    line(engine, "ins", sides, blocks, 5, per=args.insert)
            finally:
                store.close()


if __name__ == "__main__":
    main()
