"""Per-interval series: a stall shows in its interval only, intervals merge
exactly into the whole task, and the HDR log export reads back with the
standard reader."""

import threading
import time

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from storebench.data.batch import Schema
from storebench.driver import Driver, FnOp, Task
from storebench.driver import loops as loops_mod
from storebench.measure.metrics import (
    BUCKETS,
    HIGHEST_NS,
    MIN_POINTS,
    POINTS_MAX,
    Histogram,
    Series,
    bucket_top,
)
from storebench.report.export import hdr_intervals, write_hdr
from storebench.results.records import RunRecord, TaskRecord
from storebench.stores.base import StoreSpec

MS = 1_000_000
S = 1_000_000_000


@pytest.fixture
def coll():
    store = StoreSpec("null").open()
    yield store.create_collection("intervals", Schema())
    store.close()


class StallAtSecond3:
    """A fake store on the virtual clock: 1 ms per operation, and once, the
    first operation after 3.3 s into the measurement takes 200 ms more."""

    def __init__(self, clock, fail_every=0):
        self.clock = clock
        self.fail_every = fail_every

    def __call__(self, coll, c, clients):
        vc = self.clock
        state = {"t0": None, "stalled": False}

        def op(i):
            if i < 0:
                vc.spend(MS)
                return
            if state["t0"] is None:
                state["t0"] = vc.now
            if not state["stalled"] and vc.now - state["t0"] >= 3300 * MS:
                state["stalled"] = True
                vc.spend(200 * MS)
            vc.spend(MS)
            if self.fail_every and i % self.fail_every == self.fail_every - 1:
                raise RuntimeError("planted failure")

        return FnOp(op)


def same_histogram(a: Histogram, b: Histogram) -> None:
    assert np.array_equal(a._counts, b._counts)
    assert (a.count, a.sum_ns) == (b.count, b.sum_ns)
    assert (a.hdr.min_value, a.hdr.max_value) == (b.hdr.min_value, b.hdr.max_value)


def test_a_stall_at_second_3_shows_in_interval_3_only(virtual_clock, coll):
    task = Task("get", StallAtSecond3(virtual_clock), duration_s=6.0, warmup_ops=10)
    stats, _ = Driver(interval_s=1.0).run(task, coll)
    series = stats.series
    assert len(series) == 6  # the last op's overshoot past 6 s joins interval 5
    ops = series.ops()
    # 1 ms per op; 200 of interval 3's milliseconds went to the stall
    assert ops.tolist() == [999, 1000, 1000, 800, 1000, 1001]
    assert ops.sum() == stats.ops
    top = series.maxs.tolist()
    assert top[3] == 201 * MS
    assert all(t == MS for k, t in enumerate(top) if k != 3)
    p99 = series.percentiles((99.0,))[99.0]
    assert all(p99[k] == MS for k in range(6) if k != 3)
    rec = TaskRecord.of(stats)
    s = rec.series
    assert s["interval_s"] == 1.0 and s["ops"] == ops.tolist()
    assert s["latency_ns"]["max"] == top
    assert s["ops_per_s"][3] == 800.0
    assert [k for k, v in enumerate(s["latency_ns"]["max"]) if v > 100 * MS] == [3]
    # the whole run's histogram is the exact merge of the intervals
    same_histogram(series.histogram(), stats.latency)
    merged = Histogram()
    for k in range(len(series)):
        merged.merge(series.histogram(k, k + 1))
    same_histogram(merged, stats.latency)
    # ... and so are the record's encoded ones
    whole = HdrHistogram.decode(rec.histogram)
    again = Histogram().hdr
    for encoded in s["hdr"]:
        again.decode_and_add(encoded)
    assert again.total_count == whole.total_count == stats.ops
    assert list(again.counts) == list(whole.counts)


