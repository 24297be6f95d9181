"""Elasticsearch and OpenSearch in the session's shared servers, and the
checks their engine tests share.

``tests/stores/servers.py`` starts one server per engine per test session on
first use and stops them at its end; importing this module adds the two Java
engines to its factories. Each is one single node from the Maven Central
distribution, fetched into the cache on first use.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from storebench.data import filters as F
from storebench.servers.base import Server
from storebench.stores.base import Capability, StoreSpec
from storebench.stores.params import HnswIndex, HnswSearch
from tests.conftest import make_docs
from tests.stores import servers as S
from tests.stores.servers import FACTORIES

INDEX = HnswIndex(m=16, ef_construct=200)  # collections are created (and built) with it
# one build and one ef: crud's default HNSW grid would make a run per build
ONE_POINT = {"grid.index.m": [16], "grid.index.ef_construct": [200], "grid.search.ef": [100]}


def _elasticsearch() -> Server:
    from storebench.servers.elastic import ElasticsearchServer

    return ElasticsearchServer()


def _opensearch() -> Server:
    from storebench.servers.elastic import OpenSearchServer

    return OpenSearchServer()


FACTORIES.setdefault("elasticsearch", _elasticsearch)
FACTORIES.setdefault("opensearch", _opensearch)


def spec(engine: str, **kw: Any) -> StoreSpec:
    return StoreSpec(engine, S.shared_url(engine), **kw)


def check_localhost_and_unprivileged(engine: str) -> None:
    server = S.shared_server(engine)
    procs = server.processes()
    assert procs, "no server process"
    listening = {
        (c.laddr.ip, c.laddr.port)
        for p in procs
        for c in p.net_connections("inet")
        if c.status == psutil.CONN_LISTEN
    }
    ports = {port for _, port in listening}
    assert {server.port, server.transport_port} <= ports  # type: ignore[attr-defined]
    # a JVM shows IPv4 sockets as IPv4-mapped IPv6 addresses
    assert {ip.removeprefix("::ffff:") for ip, _ in listening} == {"127.0.0.1"}
    if server.user is not None:
        assert {p.username() for p in procs} == {server.user}


def check_killed_server(engine: str, tmp_path: Path, monkeypatch: Any) -> dict[str, Any]:
    """S.kill_during_run, plus: every process of the server is gone."""
    from storebench.servers.elastic import LuceneServer

    pids: list[int] = []
    real = LuceneServer.version

    def spy(self: LuceneServer) -> str:  # runs once the server is ready
        pids.extend(p.pid for p in self.processes())
        return real(self)

    monkeypatch.setattr(LuceneServer, "version", spy)
    for k, v in ONE_POINT.items():  # one run: no next grid point to start after the kill
        monkeypatch.setitem(S.SMALL_RUN, k, v)
    rec, seconds = S.kill_during_run(engine, tmp_path, monkeypatch)
    assert rec["status"] == "failed"
    assert seconds < 30
    assert [t["name"] for t in rec["tasks"]][:2] == ["create", "build_index"]
    assert f"{engine} server died (exit code -9)" in rec["error"]
    assert pids and all(S.gone(p) for p in pids), "a JVM outlived its killed server"
    return rec


def check_foreign_data_survives(
    engine: str,
    tmp_path: Path,
    plant: Callable[[str, int], None],
    snapshot: Callable[[], Any],
    remove: Callable[[str], None],
) -> None:
    """Indices planted with the engine's own client (one with a name a clean-up
    by pattern would take) are untouched by a crud run by URL, and the
    run's URL credentials appear nowhere in its record."""
    url = S.shared_url(engine)
    planted = ["someone_elses", "storebench_00000000_crud"]
    for i, name in enumerate(planted):
        plant(name, 50 + i)
    before = snapshot()
    try:
        authed = url.replace("http://", "http://someone:s3cret@")
        rec = S.crud_run(f"{engine}={authed}", tmp_path, **ONE_POINT)
        assert rec["status"] == "ok", rec.get("error")
        assert snapshot() == before  # nothing else left, nothing taken
    finally:
        for name in planted:
            remove(name)
    assert ":***@" in rec["store"]["url"]
    assert all("s3cret" not in f.read_text() for f in tmp_path.glob("*.jsonl"))


def check_unreachable_url(engine: str) -> None:
    import pytest

    from storebench.errors import UserError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(UserError) as err:
            StoreSpec(engine, f"http://u:s3cret@127.0.0.1:{port}").open()
    assert "cannot use" in str(err.value) and "s3cret" not in str(err.value)


