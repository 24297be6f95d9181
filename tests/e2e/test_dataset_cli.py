"""``storebench dataset`` as a user meets it, in subprocesses."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from storebench.cli.main import cli
from tests.unit.test_datasets_download import LoopbackServer, hdf5_bytes

CLI = [sys.executable, "-m", "storebench"]


def sb(data, *args):
    env = {**os.environ, "STOREBENCH_DATA": str(data)}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=120)


def test_make_info_truth_list(tmp_path):
    data = tmp_path / "data"
    r = sb(
        data,
        "dataset",
        "make",
        "--name",
        "demo",
        "-n",
        "5000",
        "--dim",
        "16",
        "--queries",
        "50",
        "--labels",
        "1%,0.5",
        "--strings",
        "2",
        "--string-size",
        "4",
    )
    assert r.returncode == 0, r.stderr
    assert (
        "demo: 5,000 x 16 l2, 50 queries, fields: tags.i, label_1p, label_50p, test1, test2"
        in r.stdout
    )

    r = sb(data, "dataset", "info", "demo", "--json")
    info = json.loads(r.stdout)
    assert (info["n"], info["dim"], info["queries"]) == (5000, 16, 50)

    r = sb(data, "dataset", "truth", "demo", "-k", "10")
    assert r.returncode == 0, r.stderr
    assert "demo: k=10 l2 for 50 queries: computed in" in r.stdout
    r = sb(data, "dataset", "truth", "demo", "-k", "5")
    assert "k=5 l2 for 50 queries: cached in" in r.stdout
    r = sb(data, "dataset", "truth", "demo", "-k", "10", "--where", "{label_1p: label_1p}")
    assert r.returncode == 0, r.stderr
    assert "filter keeps" in r.stdout and "of 5,000 rows: computed" in r.stdout

    r = sb(data, "dataset", "list", "--local")
    assert r.returncode == 0 and "demo" in r.stdout


def test_import_of_a_corrupt_file_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    data = tmp_path / "data"
    bad = tmp_path / "base.fbin"
    with open(bad, "wb") as f:
        f.write(np.array([1000, 8], "<i4").tobytes())
        f.write(np.zeros((999, 8), "<f4").tobytes())  # one row short
    r = sb(data, "dataset", "import", str(bad), "--metric", "l2")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines == [
        f"storebench: error: {bad}: header declares 1,000 x 8 (32,008 bytes) "
        "but the file has 31,976 bytes (truncated)"
    ]
    assert not data.exists() or not any(data.iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["dataset", "info", "nosuch"], "unknown dataset 'nosuch'"),
        (["dataset", "truth", "sift-128-euclidean"], "is registered but not downloaded"),
        (["dataset", "fetch", "nosuch"], "unknown dataset 'nosuch' (registered: "),
        (["dataset", "make", "--labels", "2"], "selectivity 2.0 is not in (0, 1]"),
    ],
)
def test_bad_names_and_values_exit_2(tmp_path, monkeypatch, args, message):
    # in-process (the same Group that turns errors into exit 2), to spare start-ups
    monkeypatch.setenv("STOREBENCH_DATA", str(tmp_path / "data"))
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_fetch_from_a_loopback_mirror_then_a_checksum_mismatch(tmp_path):
    data = tmp_path / "data"
    with LoopbackServer() as srv:
        body = hdf5_bytes(tmp_path, n=300, dim=128)
        srv.files["/sift-128-euclidean.hdf5"] = body
        r = sb(data, "dataset", "fetch", "sift-128-euclidean", "--mirror", srv.url, "--no-progress")
        assert r.returncode == 0, r.stderr
        assert "sift-128-euclidean: 300 x 128 l2, 20 queries" in r.stdout
        sums = json.loads((data / "checksums.json").read_text())
        assert list(sums) == ["http://ann-benchmarks.com/sift-128-euclidean.hdf5"]

        # the mirror now serves other bytes: the recorded checksum refuses them
        srv.files["/sift-128-euclidean.hdf5"] = hdf5_bytes(tmp_path, n=301, dim=128)
        r = sb(data, "dataset", "fetch", "sift-128-euclidean", "--mirror", srv.url, "--force")
        assert r.returncode == 2
        assert "checksum mismatch" in r.stderr and "the downloaded file was deleted" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert not list((data / "downloads").rglob("*.part"))

    r = sb(data, "dataset", "info", "sift-128-euclidean", "--json")
    assert json.loads(r.stdout)["n"] == 300  # the first import is intact


@pytest.mark.parametrize("args", [["list", "--local"], ["list"], ["info", "x"]])
def test_a_data_directory_that_is_a_file_is_one_line(tmp_path, monkeypatch, args):
    data = tmp_path / "data"
    data.write_text("not a directory")
    monkeypatch.setenv("STOREBENCH_DATA", str(data))
    r = CliRunner().invoke(cli, ["dataset", *args])
    assert r.exit_code == 2, r.output
    error = f"storebench: error: STOREBENCH_DATA: the data directory {data} is not a directory\n"
    assert r.output == error
