"""Over time, as a user meets it: a real run writes per-interval series;
``show --over-time`` draws them, the report charts them, ``export --format
hdr`` writes logs the standard reader reads; an interval set in the scenario
reaches the record."""

import json
import sys

import pytest
from hdrh.log import HistogramLogReader

from storebench.measure.metrics import Histogram
from storebench.results.records import load

CLI = [sys.executable, "-m", "storebench"]


def sb(*args, timeout=300):
    import subprocess

    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    r = sb(
        "run",
        "crud",
        "--set",
        "n=1000",
        "--set",
        "ops=2000",
        "--set",
        "stores=[memory]",
        "--set",
        "driver.interval_s=0.05",
        "--results",
        str(d),
    )
    assert r.returncode == 0, r.stderr
    return d


def test_a_run_records_series_at_the_scenario_interval(results):
    (rec,) = load(results)
    timed = [t for t in rec.tasks if t.series]
    assert len(timed) >= 5  # create, read, update, delete, find ...
    for t in timed:
        s = t.series
        assert s["interval_s"] == 0.05
        assert sum(s["ops"]) == t.ops
        assert len(s["ops"]) == len(s["ops_per_s"]) == len(s["latency_ns"]["p99"])
        assert t.start_unix and abs(t.start_unix - rec.tasks[0].start_unix) < 600
        assert len(s["hdr"]) * s["hdr_interval_s"] >= len(s["ops"]) * s["interval_s"] - 1e-9


def test_show_over_time_draws_sparklines(results):
    r = sb("show", str(results), "--over-time")
    assert r.returncode == 0, r.stderr
    assert "ops/s over time" in r.stdout and "per 0.05 s interval" in r.stdout
    assert any(ch in r.stdout for ch in "▁▂▃▄▅▆▇█")
    # a task of fewer than ten intervals is said to be too short for this
    (rec,) = load(results)
    short = [t.name for t in rec.tasks if t.series and t.points() < 10]
    said = "too short to be seen over time (under 10 intervals): "
    out = " ".join(r.stdout.split())  # the line may wrap
    assert (said + ", ".join(short) in out) if short else (said not in out)


def test_report_has_the_timeline(results, tmp_path):
    pytest.importorskip("matplotlib")
    r = sb("report", str(results), "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "report.md").read_text()
    assert "Throughput and latency over time" in md
    assert "Intervals per task" in md
    assert "crud-timeline" in (tmp_path / "report.html").read_text()


def test_export_hdr_reads_back(results, tmp_path):
    out = tmp_path / "hdr"
    r = sb("export", str(results), "--format", "hdr", "--out", str(out))
    assert r.returncode == 0, r.stderr
    (rec,) = load(results)
    logs = sorted(out.glob("*.hlog"))
    assert len(logs) == len([t for t in rec.tasks if t.histogram])
    for t in rec.tasks:
        if not t.series:
            continue
        (path,) = [p for p in logs if p.name.endswith(f".{t.name}.hlog")]
        reader = HistogramLogReader(str(path), Histogram().hdr)
        total = 0
        while (h := reader.get_next_interval_histogram()) is not None:
            total += h.total_count
        assert total == t.ops
    assert json.loads(results.joinpath("crud.jsonl").read_text().splitlines()[0])["run_id"]
