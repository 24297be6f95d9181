"""Exact ground truth against faiss, in the same run.

1,000,000 x 128 clustered base vectors (float32, 512 MB), 1,000 queries,
k=100, l2: storebench's ``exact_knn`` and faiss's ``IndexFlatL2`` (add +
search) alternate ``--repeats`` times on the same arrays; the best time of
each is compared. A sampler thread reads the process RSS every 5 ms, so each
phase's peak is its own (the base array is resident throughout; faiss's
``add`` copies it once more, which is faiss's peak, not ours). Targets: our
time <= 1.2 x faiss's, our peak RSS <= base size + 1 GiB. The two answers
are checked against each other (same distances to float32 rounding).

    python benchmarks/truth.py [--n 1000000] [--dim 128] [--nq 1000] [--k 100]
                               [--repeats 3] [--threads N]

Needs faiss-cpu (the ``faiss`` extra, installed by ``test``/``dev``).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil

from storebench.data import synthetic
from storebench.data.truth import default_threads, exact_knn

GiB = 1 << 30


class PeakRSS:
    """Peak resident set size of this process while the block runs."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.proc = psutil.Process()
        self.peak = 0
        self.start = 0
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        self.start = self.proc.memory_info().rss
        self.peak = self.start
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def timed(fn: Callable[[], Any]) -> tuple[float, int, int, Any]:
    with PeakRSS() as rss:
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
    return dt, rss.start, rss.peak, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--nq", type=int, default=1000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        import faiss
    except ImportError:
        print("needs faiss-cpu: pip install 'storebench[faiss]'", file=sys.stderr)
        return 2
    threads = args.threads or default_threads()
    faiss.omp_set_num_threads(threads)

    t0 = time.perf_counter()
    base = synthetic.vectors(args.n, args.dim, "clustered", args.seed)
    queries = synthetic.queries(args.nq, args.dim, "clustered", args.seed)
    gen_s = time.perf_counter() - t0
    base_bytes = base.nbytes
    print(
        f"base {args.n:,} x {args.dim} float32 ({base_bytes / GiB:.3f} GiB), "
        f"{args.nq:,} queries, k={args.k}, l2, {threads} threads "
        f"(generated in {gen_s:.1f} s); OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '-')}"
    )
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    def ours() -> tuple[np.ndarray, np.ndarray]:
        return exact_knn(base, queries, args.k, "l2", threads=threads)

    def theirs() -> tuple[np.ndarray, np.ndarray]:
        index = faiss.IndexFlatL2(args.dim)
        index.add(base)
        d2, ids = index.search(queries, args.k)
        del index
        return ids, np.sqrt(np.maximum(d2, 0))

    our_t: list[float] = []
    their_t: list[float] = []
    our_peak = 0
    their_peak = 0
    before = psutil.Process().memory_info().rss
    out_ours = out_theirs = None
    for r in range(args.repeats):
        dt, _, peak, out_ours = timed(ours)
        our_t.append(dt)
        our_peak = max(our_peak, peak)
        dt2, _, peak2, out_theirs = timed(theirs)
        their_t.append(dt2)
        their_peak = max(their_peak, peak2)
        print(f"  repeat {r + 1}: storebench {dt:.2f} s   faiss {dt2:.2f} s", flush=True)
    assert out_ours is not None and out_theirs is not None

    pos, dist = out_ours
    fids, fdist = out_theirs
    same_ids = float((pos == fids).mean())
    max_dd = float(np.abs(dist - fdist).max())
    best_ours, best_theirs = min(our_t), min(their_t)
    ratio = best_ours / best_theirs
    rss_limit = base_bytes + GiB
    print(
        f"storebench exact_knn: best {best_ours:.2f} s (all: {', '.join(f'{t:.2f}' for t in our_t)})"
    )
    print(
        f"faiss IndexFlatL2:    best {best_theirs:.2f} s (all: {', '.join(f'{t:.2f}' for t in their_t)})"
    )
    print(
        f"time ratio storebench/faiss: {ratio:.2f} (target <= 1.20): {'PASS' if ratio <= 1.2 else 'FAIL'}"
    )
    print(
        f"peak RSS during storebench: {our_peak / GiB:.3f} GiB "
        f"(process before: {before / GiB:.3f} GiB; limit base + 1 GiB = {rss_limit / GiB:.3f} GiB): "
        f"{'PASS' if our_peak <= rss_limit else 'FAIL'}"
    )
    print(f"peak RSS during faiss (holds its own copy of the base): {their_peak / GiB:.3f} GiB")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"agreement: same ids {same_ids:.4%} (ties may order differently), max |d - d_faiss| {max_dd:.2e}"
    )
    return 0 if ratio <= 1.2 and our_peak <= rss_limit else 1


if __name__ == "__main__":
    sys.exit(main())