def test_failed_operations_keep_the_others_in_their_intervals(virtual_clock, coll):
    """The closed loop's end times follow from its latencies; a failure
    restarts the running sum and the failed op is in no interval."""
    task = Task(
        "get", StallAtSecond3(virtual_clock, fail_every=10), duration_s=6.0, max_errors=10**6
    )
    stats, _ = Driver(interval_s=1.0).run(task, coll)
    assert sum(stats.errors.values()) > 500
    ops = stats.series.ops()
    assert ops.sum() == stats.ops
    # every 10th op fails: 9 of 10 per millisecond tick count
    assert ops[0] in (899, 900) and ops[1] == 900 and ops[3] in (719, 720, 721)
    same_histogram(stats.series.histogram(), stats.latency)


def test_errors_are_counted_per_interval(virtual_clock, coll):
    """Every 10th op fails: about 100 failures in each second, their total
    the task's error count, in the series and its record."""
    task = Task(
        "get", StallAtSecond3(virtual_clock, fail_every=10), duration_s=6.0, max_errors=10**6
    )
    stats, _ = Driver(interval_s=1.0).run(task, coll)
    errors = stats.series.errors
    assert errors.sum() == sum(stats.errors.values())
    assert len(errors) == 6 and all(75 <= e <= 101 for e in errors)
    assert errors[3] < errors[2]  # the stall's 200 ms ran no operation
    assert TaskRecord.of(stats).series["errors"] == errors.tolist()
    # a task without failures records none
    clean, _ = Driver(interval_s=1.0).run(
        Task("get", StallAtSecond3(virtual_clock), duration_s=2.0), coll
    )
    assert "errors" not in TaskRecord.of(clean).series


def test_a_failed_thinking_op_counts_where_it_failed(coll):
    def factory(coll, c, clients):
        def op(i):
            if i == 30:
                raise RuntimeError("planted failure")

        return FnOp(op)

    task = Task("think", factory, duration_s=1.0, think_s=0.01, max_errors=1)
    stats, _ = Driver(interval_s=0.25).run(task, coll)
    # op 30 starts ~0.3 s in (10 ms apart): interval 1, not the first
    assert stats.series.errors.tolist()[:2] == [0, 1] and stats.series.errors.sum() == 1


def test_open_loop_keeps_service_time_per_interval(coll):
    """A 900 ms stall at 1.3 s of an open loop at 200/s: the operations
    queued behind it end in interval 2 late by up to 0.9 s (latency from the
    intended start), while their service time stays ~1 ms."""
    state = {"t0": None, "stalled": False}

    def factory(coll, c, clients):
        def op(i):
            now = time.perf_counter_ns()
            if i >= 0 and state["t0"] is None:
                state["t0"] = now
            if i >= 0 and not state["stalled"] and now - state["t0"] >= 1300 * MS:
                state["stalled"] = True
                time.sleep(0.9)
            time.sleep(0.001)

        return FnOp(op)

    task = Task("open", factory, duration_s=3.0, rate=200.0, items_per_op=10)
    stats, _ = Driver(interval_s=1.0).run(task, coll)
    lat, svc = stats.series, stats.service_series
    assert len(lat) == len(svc) == 3
    assert svc.ops().tolist() == lat.ops().tolist()
    same_histogram(svc.histogram(), stats.service)
    p50 = lat.percentiles((50.0,))[50.0]
    s50 = svc.percentiles((50.0,))[50.0]
    assert p50[2] > 100 * MS and s50[2] < 50 * MS
    assert svc.maxs[2] >= 900 * MS  # the stalled op itself ended at ~2.2 s
    s = TaskRecord.of(stats).series
    assert s["service_ns"]["p50"] == s50.tolist() and s["service_ns"]["max"] == svc.maxs.tolist()
    assert s["items_per_s"] == pytest.approx([10 * x for x in s["ops_per_s"]], abs=1.0)
    # a closed loop has no service series
    closed, _ = Driver(interval_s=1.0).run(Task("get", factory, duration_s=0.3), coll)
    assert closed.service_series is None and "service_ns" not in TaskRecord.of(closed).series


