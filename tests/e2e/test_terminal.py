"""The terminal side of the command line: tables fitted to the terminal
(no number cut), ``--dry-run`` (nothing written, nothing started),
``--store-option``, ``--json``, ``-q`` and flags after the command."""

import contextlib
import io
import json
import re
import subprocess
import sys
import time

import psutil
import pytest
from rich.console import Console

import storebench
from storebench.report import terminal
from storebench.results import records

CLI = [sys.executable, "-m", "storebench"]
NUMBER = re.compile(r"\d")


def sb(*args, env=None, timeout=300):
    import os

    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A small search sweep on an exact store and an HNSW store (two index
    configurations, three search settings each), real runs."""
    out = tmp_path_factory.mktemp("sweep")
    storebench.run(
        "search",
        stores=["memory", "hnswlib"],
        set={"n": 800, "queries": 20, "repeats": 1, "warmup": 2, "min_window_s": 0},
        results_dir=out,
    )
    return out


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[\s│┃]+", text) if w}


def _rendered(recs, width: int) -> tuple[str, set[str]]:
    """The run lines, the per-run tables and the study tables at ``width``,
    and every word their cells hold in full."""
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    terminal.print_records(recs, console, full=False)
    terminal.print_records(recs, console, full=True)
    terminal.print_study_tables(recs, console)
    whole: set[str] = set()
    for rec in recs:
        whole |= _words(terminal.run_line(rec, 10_000).plain)
        for row in terminal.run_rows(rec):
            whole |= {w for cell in row for w in _words(terminal._plain(cell))}
    for block in terminal.study_tables(recs):
        whole |= {w for row in block.rows for cell in row for w in _words(cell)}
    return console.export_text(), whole


@pytest.mark.parametrize("width", [80, 100, 120])
def test_tables_fit_the_terminal_and_cut_no_number(sweep, width):
    recs = records.load([sweep])
    text, whole = _rendered(recs, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text
    body = [
        line
        for line in lines
        if line.startswith("│") or line.startswith(("ok ", "failed ", "interrupted "))
    ]
    assert len(body) > 20
    cut = [w for line in body for w in _words(line) if NUMBER.search(w) and w not in whole]
    assert cut == [], cut
    # recall has its own column in the per-run tables; each run's line names
    # its headline task and setting, and its recall where the width allows
    assert re.search(r"┃ +recall ┃", text) or "rec" in text
    for line in lines[: len(recs)]:
        assert line.startswith("ok") and re.search(r"  search (ef=\d+ )?c=\d+: [\d,.]+ ops/s", line)
        assert "recall@10" in line or width < 100


def test_show_prints_the_study_tables_as_run_does_and_json(sweep):
    r = sb("show", str(sweep), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "…" not in r.stdout
    first = r.stdout.splitlines()[:3]
    assert all(line.startswith("ok  ") for line in first), first
    # the study's tables come last, after the per-run lines
    assert r.stdout.index("QPS") > r.stdout.index(first[-1])
    j = sb("show", str(sweep), "--json")
    data = json.loads(j.stdout)
    assert len(data["runs"]) == 3 and {r["status"] for r in data["runs"]} == {"ok"}
    assert any(t["title"] == "QPS" for t in data["tables"])
    hnsw = [r for r in data["runs"] if r["store"] == "hnswlib"]
    assert hnsw and all(0 < r["recall_min"] <= r["recall_max"] <= 1 for r in hnsw)
    # -q prints nothing, wherever it is given
    for args in (["-q", "show", str(sweep)], ["show", str(sweep), "--quiet"]):
        q = sb(*args)
        assert q.returncode == 0 and q.stdout == "" and q.stderr == ""


def test_list_json():
    r = sb("list", "stores", "--json")
    stores = {s["store"]: s for s in json.loads(r.stdout)}
    assert stores["memory"]["available"] == "yes" and "sqlite" in stores
    r = sb("list", "scenarios", "--json", "-v")
    assert "search" in {s["scenario"] for s in json.loads(r.stdout)}


def _watch_children(proc: subprocess.Popen) -> set[str]:
    """The names of every process ``proc`` starts while it runs."""
    seen: set[str] = set()
    me = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    seen.add(child.name())
        except psutil.Error:
            break
        time.sleep(0.005)
    return seen


def test_dry_run_writes_nothing_and_starts_nothing(tmp_path):
    db = tmp_path / "db.sqlite"
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            "search",
            "--store",
            "pgvector,hnswlib",
            "--store",
            f"sqlite={db}",
            "--store-option",
            "pgvector.settings.shared_buffers=64MB",
            "--results",
            str(results),
            "--dry-run",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, "COLUMNS": "200"},
    )
    children = _watch_children(proc)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert children == set(), children  # no server, no client process
    assert not results.exists() and not db.exists()  # no results file, no database
    assert list(tmp_path.iterdir()) == []
    assert "a managed server" in out and "a private temporary directory" not in out
    assert "estimated time:" in out and "memory: about" in out
    assert "dry run: nothing started" in out
    assert "options of pgvector: {'settings': {'shared_buffers': '64MB'}}" in out


def test_dry_run_json_counts_the_plan(tmp_path):
    r = sb(
        "run",
        "search",
        "--store",
        "memory,hnswlib",
        "--results",
        str(tmp_path / "r"),
        "--dry-run",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    # memory: 3 repeats; hnswlib: 2 index configurations x 3 repeats
    assert len(plan["runs"]) == 9
    assert plan["estimated_s"] > 0 and plan["memory_bytes"] > 0
    assert all(r["search_sweep"] == {"ef": [16, 64, 128]} for r in plan["runs"][3:])
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--store", "pgvector", "--store-option", "pgvector.setings.x=1"],
            "--store-option pgvector.setings: unknown option parameter 'setings' for store pgvector",
        ),
        (
            ["--store", "memory,sqlite", "--store-option", "mode=memory"],
            "--store-option: mode: start with the store's engine (memory or sqlite)",
        ),
        (
            ["--store", "memory", "--store-option", "pgvector.settings.x=1"],
            "--store-option: pgvector.settings.x: no pgvector store in this run",
        ),
        (
            ["--store", "pgvector=postgresql://u@127.0.0.1:1/db"]
            + ["--store-option", "settings.shared_buffers=1GB"],
            "option settings of pgvector configures the managed server",
        ),
    ],
)
def test_store_options_are_checked_by_the_store_at_plan_time(tmp_path, args, message):
    r = sb("run", "search", *args, "--results", str(tmp_path / "r"))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storebench: error: "), lines
    assert message in lines[0]
    assert not (tmp_path / "r").exists()


def test_store_option_reaches_the_store(tmp_path):
    r = sb(
        "run",
        "crud",
        "--store",
        "sqlite",
        "--store-option",
        "mode=memory",
        "--set",
        "n=200",
        "--set",
        "ops=10",
        "--results",
        str(tmp_path),
        "--json",
        "-q",
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    summary = json.loads(r.stdout)
    assert [x["status"] for x in summary["runs"]] == ["ok"]
    (rec,) = records.load([tmp_path])
    assert rec.store.options == {"mode": "memory"}


def test_dry_run_refuses_what_the_run_would_refuse(tmp_path):
    r = sb("run", "crud", "--results", str(tmp_path / "no" / "dir"), "--dry-run")
    assert r.returncode == 2 and "makes no parent directories" in r.stderr
    r = sb("run", "crud", "--set", "n=100000000", "--results", str(tmp_path / "r"), "--dry-run")
    assert r.returncode == 2 and "--set driver.memory_check=false to run anyway" in r.stderr
    assert list(tmp_path.iterdir()) == []
