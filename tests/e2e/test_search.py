"""The search, tune and scale scenarios end to end on small data: phases in
order, the count check, recall per setting and per selectivity, tuning,
growing sizes, process clients, open loop, engine-side time, reports."""

import numpy as np
import pytest

import storebench
from storebench.report import data, views
from storebench.report.terminal import fmt_ns
from storebench.stores.reference.memory import MemoryCollection

WORKLOADS = ("search", "tune", "scale")
# min_window_s 0: each task runs its ops exactly (tests/unit/test_pool.py has the floor)
SMALL = {
    "n": 1500,
    "dim": 16,
    "queries": 60,
    "k": 10,
    "batch_size": 500,
    "warmup": 2,
    "min_window_s": 0,
}


def run(scenario, stores, tmp_path, **sets):
    if scenario == "search" and set(stores) <= {"memory", "sqlite"}:
        sets.setdefault("grid", {})  # no index or search parameters to sweep
    return storebench.run(scenario, stores=stores, set={**SMALL, **sets}, results_dir=tmp_path)


def tasks(rec):
    return {t["name"]: t for t in rec["tasks"]}


def test_search_times_upload_index_and_searches_per_setting_and_client_count(tmp_path):
    (rec,) = run(
        "search",
        ["hnswlib"],
        tmp_path,
        repeats=1,
        clients=[1, 2],
        labels=[0.1, 0.5],
        **{"grid.index.m": [16], "grid.search.ef": [10, 80]},
    )
    assert rec["status"] == "ok", rec["error"]
    names = [t["name"] for t in rec["tasks"]]
    assert names[:2] == ["upload", "build_index"]
    assert names[2:] == [
        "search ef=10 c=1",
        "search ef=10 c=2",
        "filtered 10% ef=10 c=1",
        "filtered 50% ef=10 c=1",
        "search ef=80 c=1",
        "search ef=80 c=2",
        "filtered 10% ef=80 c=1",
        "filtered 50% ef=80 c=1",
    ]
    t = tasks(rec)
    assert t["upload"]["items"] == 1500 and t["upload"]["clients"] == 2  # uploaders = clients
    assert rec["metrics"]["count_checks"][0] == {
        "when": "after upload",
        "expected": 1500,
        "held": 1500,
    }
    low, high = t["search ef=10 c=1"], t["search ef=80 c=1"]
    assert (
        low["scores"]["recall@10"] < high["scores"]["recall@10"]
        and high["scores"]["recall@10"] >= 0.95
    )
    assert low["search"] == {"ef": 10} and low["ops"] == 60  # the query set once
    assert t["search ef=80 c=2"]["scores"]["recall@10"] == pytest.approx(
        high["scores"]["recall@10"]
    )
    for name in ("search ef=80 c=1", "filtered 10% ef=80 c=1"):
        task = t[name]
        assert 0 < task["scores"]["precision@10"] <= 1 and task["latency_ns"]["p99"] > 0
        assert {"client_cpu_per_s", "client_cpu_ceiling", "client_saturated"} <= set(task)
    f = t["filtered 10% ef=80 c=1"]
    assert f["filter"] == "label_10p" and f["selectivity"] == 0.1 and f["scores"]["recall@10"] > 0.9


def test_a_short_load_fails_the_run_before_any_search(tmp_path, monkeypatch):
    real = MemoryCollection.insert

    def lossy(self, docs):  # an engine that silently drops the tail of each batch
        real(self, docs.slice(0, len(docs) - 3))

    monkeypatch.setattr(MemoryCollection, "insert", lossy)
    for scenario in ("search", "tune", "scale"):
        (rec,) = run(scenario, ["memory"], tmp_path / scenario, repeats=1, clients=[1])
        assert rec["status"] == "failed"
        assert "count check after upload" in rec["error"], rec["error"]
        assert "holds 1,491 of 1,500 documents" in rec["error"]
        assert not [t for t in rec["tasks"] if t.get("phase") == "search"]


def test_repeats_are_one_configuration_with_best_and_spread(tmp_path):
    recs = run("search", ["memory"], tmp_path, repeats=3, clients=[1, 2], labels=[])
    assert [r["repeat"] for r in recs] == [0, 1, 2] and len({r["key"] for r in recs}) == 3
    (config,) = data.group(data.load(tmp_path))
    assert len(config.runs) == 3
    v = views.ViewInput("search", data.load(tmp_path))
    (note, table) = views.views_for("search")[0].fn(v)
    assert table.columns[-2:] == ["runs", "run"] and table.rows[0][-2] == "3"
    qps_cell = table.rows[0][table.columns.index("QPS 2 clients")]
    best = max(recs, key=lambda r: tasks(r)["search c=2"]["ops_per_s"])  # the best run...
    assert qps_cell.startswith(f"{tasks(best)['search c=2']['ops_per_s']:,.0f}") and "±" in qps_cell
    assert table.rows[0][-1] == data.short_run(best["run_id"])  # ...named
    one = table.rows[0][table.columns.index("mean (1 client)")]  # its latency, not the lowest
    assert one.startswith(fmt_ns(tasks(best)["search c=1"]["latency_ns"]["mean"]))


