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
    assert "s · memory" in r.stdout and "? · ?" in r.stdout


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
