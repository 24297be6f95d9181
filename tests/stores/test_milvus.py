"""Milvus beyond the conformance suite, on both engines the one client code
serves (``milvus``: the real Milvus standalone; ``milvus-lite``: Milvus Lite
3): each managed server's lifecycle, Milvus Lite in this process, the HNSW
index (flushed first), a server killed mid-run, other people's collections,
the filter compiler, the release option."""

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient

from storebench.data import filters as F
from storebench.servers import milvus_standalone as M
from storebench.stores.base import StoreSpec, store_class
from storebench.stores.config import SpecError
from storebench.stores.opening import open_store
from storebench.stores.params import HnswIndex
from storebench.stores.vector.milvus import GRPC_OPTIONS, to_expr
from tests.conftest import make_docs
from tests.stores import servers as S

ENGINES = [
    pytest.param(e, marks=pytest.mark.skipif(S.skipped(e), reason="STOREBENCH_SKIP_ENGINES"))
    for e in ("milvus", "milvus-lite")
]
OTHER_RELEASE = "2.2.16"  # the 2.2 line the Milvus evaluation used
lite_only = pytest.mark.skipif(S.skipped("milvus-lite"), reason="STOREBENCH_SKIP_ENGINES")


@pytest.mark.parametrize("engine", ENGINES)
def test_managed_server_starts_serves_and_stops(engine):
    S.check_managed(StoreSpec(engine))


@pytest.mark.parametrize(
    ("engine", "says"),
    [("milvus", f"Milvus v{M.DEFAULT_VERSION}"), ("milvus-lite", "Milvus Lite 3")],
)
def test_the_record_says_which_engine_ran(engine, says):
    if S.skipped(engine):
        pytest.skip("STOREBENCH_SKIP_ENGINES")
    store = StoreSpec(engine, S.shared_url(engine)).open()
    try:
        v = store.versions()["engine"]
        assert v.startswith(says) and not v.endswith("-lite")
    finally:
        store.close()


def test_the_release_is_an_option_checked_before_anything_starts():
    cls = store_class("milvus")
    assert cls.check_spec(None, {}).version == M.DEFAULT_VERSION
    make = cls.managed_server(cls.check_spec(None, {"version": "2.2.16"}))
    assert make.keywords == {"version": "2.2.16"}  # type: ignore[attr-defined]
    with pytest.raises(SpecError, match="option version of milvus: .*2.1.0 has no server binary"):
        cls.check_spec(None, {"version": "2.1.0"})
    with pytest.raises(SpecError, match="configures the managed server"):
        cls.check_spec("http://127.0.0.1:19530", {"version": "2.2.16"})
    with pytest.raises(SpecError, match="unknown option parameter 'version' for store milvus-lite"):
        store_class("milvus-lite").check_spec(None, {"version": "2.3.5"})


def test_the_real_milvus_takes_no_path():
    with pytest.raises(SpecError, match="expected http"):
        store_class("milvus").check_spec("/tmp/bench.db", {})


@lite_only
def test_milvus_lite_in_process_from_a_path(tmp_path):
    docs = make_docs(200)
    opened = open_store(StoreSpec("milvus-lite", str(tmp_path / "bench.db")))
    store = opened.store
    try:
        assert opened.server is None
        assert store.spec.url.startswith("http://127.0.0.1:")  # client processes reach it
        assert store.spec.options["lite_path"] == str(tmp_path / "bench.db")
        coll = store.create_collection("sb_lite", docs.schema())
        coll.insert(docs)
        assert coll.count() == 200
        assert coll.search(docs.vectors[:3], 1).ids[:, 0].tolist() == [0, 1, 2]
        coll.drop()
    finally:
        opened.close()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("metric", ["l2", "ip", "cosine"])
def test_hnsw_index_reaches_the_recall_with_exact_distances(engine, metric):
    spec = StoreSpec(engine, S.shared_url(engine))
    assert S.check_ann(spec, {"m": 16, "ef_construct": 200}, 400, metric) >= 0.95


