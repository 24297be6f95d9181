"""Reports: grouping, HDR arithmetic, views registry, escaping, exports and
comparisons, on records from real (small) runs."""

import copy
import json
import math
import re
from html.parser import HTMLParser

import numpy as np
import pytest

import storebench
from storebench.measure.metrics import Histogram
from storebench.report import build, data, export, summary, views
from storebench.report import compare as cmp
from storebench.report.plots import pareto_front
from storebench.results import records

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    storebench.run(
        "crud",
        stores=["memory", "sqlite"],
        set={"n": 400, "ops": 60, "repeats": 2},
        results_dir=d,
    )
    storebench.run(
        "crud", stores=["memory"], set={"n": 400, "ops": 60, "clients": 2}, results_dir=d
    )
    return d


@pytest.fixture
def recs(results):
    return data.load(results)


# --- HDR arithmetic --------------------------------------------------------------


def test_fast_decode_equals_histogram_decode(recs):
    for t in recs[0].tasks:
        slow = Histogram.decode(t.histogram)
        fast = data.histogram(t.histogram)
        assert np.array_equal(slow._counts, fast._counts)
        assert (fast.count, fast.hdr.min_value, fast.hdr.max_value) == (
            slow.count,
            slow.hdr.min_value,
            slow.hdr.max_value,
        )
        assert fast.sum_ns == slow.sum_ns
        assert data.stddev(fast) == pytest.approx(slow.hdr.get_stddev(), rel=1e-9)


def test_vectorised_percentiles_equal_hdrhistogram_lookups():
    h = Histogram()
    rng = np.random.default_rng(1)
    h.record(rng.lognormal(10, 1.5, 5000).astype(np.int64))
    ps = [0, 0.1, 1, 25, 50, 90, 95, 99, 99.9, 99.99, 100]
    assert data.percentiles(h, ps) == [h.percentile(p) for p in ps]
    assert data.percentiles(Histogram(), [50]) == [0]


def test_percentile_interval_narrows_with_more_samples():
    rng = np.random.default_rng(2)
    small, big = Histogram(), Histogram()
    small.record(rng.normal(1e6, 1e5, 100).astype(np.int64))
    big.record(rng.normal(1e6, 1e5, 100_000).astype(np.int64))
    lo_s, hi_s = data.percentile_interval(small, 99)
    lo_b, hi_b = data.percentile_interval(big, 99)
    assert lo_s <= small.percentile(99) <= hi_s
    assert lo_b <= big.percentile(99) <= hi_b
    assert hi_b - lo_b < hi_s - lo_s


def test_pareto_front_keeps_only_points_nothing_beats_on_both_axes():
    pts = [(0.90, 1000), (0.95, 800), (0.93, 700), (0.99, 300), (0.99, 250), (0.80, 900)]
    assert pareto_front(pts) == [(0.90, 1000), (0.95, 800), (0.99, 300)]
    assert pareto_front([]) == []


# --- grouping --------------------------------------------------------------------


def test_repeats_form_one_configuration_whatever_the_private_db_path(recs):
    sqlite = [r for r in recs if r.store.engine == "sqlite"]
    assert len({r.store.url for r in sqlite}) == 2  # each run had its own file
    assert len({r.key for r in sqlite}) == 2  # and the key includes the repeat
    configs = data.group(data.ok_runs(recs))
    by = {c.label: len(c.runs) for c in configs}
    assert by == {"memory clients=1": 2, "sqlite clients=1": 2, "memory clients=2": 1}
    s = configs[0].task("read").spread("ops_per_s")
    assert s.n == 2 and s.min <= s.median <= s.max


def test_a_url_the_user_gave_stays_part_of_the_configuration():
    assert records.private_location("/tmp/storebench-sqlite-ab12cd34/store.db")
    assert records.private_location("/tmp/storebench-qdrant-edge-zuvypwyr")  # the directory itself
    assert not records.private_location("/data/bench.db")
    assert not records.private_location("postgresql://h/db")


def test_credentials_are_redacted_in_any_text():
    s = data.safe_text("connect to postgresql://bench:hunter2@db:5432/x failed")
    assert "hunter2" not in s and "bench:***@db:5432" in s
    m = data.safe_mapping({"url": "redis://:pw123@h:6379", "options": {"password": "pw123"}})
    assert "pw123" not in json.dumps(m)


# --- views -----------------------------------------------------------------------


def test_crud_views_come_first_then_the_shared_ones():
    names = [v.name for v in views.views_for("crud")]
    assert names[:2] == ["crud_latency", "crud_rates"]
    assert {"recall_qps", "tasks", "percentiles", "concurrency", "spread"} <= set(names)
    # a workload without views of its own still gets the shared ones
    assert [v.name for v in views.views_for("ingest")] == names[2:]