def test_tuning_reaches_the_target_with_the_smallest_ef_and_monotone_recall(tmp_path):
    (rec,) = run("tune", ["hnswlib"], tmp_path, max_clients=2, target_recall=0.95, labels=[0.1])
    assert rec["status"] == "ok", rec["error"]
    tun = rec["metrics"]["tune"]
    assert tun["param"] == "ef" and tun["reached"] and tun["monotone"]
    probes = dict(tun["probes"])
    ef = tun["value"]
    assert probes[ef] >= 0.95 and rec["metrics"]["tuned_ef"] == ef
    assert ef == 10 or probes[ef - 1] < 0.95  # nothing smaller reaches it
    t = tasks(rec)
    assert set(t) == {
        "upload",
        "build_index",
        f"search ef={ef} c=1",
        f"search ef={ef} c=2",
        f"filtered 10% ef={ef} c=1",
    }
    one = t[f"search ef={ef} c=1"]
    assert one["setting"] == {"ef": ef} and one["scores"]["recall@10"] >= 0.9
    assert {"mean", "p50", "p95", "p99"} <= set(one["latency_ns"])


def test_an_exact_store_is_measured_as_it_is(tmp_path):
    (rec,) = run("tune", ["memory"], tmp_path, max_clients=1)
    assert rec["status"] == "ok"
    assert rec["metrics"]["tune"]["param"] is None and rec["metrics"]["tune"]["recall"] == 1.0


def test_scale_measures_each_doubling_against_its_own_truth(tmp_path):
    (rec,) = run("scale", ["hnswlib"], tmp_path, n=500, steps=3, clients=[1], ops=40)
    assert rec["status"] == "ok", rec["error"]
    steps = rec["metrics"]["scale"]
    assert [s["n"] for s in steps] == [500, 1000, 2000]
    assert [c["expected"] for c in rec["metrics"]["count_checks"]] == [
        500,
        500,
        1000,
        1000,
        2000,
        2000,
    ]
    searches = [t for t in rec["tasks"] if t.get("phase") == "search"]
    assert [t["n"] for t in searches] == [500, 1000, 2000]
    assert all(t["scores"]["recall@10"] >= 0.9 for t in searches)
    uploads = [t for t in rec["tasks"] if t.get("phase") == "upload"]
    assert [t["items"] for t in uploads] == [500, 500, 1000]  # only the new documents


def test_process_clients_get_the_queries_and_the_setting(tmp_path):
    (rec,) = run(
        "search", ["sqlite"], tmp_path, repeats=1, clients=[1, 2], labels=[], n=500, queries=30
    )
    t = tasks(rec)
    assert t["search c=1"]["executor"] == "threads"
    assert t["search c=2"]["executor"] == "processes"  # sqlite serves processes
    assert t["search c=2"]["scores"]["recall@10"] == 1.0 and t["search c=2"]["queries_scored"] == 30


def test_open_loop_at_a_target_rate(tmp_path):
    (rec,) = run("search", ["memory"], tmp_path, repeats=1, clients=[1], labels=[], rate=150)
    t = tasks(rec)["search c=1"]
    assert t["target_rate"] == 150 and "service_ns" in t
    assert 0 < t["ops_per_s"] <= 150 * 1.1  # never ahead of the schedule
    assert t["latency_ns"]["max"] >= t["service_ns"]["max"]  # queueing counts


@pytest.mark.parametrize(
    "engine, command",
    [("redis", "FT.SEARCH"), ("elasticsearch", "search"), ("opensearch", "search")],
)
def test_engine_side_time(tmp_path, engine, command):
    import tests.stores.servers_java  # noqa: F401  (adds the Java engines' servers)
    from tests.stores.servers import shared_url

    url = shared_url(engine)
    (rec,) = run(
        "search",
        [f"{engine}={url}"],
        tmp_path,
        repeats=1,
        clients=[1, 2],
        labels=[0.1],
        n=800,
        data="uniform",  # the worst case: ef=10 misses neighbours there
        **{"grid.index.m": [16], "grid.search.ef": [10, 200]},
    )
    assert rec["status"] == "ok", rec["error"]
    t = tasks(rec)
    for name in ("search ef=10 c=1", "search ef=200 c=2"):
        eng = t[name]["engine"]
        assert eng["command"] == command and eng["calls"] >= t[name]["ops"]
        assert 0 < eng["mean_ns"] < t[name]["latency_ns"]["mean"]
    # the ef reached the process clients: recall differs by setting there too
    assert t["search ef=200 c=2"]["executor"] == "processes"
    assert (
        t["search ef=200 c=2"]["scores"]["recall@10"] > t["search ef=10 c=2"]["scores"]["recall@10"]
    )
    assert t["search ef=10 c=2"]["scores"]["recall@10"] == pytest.approx(
        t["search ef=10 c=1"]["scores"]["recall@10"]
    )


