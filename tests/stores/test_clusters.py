"""Managed clusters (``servers.cluster``): a 2-node cluster of each engine
storebench can start as a cluster comes up on loopback, puts each copy of an
index on a node of its own as the engine itself reports (the topology the
run records), and leaves no process, port or directory behind when Ctrl-C
ends storebench."""

from __future__ import annotations

import ipaddress
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from storebench.servers.base import port_open
from tests.stores import servers as S

# engine: its client's module, its two copies of an index and their state
# (Weaviate's copies are peers: no primary)
ENGINES = {
    "elasticsearch": ("elasticsearch", ["primary", "replica"], "STARTED"),
    "opensearch": ("opensearchpy", ["primary", "replica"], "STARTED"),
    "weaviate": ("weaviate", ["replica", "replica"], "READY"),
}

HOLDER = textwrap.dedent(
    """
    import json, sys, time
    sys.path[:0] = {path!r}
    from storebench.stores.base import StoreSpec
    from storebench.stores.opening import open_store
    from tests.conftest import make_docs

    with open_store(StoreSpec({engine!r}, options={{"replicas": 2}})) as opened:
        cluster, store = opened.server, opened.store
        docs = make_docs(200)
        coll = store.create_collection("sb_cluster", docs.schema())
        coll.insert(docs)
        hits = coll.search(docs.vectors[:3], 1).ids[:, 0].tolist()
        print(json.dumps({{
            "url": store.spec.url,
            "hits": hits,
            "topology": store.topology(["sb_cluster"]),
            "settings": cluster.engine_settings,
            "pids": [p.pid for p in cluster.processes()],
            "ports": [
                p for n in cluster.nodes
                for p in (n.port, getattr(n, "transport_port", 0), getattr(n, "grpc_port", 0)) if p
            ],
            "dirs": [str(d) for d in cluster.dirs],
            "listening": sorted({{
                c.laddr.ip for c in __import__("psutil").net_connections("inet")
                if c.pid in {{p.pid for p in cluster.processes()}} and c.status == "LISTEN"
            }}),
        }}), flush=True)
        time.sleep(600)
    """
)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_two_node_cluster_records_its_topology_and_ctrl_c_leaves_nothing(engine: str) -> None:
    if S.skipped(engine):
        pytest.skip("STOREBENCH_SKIP_ENGINES")
    module, two_copies, state = ENGINES[engine]
    pytest.importorskip(module)
    code = HOLDER.format(path=sys.path, engine=engine)
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = p.stdout.readline()  # type: ignore[union-attr]
        assert line.strip(), f"the cluster did not start: {p.stderr.read()[-3000:]}"  # type: ignore[union-attr]
        got = json.loads(line)
    finally:
        p.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            p.wait(120)
        finally:
            p.kill()
    assert got["hits"] == [0, 1, 2]
    # the client spreads its requests over both nodes
    assert got["url"].count("http://127.0.0.1:") == 2
    topo = got["topology"]
    assert topo["nodes"] == ["node-0", "node-1"]
    copies = topo["shards"]
    assert sorted(c["copy"] for c in copies) == two_copies
    assert {c["node"] for c in copies} == {"node-0", "node-1"}, "two copies on one node"
    assert {c["state"] for c in copies} == {state}
    assert got["settings"]["nodes"] == "2"
    # loopback only (a JVM's socket shows 127.0.0.1 as ::ffff:127.0.0.1)
    assert got["listening"] and all(
        ipaddress.ip_address(a.removeprefix("::ffff:")).is_loopback for a in got["listening"]
    ), got["listening"]
    assert len(got["pids"]) >= 2
    assert all(S.gone(pid, within=30) for pid in got["pids"]), "a node outlived Ctrl-C"
    assert not [d for d in got["dirs"] if Path(d).exists()], "a node's directory is left"
    assert not [port for port in got["ports"] if port_open(port)], "a node's port is still open"
    assert not [
        q.pid
        for q in psutil.process_iter(["cwd"])
        if any((q.info.get("cwd") or "").startswith(d) for d in got["dirs"])
    ]
