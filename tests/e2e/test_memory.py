"""A run that cannot fit in memory is refused at plan time (issue 15): one
line with the estimate, the parameter that sets it and the override, exit
status 2, nothing written, no data generated, no store opened. Every
workload and datasets are estimated; ``driver.memory_check: false`` runs
anyway."""

import json
import subprocess
import sys

import pytest

import storebench
from storebench.errors import UserError
from storebench.plan import memory
from storebench.plan.scenario import Scenario
from storebench.stores.base import StoreSpec

CLI = [sys.executable, "-m", "storebench"]
HUGE = 200_000_000  # 95 GiB of 128-d vectors alone


def refused(*args, results):
    r = subprocess.run(
        [*CLI, "run", *args, "--results", str(results)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storebench: error: "), r.stderr
    assert not results.exists(), "something was written"
    return lines[0]


def test_a_run_too_big_for_the_machine_is_refused_with_its_estimate(tmp_path):
    line = refused("crud", "--store", "memory", "--set", f"n={HUGE}", results=tmp_path / "out")
    assert line.startswith("storebench: error: --set params.n: a run on memory needs about ")
    # per document: the vector, id, tags.i, the random order and live tags, a row mask
    data = memory.fmt_bytes(HUGE * (128 * 4 + 8 + 8 + 16 + 1))
    assert f"(data {data}, queries " in line and "truth " in line and "store " in line
    assert "GiB available; --set driver.memory_check=false to run anyway" in line


def test_the_message_names_the_parameter_the_user_set(tmp_path):
    line = refused("crud", "--store", "memory", "--set", "dim=200000000", results=tmp_path / "o")
    assert line.startswith("storebench: error: --set params.dim: a run on memory needs about")
    line = refused("crud", "--set", f"grid.n=[1000,{HUGE}]", results=tmp_path / "o")
    assert line.startswith("storebench: error: --set grid.n: a run on ")


def test_no_managed_server_starts_for_a_refused_run(tmp_path):
    # redis and pgvector would start servers; the plan refuses first, in a second
    line = refused(
        "tune", "--store", "redis,pgvector", "--set", f"n={HUGE}", results=tmp_path / "out"
    )
    assert "--set params.n: a run on redis needs about" in line


@pytest.fixture
def no_store_opens(monkeypatch):
    def refuse(self):
        raise AssertionError(f"{self.engine} was opened: the run started")

    monkeypatch.setattr(StoreSpec, "open", refuse)


@pytest.mark.parametrize(
    ("workload", "store", "values", "key"),
    [
        ("crud", "hnswlib", {"n": HUGE}, "n"),
        ("search", "hnswlib", {"n": HUGE, "grid": {}}, "n"),
        ("tune", "memory", {"dim": 100_000_000}, "dim"),
        ("scale", "hnswlib", {"steps": 40}, "steps"),
        ("ingest", "sqlite", {"count": 20_000_000_000, "grid": {}}, "count"),
        ("social", "memory", {"scale": 1_000_000}, "scale"),
    ],
)
def test_every_workload_is_estimated_from_python(
    tmp_path, no_store_opens, workload, store, values, key
):
    with pytest.raises(UserError, match=rf"^--set params\.{key}: a run on {store} needs about"):
        storebench.run(workload, stores=[store], set=values, results_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def fake_dataset(tmp_path, n, dim):
    """A dataset's meta.json alone: the plan reads no array."""
    d = tmp_path / "big-ds"
    d.mkdir(parents=True)
    meta = {"name": "big-ds", "dim": dim, "metric": "l2", "n": n, "nq": 1000, "format_version": 1}
    (d / "meta.json").write_text(json.dumps(meta))
    return d


def test_a_dataset_counts_what_the_store_holds_not_its_mapped_files(tmp_path):
    ds = fake_dataset(tmp_path, 1_000_000_000, 96)
    # a scenario that leaves n to the dataset: its size, read from meta.json
    f = tmp_path / "big.yaml"
    f.write_text(f"name: big\nworkload: search\nstores: [hnswlib]\nparams:\n  dataset: {ds}\n")
    line = refused(str(f), results=tmp_path / "o")
    assert line.startswith(f"storebench: error: {f}:5: params.dataset: a run on hnswlib needs")
    sc = Scenario.load(str(f), ["driver.memory_check=false"])
    parts, _ = memory.estimate(sc.plan()[0], shared_in_ram=False)
    # the vectors are memory-mapped from the dataset's files: data is row masks
    assert parts["data"] == 1_000_000_000
    assert parts["store"] > 4 * 96 * 1_000_000_000
    # --set n keeps that many of its rows, and never more than it has
    sc = Scenario.load(str(f), ["n=1000"])
    assert sum(memory.estimate(sc.plan()[0], shared_in_ram=False)[0].values()) < 1 << 30
    # more rows than the dataset has is refused by the plan, before any estimate
    small = fake_dataset(tmp_path / "small", 1000, 96)
    with pytest.raises(UserError, match="more than the 1,000 rows"):
        Scenario.load(str(f), [f"dataset={small}", f"n={HUGE}"])


def test_a_server_by_url_is_not_counted_a_managed_one_is():
    def store_part(store):
        sc = Scenario.load("tune", ["n=1000000", "driver.memory_check=false"], [store])
        return memory.estimate(sc.plan()[0], shared_in_ram=False)[0].get("store", 0)

    assert store_part("redis=redis://127.0.0.1:1/0") == 0
    assert store_part("redis") > 1_000_000 * 4 * 128
    assert store_part("pgvector") > 0  # the managed server's fixed share
    assert store_part("null") == 0


def test_the_override_runs_anyway_and_the_check_uses_available_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "available", lambda: 1 << 20)  # a 1 MiB machine
    small = {"n": 300, "ops": 10, "grid": {}}
    with pytest.raises(UserError, match="this machine has 1.0 MiB available"):
        storebench.run("crud", stores=["memory"], set=small, results_dir=tmp_path)
    assert not list(tmp_path.iterdir())
    recs = storebench.run(
        "crud",
        stores=["memory"],
        set={**small, "driver.memory_check": False},
        results_dir=tmp_path,
    )
    assert [r["status"] for r in recs] == ["ok"]
    # the same key from the command line (read as YAML)
    sc = Scenario.load("crud", [f"n={HUGE}", "driver.memory_check=false"], ["memory"])
    assert sc.file.driver.memory_check is False
    assert all("memory_check" not in run.driver for run in sc.plan())  # not an executor setting


def test_the_built_in_scenarios_fit_and_listing_them_checks_nothing(monkeypatch):
    for name in ("crud", "search", "tune", "scale", "ingest", "social", "streaming"):
        sc = Scenario.load(name)
        memory.check(sc, sc.plan())  # as shipped, on a test machine
    monkeypatch.setattr(memory, "available", lambda: 0)
    for name in ("crud", "search", "tune", "scale", "ingest", "social", "streaming"):
        Scenario.load(name)  # storebench list scenarios, init: not a run


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_cgroup_memory_limit_lowers_what_is_available(tmp_path, version):
    mib = 1 << 20
    if version == "v2":
        (tmp_path / "cgroup").write_text("0::/box\n")
        d = tmp_path / "fs" / "box"
        files = ("memory.max", "memory.current", "inactive_file")
    else:
        (tmp_path / "cgroup").write_text("5:cpu:/\n4:memory:/box\n")
        d = tmp_path / "fs" / "memory" / "box"
        files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    d.mkdir(parents=True)
    (d / files[0]).write_text(f"{512 * mib}\n")
    (d / files[1]).write_text(f"{300 * mib}\n")
    (d / "memory.stat").write_text(f"anon 1\n{files[2]} {100 * mib}\n")
    # the limit, less what is used, plus the page cache the kernel can drop
    assert memory.cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs") == 312 * mib
    (d / files[0]).write_text("max\n" if version == "v2" else f"{1 << 62}\n")
    assert memory.cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs") is None
