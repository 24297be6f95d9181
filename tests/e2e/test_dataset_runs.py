"""Runs on a dataset are exact about it: all its rows and its test set unless
a prefix or a count is stated (and the record says which), its dimension
and metric whatever the scenario file says for synthetic data, a stated n
larger than the data or a conflicting dim or metric refused before anything
runs, and the record naming the dataset by name and content hash. A
VectorDBBench directory with files beside its data is read, or refused
naming the file."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import storebench
from storebench.data import datasets
from storebench.errors import UserError
from storebench.plan.scenario import Scenario

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CLI = [sys.executable, "-m", "storebench"]
# a small run of the search scenario: its own n (10,000), dim (128), metric,
# queries (500) and labels stay in the file; the dataset brings its own
QUICK = {"grid": {}, "clients": [1], "repeats": 1, "warmup": 0}


@pytest.fixture
def data(tmp_path, monkeypatch):
    """STOREBENCH_DATA with a 3,000 x 16 l2 dataset of 40 queries, made by
    `storebench dataset make`."""
    root = tmp_path / "data"
    monkeypatch.setenv("STOREBENCH_DATA", str(root))
    r = subprocess.run(
        [*CLI, "dataset", "make", "--name", "d16", "-n", "3000", "--dim", "16", "--queries", "40"],
        capture_output=True,
        text=True,
        env=os.environ | {"STOREBENCH_DATA": str(root)},
    )
    assert r.returncode == 0, r.stderr
    return root


def run(tmp_path, **sets):
    return storebench.run(
        "search", stores=["memory"], set=QUICK | sets, results_dir=tmp_path / "results"
    )


def test_a_dataset_run_uses_all_its_rows_and_its_test_set(data, tmp_path):
    (rec,) = run(tmp_path, dataset="d16")
    assert rec["status"] == "ok", rec["error"]
    p = rec["params"]
    assert (p["n"], p["dim"], p["metric"], p["queries"], p["labels"]) == (3000, 16, "l2", 40, [])
    assert rec["metrics"]["data"] == {
        "dataset": "d16",
        "content_hash": datasets.load("d16").content_hash,
        "n": 3000,
        "rows": 3000,
        "prefix": False,
        "dim": 16,
        "metric": "l2",
        "queries": 40,
    }
    tasks = {t["name"]: t for t in rec["tasks"]}
    assert tasks["upload"]["items"] == 3000
    assert tasks["search c=1"]["queries_scored"] == 40


def test_a_stated_n_takes_a_prefix_and_the_record_says_so(data, tmp_path):
    (rec,) = run(tmp_path, dataset="d16", n=1000, queries=25)
    assert rec["status"] == "ok", rec["error"]
    d = rec["metrics"]["data"]
    assert (d["n"], d["rows"], d["prefix"], d["queries"]) == (1000, 3000, True, 25)
    assert rec["params"]["n"] == 1000 and rec["tasks"][0]["items"] == 1000


REFUSED = [
    ("n=5000", "--set params.n: n=5,000 is more than the 3,000 rows of d16"),
    ("metric=cosine", "--set params.metric: metric=cosine, but d16 is l2"),
    ("dim=64", "--set params.dim: dim=64, but d16 holds 16-d vectors"),
    ("queries=41", "--set params.queries: queries=41, but d16 has 40 test queries"),
]


@pytest.mark.parametrize(("setting", "message"), REFUSED)
def test_a_dataset_run_that_disagrees_with_the_data_is_refused_at_the_cli(
    data, tmp_path, setting, message
):
    results = tmp_path / "results"
    sets = ["--set", "dataset=d16", "--set", "grid={}", "--set", setting]
    r = subprocess.run(
        [*CLI, "run", "search", "--store", "memory", *sets, "--results", str(results)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith(f"storebench: error: {message}")
    assert len(r.stderr.strip().splitlines()) == 1
    assert not results.exists()


@pytest.mark.parametrize(("setting", "message"), REFUSED)
def test_a_dataset_run_that_disagrees_with_the_data_is_refused_from_python(
    data, tmp_path, setting, message
):
    key, value = setting.split("=")
    with pytest.raises(UserError) as e:
        run(tmp_path, dataset="d16", **{key: value if key == "metric" else int(value)})
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "results").exists()


def test_a_scenario_file_that_names_its_dataset_states_its_sizes(data, tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "name: mine\nworkload: search\nstores: [memory]\n"
        "params: {dataset: d16, n: 2000, dim: 16, clients: [1]}\n"
    )
    (run_,) = Scenario.load(str(f)).plan()
    assert (run_.params.n, run_.params.queries) == (2000, 40)  # a prefix: the file said so
    f.write_text(
        "name: mine\nworkload: search\nstores: [memory]\nparams:\n  dataset: d16\n  dim: 32\n"
    )
    with pytest.raises(UserError, match=r"mine.yaml:6: params.dim: dim=32, but d16 holds 16-d"):
        Scenario.load(str(f))


def test_scale_on_a_dataset_ends_at_its_size(data):
    (run_,) = Scenario.load("scale", stores=["memory"], values={"dataset": "d16"}).plan()
    assert run_.params.sizes() == [750, 1500, 3000]
    with pytest.raises(UserError, match=r"n=1,000 x 2\^2 = 4,000 is more than the 3,000 rows"):
        Scenario.load("scale", stores=["memory"], values={"dataset": "d16", "n": 1000})


# --- a VectorDBBench directory ------------------------------------------------------


def vectordbbench_dir(path, ds):
    """The dataset in VectorDBBench's layout: train.parquet and test.parquet
    of (id, emb)."""
    path.mkdir()
    vecs = np.asarray(ds.vectors)
    pq.write_table(pa.table({"id": np.asarray(ds.ids), "emb": list(vecs)}), path / "train.parquet")
    pq.write_table(
        pa.table({"id": np.arange(ds.nq), "emb": list(np.asarray(ds.queries))}),
        path / "test.parquet",
    )
    return path


def test_a_vectordbbench_directory_with_a_meta_json_is_read(data, tmp_path):
    vdb = vectordbbench_dir(tmp_path / "vdb16", datasets.load("d16"))
    (vdb / "meta.json").write_text(json.dumps({"name": "vdb16", "metric_type": "L2", "dim": 16}))
    (vdb / "README.md").write_text("not data\n")
    (rec,) = run(tmp_path, dataset=str(vdb))
    assert rec["status"] == "ok", rec["error"]
    d = rec["metrics"]["data"]
    assert (d["dataset"], d["n"], d["prefix"], d["metric"], d["queries"]) == (
        "vdb16",
        3000,
        False,
        "l2",  # from meta.json's metric_type
        40,
    )
    imported = datasets.load("vdb16")
    assert imported.meta.source["kind"] == "parquet" and d["content_hash"] == imported.content_hash


def test_a_vectordbbench_directory_that_does_not_say_its_metric_takes_the_stated_one(
    data, tmp_path
):
    vdb = vectordbbench_dir(tmp_path / "plain", datasets.load("d16"))
    (vdb / "meta.json").write_text(json.dumps({"rows": 3000}))  # a metric it does not state
    with pytest.raises(UserError, match=r"train.parquet: the source does not say its metric"):
        run(tmp_path, dataset=str(vdb))
    assert not (data / "plain").exists()  # nothing imported
    (rec,) = run(tmp_path, dataset=str(vdb), metric="cosine")
    assert rec["status"] == "ok" and rec["metrics"]["data"]["metric"] == "cosine"


def test_a_vectordbbench_directory_with_an_unknown_parquet_file_is_refused_naming_it(
    data, tmp_path
):
    vdb = vectordbbench_dir(tmp_path / "odd", datasets.load("d16"))
    pq.write_table(pa.table({"x": [1, 2]}), vdb / "extra.parquet")
    results = tmp_path / "results"
    r = subprocess.run(
        [*CLI, "run", "search", "--store", "memory", "--set", f"dataset={vdb}"]
        + ["--set", "grid={}", "--results", str(results)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"storebench: error: {vdb / 'extra.parquet'}: not a file of a")
    assert len(r.stderr.strip().splitlines()) == 1 and not results.exists()