def test_reports_of_the_three_workloads(tmp_path):
    grid = {"grid.index.m": [16], "grid.search.ef": [16, 64]}
    small = {"n": 800, "queries": 30}
    run(
        "search",
        ["memory", "hnswlib"],
        tmp_path,
        repeats=2,
        clients=[1, 2],
        labels=[0.5],
        **small,
        **grid,
    )
    run("tune", ["hnswlib"], tmp_path, max_clients=2, **small)
    run("scale", ["hnswlib"], tmp_path, n=400, steps=2, clients=[1, 2], ops=30, queries=30)
    recs = data.load(tmp_path)
    for workload, own in (
        ("search", ["search_table", "qps_clients"]),
        ("tune", ["tune_table", "tune_probes"]),
        ("scale", ["scale_table", "scale_plot"]),
    ):
        names = [view.name for view in views.views_for(workload)]
        assert names[: len(own)] == own
        assert names.count("recall_qps") == 1 and names.count("concurrency") == 1
        v = views.ViewInput(workload, [r for r in recs if r.workload == workload])
        sections = views.run_views(v, plots=False)  # the charts: below, a few
        failed = [
            s.title
            for s in sections
            for b in s.blocks
            if isinstance(b, views.Text) and b.text.startswith("This view failed")
        ]
        assert not failed
        titles = {s.title for s in sections}
        assert "Client CPU and engine-side time" in titles
        assert ("Filtered search per selectivity" in titles) is (workload == "search")
    pytest.importorskip("matplotlib")
    from storebench.report import search as sv

    by = {w: views.ViewInput(w, [r for r in recs if r.workload == w]) for w in WORKLOADS}
    for fn, w in (
        (sv.recall_qps, "search"),
        (sv.concurrency, "tune"),
        (sv.tune_probes, "tune"),
        (sv.scale_plot, "scale"),
    ):
        blocks = fn(by[w])
        assert blocks and isinstance(blocks[0], views.Figure), (fn.__name__, w)


def _fvecs(path, x):
    x = np.asarray(x, np.float32)
    rows = np.hstack([np.full((len(x), 1), x.shape[1], np.int32).view(np.float32), x])
    rows.tofile(path)


@pytest.fixture
def tied_dataset(tmp_path, monkeypatch):
    """1,200 rows: 40 distinct points, each 30 times, so the 100th neighbour
    of a query is in the middle of a group of 30 equal distances."""
    from storebench.data import datasets

    monkeypatch.setenv("STOREBENCH_DATA", str(tmp_path / "data"))
    rng = np.random.default_rng(3)
    points = rng.normal(size=(40, 8)).astype(np.float32)
    _fvecs(tmp_path / "base.fvecs", np.repeat(points, 30, axis=0))
    _fvecs(tmp_path / "query.fvecs", rng.normal(size=(25, 8)))
    datasets.import_path(
        tmp_path / "base.fvecs", "tied", queries=tmp_path / "query.fvecs", metric="l2"
    )
    return "tied"


@pytest.mark.parametrize("k", [10, 100])
@pytest.mark.parametrize("scenario", ["search", "crud"])
def test_ties_count_whichever_tied_ids_an_exact_store_returns(
    tmp_path, monkeypatch, tied_dataset, scenario, k
):
    real = MemoryCollection.search

    def last_of_ties(self, vectors, k_, where=None):
        """An exact store that breaks ties the other way: of equal distances,
        the highest ids (the truth keeps the lowest)."""
        r = real(self, vectors, min(k_ + 60, 1200), where)
        order = np.lexsort((-r.ids, r.distances), axis=1)[:, :k_]
        return type(r)(
            np.take_along_axis(r.ids, order, 1), np.take_along_axis(r.distances, order, 1)
        )

    monkeypatch.setattr(MemoryCollection, "search", last_of_ties)
    sets = {"dataset": tied_dataset, "k": k, "ops": 25, "batch_size": 400}
    if scenario == "search":
        sets |= {"queries": 25, "grid": {}, "warmup": 0, "labels": [], "repeats": 1}
    (rec,) = storebench.run(scenario, stores=["memory"], set=sets, results_dir=tmp_path)
    assert rec["status"] == "ok", rec["error"]
    recalls = [
        t["scores"][f"recall@{k}"] for t in rec["tasks"] if f"recall@{k}" in t.get("scores", {})
    ]
    assert recalls and all(r == 1.0 for r in recalls), recalls


