"""The command line as a user meets it, in subprocesses."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import storebench

CLI = [sys.executable, "-m", "storebench"]


def sb(*args, cwd=None, timeout=300):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def records(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_crud_prints_a_table_per_store_with_full_recall(tmp_path):
    r = sb("run", "crud", "--set", "n=2000", "--set", "ops=100", "--results", str(tmp_path))
    assert r.returncode == 0, r.stderr
    # a line per run (a table each with -v, below), recall in its own place
    assert "ok  memory" in r.stdout and "ok  sqlite" in r.stdout
    assert r.stdout.count("recall@10 1.0000") == 2
    recs = records(tmp_path / "crud.jsonl")
    assert [x["status"] for x in recs] == ["ok", "ok"]
    tasks = [t["name"] for t in recs[0]["tasks"]]
    assert tasks == ["create", "read", "update", "delete", "find_by_condition", "find_by_vector"]
    rec = recs[1]
    assert rec["versions"]["engine"].startswith("SQLite")
    assert rec["machine"]["cores_logical"] >= 1
    read = rec["tasks"][1]
    assert (
        read["ops"] == 100
        and read["ops_per_s"] > 0
        and read["latency_ns"]["p99"] >= read["latency_ns"]["p50"]
    )
    shown = sb("show", str(tmp_path), "-v")  # -v after the command too
    assert shown.returncode == 0 and "find_by_vector" in shown.stdout
    assert "crud · memory" in shown.stdout and "crud · sqlite" in shown.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "crud", "--store", "nosuch"], "--store: unknown store 'nosuch' (known: "),
        (
            ["run", "crud", "--set", "batchsize=10"],
            "--set params.batchsize: unknown key",
        ),
        (["run", "crud", "--set", "n=ten"], "params.n: Input should be a valid integer"),
        (["run", "missing.yaml"], "missing.yaml: scenario file not found"),
        (["run", "nosuch"], "unknown scenario 'nosuch'"),
        (
            ["run", "crud", "--store", "memory", "--set", "driver.executor=processes"],
            "memory cannot serve processes clients: no shared_across_processes",
        ),
        (["run", "crud", "--set", "driver.executor=ray9"], "unknown executor 'ray9'"),
        (["show", "nothing-here.jsonl"], "nothing-here.jsonl: no such file or directory"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    r = (
        sb(*args, "--results", str(tmp_path / "res"))
        if args[0] == "run"
        else sb(*args, cwd=tmp_path)
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storebench: error: ")
    assert message in lines[0]
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_run_leaves_a_valid_record_marked_interrupted(tmp_path, sig):
    p = subprocess.Popen(
        [
            *CLI,
            "-v",
            "run",
            "crud",
            "--store",
            "sqlite",
            "--set",
            "n=2000",
            "--set",
            "ops=1000000",
            "--results",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # wait until the long task is being measured
    deadline = time.monotonic() + 120
    seen = ""
    while "task read: measuring" not in seen and time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        seen += line
    assert "task read: measuring" in seen, seen
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, err  # 130 for SIGINT, 143 for SIGTERM
    (rec,) = records(tmp_path / "crud.jsonl")
    assert rec["status"] == "interrupted"
    assert rec["error"] == f"interrupted by {sig.name}"
    create, read = rec["tasks"][:2]
    assert create["complete"] and create["ops"] == 2
    assert read["name"] == "read" and not read["complete"] and 0 <= read["ops"] < 1_000_000
    # the run's temporary database is gone
    assert not any(Path("/tmp").glob(f"storebench-run-*{rec['run_id'][-8:]}*"))


def test_version_and_help():
    r = sb("--version")
    assert r.returncode == 0 and storebench.__version__ in r.stdout
    for cmd in (["--help"], ["run", "--help"], ["list", "--help"], ["show", "--help"]):
        assert sb(*cmd).returncode == 0
    r = sb("list", "stores")
    assert "memory" in r.stdout and "sqlite" in r.stdout and "null" in r.stdout


def test_python_api_returns_the_records(tmp_path):
    recs = storebench.run(
        "crud", stores=["memory"], set={"n": 300, "ops": 20}, results_dir=tmp_path
    )
    assert len(recs) == 1 and recs[0]["status"] == "ok"
    assert recs[0]["settings"][0]["scores"]["recall@10"] == 1.0
    # resume skips what is already done
    assert (
        storebench.run(
            "crud", stores=["memory"], set={"n": 300, "ops": 20}, results_dir=tmp_path, resume=True
        )
        == []
    )


def test_resume_measures_again_a_dataset_replaced_under_the_same_name(tmp_path, monkeypatch):
    from storebench.data import datasets
    from storebench.data.datasets import SyntheticSpec

    monkeypatch.setenv("STOREBENCH_DATA", str(tmp_path / "data"))
    datasets.make_synthetic(SyntheticSpec(n=400, dim=8, nq=10), "d")
    setting = {"dataset": "d", "clients": [1], "queries": 10}
    first = storebench.run("search", stores=["memory"], set=setting, results_dir=tmp_path)
    assert first and all(r["status"] == "ok" for r in first)
    assert first[0]["metrics"]["data"]["content_hash"] == datasets.load("d").content_hash
    again = storebench.run(
        "search", stores=["memory"], set=setting, results_dir=tmp_path, resume=True
    )
    assert again == []  # the same data: done
    datasets.make_synthetic(SyntheticSpec(n=400, dim=8, nq=10, seed=1), "d", replace=True)
    changed = storebench.run(
        "search", stores=["memory"], set=setting, results_dir=tmp_path, resume=True
    )
    # other data under that name: measured again, every run of it
    assert len(changed) == len(first) and all(r["status"] == "ok" for r in changed)
    assert (
        changed[0]["metrics"]["data"]["content_hash"] != first[0]["metrics"]["data"]["content_hash"]
    )


def test_init_writes_a_scenario_to_edit_and_never_overwrites(tmp_path):
    r = sb("init", "social", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "social.yaml").read_text().startswith("# agdb")
    again = sb("init", "social", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    nowhere = sb("init", "social", str(tmp_path / "no" / "x.yaml"), cwd=tmp_path)
    assert nowhere.returncode == 2 and "Traceback" not in nowhere.stderr
    assert nowhere.stderr.strip().endswith("x.yaml: cannot write it: No such file or directory")