def test_a_registered_view_shows_and_a_failing_one_becomes_a_note(recs):
    @views.register("crud", "zz_demo", "Demo view")
    def demo(v):
        return [views.Table("runs", ["n"], [[str(len(v.ok))]])]

    @views.register("crud", "zz_broken", "Broken view")
    def broken(v):
        raise RuntimeError("no luck")

    try:
        secs = views.run_views(views.ViewInput("crud", recs), plots=False)
        by = {s.id: s for s in secs}
        assert by["crud-zz_demo"].blocks[0].rows == [["5"]]
        assert "no luck" in by["crud-zz_broken"].blocks[0].text
        assert "crud-percentiles" not in by  # plots off: chart views skipped
    finally:
        reg = views._REGISTRY["crud"]
        reg[:] = [v for v in reg if not v.name.startswith("zz_")]


def test_tables_of_repeats_say_which_run_their_rows_are_from(recs, tmp_path):
    """A row of repeats is one run's (the best by its headline task): the
    terminal, Markdown and HTML tables all say so, a single run's do not."""
    from storebench.report.terminal import study_tables

    rule = "best of 2 by ops/s of find_by_vector"
    tables = study_tables(recs)
    assert [t.title for t in tables] == ["memory", "sqlite"] * 2  # crud's latency, rates
    said = f"Repeats: every number in a row is one run's (its run column), the {rule}."
    assert all(said in t.note for t in tables)
    assert not any("Repeats:" in t.note for t in study_tables([r for r in recs if r.repeat == 0]))
    written = build.write(recs, tmp_path / "report")
    page, said = written.markdown.read_text(), "Repeats: every number in a row is one run"
    assert page.count(said) >= 5  # under each crud table and the summary's
    assert written.html.read_text().count(said) == page.count(said)


def test_docarray_tables_have_the_study_columns(recs):
    secs = views.run_views(views.ViewInput("crud", recs), plots=False)
    lat = next(s for s in secs if s.id == "crud-crud_latency")
    tables = [b for b in lat.blocks if isinstance(b, views.Table)]
    assert [t.title for t in tables] == ["memory", "sqlite"]
    cols = tables[0].columns
    assert cols[:3] == ["m", "ef_construct", "ef"]
    assert cols[3:] == [
        "clients",
        "Recall@10",
        "find by vector",
        "find by condition",
        "create 400",
        "read",
        "update",
        "delete",
        "peak server RSS",  # the footprint, in every study table
        "data size",
        "bytes/vector",
        "runs",
        "run",  # the run every number of the row is from
    ]
    assert tables[1].rows[0][4] == "1.0000"  # sqlite searches exactly


# --- the page --------------------------------------------------------------------


class _Refs(HTMLParser):
    """Every reference in a page that a browser could fetch."""

    URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "poster", "srcset", "data"}
    FETCHING_TAGS = {
        "script",
        "link",
        "iframe",
        "object",
        "embed",
        "base",
        "frame",
        "audio",
        "video",
    }

    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        if tag in self.FETCHING_TAGS:
            self.refs.append(f"<{tag}>")
        self._in_style = tag == "style"
        for k, v in attrs:
            if k in self.URL_ATTRS and v and not v.startswith(("#", "data:")):
                self.refs.append(f"{tag} {k}={v}")
            if k == "style" and v:
                self._css(v)

    def handle_data(self, text):
        if self._in_style:
            self._css(text)

    def handle_endtag(self, tag):
        self._in_style = False

    def _css(self, css):
        self.refs += re.findall(r"url\(\s*['\"]?(?!#|data:)[^)]*\)", css)
        self.refs += re.findall(r"@import[^;]*", css)


def external_references(page: str) -> list[str]:
    p = _Refs()
    p.feed(page)
    return p.refs


def test_html_page_is_self_contained(recs, tmp_path):
    w = build.write(recs, tmp_path)
    page = w.html.read_text()
    assert external_references(page) == []
    assert "<script" not in page and "<link" not in page and "<iframe" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert page.count("<svg") == len(w.plots) // 2 >= 3


