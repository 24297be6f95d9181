"""Redis beyond the conformance suite: the managed server's lifecycle,
pipelines that really batch, indexing waited for, a server killed mid-run,
other people's keys and indexes, the filter compiler."""

import psutil
import pytest
import redis

from storebench.data import filters as F
from storebench.stores.base import StoreSpec
from storebench.stores.opening import open_store
from storebench.stores.params import HnswIndex, HnswSearch
from storebench.stores.vector.redis import to_query
from tests.conftest import make_docs
from tests.stores import servers as S

pytestmark = pytest.mark.skipif(S.skipped("redis"), reason="STOREBENCH_SKIP_ENGINES")


def client() -> redis.Redis:
    return redis.Redis.from_url(S.shared_url("redis"), protocol=2)


def test_managed_server_starts_serves_and_stops():
    S.check_managed(StoreSpec("redis"))


def test_managed_redis_listens_on_localhost_only_and_keeps_its_password():
    opened = open_store(StoreSpec("redis"))
    store, server = opened.store, opened.server
    try:
        proc = psutil.Process(server.proc.pid)
        addrs = {c.laddr.ip for c in proc.net_connections("inet") if c.status == "LISTEN"}
        assert addrs == {"127.0.0.1"}
        assert server.password not in " ".join(proc.cmdline())
        assert server.password not in str(store.spec.describe())
        assert "RediSearch" in store.versions()["engine"]
    finally:
        opened.close()


def test_a_store_that_fails_to_open_stops_the_server_started_for_it(monkeypatch):
    from storebench.servers.base import Server
    from storebench.stores.vector.redis import RedisStore

    started: list[Server] = []
    real_start = Server.start

    def spy(self: Server) -> Server:
        started.append(self)
        return real_start(self)

    def interrupted(self: RedisStore) -> None:  # a Ctrl-C while the store connects
        assert started and started[0].alive()
        raise KeyboardInterrupt

    monkeypatch.setattr(Server, "start", spy)
    monkeypatch.setattr(RedisStore, "_connect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        open_store(StoreSpec("redis"))
    (server,) = started
    assert S.gone(server.proc.pid)  # type: ignore[union-attr]
    assert not server.dir.exists()


def test_a_managed_run_records_its_server_and_a_run_by_url_none(tmp_path):
    rec = S.crud_run("redis", tmp_path)
    assert rec["status"] == "ok", rec["error"]
    assert rec["server"]["managed"] is True and rec["server"]["startup_s"] > 0
    assert rec["store"]["url_given"] is False
    assert rec["store"]["url"].startswith("redis://:***@127.0.0.1:")  # the server's, redacted
    for task in rec["tasks"]:  # sampled beside every task
        assert task["server_peak_rss_bytes"] > 0 and task["server_cpu_s"] >= 0, task["name"]
        assert task["server_data_bytes"] > 0
    given = S.crud_run(f"redis={S.shared_url('redis')}", tmp_path)
    assert given["status"] == "ok", given["error"]
    assert given["server"] is None and given["store"]["url_given"] is True
    assert not any(k.startswith("server_") for t in given["tasks"] for k in t)


def _bytes(command) -> bytes:
    return command if isinstance(command, bytes) else b"".join(map(bytes, command))


def _stats(r: redis.Redis) -> dict:
    return r.info("commandstats")


@pytest.mark.parametrize(
    "how",
    [
        "insert",  # one batch: its HSETs in one pipeline
        "insert_pipelined",  # ten batches, one pipeline: not one write per batch
    ],
)
def test_inserts_go_out_in_one_write_and_all_arrive(monkeypatch, how):
    docs = make_docs(300)
    store = StoreSpec("redis", S.shared_url("redis")).open()
    r = client()
    sends = []
    real = redis.connection.Connection.send_packed_command

    def counting(self, command, check_health=True):
        if b"HSET" in _bytes(command):  # not a new connection's handshake
            sends.append(1)
        return real(self, command, check_health)

    try:
        coll = store.create_collection(f"sb_one_write_{how}", docs.schema())
        before = _stats(r).get("cmdstat_hset", {}).get("calls", 0)
        size_before = r.dbsize()
        monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counting)
        if how == "insert":
            coll.insert(docs)
        else:
            coll.insert_pipelined([docs.slice(i, i + 30) for i in range(0, 300, 30)])
        monkeypatch.undo()
        # the engine's own counters: every HSET reached the server...
        assert _stats(r)["cmdstat_hset"]["calls"] - before == 300
        assert r.dbsize() - size_before == 300
        # ...in one write, not one per command
        assert len(sends) == 1
        assert coll.count() == 300
        coll.drop()
    finally:
        store.close()
        r.close()


