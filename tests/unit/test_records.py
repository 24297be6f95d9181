"""The typed records: reading older and newer versions, extra fields kept,
configuration identity, the per-setting split and the one aggregation."""

import json

import pytest

from storebench.errors import UserError
from storebench.report import data
from storebench.results import files as results
from storebench.results import records


def task(name, ops_per_s, *, search=None, clients=1, recall=None, **more):
    t = {
        "name": name,
        "clients": clients,
        "ops": 100,
        "items": 100,
        "elapsed_s": 100 / ops_per_s,
        "ops_per_s": ops_per_s,
        "items_per_s": ops_per_s,
        "latency_ns": {"mean": 1e9 / ops_per_s, "p50": 1000, "p99": 2000},
        "phase": "search",
        **more,
    }
    if search is not None:
        t["search"] = search
    if recall is not None:
        t["recall@10"] = recall
    return t


def run(run_id, qps, *, url="redis://:***@127.0.0.1:40001/0", managed=True, version=None):
    """A search run over ef 16 and 64 at 1 and 2 clients (QPS ``qps[ef]``)."""
    tasks = [
        {"name": "upload", "ops": 2, "items": 1000, "elapsed_s": 0.5, "phase": "upload"},
        {"name": "build_index", "ops": 1, "items": 1000, "elapsed_s": 0.2, "phase": "index"},
    ]
    for ef, (q1, q2) in qps.items():
        s = {"ef": ef}
        tasks.append(task(f"search ef={ef} c=1", q1, search=s, recall=ef / 100))
        tasks.append(task(f"search ef={ef} c=2", q2, search=s, clients=2, recall=ef / 100))
    rec = {
        "run_id": run_id,
        "workload": "search",
        "scenario": "search",
        "status": "ok",
        "store": {"engine": "redis", "url": url, "index": {"m": 16}, "search": {}},
        "params": {"n": 1000, "clients": [1, 2]},
        "versions": {"engine": "Redis 8"},
        "server": {"managed": True} if managed else None,
        "tasks": tasks,
        "metrics": {"upload_s": 0.5, "recall@10": 0.16},  # version 1: the first ef's
    }
    if version is not None:
        rec["record_version"] = version
    return rec


def test_a_version_1_sweep_gets_each_settings_own_recall():
    (rec,) = records.parse_all([run("a-1", {16: (100, 150), 64: (50, 80)})])
    assert rec.record_version == records.RECORD_VERSION
    assert [s.search for s in rec.settings] == [{"ef": 16}, {"ef": 64}]
    assert [s.scores["recall@10"] for s in rec.settings] == [0.16, 0.64]
    assert rec.metrics == {"upload_s": 0.5} and rec.scores == {}  # the copied one is gone
    assert rec.tasks[2].scores == {"recall@10": 0.16}  # no longer beside the task's fields
    per = rec.per_setting()
    assert [(r.store.search, r.scores["recall@10"], r.headline) for r in per] == [
        ({"ef": 16}, 0.16, "search ef=16 c=2"),
        ({"ef": 64}, 0.64, "search ef=64 c=2"),
    ]
    assert [len(r.tasks) for r in per] == [4, 4]  # upload, index and the setting's two
    assert {r.run_id for r in per} == {"a-1"}


def test_a_newer_record_is_one_line_and_a_wrong_type_names_the_field(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps({"run_id": "x", "record_version": 99}) + "\n")
    with pytest.raises(UserError, match=rf"{f}:1: record_version 99 is newer .* upgrade"):
        list(records.read(f))
    f.write_text(json.dumps({"run_id": "x", "tasks": [{"name": "t", "ops": "many"}]}) + "\n")
    with pytest.raises(UserError, match=rf"{f}:1: not a storebench result record \(tasks.0.ops"):
        list(records.read(f))


def test_a_field_no_record_declares_is_refused_and_older_files_drop_theirs(tmp_path):
    old = run("a-1", {16: (100, 150)}, version=2)
    old["dataset"], old["tasks"][2]["loadavg_1m"] = {"name": "s10k"}, 1.5  # no longer written
    rec = records.parse(old)
    assert "dataset" not in rec.to_dict() and "loadavg_1m" not in rec.tasks[2].to_dict()
    path = tmp_path / "r.jsonl"
    results.append(path, rec)
    assert list(records.read(path)) == [rec]
    now = rec.to_dict()
    now["tasks"][2]["loadavg_1m"] = 1.5
    with pytest.raises(UserError, match=r"tasks.2.loadavg_1m: Extra inputs are not permitted"):
        records.parse(now)


def test_identity_leaves_out_what_storebench_chose_and_keeps_what_the_user_gave():
    a = records.parse(run("a-1", {16: (1, 1)}, url="redis://:***@127.0.0.1:40001/0"))
    b = records.parse(run("b-1", {16: (1, 1)}, url="redis://:***@127.0.0.1:40999/0"))
    assert records.config_id(a) == records.config_id(b)  # managed: a new port each run
    assert data.store_label(a) == "redis"
    given = [
        records.parse(run(x, {16: (1, 1)}, url=f"redis://db:{p}/0", managed=False))
        for x, p in (("c-1", 1), ("d-1", 2))
    ]
    assert records.config_id(given[0]) != records.config_id(given[1])  # two servers
    assert data.store_label(given[0]) == "redis redis://db:1/0"
    # version 2 says so itself, whatever the url looks like
    v2 = run("e-1", {16: (1, 1)}, url="/data/storebench-mine/x.db", managed=False, version=2)
    v2["store"]["url_given"] = True
    assert records.config_identity(records.parse(v2))["store.url"] == "/data/storebench-mine/x.db"
    # the engine's version is part of it
    newer = run("f-1", {16: (1, 1)})
    newer["versions"]["engine"] = "Redis 9"
    assert records.config_id(records.parse(newer)) != records.config_id(a)


def test_best_and_median_are_whole_runs_by_the_headline_task():
    recs = [
        run("r-1", {16: (300, 100)}),  # fastest at 1 client, slowest at the headline (2)
        run("r-2", {16: (100, 300)}),
        run("r-3", {16: (200, 200)}),
        run("r-4", {16: (50, 250)}),
    ]
    (c,) = data.configurations(records.parse_all(recs))
    best, median = c.pick("best"), c.pick("median")
    assert best.run.run_id == "r-2" and best.criterion == "ops/s of search ef=16 c=2"
    assert median.run.run_id == "r-3"  # 100, 200, 250, 300: the lower middle one
    assert best.describe() == "best of 4 by ops/s of search ef=16 c=2"
    # every number of the row is that run's: its 1-client QPS, not the highest
    assert best.run.task("search ef=16 c=1").ops_per_s == 100
    with pytest.raises(UserError, match="unknown aggregation"):
        c.pick("mean")


def test_a_phase_that_did_no_work_has_no_rate():
    from storebench.measure.metrics import TaskStats

    s = TaskStats("build_index", ops=1, items=1000, elapsed_ns=2_000)
    t = records.TaskRecord.of(s, index_build="during_insert", items=0, ops_per_s=None)
    assert t.items_per_s is None and t.ops_per_s is None and t.index_build == "during_insert"
    built = records.TaskRecord.of(s)
    assert built.items_per_s == pytest.approx(1000 / 2e-6)
    assert records.TaskRecord.of(TaskStats("t")).ops_per_s is None  # nothing done