def test_text_from_results_is_escaped_and_credentials_never_appear(recs, tmp_path):
    evil = [r for r in recs if r.store.engine == "memory"][0].to_dict()  # the JSON form
    evil["run_id"] = "evil-1"
    evil["store"]["engine"] = "<script>alert(1)</script>$x$"
    evil["versions"]["engine"] = "1.0<b>bold</b>"
    evil["status"] = "failed"
    evil["error"] = "boom <img src=x onerror=alert(2)> at postgresql://bench:hunter2@db:5432/x"
    evil["traceback"] = "Traceback: redis://:s3cr3t@h:6379 </pre><script>alert(3)</script>"
    evil["machine"]["hostname"] = "<i>host</i>"
    ok = copy.deepcopy(evil)
    ok["run_id"], ok["status"], ok["error"] = "evil-2", "ok", None
    w = build.write([*recs, evil, ok], tmp_path)
    md = w.markdown.read_text()
    assert "hunter2" not in md and "s3cr3t" not in md
    # Markdown passes HTML through except in code fences (the traceback's), shown literally
    md_outside_fences = re.sub(r"^```\n.*?^```\n", "", md, flags=re.S | re.M)
    outputs = [w.html.read_text(), md_outside_fences]
    outputs += [p.read_text() for p in w.plots if p.suffix == ".svg"]
    for text in outputs:
        assert "hunter2" not in text and "s3cr3t" not in text
        assert "<script>alert" not in text and "<img src=x" not in text and "<b>bold" not in text
        assert "<i>host" not in text
    page = outputs[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "bench:***@db:5432" in page
    assert external_references(page) == []


# --- exports ---------------------------------------------------------------------


def test_frames_have_one_row_per_run_and_task(results, recs):
    df = storebench.report.frames(results)
    n_tasks = sum(len(r.tasks) for r in recs)
    assert len(df) == n_tasks == 5 * 6
    for col in (
        "run_id",
        "config",
        "store.engine",
        "params.n",
        "task",
        "ops_per_s",
        "latency_ns.p99",
    ):
        assert col in df.columns
    assert list(df.columns).index("task") > list(df.columns).index("machine.cores_logical")
    vec = df[df.task == "find_by_vector"]
    assert (vec["recall@10"] == 1.0).all()
    h = Histogram.decode(vec.iloc[0]["histogram"])
    assert h.percentile(99) == vec.iloc[0]["latency_ns.p99"]


def test_csv_and_parquet_hold_the_same_rows(recs, tmp_path):
    import pandas as pd

    n = export.write_csv(recs, tmp_path / "r.csv")
    m = export.write_parquet(recs, tmp_path / "r.parquet")
    a = pd.read_csv(tmp_path / "r.csv")
    b = pd.read_parquet(tmp_path / "r.parquet")
    assert n == m == len(a) == len(b) == 30
    assert list(a.columns) == list(b.columns)
    assert np.allclose(a["ops_per_s"], b["ops_per_s"])


def test_a_run_without_tasks_is_still_a_row(recs):
    failed = recs[0].to_dict()
    failed["status"], failed["tasks"], failed["error"] = "failed", [], "could not connect"
    rows = export.rows([failed])
    assert len(rows) == 1 and rows[0]["task"] is None and rows[0]["status"] == "failed"


# --- compare ---------------------------------------------------------------------


def test_compare_pairs_by_parameters_and_names_what_differs(recs):
    a = cmp.select(recs, ["store=memory", "clients=1"])
    b = cmp.select(recs, ["store=sqlite"])
    comp = cmp.compare(a, b)
    assert comp.differ == {"store.engine": ("memory", "sqlite")}
    assert {r.pair for r in comp.rows} == {"all runs"}
    row = next(r for r in comp.rows if r.task == "find_by_vector" and r.metric == "p50")
    assert row.a.basis == "repeats" and row.a.runs == 2
    assert row.ratio == pytest.approx(row.b.value / row.a.value)
    rec = next(r for r in comp.rows if r.metric == "recall@10")
    assert rec.verdict == "same" and rec.ratio == 1.0


def test_compare_with_itself_is_all_same(recs):
    comp = cmp.compare(recs, recs)
    assert comp.differ == {} and comp.rows
    assert {r.verdict for r in comp.rows} == {"same"}
    assert comp.only_a == comp.only_b == []


def test_single_runs_use_hdr_intervals(recs):
    a = cmp.select(recs, ["clients=2"])
    b = cmp.select(recs, ["store=memory", "clients=1", "repeat=0"])
    comp = cmp.compare(a, b)
    p99 = next(r for r in comp.rows if r.task == "read" and r.metric == "p99")
    assert p99.a.basis == p99.b.basis == "hdr"
    assert p99.a.lo <= p99.a.value <= p99.a.hi
    ops = next(r for r in comp.rows if r.task == "read" and r.metric == "ops/s")
    assert ops.a.basis == "hdr" and 0 < ops.a.lo < ops.a.value < ops.a.hi


def test_a_few_stalls_do_not_turn_a_21x_gap_between_single_runs_into_noise():
    """199 reads of 5 us and one 4 ms stall against 200 reads of 105 us: the
    normal interval of the first one's mean reaches zero, but its mean is
    never below its fastest read, so the gap stays a verdict."""
    from storebench.results.records import TaskRecord

    def task(latencies_ns: list[int]) -> TaskRecord:
        h = Histogram()
        h.record(np.array(latencies_ns, np.int64))
        return TaskRecord(name="read", ops=len(latencies_ns), histogram=h.encode())

    fast = task([5_000] * 199 + [4_000_000])
    slow = task([105_000] * 200)
    a = cmp._throughput(1e9 / (sum([5_000] * 199 + [4_000_000]) / 200), fast)
    b = cmp._throughput(1e9 / 105_000, slow)
    assert a.hi < math.inf and a.lo <= a.value <= a.hi
    assert a.value / b.value > 4 and cmp._verdict(a, b, True) == "worse"


@pytest.mark.parametrize(
    "a, b, higher, verdict",
    [
        ((100, 90, 110), (105, 95, 115), True, "noise"),
        ((100, 98, 102), (120, 118, 122), True, "better"),
        ((100, 98, 102), (120, 118, 122), False, "worse"),
        ((100, 100, 100), (100, 90, 110), False, "same"),
        ((100, 99, 101), (104, 103, 105), True, "same"),  # beyond the spread, under 5%
    ],
)
def test_differences_within_the_spread_are_noise(a, b, higher, verdict):
    ia = cmp.Interval(*a, runs=3, basis="repeats")
    ib = cmp.Interval(*b, runs=3, basis="repeats")
    assert cmp._verdict(ia, ib, higher) == verdict


def test_a_score_needs_no_minimum_and_a_caution_puts_no_doubt_on_it():
    from rich.console import Console

    from storebench.cli.report import _pair_table

    a, b = (
        cmp.Interval(0.97, 0.97, 0.97, 3, "repeats"),
        cmp.Interval(0.99, 0.99, 0.99, 3, "repeats"),
    )
    assert cmp._verdict(a, b, True, timing=False) == "better"  # 2%, and no spread at all
    fast, slow = cmp.Interval(100, 99, 101, 3, "repeats"), cmp.Interval(50, 49, 51, 3, "repeats")
    pair = cmp.Pair("all runs", "best of 3", "best of 3", "r1", "r2", caution_b=["busy"])
    comp = cmp.Comparison({}, pairs=[pair])
    comp.rows = [
        cmp.Row("all runs", "find", "ops/s", fast, slow, 0.5, "worse", True),
        cmp.Row("all runs", "find", "p50", fast, slow, 0.5, "better", False),
        cmp.Row("all runs", "find", "recall@10", a, b, 1.02, "better", True),
    ]
    console = Console(width=80, record=True)
    console.print(_pair_table(comp, pair, False, 80))
    text = console.export_text()
    assert "slower?" in text and "better?" not in text and "better" in text
    assert "p50" not in text  # the summary: throughput, p95 and scores; -v: all
    console.print(_pair_table(comp, pair, True, 80))
    assert "faster?" in console.export_text()


def _sweep_comparison(settings: int) -> cmp.Comparison:
    """Two sweeps of the search scenario as compare pairs them: ``settings``
    configurations (m x ef), each with an upload, a build and searches
    plain and filtered; B a little slower in places."""
    tasks = ["upload", "build_index", "search c=1", "search c=4"]
    tasks += [f"filtered {p}% c=1" for p in (1, 10, 50, 99)]
    comp = cmp.Comparison({}, runs_a=settings, runs_b=settings)
    for i in range(settings):
        m, ef = (16, 32)[i % 2], (16, 64, 128)[i // 2 % 3]
        label = f"store=hnswlib m={m} ef={ef}"
        pair = cmp.Pair(label, "1 run", "1 run", f"a{i}", f"b{i}", headline="search c=4")
        pair.config = {"store": "hnswlib", "m": m, "ef": ef}
        comp.pairs.append(pair)
        for j, task in enumerate(tasks):
            scale = 1.0 + 0.1 * ((i + j) % 3)
            metrics = [("ops/s", 1000.0, True), ("p50", 1e5, False), ("p95", 2e5, False)]
            metrics += [("p99", 3e5, False), ("recall@10", 0.95, True)]
            for metric, v, hib in metrics:
                b = v / scale if metric == "ops/s" else v * scale if metric != "recall@10" else v
                ia = cmp.Interval(v, v * 0.99, v * 1.01, 1, "hdr")
                ib = cmp.Interval(b, b * 0.99, b * 1.01, 1, "hdr")
                verdict = cmp._verdict(ia, ib, hib, metric in cmp.TIMINGS)
                comp.rows.append(cmp.Row(label, task, metric, ia, ib, b / v, verdict, hib))
    return comp


@pytest.mark.parametrize("settings", [1, 6, 12])
def test_compare_of_two_sweeps_is_one_screen_and_v_has_every_task(settings):
    """A sweep's pairs are a summary of a row each (its headline task's
    ops/s, p95, recall and a verdict) and a line pointing to -v: one
    screen, at 80 columns, however many tasks each pair has."""
    from rich.console import Console

    from storebench.cli.report import SCREEN_LINES, compare_output

    def shown(full: bool) -> str:
        console = Console(width=80, record=True, color_system=None)
        for part in compare_output(_sweep_comparison(settings), "A: a  B: b", 80, full):
            console.print(part, markup=False, highlight=False)
        return console.export_text()

    text, full = shown(False), shown(True)
    lines = text.splitlines()
    assert len(lines) <= min(SCREEN_LINES, 40), text
    assert max(len(line) for line in lines) <= 80
    assert "filtered 50% c=1" in full and " p99 " in full
    if settings > 1:  # a row per pair, with its figures and verdict
        assert "summary: " in text and "slower" in text and "recall@10" in text
        assert "filtered 50% c=1" not in text and "-v: every task of each pair" in text
        assert text.count("hnswlib") == settings


def test_select_rejects_a_condition_without_value(recs):
    from storebench.errors import UserError

    with pytest.raises(UserError, match="KEY=VALUE"):
        cmp.select(recs, ["store"])
    assert cmp.select(recs, ["run_id=" + recs[0].run_id]) == [recs[0]]
    assert len(cmp.select(recs, ["params.n=400"])) == len(recs) == 5


def test_the_reference_checker_sees_what_a_browser_would_fetch():
    page = (
        '<img src="http://a/x.png"><svg><image xlink:href="https://b/y.png"/></svg>'
        '<div style="background:url(//c/z.png)"></div><style>@import "d.css";</style>'
        '<script src="e.js"></script><a href="#ok">ok</a><img src="data:image/png;base64,AA">'
        "<p>&lt;img src=x&gt; is text</p>"
    )
    refs = external_references(page)
    assert len(refs) == 6, refs


# --- noise: a busy machine and scattered repeats are said, in report and compare ---------


def _noisy(recs, busy_run, scale):
    """The memory runs of ``recs``: run ``busy_run`` ran on a busy machine,
    and the last one's headline ops/s is ``scale`` times the first's."""
    from storebench.results import records

    mem = [r for r in recs if r.store.engine == "memory" and r.params["clients"] == 1]
    assert len(mem) == 2  # the two repeats of one configuration
    out = []
    for i, r in enumerate(mem):
        d = r.to_dict()
        if i == busy_run:
            d["machine_load"] = {"busy": True, "other_cpu_cores": 1.7, "busy_tasks": ["read"]}
        if i == len(mem) - 1:
            head = r.headline_task().name
            for t in d["tasks"]:
                if t["name"] == head:
                    t["ops_per_s"] = data.headline_value(mem[0]) * scale
        out.append(records.parse(d))
    return out


def test_a_busy_run_or_scattered_repeats_are_cautioned_in_report_and_compare(recs):
    quiet = _noisy(recs, busy_run=-1, scale=1.0)
    (c,) = data.configurations(quiet)
    assert data.cautions(c) == []
    head = next(s for s in build.sections(quiet, plots=False) if s.id.startswith("wl-"))
    assert not any("Caution" in b.text for b in head.blocks if isinstance(b, views.Text))
    # one run busy, the other's ops/s four times higher: both said
    noisy = _noisy(recs, busy_run=0, scale=4.0)
    (c,) = data.configurations(noisy)
    why = data.cautions(c)
    assert why[0] == "1 of 2 run(s) on a busy machine (other processes up to 1.7 cores)"
    assert why[1].startswith("repeats spread ±") and "over ±25%" in why[1]
    head = next(s for s in build.sections(noisy, plots=False) if s.id.startswith("wl-"))
    text = " ".join(b.text for b in head.blocks if isinstance(b, views.Text))
    assert "Caution: " in text and why[0] in text and why[1] in text
    comp = cmp.compare(quiet, noisy)
    (pair,) = comp.pairs
    assert pair.caution_b == why and pair.cautioned
    assert json.loads(comp.to_json())["pairs"][0]["caution_b"] == why


# --- the summary: the answer first ---------------------------------------------------------


def _fixed(recs, values):
    """``recs``' ok runs with the headline ops/s set per (engine, clients):
    a fixed set of records whose ranking is known."""
    from storebench.results import records

    out = []
    for r in recs:
        d = r.to_dict()
        _quiet(d)
        vals = values[(r.store.engine, r.params["clients"])]
        v = vals[r.repeat % len(vals)]
        head = r.headline_task().name
        for t in d["tasks"]:
            if t["name"] == head:
                t["ops_per_s"] = v
        out.append(records.parse(d))
    return out


def _quiet(d):
    """A record as if its machine had been idle (the fixture's real runs
    share this machine with whatever else runs)."""
    d["machine_load"] = None
    for t in d["tasks"]:
        t.pop("machine_load", None)
    return d


def test_the_summary_names_the_leader_and_its_ratio(recs):

    fixed = _fixed(
        recs,
        {("memory", 1): [900.0, 1000.0], ("memory", 2): [1200.0], ("sqlite", 1): [400.0, 410.0]},
    )
    secs = build.sections(fixed, plots=False)
    assert secs[0].id == "summary-crud"  # quiet records: no warnings, the answer first
    lead = [b.text for b in secs[0].blocks if isinstance(b, views.Text) and b.kind == "lead"]
    assert lead[0] == (
        "memory leads by ops/s of find_by_vector: 1,200 (memory clients=2), "
        "2.93x sqlite's 410 (sqlite clients=1)."
    )
    assert lead[1].startswith("memory clients=2 ran once: the spread over repeats is unknown")
    (table,) = [b for b in secs[0].blocks if isinstance(b, views.Table)]
    assert [row[0] for row in table.rows] == ["memory clients=2", "sqlite clients=1"]
    assert table.columns[:3] == ["configuration", "recall", "find by vector QPS"]
    i = table.columns.index("vs leader")
    assert [row[i] for row in table.rows] == ["1.00x", "0.34x"]
    assert {"peak server RSS", "data size", "bytes/vector"} <= set(table.columns)
    # the details follow, folded; the conditions are said
    assert any("Conditions: " in b.text for b in secs[0].blocks if isinstance(b, views.Text))
    details = [s for s in secs if s.id.startswith("wl-")]
    assert details and all(s.folded for s in details)
    # a spread that overlaps the runner-up's makes the ranking uncertain
    close = _fixed(
        recs,
        {("memory", 1): [300.0, 1000.0], ("memory", 2): [100.0], ("sqlite", 1): [400.0, 900.0]},
    )
    ents = summary.entries("crud", close, "best")
    ld = summary.lead(ents)
    assert ld.leader.engine == "memory" and ld.ratio == pytest.approx(1000 / 900)
    assert any("overlap" in w for w in ld.uncertain)
    assert any("repeats spread" in w for w in ld.uncertain)


def test_series_styles_are_unique_across_a_report(recs):
    from storebench.report import plots

    styles = plots.SeriesStyles()
    pairs = [styles(f"s{i}")[k] for i in range(100) for k in ("color",)]
    assert len(set(zip(pairs, [styles(f"s{i}")["marker"] for i in range(100)], strict=True))) == 100
    assert styles("s3") == styles("s3")  # one series, one look, in every chart
    more = plots.SeriesStyles()
    looks = {tuple(more(f"x{i}").values()) for i in range(250)}
    assert len(looks) == 250
    # a whole report: every series drawn got its own colour and marker
    with plots.report_scope() as used:
        build.sections(recs)
    assigned = used.assigned()
    assert len(assigned) >= 4
    assert len(set(assigned.values())) == len(assigned)
    assert len({(c, m) for c, m, _ in assigned.values()}) == len(assigned)


def test_a_noisy_or_failed_run_produces_the_warning_block(recs, tmp_path):
    from storebench.results import records

    idle = [records.parse(_quiet(r.to_dict())) for r in _noisy(recs, busy_run=-1, scale=1.0)]
    quiet = build.write(idle, tmp_path / "quiet")
    assert 'class="warning"' not in quiet.html.read_text()
    noisy = _noisy(recs, busy_run=0, scale=4.0)
    failed = noisy[0].to_dict()
    failed["run_id"], failed["status"], failed["error"] = "failed-1", "failed", "boom"
    w = build.write([*noisy, failed], tmp_path / "noisy")
    page = w.html.read_text()
    top = page.split('id="summary-crud"', 1)[0]  # before the first summary
    assert '<section id="warnings">' in top
    warn = re.findall(r'<p class="warning" role="alert">(.*?)</p>', top)
    assert any("1 of 3 run(s) did not finish (1 failed)" in x for x in warn), warn
    assert any("on a busy machine" in x and "spread over ±25%" in x for x in warn), warn
    assert "> **Warning:** " in w.markdown.read_text()
    # the summary says the ranking is uncertain rather than naming a sure leader
    assert "cautioned" in page


def test_recall_axis_is_logit_unless_asked_linear(recs, tmp_path):
    from storebench.report import plots

    with plots.report_scope("linear"):
        assert plots.recall_axis_note() == "linear"
    with plots.report_scope():
        assert plots.recall_axis_note().startswith("logit")
        fig = plots.new_figure()
        plots.recall_axis(fig.axes[0], [0.9, 0.99, 1.0])
        assert fig.axes[0].get_xscale() == "function"
        ticks = list(fig.axes[0].get_xticks())
        assert 0.99 in ticks and 0.999 in ticks
    with pytest.raises(Exception, match="unknown recall axis"), plots.report_scope("log"):
        pass


def test_ingest_summary_has_arangobs_matrix_and_the_footprint(tmp_path):
    from storebench.report.terminal import fmt_rate

    storebench.run(
        "ingest",
        stores=["memory", "sqlite"],
        set={"count": 600, "grid": {"concurrency": [1, 2]}, "batch_size": 50},
        results_dir=tmp_path,
    )
    recs = data.load(tmp_path)
    secs = summary.summary_sections(recs, "best", plots_on=False)
    (sec,) = [s for s in secs if s.id == "summary-ingest"]
    tables = {t.title: t for t in sec.blocks if isinstance(t, views.Table)}
    m = tables["documents per second, per store and setting"]
    assert m.columns == ["store", "concurrency=1", "concurrency=2"]
    assert [r[0] for r in m.rows] == ["memory", "sqlite"]
    for c in data.configurations(recs):
        run = c.pick("best").run  # the run's own documents/s, as counted
        row = next(r for r in m.rows if r[0] == c.engine)
        col = m.columns.index(f"concurrency={run.params['concurrency']}")
        assert row[col] == fmt_rate(run.metrics["docs_per_s"])
    lead = next(b.text for b in sec.blocks if isinstance(b, views.Text) and b.kind == "lead")
    assert "documents per second (counted: completed)" in lead
    # the stores report their size: the footprint's data column has it
    head = next(t for t in tables.values() if t.title.startswith("ingest:"))
    sizes = [r[head.columns.index("data size")] for r in head.rows]
    assert all(x.endswith(("KiB", "MiB", " B")) for x in sizes), sizes
    fp = summary.footprint(recs[0])
    assert fp.data_bytes == recs[0].metrics["size_bytes"] and fp.vectors is None


# --- the charts: every point and label inside, ranges that read, names as files --------


def _inside(inner, outer, margin=0.0):
    return (
        inner.x0 >= outer.x0 + margin
        and inner.x1 <= outer.x1 - margin
        and inner.y0 >= outer.y0 + margin
        and inner.y1 <= outer.y1 - margin
    )


def _front(pts, label):
    """A rendered front of ``pts`` labelled ``label(i)``: its axes and renderer."""
    from storebench.report import plots

    with plots.report_scope():
        fig = plots.new_figure()
        ax = fig.axes[0]
        front = [(x, y, None, label(i)) for i, (x, y) in enumerate(pts)]
        plots.pareto_series(ax, front, "hnswlib", marker="o")
        plots.rate_axis(ax, "y")
        plots.recall_axis(ax, [x for x, _ in pts], "x")
        plots.render(fig, "front", "front")
        fig.canvas.draw()
    return ax, fig.canvas.get_renderer()


def test_the_recall_front_holds_every_point_and_label_inside_its_frame():
    """Recall 1.0 (every query's neighbours found) is inside the frame with
    its marker whole and its label in the axes; the ticks do not overlap;
    nor do the labels of two points close together."""
    from storebench.report import plots

    near = [(0.70, 30000.0), (0.72, 29000.0), (0.95, 9000.0), (1.0, 300.0)]  # two builds, one ef
    ax, r = _front(near, lambda i: f"m={16 * (i + 1)} ef=16")
    boxes = [t.get_window_extent(r) for t in ax.texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    pts = [(0.77, 20000.0), (0.95, 9000.0), (0.998, 4000.0), (0.9998, 2500.0), (1.0, 300.0)]
    ax, r = _front(pts, lambda i: f"ef={2**i}")
    frame = ax.get_window_extent(r)
    for x, y in pts:
        px, py = ax.transData.transform((x, y))
        assert frame.x0 + 5 < px < frame.x1 - 5 and frame.y0 < py < frame.y1, (x, px, frame)
    assert len(ax.texts) == len(plots.pareto_front(pts))
    for t in ax.texts:
        assert _inside(t.get_window_extent(r), frame), t.get_text()
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert 3 <= len(labels) <= plots.MAX_RECALL_TICKS
    assert "1" in [t.get_text() for t in labels]
    boxes = sorted((t.get_window_extent(r) for t in labels), key=lambda b: b.x0)
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))
    # every point at 1.0 (an easy data set): still an axis to read, 1.0 inside it
    with plots.report_scope():
        fig = plots.new_figure()
        plots.recall_axis(fig.axes[0], [1.0, 1.0])
    lo, hi = fig.axes[0].get_xlim()
    assert lo <= 0.999 and hi > 1.0
    assert list(fig.axes[0].get_xticks()) == [0.999, 0.9999, 1.0]


def test_panels_share_a_y_range_unless_it_would_flatten_one():
    """Upload batches of a second beside searches of microseconds: the
    searches share one range, the upload panel keeps its own and the
    caption says so."""
    from storebench.report import plots

    fig = plots.new_figure(9, 3, 1, 3, sharey=True)
    for ax, (lo, hi), title in zip(
        fig.axes,
        ((2e4, 3e6), (5e4, 9e6), (2e8, 1e9)),
        ("search", "filtered", "upload"),
        strict=True,
    ):
        ax.plot([0, 1, 2], [lo, (lo * hi) ** 0.5, hi])
        plots.fmt_ns_axis(ax, "y")
        ax.set_title(title)
    chart = plots.render(fig, "percentiles", "percentiles", "Latency.")
    search, filtered, upload = fig.axes
    assert search.get_ylim() == filtered.get_ylim()
    assert search.get_ylim()[1] < 1e8 and upload.get_ylim()[0] > 1e7
    assert chart.caption.endswith("Own y range (values far from the other panels'): upload.")


def test_chart_files_and_their_markdown_links_hold_no_space():
    from storebench.report import markdown, plots

    fig = plots.new_figure()
    fig.axes[0].plot([0, 1], [0, 1])
    chart = plots.render(fig, "streaming-recall-qps-recall 100%", "recall 100%")
    assert chart.name == "streaming-recall-qps-recall-100"
    link = markdown.figure(chart).split("\n", 1)[0]
    assert link == "![recall 100%](plots/streaming-recall-qps-recall-100.png)"
    assert plots.slug("a/b (c)") == "a-b-c" and plots.slug("%%") == "x"


def test_the_timeline_names_runs_as_the_report_does_and_its_legend_covers_nothing(recs):
    from storebench.report import plots, timeline

    with plots.report_scope():
        v = views.ViewInput("crud", recs)
        blocks = timeline.timeline_view(v)
    labels = {c.label for c in data.group(data.ok_runs(recs))}
    shown = [label for label, _ in timeline.chosen_runs(v)]
    assert len(shown) > 1 and set(shown) <= labels, (shown, labels)
    # tasks of one interval (these all are: 60 operations) have no steadiness to list
    assert isinstance(blocks[1], views.Text) and "of one interval left out" in blocks[1].text
    # one legend for the whole figure (below its panels), none over a panel's data
    assert blocks[0].svg.count('<g id="legend_') == 1


def test_the_recall_front_is_on_the_first_screen(recs):
    """The front moves into the workload's summary, after its sentences,
    out of the folded details (where a note points to it)."""
    with plots_scope():
        secs = build.sections(recs)
    (summary,) = [s for s in secs if s.id == "summary-crud"]
    kinds = [b.kind if isinstance(b, views.Text) else type(b).__name__ for b in summary.blocks]
    at = next(i for i, b in enumerate(summary.blocks) if isinstance(b, views.Figure))
    assert summary.blocks[at].name == "crud-recall-qps-find_by_vector"
    assert kinds[:at] == ["lead"] * at and at > 0
    folded = [b for s in secs[secs.index(summary) + 1 :] for b in s.blocks]
    assert not [b for b in folded if isinstance(b, views.Figure) and "recall-qps" in b.name]
    assert any(isinstance(b, views.Text) and "under Summary: crud" in b.text for b in folded)


def plots_scope():
    from storebench.report import plots

    return plots.report_scope()


def test_column_names_may_wrap_at_underscores_and_slashes():
    from storebench.report import html

    page = html.table(views.Table("t", ["write_comments mean", "bytes/vector"], [["1", "2"]]), "v")
    assert ">write_<wbr>comments mean</th>" in page and ">bytes/<wbr>vector</th>" in page


def test_the_footprint_chart_draws_only_the_measures_some_run_has():
    pytest.importorskip("matplotlib")
    from storebench.report.footprint import Footprint

    embedded = [("memory", "memory", Footprint(None, 2.0**20, 10), "r1")]
    fig = summary.footprint_chart(embedded)
    assert fig is not None and "server RSS" not in fig.title and "RSS" not in fig.svg
    assert "data size" in fig.title
    served = [*embedded, ("redis", "redis", Footprint(3.0 * 2**20, 2.0**20, 10), "r2")]
    assert "peak server RSS" in summary.footprint_chart(served).title
    assert summary.footprint_chart([("x", "memory", Footprint(None, None, None), "r")]) is None


def test_two_invocations_of_one_plan_are_said_not_silently_repeats(results, tmp_path, caplog):
    from storebench.results import records

    (first,) = [r for r in records.load(results) if r.params["clients"] == 2]
    assert records.separate_invocations(records.load(results)) == ""  # repeats 0 and 1
    again = first.to_dict() | {"run_id": "20261128T000000-0badc0de"}
    path = tmp_path / "both.jsonl"
    path.write_text(json.dumps(first.to_dict()) + "\n" + json.dumps(again) + "\n")
    records.load(path)
    said = f"runs {first.run_id} and {again['run_id']} (crud, memory) are both repeat 0"
    assert said in caplog.text