def test_an_error_reply_fails_the_insert_and_the_connection_stays_in_step():
    """One HSET of a pipeline fails (its key holds a string): the insert
    raises that error after reading every reply, the others land, and the
    write connection serves the next insert with the right replies."""
    docs = make_docs(10)
    store = StoreSpec("redis", S.shared_url("redis")).open()
    r = client()
    try:
        coll = store.create_collection("sb_error", docs.schema())
        r.set("sb_error:3", "not a hash")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            coll.insert(docs.slice(0, 5))
        assert [r.type(f"sb_error:{i}") for i in range(5)] == [b"hash"] * 3 + [b"string", b"hash"]
        coll.insert_pipelined([docs.slice(5, 7), docs.slice(7, 10)])
        coll.insert(docs.slice(4, 5))
        assert len(store._writers) == 1  # one writer thread: one connection, reused
        assert coll.count() == 9
        got = coll.get(docs.ids[5:]).sorted_by_id()
        assert list(got.fields["label"]) == list(docs.fields["label"][5:])
        assert got.vectors.tobytes() == docs.vectors[5:].tobytes()
        coll.drop()
    finally:
        store.close()
        r.close()


def test_concurrent_writers_get_a_connection_each_closed_with_the_store():
    import threading

    docs = make_docs(400)
    store = StoreSpec("redis", S.shared_url("redis")).open()
    try:
        coll = store.create_collection("sb_writers", docs.schema())
        start = threading.Barrier(4)

        def write(k: int) -> None:
            start.wait()
            for b in range(k, 40, 4):
                coll.insert(docs.slice(b * 10, b * 10 + 10))

        threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert coll.count() == 400
        assert 1 <= len(store._writers) <= 4
        writers = list(store._writers)
        assert all(w._sock is not None for w in writers)
        coll.drop()
    finally:
        store.close()
    assert all(w._sock is None for w in writers)


def test_build_index_waits_until_the_engine_has_indexed_everything():
    docs = make_docs(3000, dim=32, seed=3)
    store = StoreSpec("redis", S.shared_url("redis")).open()
    try:
        coll = store.create_collection("sb_wait", docs.schema())
        for b in docs.batches(1000):
            coll.insert(b)
        coll.build_index(HnswIndex(m=16, ef_construct=200))
        info = coll._info()
        assert int(info["indexing"]) == 0 and float(info["percent_indexed"]) == 1.0
        assert int(info["num_docs"]) == 3000
        assert any(b"HNSW" in a for a in info["attributes"])
        coll.drop()
    finally:
        store.close()


@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_hnsw_index_reaches_the_recall_with_exact_distances(metric):
    spec = StoreSpec("redis", S.shared_url("redis"))
    assert S.check_ann(spec, {"m": 16, "ef_construct": 200}, 400, metric) >= 0.95


def test_filters_compile_to_the_query_language():
    attr = {"tags.i": "f0", "score": "f1", "label": "f2"}
    kinds = {"tags.i": "int", "score": "float", "label": "str"}
    q = to_query(
        F.And(
            (
                F.Range("tags.i", 1, 5),
                F.Or((F.Cmp("score", "lt", 0.5), F.Not(F.In("label", ("a b", "c-d"))))),
            )
        ),
        attr,
        kinds,
    )
    assert q == r"(@f0:[1 5] (@f1:[-inf (0.5] | -(@f2:{a\ b | c\-d})))"
    assert to_query(F.In("tags.i", ()), attr, kinds) == "@_id:[+inf -inf]"


def test_a_killed_server_fails_the_run_quickly_with_its_log(tmp_path, monkeypatch):
    rec, seconds = S.kill_during_run("redis", tmp_path, monkeypatch)
    assert rec["status"] == "failed"
    assert seconds < 15
    names = [t["name"] for t in rec["tasks"]]
    assert names[:2] == ["create", "build_index"]
    assert "redis server died (exit code -9)" in rec["error"]
    assert "Ready to accept connections" in rec["error"]  # the log's tail


