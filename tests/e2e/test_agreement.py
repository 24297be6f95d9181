"""Every view of one set of records tells the same numbers.

Real runs (small n): a search sweep over three ``ef`` settings on managed
Redis and managed PostgreSQL (pgvector), three repeats each (a new server,
so a new port, every run), and one hnswlib run (its index is built during
the upload, as Redis's is: created with the run's index parameters). Then ``storebench report``, ``compare --json``, ``export``,
``frames()`` and ``show``, under both aggregations, must give for every
configuration the numbers of one run: the one chosen by the stated rule,
computed here from the raw JSON (not through the code under test).
Run and row counts must equal the records'."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import storebench
from storebench.report.terminal import fmt_ns, fmt_rate
from storebench.report.views import STALLS
from tests.stores.servers import skipped

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

CLI = [sys.executable, "-m", "storebench"]
EFS = (16, 64, 128)
CLIENTS = (1, 2)
SMALL = {
    "n": 1200,
    "dim": 16,
    "queries": 40,
    "k": 10,
    "batch_size": 400,
    "warmup": 2,
    "min_window_s": 0,  # each task runs its queries once: the views, not the figures, are tested
    "clients": list(CLIENTS),
    "labels": [],
    "grid": {"index.m": [16], "index.ef_construct": [64], "search.ef": list(EFS)},
}
SERVERS = ("redis", "pgvector")


def sb(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    for engine in SERVERS:
        if skipped(engine):
            pytest.skip(f"{engine} skipped")
    d = tmp_path_factory.mktemp("agree")
    storebench.run("search", stores=list(SERVERS), set={**SMALL, "repeats": 3}, results_dir=d)
    storebench.run("search", stores=["hnswlib"], set={**SMALL, "repeats": 1}, results_dir=d)
    return d


@pytest.fixture(scope="module")
def raw(results) -> list[dict]:
    """The records as the file holds them."""
    lines = (results / "search.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert [r["status"] for r in recs] == ["ok"] * 7, [r.get("error") for r in recs]
    return recs


def task(rec: dict, name: str) -> dict:
    (t,) = [t for t in rec["tasks"] if t["name"] == name]
    return t


def headline(ef: int) -> str:
    return f"search ef={ef} c={max(CLIENTS)}"


def chosen(raw: list[dict], engine: str, ef: int, how: str) -> dict:
    """The rule, from the raw JSON: the run with the highest ops/s of the
    search at the most clients (best), or the median run by it (the lower
    middle one for an even count); ties go to the earlier run."""
    runs = [r for r in raw if r["store"]["engine"] == engine]
    ranked = sorted(
        enumerate(runs), key=lambda ir: (task(ir[1], headline(ef))["ops_per_s"], -ir[0])
    )
    if how == "best":
        return ranked[-1][1]
    ranked = sorted(enumerate(runs), key=lambda ir: (task(ir[1], headline(ef))["ops_per_s"], ir[0]))
    return ranked[(len(ranked) - 1) // 2][1]


def short(run_id: str) -> str:
    return run_id.rsplit("-", 1)[-1]


def configurations(raw: list[dict]):
    for engine in ("redis", "pgvector", "hnswlib"):
        for ef in EFS:
            yield engine, ef


# --- the report's Markdown tables --------------------------------------------------------


def md_tables(md: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every pipe table (title: the bold line or
    heading above it)."""
    out = []
    title = ""
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("**") and line.endswith("**"):
            title = line.strip("*")
        elif line.startswith("#"):
            title = line.lstrip("#").strip()
        elif line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("| :--"):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("| "):
                rows.append(_cells(lines[i]))
                i += 1
            out.append((title, header, rows))
            continue
        i += 1
    return out


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [p.strip().replace("\\|", "|") for p in parts]


def table(tables, title: str, first_col: str, has: str = "") -> tuple[list[str], list[list[str]]]:
    for t, header, rows in tables:
        if t == title and header[0] == first_col and (not has or has in header):
            return header, rows
    raise AssertionError(f"no table {title!r} with {first_col!r}: {[t[0] for t in tables]}")


def cell(header: list[str], row: list[str], col: str) -> str:
    return row[header.index(col)]