def test_a_wrong_id_at_a_tied_distance_is_still_a_miss():
    """Tie-aware scoring counts a found id by its *true* distance, among the
    rows the truth covers: a row outside them (deleted, filtered out) is a
    miss even at the k-th distance."""
    from storebench.data.truth import GroundTruth
    from storebench.results.scores import RECALL
    from storebench.workloads.vector.scoring import score

    truth = GroundTruth(np.array([[0, 1]]), np.array([[0.0, 1.0]], np.float32))
    payload = (np.array([[0, 7]]), np.array([True]))
    tied = score([payload], truth, 2, lambda rows, f: np.array([[0.0, 1.0]], np.float32))
    outside = score([payload], truth, 2, lambda rows, f: np.array([[0.0, np.inf]], np.float32))
    untold = score([payload], truth, 2)
    assert [s.of(RECALL) for s in (tied, outside, untold)] == [1.0, 0.5, 0.5]


def test_a_floor_on_the_window_cycles_the_queries_and_the_clients_end_with_the_run(tmp_path):
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    (rec,) = run(
        "search",
        ["sqlite"],
        tmp_path,
        repeats=1,
        clients=[1, 2],
        labels=[],
        n=500,
        queries=30,
        min_window_s=0.5,
    )
    assert rec["status"] == "ok", rec["error"]
    for name in ("search c=1", "search c=2"):
        t = tasks(rec)[name]
        assert t["ops"] > 30 and t["elapsed_s"] >= 0.5 and t["min_window_s"] == 0.5
        assert t["queries_scored"] == 30 and t["scores"]["recall@10"] == 1.0  # each query once
    assert tasks(rec)["search c=2"]["executor"] == "processes"
    left = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before
        and p.status() != psutil.STATUS_ZOMBIE
        and "resource_tracker" not in " ".join(p.cmdline())
    ]
    assert not left  # the run's client processes ended with it


def test_the_topology_views_show_replicas_node_cpu_and_what_limited_each_row(tmp_path):
    """The views' reading, on a real search run's records given the
    topologies a cluster run records (the cluster itself: test_clusters)."""
    from storebench.report import cluster as cv

    run(
        "search",
        ["hnswlib"],
        tmp_path,
        n=400,
        queries=30,
        clients=[1, 2],
        repeats=1,
        **{"grid.index.m": [16], "grid.search.ef": [32]},
    )
    (rec,) = data.load(tmp_path)
    recs = []
    for i, replicas in enumerate((1, 2, 8)):
        r = rec.model_copy(deep=True)
        r.run_id = f"{rec.run_id}-{replicas}"
        r.store.options = {"replicas": replicas, "node_cpus": 0.25}
        r.machine["cores_logical"] = 2
        r.topology = {"nodes": [f"node-{j}" for j in range(replicas)], "shards": []}
        for t in r.tasks:
            if t.phase == "search":
                t.elapsed_s = 10.0
                # the nodes used their whole quota up to 4 nodes (2.5 of 10 s), then less
                t.server_node_cpu_s = {
                    f"node-{j}": 2.4 if replicas < 8 else 1.0 for j in range(replicas)
                }
                t.ops_per_s = 100.0 * (i + 1)
                # the machine as measured varies with its load: fix what the limit reads
                t.client_cpu_per_s = 0.3
                t.machine_load = {"other_cpu_cores": 0.1}
        recs.append(r)
    v = views.ViewInput("search", recs)
    assert cv.cluster_table(views.ViewInput("search", [rec])) == []  # one node, no axis: nothing
    (note, table) = cv.cluster_table(v)
    rows = {(row[1], row[5]): row for row in table.rows}  # (nodes, clients)
    assert set(rows) == {(n, c) for n in ("1", "2", "8") for c in ("1 client", "2 clients")}
    assert rows[("2", "2 clients")][9] == "0.24-0.24"  # cores used per node
    assert rows[("2", "2 clients")][10] == "node quotas"
    assert rows[("8", "2 clients")][10] == "machine (quotas 2 cores of 2)"
    pytest.importorskip("matplotlib")
    (fig,) = cv.cluster_plot(v)
    assert isinstance(fig, views.Figure)
