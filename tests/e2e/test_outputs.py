"""Results and output locations are checked before any work (issue 15):
a directory that cannot be written, or whose parent is missing, is one
line naming it, exit status 2, nothing written and nothing run. The tests
run as root, for whom permission bits do not stop a write: the unwritable
places are a path under a regular file and ``/proc``, where ``os.access``
says yes but no file can be made."""

import json
import subprocess
import sys

import pytest

import storebench
from storebench.errors import UserError
from storebench.stores.base import StoreSpec

CLI = [sys.executable, "-m", "storebench"]
SMALL = ["--store", "memory", "--set", "n=300", "--set", "ops=10", "--set", "grid={}"]


def cli(*args):
    return subprocess.run([*CLI, *args], capture_output=True, text=True)


def one_line(r):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storebench: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("not a directory\n")
    return f


def nothing_written(root, *allowed):
    made = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    assert made == sorted(allowed), made


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("{file}/results", "{file} is not a directory"),
        ("{file}", "exists and is not a directory"),
        ("{tmp}/missing/results", "directory {tmp}/missing does not exist"),
        ("/proc/storebench-results", "cannot write in /proc"),
    ],
)
def test_run_refuses_a_results_directory_it_cannot_write(tmp_path, a_file, where, says):
    where = where.format(file=a_file, tmp=tmp_path)
    line = one_line(cli("run", "crud", *SMALL, "--results", where))
    assert line.startswith(f"storebench: error: --results {where}: ")
    assert says.format(file=a_file, tmp=tmp_path) in line
    nothing_written(tmp_path, "a-file")


def test_run_refuses_a_results_file_that_is_a_directory(tmp_path):
    (tmp_path / "out" / "crud.jsonl").mkdir(parents=True)
    line = one_line(cli("run", "crud", *SMALL, "--results", str(tmp_path / "out")))
    assert f"{tmp_path / 'out' / 'crud.jsonl'}: is a directory, not a file" in line
    nothing_written(tmp_path, "out", "out/crud.jsonl")


def test_run_and_show_refuse_a_results_file_that_is_a_device(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "crud.jsonl").symlink_to("/dev/zero")  # read for ever, were it read
    line = one_line(cli("run", "crud", *SMALL, "--results", str(tmp_path / "out")))
    assert f"{tmp_path / 'out' / 'crud.jsonl'}: not a regular file" in line
    line = one_line(cli("show", str(tmp_path / "out" / "crud.jsonl")))
    assert "crud.jsonl: not a regular file" in line


@pytest.fixture
def no_store_opens(monkeypatch):
    def refuse(self):
        raise AssertionError(f"{self.engine} was opened: the run started")

    monkeypatch.setattr(StoreSpec, "open", refuse)


def test_the_api_refuses_before_anything_runs(tmp_path, a_file, no_store_opens):
    for where, says in (
        (a_file / "results", f"results_dir {a_file}/results: {a_file} is not a directory"),
        (tmp_path / "x" / "y", f"directory {tmp_path}/x does not exist"),
        ("/proc/storebench-results", "cannot write in /proc"),
    ):
        with pytest.raises(UserError) as err:
            storebench.run("crud", stores=["memory", "redis"], results_dir=where)
        assert says in str(err.value)
    nothing_written(tmp_path, "a-file")


def test_the_named_results_directory_is_made_its_parent_must_exist(tmp_path):
    out = tmp_path / "results"
    recs = storebench.run(
        "crud", stores=["memory"], set={"n": 300, "ops": 10, "grid": {}}, results_dir=out
    )
    assert [r["status"] for r in recs] == ["ok"]
    lines = (out / "crud.jsonl").read_text().splitlines()
    assert [json.loads(x)["run_id"] for x in lines] == [recs[0]["run_id"]]
    nothing_written(tmp_path, "results", "results/crud.jsonl")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("recs")
    storebench.run("crud", stores=["memory"], set={"n": 300, "ops": 10, "grid": {}}, results_dir=d)
    return d / "crud.jsonl"


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ("{tmp}/missing/dir/x.csv", "directory {tmp}/missing/dir does not exist"),
        ("{file}/x.csv", "{file} is not a directory"),
        ("/proc/x.csv", "cannot write in /proc"),
        ("{tmp}", "is a directory, not a file"),
    ],
)
def test_export_refuses_an_out_it_cannot_write_and_makes_no_directory(
    tmp_path, a_file, records, out, says
):
    out = out.format(tmp=tmp_path, file=a_file)
    line = one_line(cli("export", str(records), "--format", "csv", "--out", out))
    assert line.startswith(f"storebench: error: --out {out}: ")
    assert says.format(tmp=tmp_path, file=a_file) in line
    nothing_written(tmp_path, "a-file")


def test_export_writes_into_an_existing_directory(tmp_path, records):
    r = cli("export", str(records), "--out", str(tmp_path / "x.csv"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "x.csv").read_text().startswith("run_id,")


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ("{tmp}/missing/report", "directory {tmp}/missing does not exist"),
        ("{file}", "exists and is not a directory"),
        ("{file}/report", "{file} is not a directory"),
        ("/proc/report", "cannot write in /proc"),
    ],
)
def test_report_refuses_an_out_it_cannot_write(tmp_path, a_file, records, out, says):
    out = out.format(tmp=tmp_path, file=a_file)
    line = one_line(cli("report", str(records), "--out", out))
    assert line.startswith(f"storebench: error: --out {out}: ")
    assert says.format(tmp=tmp_path, file=a_file) in line
    nothing_written(tmp_path, "a-file")