def test_stall_on_a_real_clock_with_clients_merged(coll):
    """Two thread clients on a store that stalls every caller for 200 ms at
    3.3 s: interval 3 shows it in both clients' operations, merged. (The
    virtual-clock test above pins "interval 3 only" exactly; on a real clock
    a machine busy enough to pause a thread for 200 ms elsewhere can.)"""
    lock = threading.Lock()
    state = {"t0": None, "stalled": False}

    def factory(coll, c, clients):
        def op(i):
            if i >= 0:
                with lock:
                    now = time.perf_counter_ns()
                    if state["t0"] is None:
                        state["t0"] = now
                    if not state["stalled"] and now - state["t0"] >= 3300 * MS:
                        state["stalled"] = True
                        time.sleep(0.2)
            time.sleep(0.001)

        return FnOp(op)

    task = Task("get", factory, clients=2, duration_s=6.0, executor="threads")
    stats, _ = Driver(interval_s=1.0).run(task, coll)
    series = stats.series
    assert len(series) == 6
    top = series.maxs
    assert top[3] >= 200 * MS
    # each client had an op of ~200 ms in interval 3 (one slept, one waited)
    assert count_at_least(series.histogram(3, 4), 190 * MS) >= 2
    assert series.ops().sum() == stats.ops
    same_histogram(series.histogram(), stats.latency)


def count_at_least(h: Histogram, ns: int) -> int:
    """How many values of ``h`` are in buckets reaching ``ns`` or more."""
    idx = np.flatnonzero(h._counts)
    return int(h._counts[idx][bucket_top(idx) >= ns].sum())


def test_open_and_thinking_loops_have_series(coll):
    def factory(coll, c, clients):
        return FnOp(lambda i: None)

    stats, _ = Driver(interval_s=1.0).run(Task("open", factory, duration_s=1.5, rate=400.0), coll)
    assert len(stats.series) == 2 and stats.series.ops().sum() == stats.ops
    assert abs(int(stats.series.ops()[0]) - 400) <= 4  # on schedule: 400 per second
    same_histogram(stats.series.histogram(), stats.latency)
    stats, _ = Driver(interval_s=0.25).run(
        Task("think", factory, duration_s=1.0, think_s=0.002, clients=2), coll
    )
    assert len(stats.series) == 4 and stats.series.ops().sum() == stats.ops
    assert TaskRecord.of(stats).series["interval_s"] == 0.25


def test_interval_percentiles_are_hdr_percentiles():
    rng = np.random.default_rng(7)
    n = 20_000
    values = rng.lognormal(12, 1.5, n).astype(np.int64) + 1
    values[::997] = HIGHEST_NS + 5  # clamped as Histogram.record clamps
    ends = np.sort(rng.integers(0, 7 * S, n))
    s = Series.of(values, ends, 0, S)
    ps = (50.0, 90.0, 99.0, 99.9, 100.0)
    got = s.percentiles(ps)
    k = ends // S
    for i in range(7):
        h = Histogram()
        h.record(values[k == i])
        want = h.summary()
        for p in ps[:-1]:
            assert got[p][i] == want[f"p{p:g}"]
        assert got[100.0][i] == want["max"] == s.maxs[i]
        same_histogram(s.histogram(i, i + 1), h)


def test_series_merge_is_exact_and_fit_folds_the_tail():
    rng = np.random.default_rng(3)
    a_vals, b_vals = rng.integers(1, 10**7, 5000), rng.integers(1, 10**8, 3000)
    a = Series.of(a_vals, np.sort(rng.integers(0, 3 * S, 5000)), 0, S)
    b = Series.of(b_vals, np.sort(rng.integers(0, int(3.05 * S), 3000)), 0, S)
    whole = Histogram()
    whole.record(np.r_[a_vals, b_vals])
    a.merge(b)
    same_histogram(a.histogram(), whole)
    assert len(a) == 4  # b's last ops ended after 3 s
    a.fit(int(3.05 * S))  # a 50 ms tail joins interval 2
    assert len(a) == 3 and a.ops().sum() == 8000
    same_histogram(a.histogram(), whole)
    assert int(a.keys.max()) // BUCKETS == 2


