"""The first hour, as a newcomer meets it: the README's commands in its
order (list, ``make demo``'s run, a run of every other built-in scenario at
a small size, show, compare, report, export), through the command line, in
a fresh directory, with what ``make demo`` installs. At 80 and 120 columns
each prints what it was asked for: no failure, no install hint for an extra
that does not exist, every study table of a single run, no column of only
"-", no number cut, no line wider than the terminal. The demo's HNSW store
shows recall falling with ef beside the exact stores' 1.0."""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.unit.test_readme import demo_run

# seventeen commands in a row, each its own process: ~1 min on an idle machine
pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "storebench"]
WIDTHS = (80, 120)
EXTRAS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
)
HINT = re.compile(r"storebench\[([^\]]*)\]")
# the approximate store make demo installs (tune then names its ef)
ANN = "usearch"
DEMO = shlex.split(demo_run().partition(" run ")[2])  # crud, --store ..., --set ...

# make demo's run, then every other built-in scenario, small: short windows,
# few documents and queries
RUNS = {
    DEMO[0]: DEMO[1:],
    "social": [
        "--store",
        "memory",
        *("--set", "scale=1", "--set", "posters=2", "--set", "posts=3"),
        *("--set", "commenters=2", "--set", "comments=3", "--set", "post_readers=2"),
        *("--set", "post_reads=3", "--set", "comment_readers=2", "--set", "comment_reads=3"),
        *("--set", "post_delay_ms=1", "--set", "comment_delay_ms=1"),
        *("--set", "post_read_delay_ms=1", "--set", "comment_read_delay_ms=1"),
    ],
    "ingest": [
        *("--set", "count=400", "--set", "grid.concurrency=[1]"),
        *("--set", "grid.batch_size=[1,128]"),
    ],
    "search": [
        *("--store", ANN, "--set", "n=500", "--set", "queries=20", "--set", "repeats=1"),
        *("--set", "warmup=2", "--set", "min_window_s=0", "--set", "labels=[0.5]"),
        *("--set", "grid.index.m=[16]", "--set", "grid.search.ef=[16,64]"),
    ],
    "tune": [
        *("--store", ANN, "--set", "n=500", "--set", "queries=20", "--set", "max_clients=2"),
        *("--set", "duration_s=0.2", "--set", "warmup_s=0.05"),
    ],
    "scale": [
        *("--store", ANN, "--set", "n=300", "--set", "steps=2", "--set", "queries=20"),
        *("--set", "clients=[1]", "--set", "duration_s=0.2", "--set", "warmup_s=0.05"),
    ],
    "streaming": [
        *("--store", ANN, "--set", "n=400", "--set", "queries=20", "--set", "clients=[1]"),
        *("--set", "stages=[1.0]", "--set", "grid.insert_rate=[4000]", "--set", "warmup=1"),
    ],
}


def sb(*args: str, cwd: Path, width: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(width)}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


