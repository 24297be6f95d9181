"""Bad input of the small kinds (issue list: encodings, hand-made records,
empty grid axes, booleans as numbers, a social run with no writer, scenario
names that leave the results directory, typed values from Python): one line
naming what and where, exit status 2, nothing written."""

import json
import subprocess
import sys

import pytest

import storebench
from storebench.errors import UserError

CLI = [sys.executable, "-m", "storebench"]


def refused(*args, results):
    r = subprocess.run([*CLI, *args, "--results", str(results)], capture_output=True, text=True)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storebench: error: "), r.stderr
    assert not results.exists() or not any(results.iterdir()), "something was written"
    return lines[0]


def test_a_scenario_file_that_is_not_utf8_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: x\nworkload: crud\n# \xff\xfe\n")
    line = refused("run", str(bad), results=tmp_path / "out")
    assert f"{bad}: not UTF-8 text (byte" in line


def test_a_results_file_that_is_not_utf8_names_file_and_line(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_bytes(b'{"run_id": "a"}\n\xff\n')
    r = subprocess.run([*CLI, "show", str(f)], capture_output=True, text=True)
    assert r.returncode == 2 and f"{f}:2: not UTF-8 text" in r.stderr
    f.write_bytes(b"\xff\n")
    r = subprocess.run([*CLI, "show", str(f)], capture_output=True, text=True)
    assert r.returncode == 2 and f"{f}:1: not UTF-8 text" in r.stderr


def test_show_displays_minimal_hand_made_records(tmp_path):
    f = tmp_path / "r.jsonl"
    rec = {
        "run_id": "r",
        "scenario": "s",
        "workload": "crud",
        "status": "ok",
        "store": {"engine": "memory"},
    }
    f.write_text(json.dumps(rec) + "\n" + '{"run_id": "bare", "tasks": [{"ops": 3}]}\n')
    r = subprocess.run([*CLI, "show", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok  memory  r\n?  ?")  # a line each
    r = subprocess.run([*CLI, "show", str(f), "-v"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "s · memory" in r.stdout and "? · ?" in r.stdout  # a table each


def test_an_empty_grid_axis_is_refused(tmp_path):
    line = refused("run", "crud", "--set", "grid.clients=[]", results=tmp_path / "out")
    assert "--set grid.clients: empty" in line


@pytest.mark.parametrize("key", ["n", "ops", "clients"])
def test_a_boolean_is_not_a_number(tmp_path, key):
    line = refused("run", "crud", "--set", f"{key}=true", results=tmp_path / "out")
    assert f"--set params.{key}: expected a number, not a boolean" in line


def test_social_with_no_writer_is_refused(tmp_path):
    zeros = [a for k in ("posters", "commenters") for a in ("--set", f"{k}=0")]
    line = refused("run", "social", "--store", "memory", *zeros, results=tmp_path / "out")
    assert "at least one poster or commenter" in line


@pytest.mark.parametrize("name", ["../../../x", "a/b", ".hidden", ""])
def test_a_scenario_name_stays_inside_the_results_directory(tmp_path, name):
    f = tmp_path / "s.yaml"
    f.write_text(f"name: '{name}'\nworkload: crud\nstores: [memory]\n")
    line = refused("run", str(f), results=tmp_path / "out" / "deeper")
    assert "plain file name" in line
    assert not list(tmp_path.rglob("*.jsonl"))


def test_typed_values_from_python_are_not_parsed_again(tmp_path):
    # "yes" read as YAML would be True, and description must be a string
    recs = storebench.run(
        "crud",
        stores=["memory"],
        set={"description": "yes", "n": 300, "ops": 20, "grid": {}},
        results_dir=tmp_path,
    )
    assert [r["status"] for r in recs] == ["ok"]
    with pytest.raises(UserError, match="expected a number, not a boolean"):
        storebench.run("crud", stores=["memory"], set={"n": True}, results_dir=tmp_path)


# --- store URLs and options (checked by the plan, connecting to nothing) --------


@pytest.mark.parametrize(
    "store, message",
    [
        (
            "redis=redis://:s3cretpw@127.0.0.1:notaport/0",
            "--store: redis url 'redis://:***@127.0.0.1:notaport/0': port 'notaport' is not a "
            "number from 1 to 65535 (expected redis://[:password@]host:port/db)",
        ),
        (
            "redis=http://127.0.0.1:6379",
            "--store: redis url 'http://127.0.0.1:6379': scheme 'http'",
        ),
        ("redis=redis://127.0.0.1:6379/db1", "the path is a database number, not 'db1'"),
        ("sqlite=/no/such/dir/x.db", "directory /no/such/dir does not exist"),
        ("memory=redis://127.0.0.1:6379/0", "--store: memory takes no url"),
        ("pgvector=host=h port=x dbname=d", "pgvector url 'host=h port=x dbname=d': port 'x'"),
        ("mariadb=mysql://me@127.0.0.1:3306", "no database (the path names it)"),
    ],
)
def test_a_bad_store_url_is_refused_before_anything_starts(tmp_path, store, message):
    line = refused("run", "crud", "--store", store, results=tmp_path / "out")
    assert message in line and "s3cretpw" not in line


@pytest.mark.parametrize(
    "entry, message",
    [
        (
            "{engine: sqlite, options: {bogus_option: 1}}",
            "s.yaml:4: stores.0.options.bogus_option: unknown option parameter 'bogus_option' "
            "for store sqlite (known: mode, synchronous)",
        ),
        ("{engine: memory, options: {x: 1}}", "store memory takes no options (got 'x')"),
        ("{engine: sqlite, options: {mode: ram}}", "stores.0.options.mode: option mode of sqlite"),
        (
            "{engine: redis, url: 'redis://127.0.0.1:1/0', options: {persistence: aof}}",
            "option persistence of redis configures the managed server",
        ),
    ],
)
def test_a_bad_store_option_is_refused_with_its_line(tmp_path, entry, message):
    f = tmp_path / "s.yaml"
    f.write_text(f"name: s\nworkload: crud\nstores:\n  - {entry}\n")
    line = refused("run", str(f), results=tmp_path / "out")
    assert message in line


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_store_that_points_nowhere_fails_once_and_its_other_runs_are_skipped(tmp_path):
    url = f"redis://:s3cretpw@127.0.0.1:{_closed_port()}/0"
    r = subprocess.run(
        [*CLI, "run", "crud", "--store", f"redis={url}", "--store", "memory"]
        + ["--set", "n=200", "--set", "ops=10", "--set", "grid.clients=[1,2]"]
        + ["--set", "grid.index.m=[8,16]", "--set", "grid.index.ef_construct=[32]"]
        + ["--results", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1, r.stderr
    assert "s3cretpw" not in r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    cause = [ln for ln in lines if "failed:" in ln]
    assert len(cause) == 1 and "cannot reach Redis at redis://:***@127.0.0.1:" in cause[0]
    assert lines[-1].startswith("6 run(s), 4 not ok (1 failed, 3 skipped); results in ")
    recs = [json.loads(x) for x in (tmp_path / "crud.jsonl").read_text().splitlines()]
    by = [(x["store"]["engine"], x["status"]) for x in recs]
    assert by.count(("memory", "ok")) == 2 and by.count(("redis", "failed")) == 1
    first = next(x for x in recs if x["status"] == "failed")
    for x in recs:
        if x["status"] == "skipped":
            assert x["error"].startswith(
                f"not run: redis could not be opened in run {first['run_id']}"
            )
            assert "Connection refused" in x["error"] and x["key"] and not x.get("tasks")


def test_a_size_is_blamed_on_the_parameter_that_makes_it(tmp_path):
    # n is set too, small: the estimate is dim's doing, and the line says so
    sets = ["--set", "n=200", "--set", "dim=1000000000"]
    line = refused("run", "search", "--store", "memory", *sets, results=tmp_path / "out")
    assert line.startswith("storebench: error: --set params.dim: a run on memory needs about")