def test_loops_end_times():
    lat = np.array([5, 7, -1, 3, 4], np.int64)
    ends = loops_mod.closed_ends(lat, [(0, 100), (3, 200)])
    assert ends[[0, 1, 3, 4]].tolist() == [105, 112, 203, 207]
    assert loops_mod.open_ends(np.array([1, 2, 3]), 1000, 10.5).tolist() == [1001, 1012, 1024]


def _record(stats, **kw) -> RunRecord:
    return RunRecord(
        run_id="r1",
        scenario="crud",
        status="ok",
        started_at="2026-11-25T14:00:00+00:00",
        tasks=[TaskRecord.of(stats, **kw)],
    )


def test_hdr_log_round_trip_with_the_standard_reader(virtual_clock, coll, tmp_path):
    stats, _ = Driver(interval_s=1.0).run(
        Task("get", StallAtSecond3(virtual_clock), duration_s=6.0), coll
    )
    rec = _record(stats)
    task = rec.tasks[0]
    assert write_hdr([rec], tmp_path / "hdr") == 1
    (path,) = (tmp_path / "hdr").iterdir()
    assert path.name == "r1.get.hlog"
    reader = HistogramLogReader(str(path), Histogram().hdr)
    got = []
    while (h := reader.get_next_interval_histogram()) is not None:
        got.append(h)
    assert reader.get_start_time_sec() == pytest.approx(task.start_unix, abs=1e-3)
    assert [h.total_count for h in got] == task.series["ops"]
    for h, encoded in zip(got, task.series["hdr"], strict=True):
        assert list(h.counts) == list(HdrHistogram.decode(encoded).counts)
    # interval k starts k seconds after the start, on the log's absolute time
    starts = [h.get_start_time_stamp() / 1000 - task.start_unix for h in got]
    assert starts == pytest.approx([0, 1, 2, 3, 4, 5], abs=2e-3)
    assert got[3].get_max_value() >= 200 * MS > max(h.get_max_value() for h in got[:3])
    # the intervals add up to the whole task, read back with the same reader
    total = HistogramLogReader(str(path), Histogram().hdr)
    acc = Histogram().hdr
    while total.add_next_interval_histogram(acc):
        pass
    assert list(acc.counts) == list(HdrHistogram.decode(task.histogram).counts)


def test_hdr_export_of_an_older_record_is_one_interval(tmp_path):
    h = Histogram()
    h.record(np.array([1000, 2000, 3000]))
    old = {
        "record_version": 2,
        "run_id": "old",
        "status": "ok",
        "started_at": "2026-01-02T03:04:05+00:00",
        "tasks": [
            {"name": "get", "ops": 3, "elapsed_s": 0.5, "histogram": h.encode()},
            {"name": "index", "unsupported": "no index"},
        ],
    }
    task = RunRecord.model_validate(old).tasks[0]
    assert task.series is None
    assert [x[:2] for x in hdr_intervals(task)] == [(0.0, 0.5)]
    assert write_hdr([old], tmp_path) == 1
    reader = HistogramLogReader(str(tmp_path / "old.get.hlog"), Histogram().hdr)
    got = reader.get_next_interval_histogram()
    assert got.total_count == 3 and reader.get_next_interval_histogram() is None