@pytest.mark.parametrize("engine", ENGINES)
def test_build_index_flushes_and_builds_hnsw_over_every_row(engine):
    docs = make_docs(2000, dim=16)
    store = StoreSpec(engine, S.shared_url(engine)).open()
    try:
        coll = store.create_collection("sb_hnsw", docs.schema())
        coll.insert(docs)
        coll.build_index(HnswIndex(m=8, ef_construct=64))
        d = store.client.describe_index("sb_hnsw", "v")
        assert d["index_type"] == "HNSW"
        assert int(d["indexed_rows"]) == 2000 and int(d["pending_index_rows"]) == 0
        coll.drop()
    finally:
        store.close()


def test_filters_compile_to_milvus_expressions():
    attr = {"tags.i": "f0", "score": "f1", "label": "f2"}
    e = to_expr(
        F.And(
            (
                F.Range("tags.i", 1, 5),
                F.Or((F.Cmp("score", "lt", 0.5), F.Not(F.In("label", ('a"b', "c"))))),
            )
        ),
        attr,
    )
    assert e == '((f0 >= 1 and f0 <= 5) and (f1 < 0.5 or not (f2 in ["a\\"b", "c"])))'


@lite_only
def test_a_killed_server_fails_the_run_quickly_with_its_log(tmp_path, monkeypatch):
    rec, seconds = S.kill_during_run("milvus-lite", tmp_path, monkeypatch)
    assert rec["status"] == "failed"
    assert seconds < 15
    names = [t["name"] for t in rec["tasks"]]
    assert names[:2] == ["create", "build_index"]
    assert "milvus-lite server died (exit code -9)" in rec["error"]
    assert "MilvusLite gRPC server listening" in rec["error"]  # the log's tail


@pytest.mark.parametrize("engine", ENGINES)
def test_foreign_collections_survive_a_full_run(engine, tmp_path):
    url = S.shared_url(engine)
    c = MilvusClient(uri=url, grpc_options=GRPC_OPTIONS)
    names = ["someone_elses", "storebench_00000000_crud"]  # the second: a careless pattern's prey
    for name in names:
        s = c.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("id", DataType.INT64, is_primary=True)
        s.add_field("v", DataType.FLOAT_VECTOR, dim=4)
        # Strong: the real Milvus's default (Bounded) would hide the rows just inserted
        c.create_collection(name, schema=s, consistency_level="Strong")
        ip = c.prepare_index_params()
        ip.add_index(field_name="v", index_type="FLAT", metric_type="L2")
        c.create_index(name, ip)
        c.load_collection(name)
        c.insert(name, [{"id": i, "v": np.full(4, i, np.float32)} for i in range(30)])

    def snapshot():
        rows = {
            n: sorted(
                r["id"] for r in c.query(n, filter="id >= 0", output_fields=["id"], limit=100)
            )
            for n in names
        }
        return sorted(c.list_collections()), rows

    before = snapshot()
    try:
        # few ops: a get by id waits ~0.2 s for the real Milvus's time tick
        rec = S.crud_run(f"{engine}={url}", tmp_path, ops=20)
        assert rec["status"] == "ok", rec["error"]
        assert snapshot() == before
    finally:
        for n in names:
            c.drop_collection(n)
        c.close()


@pytest.mark.skipif(S.skipped("milvus"), reason="STOREBENCH_SKIP_ENGINES")
def test_tune_across_two_releases_records_each(tmp_path):
    import storebench

    sets = {"n": 2000, "dim": 16, "queries": 50, "max_clients": 1, "duration_s": 0.5}
    sets |= {"warmup_s": 0.1, "grid.store.version": [OTHER_RELEASE, M.DEFAULT_VERSION]}
    recs = storebench.run("tune", stores=["milvus"], set=sets, results_dir=tmp_path)
    assert [r["status"] for r in recs] == ["ok", "ok"], [r["error"] for r in recs]
    releases = [OTHER_RELEASE, M.DEFAULT_VERSION]
    assert [r["store"]["options"] for r in recs] == [{"version": v} for v in releases]
    assert [r["grid_point"] for r in recs] == [{"store.version": v} for v in releases]
    assert [r["versions"]["engine"] for r in recs] == [f"Milvus v{v}" for v in releases]
