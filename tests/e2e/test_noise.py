"""A run on a machine that other processes keep busy says so: its search
task and the run are flagged, with the other processes' CPU measured; the
same run without them measures less. The threshold is in storebench.measure.noise;
these tests hold on a shared 2-core machine (no assertion that a run
without burners is unflagged: other jobs may be busy too)."""

import json
import subprocess
import sys
import time

CLI = [sys.executable, "-m", "storebench"]
SETS = {
    "n": 1500,
    "dim": 16,
    "queries": 60,
    "grid": "{}",
    "clients": 1,
    "repeats": 1,
    "warmup": 0,
    "labels": "[]",
    "duration_s": 1.5,
}


def run_search(results):
    sets = [x for k, v in SETS.items() for x in ("--set", f"{k}={v}")]
    r = subprocess.run(
        [*CLI, "run", "search", "--store", "memory", *sets, "--results", str(results)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    (rec,) = [json.loads(line) for line in (results / "search.jsonl").read_text().splitlines()]
    return rec


def test_a_run_beside_cpu_burners_is_flagged_busy(tmp_path, burners):
    quiet = run_search(tmp_path / "quiet")
    burners(2)
    t0, c0 = time.monotonic(), burners.cpu()
    busy = run_search(tmp_path / "busy")
    rate = (burners.cpu() - c0) / (time.monotonic() - t0)  # the burners' cores

    def search(rec):
        (task,) = [t for t in rec["tasks"] if t["name"] == "search c=1"]
        return task["machine_load"]

    hot, calm = search(busy), search(quiet)
    assert hot["busy"] is True
    assert hot["other_cpu_cores"] >= 0.7 * rate  # the burners are seen (as much as they ran)
    assert hot["other_cpu_cores"] > calm["other_cpu_cores"]
    assert busy["machine_load"]["busy"] is True
    assert "search c=1" in busy["machine_load"]["busy_tasks"]
    for rec in (quiet, busy):  # every task carries the figures
        for t in rec["tasks"]:
            assert t["machine_load"]["sampled_s"] >= 0, t["name"]
            assert t["machine_load"]["load_1m_start"] is not None