def test_over_time_views_read_series_and_skip_older_records(virtual_clock, coll):
    pytest.importorskip("matplotlib")
    from storebench.report.timeline import layout, spark, sparklines, timeline_view
    from storebench.report.views import ViewInput

    stats, _ = Driver(interval_s=1.0).run(
        Task("get", StallAtSecond3(virtual_clock), duration_s=6.0), coll
    )
    build, _ = Driver(interval_s=1.0).once(
        "index", lambda: virtual_clock.spend(2 * S), since_ns=None
    )
    rec = RunRecord(
        run_id="r1",
        workload="crud",
        status="ok",
        tasks=[TaskRecord.of(stats), TaskRecord.of(build)],
    )
    spans = layout(rec)
    assert [s.timed for s in spans] == [True, False]
    # (the virtual clock maps to the epoch through the real one: only lengths hold)
    assert spans[1].end - spans[1].start == pytest.approx(2.0)
    ((name, rate, p99),) = sparklines(rec)
    assert name == "get" and p99.startswith("▁▁▁█▁▁")
    blocks = timeline_view(ViewInput("crud", [rec]))
    assert blocks[0].name == "crud-timeline" and blocks[0].png
    (row,) = blocks[1].rows
    assert row[1:3] == ["get", "6"] and row[-1] == "3-4 s"
    assert spark([1, 1, 1, 9], 2, worst=True) == "▁█"
    old = rec.model_dump()
    for t in old["tasks"]:
        t.pop("series", None)
    assert timeline_view(ViewInput("crud", [old])) == []
    assert sparklines(old) == []


def nothing(coll, c, clients):
    return FnOp(lambda i: None)


def test_over_time_views_show_service_time_errors_and_items(request, coll):
    pytest.importorskip("matplotlib")
    from storebench.report.timeline import sparklines, timeline_view
    from storebench.report.views import ViewInput

    # the open loop on the real clock (it sleeps until each op is due)
    insert = Task("insert", nothing, duration_s=0.3, rate=100.0, items_per_op=50)
    batched, _ = Driver(interval_s=0.1).run(insert, coll)
    vc = request.getfixturevalue("virtual_clock")  # from here on
    get = Task("get", StallAtSecond3(vc, fail_every=10), duration_s=4.0, max_errors=10**6)
    failing, _ = Driver(interval_s=1.0).run(get, coll)
    rec = RunRecord(
        run_id="r1",
        workload="crud",
        status="ok",
        tasks=[TaskRecord.of(failing), TaskRecord.of(batched)],
    )
    lines = sparklines(rec)
    names = [line[0] for line in lines]
    assert names == ["get", "  errors", "insert", "  service time"]
    assert lines[1][1].endswith(f"{sum(failing.errors.values()):,} in all")
    assert lines[2][1].endswith(" items/s") and " 5,000.." in lines[2][1]
    blocks = timeline_view(ViewInput("crud", [rec]))
    header, rows = blocks[1].columns, blocks[1].rows
    got = {row[1]: dict(zip(header, row, strict=True)) for row in rows}
    assert got["get"]["errors"].startswith(f"{sum(failing.errors.values()):,} (most at ")
    assert got["get"]["service p99 median"] == "-"
    assert got["insert"]["errors"] == "0" and got["insert"]["service p99 median"] != "-"


def test_a_task_of_a_second_gets_ten_points_by_default(virtual_clock, coll):
    task = Task("get", StallAtSecond3(virtual_clock), duration_s=1.0, warmup_ops=10)
    stats, _ = Driver().run(task, coll)
    assert len(TaskRecord.of(stats).series["ops"]) >= MIN_POINTS


def test_a_long_task_keeps_at_most_points_max_intervals_merged_exactly():
    rng = np.random.default_rng(3)
    ends = np.sort(rng.integers(0, 250 * S, 20_000))  # 250 s: 2,500 intervals of 0.1 s
    values = rng.integers(MS, 50 * MS, len(ends))
    series = Series.of(values, ends, 0, S // 10)
    series.fit(250 * S)
    rec = series.to_record(250 * S)
    factor = -(-len(series) // POINTS_MAX)
    assert len(rec["ops"]) == -(-len(series) // factor) <= POINTS_MAX
    assert rec["interval_s"] == pytest.approx(0.1 * factor)
    assert sum(rec["ops"]) == len(ends)
    coarse = series.coarsened(factor)
    same_histogram(coarse.histogram(), series.histogram())
    assert coarse.maxs.max() == values.max() and coarse.mins.min() == values.min()
    assert rec["latency_ns"]["max"][0] == series.maxs[:factor].max()
