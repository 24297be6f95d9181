"""The social scenario end to end on the embedded stores, both modes."""

import pytest

import storebench

SMALL = {
    "posters": 3,
    "posts": 8,
    "commenters": 3,
    "comments": 8,
    "post_readers": 6,
    "post_reads": 8,
    "comment_readers": 6,
    "comment_reads": 8,
    "post_delay_ms": 10,
    "comment_delay_ms": 10,
    "post_read_delay_ms": 10,
    "comment_read_delay_ms": 10,
}


@pytest.mark.parametrize("mode", ["default", "compat"])
def test_social_runs_writers_and_readers_together(tmp_path, mode):
    recs = storebench.run("social", set=SMALL | {"mode": mode}, results_dir=tmp_path)
    assert [r["store"]["engine"] for r in recs] == ["memory", "sqlite"]
    for rec in recs:
        assert rec["status"] == "ok", rec["error"]
        tasks = {t["name"]: t for t in rec["tasks"]}
        assert tasks["creating_users"]["ops"] == 6
        assert tasks["write_posts"]["ops"] == 24 and tasks["write_posts"]["clients"] == 3
        assert rec["metrics"]["posts"] == 24
        reads = tasks["read_posts"]
        assert reads["per_iter"] == 8 or reads["per_iter"] == 10
        if mode == "compat":
            assert "agdb's delays" in rec["metrics"]["method"]
            # compat readers wait for data inside the op: nothing is skipped
            # unless a reader gave up waiting
            assert reads["ops"] + sum(reads["skipped"].values()) == 48
        else:
            assert "corrected" in rec["metrics"]["method"]
            assert reads["ops"] + sum(reads["skipped"].values()) == 48
            assert all(k.startswith("no ") for k in reads["skipped"])
        assert rec["metrics"]["db_size_bytes"] > 0
        assert rec["metrics"]["db_size_after_compact_bytes"] <= rec["metrics"]["db_size_bytes"]


def test_compat_delays_follow_agdb_and_default_delays_are_fixed():
    from storebench.driver import Task
    from storebench.workloads.social import Actor

    # the schedule itself: agdb's delay_ms % (user + 1)
    delays = tuple((100 % (i + 1)) / 1000 for i in range(100))
    assert delays[:4] == (0.0, 0.0, 0.001, 0.0)
    assert 0.015 < sum(delays) / len(delays) < 0.019  # ~17 ms on average
    t = Task(
        "r", Actor("read_posts", None, None, True), clients=100, ops=100, think_per_client=delays
    )
    assert t.think(2) == 0.001 and t.think(6) == 0.002 and t.think(99) == 0.0


def test_collections_are_dropped_newest_first_and_a_failed_drop_keeps_the_rest(
    tmp_path, monkeypatch
):
    # comments reference posts reference users: the referencing one goes
    # first (a graph store's edges point at the nodes they reference)
    from storebench.stores.base import Collection

    dropped, real_drop = [], Collection.drop

    def drop(self):
        dropped.append(self.name.rsplit("_", 1)[-1])
        if self.name.endswith("_comments"):
            raise RuntimeError("engine said no")
        real_drop(self)

    monkeypatch.setattr(Collection, "drop", drop)
    (rec,) = storebench.run("social", stores=["memory"], set=SMALL, results_dir=tmp_path)
    assert rec["status"] == "ok", rec["error"]
    assert dropped == ["comments", "posts", "users"]
    (err,) = rec["cleanup_errors"]
    assert err.endswith("_comments: RuntimeError: engine said no")


def test_social_with_the_study_client_counts_on_a_server(tmp_path):
    # 221 clients at once, each with its own connection (redis-py's pool
    # refuses a 101st connection unless the store sizes it)
    from tests.stores.servers import shared_url

    counts = {"posters": 10, "commenters": 10, "post_readers": 100, "comment_readers": 100}
    ops = {"posts": 2, "comments": 2, "post_reads": 2, "comment_reads": 2}
    delays = {k: 5 for k in SMALL if k.endswith("_delay_ms")}
    (rec,) = storebench.run(
        "social",
        [f"redis={shared_url('redis')}"],
        set=counts | ops | delays,
        results_dir=tmp_path,
    )
    assert rec["status"] == "ok", rec["error"]
    tasks = {t["name"]: t for t in rec["tasks"]}
    assert tasks["read_comments"]["clients"] == 100
    assert rec["metrics"]["posts"] == 20
