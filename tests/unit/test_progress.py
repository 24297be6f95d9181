"""The sweep's time estimates (``progress.Sweep``) and the fitting of
terminal tables (``report.terminal.fit_columns``), on fixed inputs."""

import pytest

from storebench.plan.dryrun import estimate, time_model, what_starts
from storebench.plan.scenario import Scenario
from storebench.report.terminal import BORDER_EDGE, BORDER_PER_COLUMN, fit_columns
from storebench.run.progress import PRIOR_RUN_S, PRIOR_SERVER_S, Sweep, fmt_duration
from storebench.stores.opening import servers_started
from storebench.workloads.base import OP_S, TASK_S, TimeModel


def test_each_workload_models_its_own_time():
    # social: its actors' pauses (100 reads 100 ms apart) are the run's length
    social = time_model("social", {}, None, "memory")
    assert 10.0 <= social.fixed_s <= 10.2 and social.work_s > 0
    assert time_model("social", {"post_read_delay_ms": 300}, None, "memory").fixed_s >= 30
    # search: each measured task runs at least its window: per setting, a
    # task per client count and per filter selectivity
    p = {"n": 1000, "queries": 50, "clients": [1, 4], "labels": [0.1, 0.5], "min_window_s": 1}
    assert time_model("search", p, None, "hnswlib").fixed_s == 4
    assert time_model("search", p, {"ef": [16, 64, 128]}, "hnswlib").fixed_s == 12
    # and each task costs the harness its own start and scoring, however short
    one, three = (time_model("search", p, {"ef": e}, "hnswlib") for e in ([16], [16, 64, 128]))
    assert three.work_s - one.work_s == pytest.approx(2 * 4 * TASK_S)
    # an exhaustive store scans the documents for each query: more work as n grows
    small, big = (time_model("tune", {"n": n, "queries": 500}, None, "memory") for n in (1e3, 1e6))
    assert big.work_s > 10 * small.work_s
    # a record's parameters (a mapping) and the plan's (the model) agree
    plan = Scenario.load("crud", stores=["memory"], sets=["n=2000"]).plan()
    assert time_model("crud", plan[0].params, None, "memory") == time_model(
        "crud", plan[0].params.model_dump(), None, "memory"
    )
    assert time_model("no-such-workload", {}, None, "memory") == TimeModel()


def test_the_built_in_guesses_hold_each_scenarios_fixed_seconds():
    sweep = estimate(Scenario.load("social").plan())
    assert sweep.total() >= 2 * 10.0  # two stores, 10 s of pauses each
    streaming = Scenario.load("streaming", sets=["n=2000"]).plan()
    assert estimate(streaming).total() >= len(streaming) * 2 * 2 * 0.5  # 2 stages x 2 clients
    assert OP_S > 0


def test_a_cluster_counts_a_start_per_node_and_works_at_its_quota():
    def first(*options):
        sets = ["grid.store.replicas=[4]"]
        (run,) = Scenario.load("replicas", sets=sets, store_options=list(options)).plan()
        return estimate([run]), run

    (quota, run), (whole, _) = first(), first("opensearch.node_cpus=1")
    from storebench.stores.base import store_class

    # four nodes start, each at the engine's pace
    assert servers_started(run.spec) == 4
    assert quota.runs[0][3] == pytest.approx(4 * store_class("opensearch").pace.start)
    assert quota.runs[0][2] == pytest.approx(4 * whole.runs[0][2])  # a quarter of a core each
    (embedded,) = Scenario.load("crud", stores=["memory"]).plan()
    assert servers_started(embedded.spec) == 0


def test_the_plan_names_the_executor_the_runs_clients_get():
    def says(name, *sets, stores=("memory",)):
        (run, *_) = Scenario.load(name, stores=list(stores), sets=list(sets)).plan()
        return what_starts(run).rsplit("clients as ", 1)[1]

    # several search clients on a store that serves process clients: processes,
    # as the run chooses them (the plan said the store's threads)
    assert says("search", "clients=[40]", stores=("opensearch",)) == "processes"
    assert says("search", "clients=[1]", stores=("opensearch",)) == "threads"
    assert says("search", "clients=[40]", "executor=threads", stores=("opensearch",)) == "threads"
    assert says("crud") == "threads"
    assert says("social") == "async"  # many pausing clients: one event loop
    assert says("ingest", "concurrency=4") == "threads"  # ingest's auto: threads


def test_an_engines_pace_weighs_the_priors_until_a_run_of_it_is_timed(monkeypatch):
    from storebench.stores.base import Pace, store_class
    from storebench.workloads.base import BUILD_S, DOC_S, load_time

    hnswlib = store_class("hnswlib")
    slow = type("Slow", (hnswlib,), {"pace": Pace(upload=10.0, build=3.0)})
    assert load_time(1000, hnswlib).work_s == pytest.approx(1000 * (DOC_S + BUILD_S))
    assert load_time(1000, slow).work_s == pytest.approx(1000 * (10 * DOC_S + 3 * BUILD_S))
    # a JVM engine declares its own (no earlier run of it): a single search
    # run of OpenSearch estimated 24.7 s at the generic priors and took 58 s
    sets = ["repeats=1", "grid.index.m=[16]"]
    (run,) = Scenario.load("search", stores=["opensearch"], sets=sets).plan()
    cls = store_class("opensearch")
    pace, n = cls.pace, run.params.n
    paced = estimate([run])
    monkeypatch.setattr(cls, "pace", Pace())
    generic = estimate([run])
    more = n * (DOC_S * (pace.upload - 1) + BUILD_S * (pace.build - 1))
    more += PRIOR_SERVER_S * (pace.start - 1)
    assert paced.total() - generic.total() == pytest.approx(more)
    assert paced.total() >= 1.4 * generic.total()
    # once a run of the engine is timed, its seconds decide and the pace cancels
    monkeypatch.undo()
    for sweep in (paced, generic):
        sweep.finished(0, 50.0)
        assert sweep.estimate(0) == pytest.approx(50.0)


def test_eta_scales_the_engines_own_runs_then_all_runs():
    runs = [("a", "w", 100.0, False), ("a", "w", 200.0, False), ("b", "w", 100.0, False)]
    sweep = Sweep(runs)
    assert sweep.estimate(0) == pytest.approx(PRIOR_RUN_S + 100)  # the model's own
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
