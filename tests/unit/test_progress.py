"""The sweep's time estimates (``progress.Sweep``) and the fitting of
terminal tables (``report.terminal.fit_columns``), on fixed inputs."""

import pytest

from storebench.report.terminal import BORDER_EDGE, BORDER_PER_COLUMN, fit_columns
from storebench.run.progress import PRIOR_RUN_S, Sweep, fmt_duration, run_size


def test_run_size_counts_documents_operations_variants_and_settings():
    p = {"n": 1000, "queries": 50, "clients": [1, 4], "labels": [0.1, 0.5]}
    assert run_size(p) == 1 + 1000 + 50 * 4
    assert run_size(p, {"ef": [16, 64, 128]}) == 1 + 1000 + 50 * 4 * 3
    # an exhaustive store scans the documents for each operation
    assert run_size({"n": 4000, "queries": 10}, exact=True) == 1 + 4000 + 10 * 4
    assert run_size({}) == 1


def test_eta_scales_the_engines_own_runs_then_all_runs():
    runs = [("a", "w", 100.0, False), ("a", "w", 200.0, False), ("b", "w", 100.0, False)]
    sweep = Sweep(runs)
    assert sweep.estimate(0) == pytest.approx(PRIOR_RUN_S + 100 * 1e-3)  # priors
    assert not sweep.measured()
    sweep.finished(0, 10.0)  # engine a: 0.1 s per unit
    assert sweep.estimate(1) == pytest.approx(20.0)
    assert sweep.estimate(2) == pytest.approx(10.0)  # b: from all runs so far
    assert sweep.remaining(1, running_s=5.0) == pytest.approx(15.0 + 10.0)
    sweep.finished(1, 40.0)
    sweep.finished(2, 1.0)
    assert sweep.estimate(2) == pytest.approx(1.0)
    assert sweep.measured()


def test_eta_from_history_when_no_run_is_done():
    sweep = Sweep([("a", "w", 300.0, True)], history=[("a", "w", 100.0, 2.0), ("x", "w", 1, 99)])
    assert sweep.total() == pytest.approx(6.0)


def test_fmt_duration():
    assert fmt_duration(59.6) == "1:00" and fmt_duration(3725) == "1:02:05"
    assert fmt_duration(None) == "?" and fmt_duration(float("inf")) == "?"


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120])
def test_fitted_columns_keep_every_word_whole_and_fit(width):
    headers = ["configuration", "recall", "QPS", "p50", "p99", "upload", "run"]
    rows = [
        ["hnswlib m=16 ef_construct=64 ef=128", "0.9970", "51,388 ±4%", "1.11ms", "12.64ms"]
        + ["0.80s", "49de82bc"],
        ["sqlite", "1.0000", "53.6", "18.65ms ±12%", "426.77ms", "0.23s", "4597066c"],
    ]
    fit = fit_columns(headers, rows, width)
    used = sum(fit.widths) + BORDER_PER_COLUMN * len(fit.kept) + BORDER_EDGE
    assert used <= width
    for i, w in zip(fit.kept, fit.widths, strict=True):
        longest = max(len(word) for row in rows for word in row[i].split())
        assert w >= longest  # numbers are never folded
    assert 0 in fit.kept  # what a row is stays
    # the least telling columns go first
    order = ["run", "upload", "p99", "p50", "QPS", "recall"]
    gone = [h for h in order if h in fit.hidden]
    assert gone == order[: len(gone)]
    assert fit.hidden == [headers[i] for i in range(len(headers)) if i not in fit.kept]


def test_table_cells_are_text_not_markup():
    from rich.console import Console

    from storebench.report.terminal import fitted_table

    console = Console(width=100, record=True)
    console.print(
        fitted_table(["store", "hint"], [["hnswlib", "pip install 'storebench[hnswlib]'"]], 100)
    )
    assert "storebench[hnswlib]" in console.export_text()