def value(text: str) -> str:
    """A cell without its spread (``12,345 ±3%``) or its stalls mark."""
    return text.split(" ±")[0].removesuffix(STALLS)


@pytest.fixture(scope="module", params=["best", "median"])
def how(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def outputs(results, how, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"out-{how}")
    rep = sb("report", str(results), "--out", str(out / "report"), "--aggregate", how)
    comp = sb("compare", str(results), str(results), "--json", "--aggregate", how)
    exp = sb("export", str(results), "--out", str(out / "rows.csv"))
    # a table per run (-v), wide enough for every column
    show = sb("show", str(results), "-v", env={"COLUMNS": "200"})
    with open(out / "rows.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        "md": (out / "report" / "report.md").read_text(),
        "report_err": rep.stderr,
        "compare": json.loads(comp.stdout),
        "export_err": exp.stderr,
        "csv": rows,
        "show": show.stdout,
        "frames": storebench.report.frames(results),
    }


def test_run_and_row_counts_equal_the_records(raw, outputs):
    n_tasks = sum(len(r["tasks"]) for r in raw)
    assert n_tasks == 7 * (2 + len(EFS) * len(CLIENTS))  # upload and index once per run
    md = outputs["md"]
    assert md.count("7 run(s) of search") == 1 and "7 run(s), 7 ok" in md
    # each engine once in the header, whatever the managed servers' ports
    stores = next(x for x in md.splitlines() if x.startswith("Stores: "))
    assert [s.split()[0] for s in stores[len("Stores: ") :].split("; ")] == [
        "redis",
        "pgvector",
        "hnswlib",
    ], stores
    assert "storebench: 7 run(s)" in outputs["report_err"]
    assert f"storebench: {n_tasks} rows from 7 run(s)" in outputs["export_err"]
    assert len(outputs["csv"]) == len(outputs["frames"]) == n_tasks
    assert outputs["compare"]["runs_a"] == outputs["compare"]["runs_b"] == 7
    runs_table = table(md_tables(md), "Runs", "run")[1]
    assert len(runs_table) == 7
    assert outputs["show"].count("search · ") == 7


def test_repeats_on_managed_servers_are_one_configuration(raw, outputs):
    for engine in SERVERS:
        urls = {r["store"]["url"] for r in raw if r["store"]["engine"] == engine}
        assert len(urls) == 3  # three servers, three ports...
    header, rows = table(md_tables(outputs["md"]), "redis", "search")
    assert [cell(header, r, "runs") for r in rows] == ["3"] * 3  # ...one configuration
    configs = {row["config"] for row in outputs["csv"] if row["store.engine"] == "redis"}
    assert len(configs) == 1 + len(EFS)  # the build, and each setting


def test_report_compare_export_frames_and_show_agree_on_every_number(raw, outputs, how):
    tables = md_tables(outputs["md"])
    comp = outputs["compare"]
    df = outputs["frames"]
    for engine, ef in configurations(raw):
        run = chosen(raw, engine, ef, how)
        rid = run["run_id"]
        runs = [r for r in raw if r["store"]["engine"] == engine]
        one, top = task(run, f"search ef={ef} c=1"), task(run, headline(ef))
        upload, index = task(run, "upload"), task(run, "build_index")
        what = f"{engine} ef={ef} ({how})"

        # the report's study table
        header, rows = table(tables, engine, "search")
        (row,) = [r for r in rows if r[0] == f"ef={ef}"]
        assert cell(header, row, "run") == short(rid), what
        assert cell(header, row, "runs") == str(len(runs))
        assert cell(header, row, "Recall@10") == f"{one['scores']['recall@10']:.4f}", what
        assert cell(header, row, "Precision@10") == f"{one['scores']['precision@10']:.4f}", what
        assert value(cell(header, row, "mean (1 client)")) == fmt_ns(one["latency_ns"]["mean"])
        assert value(cell(header, row, "p95 (1 client)")) == fmt_ns(one["latency_ns"]["p95"])
        for c in CLIENTS:
            got = value(cell(header, row, f"QPS {c} client{'s' if c > 1 else ''}"))
            assert got == fmt_rate(task(run, f"search ef={ef} c={c}")["ops_per_s"]), what
        assert cell(header, row, "upload") == f"{upload['elapsed_s']:.2f}s"
        if engine in ("hnswlib", "redis"):  # indexed as documents arrived: no build time, no rate
            assert index["index_build"] == "during_insert" and index["items_per_s"] is None
            assert cell(header, row, "index") == "during upload"
        else:
            assert index["index_build"] == "built"
            assert cell(header, row, "index") == f"{index['elapsed_s']:.2f}s"

        label = f"{engine} ef={ef}"
        # the Points table: each client count's own recall and QPS, from the same run
        header, rows = table(tables, "Points", "configuration", "recall@10")
        for c in CLIENTS:
            t = task(run, f"search ef={ef} c={c}")
            (row,) = [r for r in rows if r[0] == label and r[1] == str(c)]
            assert cell(header, row, "recall@10") == f"{t['scores']['recall@10']:.4f}", what
            assert value(cell(header, row, "QPS")) == fmt_rate(t["ops_per_s"])
            assert cell(header, row, "run") == short(rid)
        # run metrics: the setting's own recall, not the first setting's
        header, rows = table(tables, "Run metrics", "configuration")
        (row,) = [r for r in rows if r[0] == label]
        assert cell(header, row, "recall@10") == f"{one['scores']['recall@10']:.4f}", what
        assert cell(header, row, "run") == short(rid)
        # client CPU, its ceiling and the flag: one task of that run
        header, rows = table(tables, "Client and engine", "configuration")
        for c in CLIENTS:
            t = task(run, f"search ef={ef} c={c}")
            (row,) = [r for r in rows if r[0] == label and r[1] == t["name"]]
            assert cell(header, row, "client CPU/s") == f"{t['client_cpu_per_s']:.2f}"
            assert cell(header, row, "ceiling") == f"{t['client_cpu_ceiling']:g}"
            assert cell(header, row, "saturated") == ("yes" if t["client_saturated"] else "")
            assert cell(header, row, "run") == short(rid)

        # compare: the same run on both sides, its values
        (pair,) = [p for p in comp["pairs"] if p["label"] == f"store={engine} ef={ef}"]
        assert pair["run_a"] == pair["run_b"] == short(rid), what
        mine = [x for x in comp["rows"] if x["pair"] == pair["label"]]
        for c in CLIENTS:
            t = task(run, f"search ef={ef} c={c}")
            got = {x["metric"]: x["a"]["value"] for x in mine if x["task"] == t["name"]}
            assert got == {
                "ops/s": t["ops_per_s"],
                "p50": t["latency_ns"]["p50"],
                "p95": t["latency_ns"]["p95"],
                "p99": t["latency_ns"]["p99"],
                **t["scores"],
            }, what

        # export and frames: the run's rows, flagged as the one shown
        for c in CLIENTS:
            name = f"search ef={ef} c={c}"
            t = task(run, name)
            (row,) = [r for r in outputs["csv"] if r["run_id"] == rid and r["task"] == name]
            assert float(row["ops_per_s"]) == t["ops_per_s"]
            assert float(row["recall@10"]) == t["scores"]["recall@10"]
            assert row[how] == "True"
            others = [
                r[how]
                for r in outputs["csv"]
                if r["task"] == name and r["store.engine"] == engine and r["run_id"] != rid
            ]
            assert others == ["False"] * (len(runs) - 1)
            f = df[(df.run_id == rid) & (df.task == name)]
            assert len(f) == 1 and f.iloc[0]["ops_per_s"] == t["ops_per_s"]
            assert f.iloc[0]["latency_ns.p99"] == t["latency_ns"]["p99"]

        # show: that run's table has the same numbers, formatted alike
        part = outputs["show"].split(f"run {rid}", 1)[1].split(" · ", 1)[0]
        for c in CLIENTS:
            t = task(run, f"search ef={ef} c={c}")
            (line,) = [x for x in part.splitlines() if x.startswith(f"│ {t['name']} ")]
            for text in (
                fmt_rate(t["ops_per_s"]),
                fmt_ns(t["latency_ns"]["mean"]),
                fmt_ns(t["latency_ns"]["p99"]),
                f" {t['scores']['recall@10']:.4f} ",  # its own column
            ):
                assert text in line, (what, text, line)
        assert top is not None


def test_the_summary_reads_correctly_against_the_tables(raw, outputs, how):
    """The first screen's answer, recomputed from the raw JSON: each
    engine's best setting at the target recall by QPS at the most clients
    (its chosen run's), the leader, its ratio, and the same numbers as the
    study tables."""
    best: dict[str, tuple[float, int, dict]] = {}
    for engine, ef in configurations(raw):
        run = chosen(raw, engine, ef, how)
        if task(run, f"search ef={ef} c=1")["scores"]["recall@10"] < 0.95:
            continue  # below the target: shown in the details, not ranked
        qps = task(run, headline(ef))["ops_per_s"]
        if engine not in best or qps > best[engine][0]:
            best[engine] = (qps, ef, run)
    ranked = sorted(best.items(), key=lambda kv: -kv[1][0])
    assert len(ranked) >= 2, ranked
    tables = md_tables(outputs["md"])
    title = "search: each engine's best configuration by QPS at 2 clients with recall ≥ 0.95"
    header, rows = table(tables, title, "configuration")
    lead_qps = ranked[0][1][0]
    assert [r[0] for r in rows] == [f"{e} ef={ef}" for e, (_, ef, _) in ranked]
    for (engine, (qps, ef, run)), row in zip(ranked, rows, strict=True):
        assert cell(header, row, "QPS (2 clients)") == fmt_rate(qps)
        assert cell(header, row, "vs leader") == f"{qps / lead_qps:.2f}x"
        assert cell(header, row, "run") == short(run["run_id"])
        # the same number as the study table's row of that setting
        sh, srows = table(tables, engine, "search")
        (srow,) = [r for r in srows if r[0] == f"ef={ef}"]
        assert value(cell(sh, srow, "QPS 2 clients")) == fmt_rate(qps)
    (first, (q1, ef1, _)), (second, (q2, ef2, _)) = ranked[0], ranked[1]
    sentence = (
        f"{first} leads by QPS at 2 clients with recall ≥ 0.95: {fmt_rate(q1)} "
        f"({first} ef={ef1}), {q1 / q2:.2f}x {second}'s {fmt_rate(q2)} ({second} ef={ef2})."
    )
    assert sentence in outputs["md"], outputs["md"].split("## Details", 1)[0]


def test_compare_refuses_to_rank_an_index_built_during_upload_against_a_build(results):
    r = sb("compare", str(results), str(results), "--a", "store=hnswlib", "--b", "store=pgvector")
    comp = json.loads(
        sb(
            "compare",
            str(results),
            str(results),
            "--a",
            "store=hnswlib",
            "--b",
            "store=pgvector",
            "--json",
        ).stdout
    )
    unlike = [x for x in comp["rows"] if x["verdict"] == "unlike"]
    assert {x["task"] for x in unlike} == {"upload", "build_index"}
    assert all(
        x["ratio"] is None and "hnswlib indexes during its upload" in x["why"] for x in unlike
    )
    assert "unlike: hnswlib indexes during its" in r.stdout  # said, not ranked
    searches = [x for x in comp["rows"] if x["task"].startswith("search")]
    assert searches and all(x["verdict"] != "unlike" for x in searches)


def test_resume_skips_managed_repeats_already_done(results, raw):
    """--resume asks the same question: the plan's runs against managed
    servers (no url) are the records' configurations, whatever their ports."""
    from storebench.plan.scenario import Scenario
    from storebench.results import records
    from storebench.run.runner import planned

    sc = Scenario.load("search", [], list(SERVERS), values={**SMALL, "repeats": 3})
    done = {records.plan_id(r) for r in records.read(results / "search.jsonl") if r.ok}
    plan = sc.plan()
    assert len(plan) == 6 and all(records.plan_id(planned(run)) in done for run in plan)
    more = Scenario.load("search", [], list(SERVERS), values={**SMALL, "repeats": 4}).plan()
    assert [records.plan_id(planned(run)) in done for run in more].count(False) == 2
    # and the command: nothing to run, no server started, nothing written
    lines = (results / "search.jsonl").read_text()
    again = storebench.run(
        "search",
        stores=list(SERVERS),
        set={**SMALL, "repeats": 3},
        results_dir=results,
        resume=True,
    )
    assert again == [] and (results / "search.jsonl").read_text() == lines
