"""How close ``storebench run --dry-run``'s estimated time comes to the real
time of a small sweep (target: within 2x).

Runs ``storebench run search`` on ``--stores`` (default memory, hnswlib,
sqlite: an exact store, two HNSW index configurations, a SQL store) at
``--n`` vectors, one repeat, in a fresh results directory, three ways:

1. ``--dry-run --json`` with no earlier runs: the estimate rests on the
   rough priors of ``storebench.run.progress``;
2. after a calibration sweep at a quarter of the size (other records in the
   same results file), ``--dry-run --json`` again: the estimate scales the
   earlier runs' seconds by the plan's sizes;
3. the sweep itself, timed from the outside (the command's wall time).

Prints both estimates, the real time, their ratios and the load average
before and after (``/proc/loadavg``), and exits 1 when the estimate from
earlier runs is off by more than 2x.

    python benchmarks/dry_run_eta.py [--n 4000] [--queries 200]
                                     [--stores memory,hnswlib,sqlite]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "storebench"]


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def storebench(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = subprocess.run([*CLI, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"storebench {' '.join(args)} failed:\n{r.stderr}")
    return r, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--stores", default="memory,hnswlib,sqlite")
    a = ap.parse_args(argv)
    print(f"load average before: {loadavg()}")
    with tempfile.TemporaryDirectory(prefix="storebench-eta-") as tmp:
        results = str(Path(tmp) / "results")

        def sweep(n: int, queries: int, *extra: str) -> tuple[Any, float]:
            return storebench(
                "run",
                "search",
                "--store",
                a.stores,
                "--set",
                f"n={n}",
                "--set",
                f"queries={queries}",
                "--set",
                "repeats=1",
                "--results",
                results,
                "--no-progress",
                *extra,
            )

        plan = json.loads(sweep(a.n, a.queries, "--dry-run", "--json")[0].stdout)
        prior = plan["estimated_s"]
        assert not Path(results).exists(), "the dry run wrote its results directory"
        sweep(a.n // 4, a.queries // 4)  # earlier runs, at a quarter of the size
        informed = json.loads(sweep(a.n, a.queries, "--dry-run", "--json")[0].stdout)
        _, real = sweep(a.n, a.queries)
    print(f"load average after:  {loadavg()}")
    print(f"plan: {len(plan['runs'])} runs of search on {a.stores}, n={a.n}, queries={a.queries}")
    print(f"real time (wall, whole command): {real:7.1f} s")
    for what, est in (
        ("estimate with no earlier runs (priors)", prior),
        ("estimate from earlier runs (a quarter of the size)", informed["estimated_s"]),
    ):
        print(f"{what}: {est:7.1f} s   estimate/real = {est / real:.2f}")
    ratio = informed["estimated_s"] / real
    ok = 0.5 <= ratio <= 2.0
    print(f"within 2x (from earlier runs): {'yes' if ok else 'no'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
