"""The managed FerretDB (MongoDB wire protocol on SQLite) with pymongo:
insert, index, find; listening on 127.0.0.1 only; no orphan."""

from __future__ import annotations

import pytest

from storebench.servers import ferretdb as F
from tests.stores import servers as S
from tests.stores.server_checks import listening_ips, no_orphan_after_sigkill, stop_leaves_nothing

pytestmark = pytest.mark.skipif(S.skipped("ferretdb"), reason="STOREBENCH_SKIP_ENGINES")


def test_the_server_binary_is_built():
    # set-up builds it (python -m storebench.servers.ferretdb --install)
    assert F.BUILT.installed() and F.BUILT.binary.is_file()


def test_ferretdb_serves_pymongo_on_loopback_only_and_stops_clean():
    import pymongo

    server = F.FerretDBServer().start()
    try:
        assert server.engine_version.startswith(f"FerretDB {F.VERSION}")
        assert listening_ips(server) == {"127.0.0.1"}
        client = pymongo.MongoClient(server.url)
        try:
            assert client.server_info()["version"].startswith("7.")
            coll = client["sb"]["docs"]
            coll.insert_many([{"_id": i, "tag": i % 10, "name": f"d{i}"} for i in range(1000)])
            coll.insert_one({"_id": 1000, "tag": 99, "name": "last"})
            coll.create_index([("tag", pymongo.ASCENDING)])
            assert "tag_1" in coll.index_information()
            assert coll.count_documents({}) == 1001
            assert coll.count_documents({"tag": {"$lt": 2}}) == 200
            assert coll.find_one({"_id": 1000})["name"] == "last"
            assert [d["_id"] for d in coll.find({"tag": 3}).sort("_id").limit(3)] == [3, 13, 23]
            coll.update_one({"_id": 3}, {"$set": {"name": "three"}})
            assert coll.find_one({"_id": 3})["name"] == "three"
            assert coll.delete_many({"tag": 99}).deleted_count == 1
        finally:
            client.close()
        assert (server.dir / "data").is_dir() and any((server.dir / "data").iterdir())
    finally:
        stop_leaves_nothing(server)


def test_no_orphan_when_storebench_is_killed():
    no_orphan_after_sigkill("storebench.servers.ferretdb", "FerretDBServer")