def check_bulk_is_one_request_and_all_arrive(engine: str) -> None:
    store = spec(engine).open()
    sent: list[tuple[str, str]] = []
    real = store._send

    def counting(req):  # type: ignore[no-untyped-def]
        sent.append((req.method, req.path))
        return real(req)

    try:
        docs = make_docs(700)
        coll = store.create_collection("sb_bulk", docs.schema(), INDEX)
        store._send = counting  # type: ignore[method-assign]
        coll.insert(docs)
        assert sent == [("POST", "/sb_bulk/_bulk")]
        # the engine's own counter: every document was indexed
        stats = store._request("GET", "/sb_bulk/_stats/indexing")
        assert stats["_all"]["primaries"]["indexing"]["index_total"] == 700
        assert coll.count() == 700  # refreshes first: near-real-time made visible
        coll.drop()
    finally:
        store.close()


def check_build_index_leaves_one_segment(engine: str) -> None:
    store = spec(engine).open()
    try:
        docs = make_docs(2000, dim=8)
        coll = store.create_collection("sb_merge", docs.schema(), INDEX)
        for b in docs.batches(500):
            coll.insert(b)
            store._refresh(coll.name)  # a segment per batch
        coll.build_index(INDEX)
        segs = store._request("GET", "/sb_merge/_segments")
        shard = segs["indices"]["sb_merge"]["shards"]["0"][0]
        assert len(shard["segments"]) == 1
        assert coll.count() == 2000
        coll.drop()
    finally:
        store.close()


def check_compact_touches_only_its_own_index(
    engine: str, plant: Callable[[str, int], None], remove: Callable[[str], None]
) -> None:
    store = spec(engine).open()
    try:
        plant("someone_elses_segments", 30)  # planted in several segments
        segs_before = store._request("GET", "/someone_elses_segments/_segments")
        docs = make_docs(300, dim=8)
        coll = store.create_collection("sb_compact", docs.schema(), INDEX)
        coll.insert(docs)
        coll.delete(docs.ids[:100])
        coll.compact()
        assert coll.count() == 200
        # one segment; deleted documents may stay in it while the shard's
        # peer-recovery retention lease still covers them (soft deletes)
        stats = store._request("GET", "/sb_compact/_stats/segments")
        assert stats["_all"]["primaries"]["segments"]["count"] == 1
        assert store._request("GET", "/someone_elses_segments/_segments") == segs_before
        coll.drop()
    finally:
        remove("someone_elses_segments")
        store.close()


def check_find_past_one_page(engine: str) -> None:
    """More matches than a search page holds (10,000): all of them, in order."""
    store = spec(engine).open()
    try:
        docs = make_docs(10_500, dim=4).select(None, vectors=False)
        coll = store.create_collection("sb_pages", docs.schema(), INDEX)
        coll.insert(docs)
        assert sorted(coll.find().ids.tolist()) == docs.ids.tolist()
        got = coll.find(F.Cmp("tags.i", "ge", 0), order=("score", True), limit=10_200)
        assert len(got) == 10_200
        np.testing.assert_array_equal(
            got.fields["score"], np.sort(docs.fields["score"])[::-1][:10_200]
        )
        coll.drop()
    finally:
        store.close()


def check_fractions_on_int_fields(engine: str) -> None:
    store = spec(engine).open()
    try:
        docs = make_docs(300)
        coll = store.create_collection("sb_frac", docs.schema(), INDEX)
        coll.insert(docs)
        for f in (
            F.Cmp("tags.i", "lt", 2.5),
            F.Cmp("tags.i", "gt", 47.5),
            F.Cmp("tags.i", "eq", 2.5),
            F.Cmp("tags.i", "ne", 2.5),
            F.Range("tags.i", 1.5, 3.5),
            F.Not(F.In("tags.i", ())),
        ):
            want = docs.ids[F.evaluate(f, docs.fields)]
            assert sorted(coll.find(f).ids.tolist()) == want.tolist(), f
        coll.drop()
    finally:
        store.close()


def check_search_params(engine: str, key: str) -> None:
    """``ef`` reaches the kNN request (``key``: the engine's own name for it)."""
    store = spec(engine).open()
    try:
        docs = make_docs(50)
        coll = store.create_collection("sb_ef", docs.schema(), INDEX)
        coll.insert(docs)
        coll.set_search_params(HnswSearch(ef=77))
        bodies: list[bytes] = []
        real = store._send

        def spy(req):  # type: ignore[no-untyped-def]
            if req.path.endswith("_search"):
                bodies.append(req.body)
            return real(req)

        store._send = spy  # type: ignore[method-assign]
        coll.search(docs.vectors[:1], 5)
        coll.set_search_params(HnswSearch(ef=33))
        res = coll.search(docs.vectors[:1], 5)
        assert f'"{key}":77'.encode() in bodies[0] and f'"{key}":33'.encode() in bodies[1]
        assert res.ids[0, 0] == 0
        assert store.supports(Capability.SEARCH_PARAMS)
        coll.drop()
    finally:
        store.close()
