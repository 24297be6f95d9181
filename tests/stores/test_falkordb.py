"""FalkorDB beyond the conformance suite: the managed server's lifecycle,
graphs it made versus graphs it found, many client threads, the compiler."""

import threading

import psutil
import pytest
import redis

from storebench.data import filters as F
from storebench.data.batch import Schema
from storebench.stores.base import StoreSpec
from storebench.stores.graph.cypher import to_cypher
from storebench.stores.opening import open_store
from tests.conftest import make_docs
from tests.stores import servers as S

pytestmark = pytest.mark.skipif(S.skipped("falkordb"), reason="STOREBENCH_SKIP_ENGINES")


def test_managed_server_on_localhost_with_a_private_password_stops_with_the_store():
    opened = open_store(StoreSpec("falkordb"))
    store, server = opened.store, opened.server
    try:
        assert server is not None and server.alive()
        proc = psutil.Process(server.proc.pid)
        addrs = {c.laddr.ip for c in proc.net_connections("inet") if c.status == "LISTEN"}
        assert addrs == {"127.0.0.1"}
        assert server.password not in " ".join(proc.cmdline())
        assert server.password not in str(store.spec.describe())
        assert "FalkorDB" in store.versions()["engine"]
        coll = store.create_collection("sb_managed", make_docs(10).schema())
        coll.insert(make_docs(10))
        assert coll.count() == 10
        pid, datadir = server.proc.pid, server.dir
    finally:
        opened.close()
    assert S.gone(pid)
    assert not datadir.exists()


def test_the_graph_goes_only_if_this_store_made_it():
    url = S.shared_url("falkordb")
    r = redis.Redis.from_url(url, decode_responses=True)
    docs = make_docs(20)
    # its own graph: deleted with its last collection
    store = StoreSpec("falkordb", url).open()
    graph = store.spec.options["graph"]
    coll = store.create_collection("sb_own", docs.schema())
    coll.insert(docs)
    assert graph in r.execute_command("GRAPH.LIST")
    coll.drop()
    assert graph not in r.execute_command("GRAPH.LIST")
    store.close()
    # someone's graph: our label goes, their nodes and the graph stay
    r.execute_command("GRAPH.QUERY", "theirs", "CREATE (:Person {name: 'ada'})")
    store = StoreSpec("falkordb", url, options={"graph": "theirs"}).open()
    try:
        assert store.has_collection("Person")  # their label counts as taken
        coll = store.create_collection("sb_guest", docs.schema())
        coll.insert(docs)
        coll.drop()
        assert "theirs" in r.execute_command("GRAPH.LIST")
        left = r.execute_command("GRAPH.QUERY", "theirs", "MATCH (n) RETURN count(n)")
        assert left[1][0][0] == 1
    finally:
        store.close()
        r.execute_command("GRAPH.DELETE", "theirs")
        r.close()


def test_more_client_threads_than_redis_py_pools_by_default():
    # redis-py 8 pools 100 connections, then raises MaxConnectionsError
    store = StoreSpec("falkordb", S.shared_url("falkordb")).open()
    try:
        coll = store.create_collection("sb_threads", Schema({"x": "int"}, indexed=("x",)))
        errors: list[BaseException] = []
        start = threading.Barrier(150)

        def reader() -> None:
            try:
                start.wait()
                coll.find(F.Cmp("x", "eq", 1), ("x", True), 10)
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(150)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        coll.drop()
    finally:
        store.close()


def test_filters_compile_to_cypher_with_parameters():
    params: dict = {}
    q = to_cypher(
        F.Or((F.Range("tags.i", 1, 5), F.Not(F.In("label", ("a", "b"))), F.In("x", ()))),
        lambda f: f"n.`{f}`",
        params,
    )
    assert q == ("((n.`tags.i` >= $p0 AND n.`tags.i` <= $p1) OR NOT (n.`label` IN $p2) OR false)")
    assert params == {"p0": 1, "p1": 5, "p2": ["a", "b"]}