Outputs = dict[tuple[str, int], subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def walked(tmp_path_factory) -> tuple[Path, Outputs]:
    """The directory walked in, and each command's output by (what, width),
    in the README's order."""
    home = tmp_path_factory.mktemp("newcomer")
    out: Outputs = {}
    out["list stores", 80] = sb("list", "stores", cwd=home, width=80)
    for width in WIDTHS:
        out["list scenarios", width] = sb("list", "scenarios", cwd=home, width=width)
    for name, args in RUNS.items():
        out[f"run {name}", 80] = sb("run", name, *args, "--no-progress", cwd=home, width=80)
    for width in WIDTHS:
        out["show", width] = sb("show", "results/", cwd=home, width=width)
    out["show --json", 0] = sb("show", "results/", "--json", cwd=home, width=80)
    out["compare", 80] = sb(
        "compare", "results/crud.jsonl", "results/crud.jsonl", "--a", "store=memory",
        "--b", "store=sqlite", cwd=home, width=80,
    )  # fmt: skip
    if importlib.util.find_spec("matplotlib"):  # the [report] extra; one study: quick
        out["report", 80] = sb(
            "report", "results/crud.jsonl", "--out", "report/", cwd=home, width=80
        )
    out["export", 80] = sb(
        "export", "results/", "--format", "csv", "--out", "runs.csv", cwd=home, width=80
    )
    return home, out


@pytest.fixture(scope="module")
def walk(walked) -> Outputs:
    return walked[1]


def tables(text: str) -> list[list[list[str]]]:
    """The body rows of each table drawn in ``text``, as cells."""
    found: list[list[list[str]]] = []
    for line in text.splitlines():
        if line.startswith("┏"):
            found.append([])
        elif line.startswith("│") and found:
            found[-1].append([c.strip() for c in line.strip("│").split("│")])
    return found


def test_every_command_succeeds_and_hints_only_real_extras(walked):
    home, walk = walked
    for (what, _), r in walk.items():
        assert r.returncode == 0, f"{what}: {r.stderr[-2000:]}"
        for extra in HINT.findall(r.stdout + r.stderr):
            assert set(extra.split(",")) <= EXTRAS, f"{what}: storebench[{extra}]"
    assert (home / "runs.csv").stat().st_size > 0
    if ("report", 80) in walk:
        assert (home / "report" / "report.html").exists()


@pytest.mark.parametrize("width", WIDTHS)
def test_output_fits_the_terminal_and_no_column_is_empty(walk, width):
    shown = [(what, r) for (what, w), r in walk.items() if w == width and what != "compare"]
    assert shown
    cells = {
        w
        for t in json.loads(walk["show --json", 0].stdout)["tables"]
        for row in t["rows"]
        for cell in row
        for w in str(cell).split()
    }
    for what, r in shown:
        for line in (r.stdout + r.stderr).splitlines():
            assert len(line) <= width, f"{what}: {line!r}"
        assert "…" not in r.stdout, what
        for table in tables(r.stdout):
            for col in zip(*table, strict=False):
                full = [c for c in col if c]
                assert not full or set(full) != {"-"}, f"{what}: a column of only '-'"
        if what.startswith(("run ", "show")):
            # a number in a table is one a study table holds whole
            body = [c for t in tables(r.stdout) for row in t for c in row]
            words = {w for c in body for w in c.split() if re.search(r"\d", w)}
            assert words <= cells, f"{what}: {sorted(words - cells)[:5]}"


def test_compare_fits_the_terminal(walk):
    assert max(len(line) for line in walk["compare", 80].stdout.splitlines()) <= 80


def test_a_single_run_prints_every_study_table(walk):
    titles = {
        what.removeprefix("run "): r.stdout.count("┏")
        for (what, _), r in walk.items()
        if what.startswith("run ")
    }
    assert all(n >= 1 for n in titles.values()), titles
    crud = walk["run crud", 80].stdout
    # create, read, update, delete, find by condition, find by vector: each
    # store's latency and throughput tables
    assert titles["crud"] == 2 * len(DEMO[DEMO.index("--store") + 1].split(","))
    for word in ("create", "read", "update", "delete", "condition", "vector"):
        assert crud.count(word) >= 4, word
    social = walk["run social", 80].stdout
    for task in ("write_posts", "write_comments", "read_posts", "read_comments"):
        assert f"│ {task}" in social
    # tune names what it tuned, and to what
    assert re.search(r"│ +ef +│ +\d+ +│", walk["run tune", 80].stdout)


def test_ingest_reads_in_documents_per_second(walk):
    lines = [ln for ln in walk["run ingest", 80].stdout.splitlines() if ln.startswith("ok")]
    rates = {}
    for line in lines:
        m = re.search(r"batch_size=(\d+)\s+insert: ([\d,]+) docs/s", line)
        assert m, line
        rates[int(m[1])] = int(m[2].replace(",", ""))
    assert set(rates) == {1, 128}


def test_the_demo_shows_recall_falling_with_ef_beside_exact_stores(walked):
    """make demo's first table: the exact stores at 1.0, each HNSW build at
    least 0.10 lower at its smallest ef than at its largest."""
    home, _ = walked
    records = [json.loads(line) for line in (home / "results/crud.jsonl").open()]
    recall = {}  # (engine, index parameters) -> {ef: recall@10}
    for r in records:
        key = (r["store"]["engine"], tuple(r["store"]["index"].values()))
        recall[key] = {
            s.get("search", {}).get("ef"): s["scores"]["recall@10"] for s in r["settings"]
        }
    exact = {k: v for k, v in recall.items() if None in v}
    swept = {k: v for k, v in recall.items() if None not in v}
    assert {k[0] for k in exact} == {"memory", "sqlite"}, recall
    assert all(v == {None: 1.0} for v in exact.values()), exact
    assert swept and {k[0] for k in swept} == {ANN}, recall
    for build, by_ef in swept.items():
        assert by_ef[max(by_ef)] - by_ef[min(by_ef)] >= 0.10, (build, by_ef)
