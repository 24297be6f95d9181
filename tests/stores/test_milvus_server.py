"""The real Milvus standalone server (the ``milvus`` wheel) with pymilvus:
collection, insert, flush, HNSW index, load, search; two releases side by
side on one machine; nothing reachable from outside; no orphan."""

from __future__ import annotations

import numpy as np
import pytest

from storebench.servers import milvus_standalone as M
from tests.stores import servers as S
from tests.stores.server_checks import listening_ips, no_orphan_after_sigkill, stop_leaves_nothing

pytestmark = pytest.mark.skipif(S.skipped("milvus"), reason="STOREBENCH_SKIP_ENGINES")

OTHER_RELEASE = "2.2.16"  # the 2.2 line the Milvus evaluation used


def hnsw_round_trip(url: str) -> None:
    from pymilvus import DataType, MilvusClient

    rng = np.random.default_rng(7)
    vectors = rng.random((2000, 32), dtype=np.float32)
    client = MilvusClient(uri=url)
    try:
        schema = client.create_schema(auto_id=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("tag", DataType.INT64)
        schema.add_field("v", DataType.FLOAT_VECTOR, dim=32)
        client.create_collection("sb_server", schema=schema)
        rows = [{"id": i, "tag": i % 10, "v": vectors[i].tolist()} for i in range(2000)]
        for start in range(0, 2000, 500):
            client.insert("sb_server", rows[start : start + 500])
        client.flush("sb_server")
        params = client.prepare_index_params()
        params.add_index(
            "v", index_type="HNSW", metric_type="L2", params={"M": 16, "efConstruction": 64}
        )
        client.create_index("sb_server", params)
        (index,) = client.list_indexes("sb_server")
        assert client.describe_index("sb_server", index)["index_type"] == "HNSW"
        client.load_collection("sb_server")
        hits = client.search(
            "sb_server",
            [vectors[5].tolist(), vectors[1234].tolist()],
            limit=3,
            search_params={"params": {"ef": 64}},
            filter="tag >= 0",
        )
        assert [h[0]["id"] for h in hits] == [5, 1234]
        assert hits[0][0]["distance"] == pytest.approx(0.0, abs=1e-4)
        assert client.query("sb_server", filter="tag == 3", output_fields=["id"], limit=500)
        client.drop_collection("sb_server")
    finally:
        client.close()


def test_the_default_release_is_installed():
    # set-up installs it (python -m storebench.servers.milvus_standalone --install)
    assert M.installed(M.DEFAULT_VERSION)
    assert M.binary(M.DEFAULT_VERSION).is_file()


def test_two_releases_serve_pymilvus_side_by_side_on_loopback_only_and_stop_clean():
    # the wheel's own launcher cannot start a second server on a machine
    M.install(OTHER_RELEASE)
    a = M.MilvusServer().start()
    try:
        assert a.engine_version == f"Milvus v{M.DEFAULT_VERSION}-lite"  # the standalone binary
        b = M.MilvusServer(version=OTHER_RELEASE).start()
        try:
            assert b.engine_version == f"Milvus v{OTHER_RELEASE}-lite"
            for server in (a, b):
                assert server.started_s is not None and server.started_s > 0
                assert listening_ips(server) == {"127.0.0.1"}
                assert server.processes()[0].name() == "milvus"
                hnsw_round_trip(server.url)
        finally:
            stop_leaves_nothing(b)
    finally:
        stop_leaves_nothing(a)


def test_releases_install_into_their_own_directories():
    assert M.home("2.3.5") != M.home("2.2.16")
    assert M.home("2.3.5").parent == M.home("2.2.16").parent
    with pytest.raises(Exception, match="expected a release like"):
        M.home("../../etc")


def test_no_orphan_when_storebench_is_killed():
    no_orphan_after_sigkill("storebench.servers.milvus_standalone", "MilvusServer")
