"""The one rule that fits every terminal table (``terminal.fit_columns``),
and the one rule every latency is printed by, on fixed inputs."""

import pytest
from rich.console import Console

from storebench.report.terminal import fit_columns, fitted_table, fmt_mean, fmt_ns
from storebench.report.views import STALLS, STALLS_NOTE, Table

# a streaming-like table: a stage's second row continues it (blank cells);
# clients tell its rows apart; m holds nothing; index is the same everywhere
HEADERS = ["configuration", "stage", "m", "clients", "QPS", "p50", "p95", "p99", "max"]
HEADERS += ["index", "run"]
ROWS = [
    ["hnswlib", "80%", "-", "1", "7,184", "35.5µs", "40.1µs", "51.0µs", "1.20ms"],
    ["", "", "-", "4", "7,762", "35.4µs", "44.0µs", "60.2µs", "2.31ms"],
    ["hnswlib", "100%", "-", "1", "6,109", "49.4µs", "55.5µs", "71.3µs", "3.33ms"],
    ["", "", "-", "4", "6,800", "45.4µs", "50.5µs", "66.6µs", "1.11ms"],
]
ROWS = [[*r, "during upload", "4b719b3d"] for r in ROWS]


@pytest.mark.parametrize("width", [50, 72, 80, 120])
def test_columns_go_by_meaning(width):
    fit = fit_columns(HEADERS, ROWS, width)
    shown = [HEADERS[i] for i in fit.kept]
    assert "m" not in shown and "m" not in fit.hidden  # it holds nothing
    # what tells the rows apart stays, at any width
    assert {"configuration", "stage", "clients"} <= set(shown)
    # the same in every row goes before anything that varies, said once
    gone = [h for h in ["index", "run", "max", "p95"] if h in fit.hidden]
    assert gone == ["index", "run", "max", "p95"][: len(gone)]
    assert fit.same == {
        h: v for h, v in (("index", "during upload"), ("run", "4b719b3d")) if h in gone
    }
    if width >= 120:
        assert fit.hidden == []
    if width == 80:  # what every row holds goes to the caption, and only that
        assert fit.hidden == ["index", "run"]
    if width == 72:  # p95 is kept before max
        assert "p95" in shown and "max" in fit.hidden


def test_the_caption_says_what_every_row_holds_and_what_went():
    console = Console(width=72, record=True, color_system=None)
    console.print(fitted_table(HEADERS, ROWS, 72))
    text = console.export_text()
    assert "in every row: index=during upload, run=4b719b3d" in text
    assert "not shown at 72 columns: max" in text
    assert max(len(line) for line in text.splitlines()) <= 72


def test_latencies_round_to_three_figures_by_one_rule():
    assert [fmt_ns(x) for x in (999.4, 999.6, 12_704_000, 12_705_000)] == [
        "999ns",
        "1.00µs",
        "12.7ms",
        "12.7ms",
    ]
    assert fmt_ns(260_000_000) == fmt_ns(260_050_000) == "260ms"
    assert [fmt_ns(x) for x in (171_500, 1_234_567_890, None)] == ["172µs", "1.23s", "-"]


def test_a_mean_above_its_p95_is_marked_and_the_table_says_why():
    stalled = {"mean": 171_500, "p95": 126_300}
    assert fmt_mean(stalled) == "172µs" + STALLS
    assert fmt_mean({"mean": 100_000, "p95": 126_300}) == "100µs"
    table = Table("t", ["task", "mean"], [["search", fmt_mean(stalled)]], note="1 run")
    assert table.note == f"1 run. {STALLS_NOTE}"
    assert Table("t", ["task", "mean"], [["search", "100µs"]]).note == ""


def test_the_stalls_note_stands_only_under_a_table_that_shows_a_marked_mean():
    # the mean goes first among its equals at 80 columns (the rightmost)
    headers = ["configuration", "QPS", "p50", "p99", "upload", "index", "docs/s", "mean"]
    rows = [
        ["hnswlib m=16 ef=64", "7,184", "35.5µs", "51.0µs", "1.20s", "3.1s", "9,100", "172µs†"],
        ["hnswlib m=32 ef=64", "7,762", "35.4µs", "60.2µs", "2.31s", "4.2s", "9,800", "40.0µs"],
    ]
    note = Table("t", headers, rows, note="1 run").note
    assert note == f"1 run. {STALLS_NOTE}"
    for width, mean_shown in ((120, True), (80, False)):
        console = Console(width=width, record=True, color_system=None)
        console.print(fitted_table(headers, rows, width, caption=note))
        text = console.export_text()
        assert ("mean" in fit_columns(headers, rows, width).hidden) is not mean_shown
        assert (STALLS_NOTE in text) is mean_shown
        assert "1 run" in text