def test_foreign_keys_and_indexes_survive_a_full_run(tmp_path):
    r = client()
    planted = {
        "someone:1": {"a": "1", "v": "x"},
        "someone:2": {"a": "2"},
        # names a careless clean-up by pattern would take
        "storebench_00000000_crud:7": {"a": "7"},
        "storebench_00000000_crud": {"a": "bare"},
    }
    for k, v in planted.items():
        r.hset(k, mapping=v)
    r.set("plain-string", "keep me")
    r.execute_command(
        "FT.CREATE", "someone_idx", "ON", "HASH", "PREFIX", 1, "someone:", "SCHEMA", "a", "NUMERIC"
    )
    r.execute_command(
        "FT.CREATE",
        "storebench_00000000_crud",
        "ON",
        "HASH",
        "PREFIX",
        1,
        "storebench_00000000_crud:",
        "SCHEMA",
        "a",
        "NUMERIC",
    )

    def snapshot():
        keys = sorted(r.scan_iter(count=1000))
        values = {k: (r.hgetall(k) if r.type(k) == b"hash" else r.get(k)) for k in keys}
        return values, sorted(r.execute_command("FT._LIST")), r.dbsize()

    before = snapshot()
    try:
        rec = S.crud_run(f"redis={S.shared_url('redis')}", tmp_path)
        assert rec["status"] == "ok", rec["error"]
        assert snapshot() == before
    finally:
        r.execute_command("FT.DROPINDEX", "someone_idx")
        r.execute_command("FT.DROPINDEX", "storebench_00000000_crud")
        r.delete(*planted, "plain-string")
        r.close()
    password = S.shared_server("redis").password
    assert all(password not in f.read_text() for f in tmp_path.glob("*.jsonl"))


def hnsw_m(info: dict) -> int | None:
    """M of the index's HNSW vector attribute (FT.INFO), None if not HNSW."""
    (vector,) = [a for a in info["attributes"] if b"VECTOR" in a]
    return vector[vector.index(b"M") + 1] if b"HNSW" in vector else None


def test_a_collection_made_with_index_parameters_loads_straight_into_hnsw():
    """Created with the run's index parameters, the collection's index is
    HNSW from the start: the HSETs insert into it, build_index with those
    parameters builds nothing and says so (False: built during the upload),
    and search reaches at least the recall of the FLAT upload rebuilt to HNSW. Other
    parameters rebuild (True)."""
    from storebench.data.truth import GroundTruth, recall_at_k

    docs = make_docs(3000, dim=32, seed=3)
    queries = make_docs(50, dim=32, seed=4).vectors
    truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 20, "l2")
    params = HnswIndex(m=16, ef_construct=64)
    store = StoreSpec("redis", S.shared_url("redis")).open()
    try:
        recalls = {}
        for name, given in (("sb_hnsw_first", params), ("sb_flat_first", None)):
            coll = store.create_collection(name, docs.schema(), given)
            algorithm = coll._info()["attributes"][-1]
            assert (b"HNSW" in algorithm) == (given is not None), algorithm
            for b in docs.batches(500):
                coll.insert(b)
            assert coll.build_index(params) is (given is None)
            info = coll._info()
            assert int(info["num_docs"]) == 3000 and float(info["percent_indexed"]) == 1.0
            assert hnsw_m(info) == 16, info
            coll.set_search_params(HnswSearch(ef=100))
            res = coll.search(queries, 10)
            recalls[name] = float(recall_at_k(res.ids, truth, 10).mean())
            if given is not None:  # other parameters: a build after all
                assert coll.build_index(HnswIndex(m=8, ef_construct=64)) is True
                assert hnsw_m(coll._info()) == 8
                assert coll.count() == 3000
            coll.drop()
        assert recalls["sb_hnsw_first"] >= 0.95
        # the same graph parameters, built in another order: the rebuild's
        # recall within its own spread (measured: 0.962 straight in, the same
        # each time; 0.90-0.99 rebuilt, which varies from build to build)
        assert recalls["sb_hnsw_first"] >= recalls["sb_flat_first"] - 0.05, recalls
    finally:
        store.close()


def test_a_search_run_records_the_index_as_built_during_the_upload(tmp_path):
    """The record tells the truth about where the index time went: the
    upload task holds it, the index task built nothing (no time, no rate)."""
    import storebench

    recs = storebench.run(
        "search",
        stores=[f"redis={S.shared_url('redis')}"],
        set={
            "n": 2000,
            "dim": 16,
            "queries": 50,
            "clients": [1],
            "labels": [],
            "grid": {"index.m": [16], "index.ef_construct": [64], "search.ef": [64]},
        },
        results_dir=tmp_path,
    )
    rec = recs[0]
    assert rec["status"] == "ok", rec["error"]
    tasks = {t["name"]: t for t in rec["tasks"]}
    assert tasks["upload"]["phase"] == "upload" and tasks["upload"]["items"] == 2000
    index = tasks["build_index"]
    assert index["index_build"] == "during_insert"
    assert index["items"] == 0 and index["ops_per_s"] is None
    assert rec["metrics"]["index"] == "during upload" and "index_s" not in rec["metrics"]
    recalls = [
        t["scores"]["recall@10"]
        for t in rec["tasks"]
        if t.get("scores", {}).get("recall@10") is not None
    ]
    assert recalls and min(recalls) >= 0.9, recalls
