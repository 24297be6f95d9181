"""How close ``storebench run --dry-run``'s estimated time comes to the real
time (target: within 2x).

Two checks, each in a fresh results directory, timed from the outside (the
command's wall time):

1. ``--scenarios``: every built-in scenario on its own stores at a small
   size (``SMALL``; ``--default-size``: the scenario's own), once with ``--dry-run --json`` and no earlier runs (the
   estimate is the workload's own time model: its delays, windows,
   warm-up, index build and operations at rough rates of a small machine),
   then for real;
2. ``--calibrate``: ``storebench run search`` on ``--stores`` at ``--n``
   vectors, estimated from the priors, then again after a calibration sweep
   at a quarter of the size (the estimate scales the earlier runs' seconds
   by the plan's sizes), then the sweep itself.

Prints estimate, real time and their ratio per line (for the scenarios
also the runs' own time, from their records' start and finish: the
command's start-up and plan are not in the estimate), with the load
average before and after (``/proc/loadavg``); exits 1 when an estimate is
off by more than 2x from the runs' time. The real runs are small and meant to be run niced
(``nice -n 5``); on a busy machine their times are longer than an idle
one's.

    python benchmarks/dry_run_eta.py [--scenarios crud,social,...] [--default-size] [--calibrate]
                                     [--n 4000] [--queries 200]
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

# each built-in scenario at a small size: its structure (stores, grid,
# repeats, delays) kept, its data and operations cut
SMALL: dict[str, list[str]] = {
    "crud": ["n=2000", "ops=200"],
    "search": ["n=2000", "queries=100", "repeats=1"],
    "social": [],  # its size is its delays: 100 reads per reader, 100 ms apart
    "ingest": ["count=2000"],
    "tune": ["n=2000", "queries=100", "duration_s=1"],
    "scale": ["n=1000", "steps=2", "queries=100", "duration_s=1"],
    "streaming": ["n=2000", "queries=100"],
    # a managed OpenSearch cluster per run: its start is most of the time
    "replicas": ["n=1000", "queries=100", "duration_s=2", "warmup=1", "grid.store.replicas=[1,2]"],
    "scale-out": ["queries=100", "duration_s=1", "warmup=1"],
}


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


def line(what: str, est: float, real: float, runs: float | None = None) -> bool:
    against = real if runs is None else runs
    ok = 0.5 <= est / against <= 2.0
    in_runs = "" if runs is None else f"{runs:8.1f} s"
    print(
        f"{what:<50} {est:7.1f} s {real:8.1f} s {in_runs:>10} {est / against:6.2f}"
        + ("" if ok else " off 2x")
    )
    return ok


def runs_seconds(results: Path) -> float:
    """The runs' own wall time, from their records."""
    from storebench.results import records
    from storebench.run.progress import record_seconds

    return sum(record_seconds(r) or 0.0 for r in records.load(results))


def scenarios(names: list[str], sizes: dict[str, list[str]]) -> bool:
    """Each scenario's estimate from no earlier runs against its real time."""
    ok = True
    size = "small size" if sizes else "default size"
    print(f"{f'scenario ({size})':<50} {'estimate':>9} {'command':>10} {'runs':>10} {'ratio':>6}")
    for name in names:
        with tempfile.TemporaryDirectory(prefix="storebench-eta-") as tmp:
            sets = [x for kv in sizes.get(name, []) for x in ("--set", kv)]
            args = ["run", name, *sets, "--results", str(Path(tmp) / "r"), "--no-progress"]
            plan = json.loads(storebench(*args, "--dry-run", "--json")[0].stdout)
            _, real = storebench(*args)
            runs = runs_seconds(Path(tmp) / "r")
        what = f"{name} ({len(plan['runs'])} runs; {' '.join(sizes.get(name, [])) or 'defaults'})"
        ok &= line(what, plan["estimated_s"], real, runs)
    return ok


def calibrate(a: argparse.Namespace) -> bool:
    """The search sweep's estimate from priors, and from earlier smaller runs."""
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
        assert not Path(results).exists(), "the dry run wrote its results directory"
        sweep(a.n // 4, a.queries // 4)  # earlier runs, at a quarter of the size
        informed = json.loads(sweep(a.n, a.queries, "--dry-run", "--json")[0].stdout)
        _, real = sweep(a.n, a.queries)
    print(f"search on {a.stores}, n={a.n}, queries={a.queries}, {len(plan['runs'])} runs:")
    line("  from no earlier runs", plan["estimated_s"], real)
    return line("  from earlier runs (a quarter of the size)", informed["estimated_s"], real)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", default=",".join(SMALL), help="built-in scenarios to run")
    ap.add_argument("--default-size", action="store_true", help="each scenario at its own size")
    ap.add_argument("--calibrate", action="store_true", help="also the search calibration")
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--stores", default="memory,hnswlib,sqlite")
    a = ap.parse_args(argv)
    print(f"load average before: {loadavg()}")
    ok = scenarios([s for s in a.scenarios.split(",") if s], {} if a.default_size else SMALL)
    if a.calibrate:
        ok &= calibrate(a)
    print(f"load average after:  {loadavg()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
