"""Grids: expansion, compat mode, and resuming an interrupted sweep."""

import json
import signal
import subprocess
import sys
import textwrap
import time

import storebench

GRID = textwrap.dedent(
    """\
    name: sweep
    workload: crud
    stores: [memory]
    params: {n: 1000, dim: 16, ops: 50, warmup: 2}
    grid:
      k: [5, 10]
      clients: [1, 2]
    """
)


def test_an_interrupted_grid_resumes_with_only_the_missing_runs(tmp_path):
    scenario = tmp_path / "sweep.yaml"
    scenario.write_text(GRID.replace("ops: 50", "ops: 20000"))
    cmd = [
        sys.executable,
        "-m",
        "storebench",
        "-v",
        "run",
        str(scenario),
        "--results",
        str(tmp_path),
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs_started = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        # "storebench: run <id>: <workload> on <store> ..." starts a run
        runs_started += line.startswith("storebench: run ") and " on " in line
        if runs_started == 3 and "task read: measuring" in line:
            break
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)
    assert p.returncode == 130
    first = [json.loads(x) for x in (tmp_path / "sweep.jsonl").read_text().splitlines()]
    assert [r["status"] for r in first] == ["ok", "ok", "interrupted"]
    assert first[2]["tasks"][-1]["complete"] is False

    p2 = subprocess.run(
        [*cmd[:4], "run", str(scenario), "--results", str(tmp_path), "--resume"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p2.returncode == 0, p2.stderr
    after = [json.loads(x) for x in (tmp_path / "sweep.jsonl").read_text().splitlines()]
    resumed = after[len(first) :]
    assert len(resumed) == 4 - 2  # everything but the two runs already ok
    done_keys = {r["key"] for r in first if r["status"] == "ok"}
    assert not done_keys & {r["key"] for r in resumed}
    assert {r["key"] for r in after if r["status"] == "ok"} == {
        r["key"] for r in resumed
    } | done_keys
    assert len({r["key"] for r in resumed}) == 2


def test_compat_mode_times_one_operation_per_task(tmp_path):
    (rec,) = storebench.run(
        "crud", stores=["memory"], set={"n": 800, "ops": 40, "mode": "compat"}, results_dir=tmp_path
    )
    tasks = {t["name"]: t for t in rec["tasks"]}
    assert rec["mode"] == "compat" and "compat" in rec["metrics"]["method"]
    assert tasks["create"]["ops"] == 1 and tasks["create"]["items"] == 800
    for name in ("read", "update", "delete", "find_by_condition", "find_by_vector"):
        assert tasks[name]["ops"] == 1, name
    assert tasks["recall_queries"]["ops"] == 40
    # recall is the record of the task that ran the scored queries, and the setting's
    assert (
        tasks["recall_queries"]["scores"]["recall@10"] == 1.0
        and rec["settings"][0]["scores"]["recall@10"] == 1.0
    )
    assert "scores" not in tasks["find_by_vector"]  # one query scores nothing


def test_crud_runs_on_a_dataset_and_unknown_datasets_are_refused(tmp_path, monkeypatch):
    import pytest

    from storebench.data import datasets
    from storebench.errors import UserError

    monkeypatch.setenv("STOREBENCH_DATA", str(tmp_path / "data"))
    datasets.make_synthetic(
        datasets.SyntheticSpec(n=1500, dim=16, nq=60, metric="cosine", seed=3), name="tiny-cos"
    )
    (rec,) = storebench.run(
        "crud", stores=["memory"], set={"dataset": "tiny-cos", "ops": 60}, results_dir=tmp_path
    )
    assert rec["status"] == "ok", rec["error"]
    assert rec["metrics"]["data"] == {
        "dataset": "tiny-cos",
        "content_hash": datasets.load("tiny-cos").content_hash,
        "n": 1500,
        "rows": 1500,
        "prefix": False,
        "dim": 16,
        "metric": "cosine",
        "queries": 60,
    }
    # the scenario's n, dim and metric size synthetic data: the dataset's are used
    assert (rec["params"]["n"], rec["params"]["dim"], rec["params"]["metric"]) == (
        1500,
        16,
        "cosine",
    )
    assert rec["settings"][0]["scores"]["recall@10"] == 1.0
    with pytest.raises(UserError, match="unknown dataset 'nope'"):
        storebench.run(
            "crud", stores=["memory"], set={"dataset": "nope"}, results_dir=tmp_path / "x"
        )
    assert not (tmp_path / "x").exists()


def test_hnsw_grid_builds_once_per_build_config_and_reports_each_ef(tmp_path):
    from storebench.report.data import expand_sweeps

    recs = storebench.run(
        "crud",
        stores=["hnswlib", "memory"],
        set=[
            "n=600",
            "dim=16",
            "ops=30",
            "grid.index.m=[8,16]",
            "grid.index.ef_construct=[32]",
            "grid.search.ef=[16,64]",
        ],
        results_dir=tmp_path,
    )
    hnsw = [r for r in recs if r["store"]["engine"] == "hnswlib"]
    mem = [r for r in recs if r["store"]["engine"] == "memory"]
    assert len(hnsw) == 2 and len(mem) == 1  # exact memory runs once...
    assert set(mem[0]["not_applicable"]) == {
        "index.m",
        "index.ef_construct",
        "search.ef",
    }  # ...and says why
    for r in hnsw:
        searches = [t for t in r["tasks"] if t["name"] == "find_by_vector"]
        assert [t["search"] for t in searches] == [{"ef": 16}, {"ef": 64}]
        assert sum(t["name"] == "build_index" for t in r["tasks"]) == 1
    rows = expand_sweeps(recs)
    assert len(rows) == 2 * 2 + 1
    assert {
        (r.store.index.get("m"), r.store.search.get("ef"))
        for r in rows
        if r.store.engine == "hnswlib"
    } == {(8, 16), (8, 64), (16, 16), (16, 64)}
