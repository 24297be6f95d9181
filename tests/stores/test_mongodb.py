"""The mongodb store beyond the conformance suite: FerretDB as its managed
server (started and stopped with the store), filters as one query document,
the URL's database."""

from __future__ import annotations

import pytest

from storebench.data import filters as F
from storebench.errors import UserError
from storebench.stores.base import StoreSpec
from storebench.stores.document.mongodb import MongoStore
from storebench.stores.document.mongoquery import to_mongodb
from storebench.stores.opening import open_store
from tests.conftest import make_docs
from tests.stores import servers as S

pytestmark = pytest.mark.skipif(S.skipped("mongodb"), reason="STOREBENCH_SKIP_ENGINES")


def test_managed_ferretdb_starts_serves_and_stops():
    opened = open_store(StoreSpec("mongodb"))
    store, server = opened.store, opened.server
    try:
        assert server is not None and server.alive()
        pid, datadir = server.proc.pid, server.dir  # type: ignore[union-attr]
        assert store.spec.url == server.url
        assert store.versions()["engine"].startswith("FerretDB v1.24.2 (MongoDB 7.")
        docs = make_docs(300)
        coll = store.create_collection("sb_managed", docs.schema())
        coll.insert(docs)
        assert coll.count() == 300
        assert coll.get(docs.ids[:3]).ids.tolist() == docs.ids[:3].tolist()
        pids = [p.pid for p in server.processes()]
    finally:
        opened.close()
    assert opened.server is None
    assert all(S.gone(p) for p in [pid, *pids])
    assert not datadir.exists()


def test_filters_are_one_query_document():
    f = F.Or((F.Cmp("a", "lt", 1), F.Not(F.Range("b.c", 2, 3))))
    assert to_mongodb(f) == {
        "$or": [{"a": {"$lt": 1}}, {"b\uff0ec": {"$lt": 2}}, {"b\uff0ec": {"$gt": 3}}]
    }
    assert to_mongodb(None) == {}
    assert to_mongodb(F.In("a", ())) == {"_id": {"$in": []}}


def test_the_url_names_the_database():
    assert MongoStore.check_url("mongodb://h:27017/bench") == "bench"
    assert MongoStore.check_url("mongodb://h") == "storebench"
    with pytest.raises(UserError):
        MongoStore.check_url("mongodb://h/a.b")
