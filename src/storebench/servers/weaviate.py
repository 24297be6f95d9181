"""A managed Weaviate server, built from the Go module proxy once.

``weaviate-server`` is built with ``go install
github.com/weaviate/weaviate/cmd/weaviate-server@VERSION`` into storebench's
cache (``engine_cache("weaviate") / VERSION / bin``; about 3 minutes on 2
cores, once)::

    python -m storebench.servers.weaviate --install     # no-op when built

The server is configured by environment variables: data in the private
directory, anonymous access (the server is reachable from this machine only),
no vectorizer module (storebench brings its own vectors), a single-node raft
cluster (``RAFT_BOOTSTRAP_EXPECT=1``), objects indexed as they are imported,
no cap on query results, no telemetry and no profiling server.
Weaviate's gRPC API, its cluster data and gossip ports and its raft ports
listen on every interface whatever the bind address says, so the server runs
in a network namespace of its own with only the REST and gRPC ports relayed
to 127.0.0.1 (``servers/netns.py``). Readiness is
``/v1/.well-known/ready`` answering 200 through the relay (a raft election
first: a few seconds).

A cluster (``servers/cluster.py``): each node in a namespace of its own on
the cluster's private network (``netns.node_address``), on Weaviate's
default ports (a node takes its peers' raft port to be the default), joined
through node 0's gossip port once it listens (a node that finds no peer
there gives up), the raft voters named; ready when ``/v1/nodes`` lists
every node healthy. A node with a CPU quota or memory limit gets
``GOMAXPROCS`` / ``GOMEMLIMIT`` to match, as in a container.

The URL carries both ports: ``http://127.0.0.1:PORT?grpc_port=GRPC``
(the official client, ``weaviate-client`` 4, speaks REST and gRPC).
"""

from __future__ import annotations

import json
import math
import os
import sys
import urllib.request
from typing import ClassVar

from storebench.servers.base import Server, free_port
from storebench.servers.cache import Built, go_install
from storebench.servers.netns import Member, isolated, node_address

VERSION = "v1.35.2"
PACKAGE = "github.com/weaviate/weaviate/cmd/weaviate-server"
BINARY = "weaviate-server"


BUILT = Built(
    "weaviate",
    BINARY,
    VERSION,
    f"{PACKAGE}@{VERSION}",
    lambda work: go_install(PACKAGE, VERSION, work / "bin"),
    "Go, about 3 minutes",
)


# Weaviate's own ports, inside its namespace (nothing else there to collide
# with); a node takes its peers' raft port to be its default
PORTS = {"http": 8080, "grpc": 50051, "gossip": 7946, "data": 7947, "raft": 8300, "raft_rpc": 8301}


class WeaviateServer(Server):
    name = "weaviate"
    start_timeout_s: ClassVar[float] = 120.0
    clusters = True

    def __init__(self, log_level: str = "warning"):
        self.binary = BUILT.require()  # before the directory exists: nothing to clean up
        super().__init__()
        self.grpc_port = free_port()
        self.log_level = log_level
        self.inner = PORTS

    def __repr__(self) -> str:
        return f"WeaviateServer(127.0.0.1:{self.port}, grpc {self.grpc_port}, {self.dir})"

    @property
    def clustered(self) -> bool:
        return len(self.peers) > 1

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        address = node_address(self.node_index) if self.clustered else "127.0.0.1"
        if self.clustered:
            env.update(
                CLUSTER_JOIN=f"{node_address(0)}:{self.inner['gossip']}",
                RAFT_JOIN=",".join(n.node_name for n in self.peers),
            )
        cpus, memory = self.limits
        if cpus:
            env["GOMAXPROCS"] = str(max(1, math.ceil(cpus)))
        if memory:
            env["GOMEMLIMIT"] = str(int(memory * 0.9))  # room for what Go does not count
        env.update(
            PERSISTENCE_DATA_PATH=str(self.dir / "data"),
            AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED="true",
            DEFAULT_VECTORIZER_MODULE="none",
            ENABLE_MODULES="",
            CLUSTER_HOSTNAME=self.node_name,
            CLUSTER_ADVERTISE_ADDR=address,
            CLUSTER_BIND_ADDR=address,
            CLUSTER_GOSSIP_BIND_PORT=str(self.inner["gossip"]),
            CLUSTER_DATA_BIND_PORT=str(self.inner["data"]),
            GRPC_PORT=str(self.inner["grpc"]),
            RAFT_PORT=str(self.inner["raft"]),
            RAFT_INTERNAL_RPC_PORT=str(self.inner["raft_rpc"]),
            RAFT_BOOTSTRAP_EXPECT=str(len(self.peers)),
            DISABLE_TELEMETRY="true",
            GO_PROFILING_DISABLE="true",
            PROMETHEUS_MONITORING_ENABLED="false",
            LOG_LEVEL=self.log_level,
            QUERY_MAXIMUM_RESULTS="100000000",  # a find returns every match
            ASYNC_INDEXING="false",  # an import returns once its objects are indexed
        )
        return env

    def command(self) -> list[str]:
        server = [
            str(self.binary),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.inner["http"]),
            "--scheme",
            "http",
        ]
        relays = [(self.port, self.inner["http"]), (self.grpc_port, self.inner["grpc"])]
        if not self.clustered:
            return isolated(server, relays, self.dir)
        hub = self.peers[0].proc  # node 0 is launched first: its namespace has the bridge
        member = Member(self.node_index, hub.pid if hub else 0, self.inner["gossip"])
        return isolated(server, relays, self.dir, member)

    def _get(self, path: str) -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()

    def running_settings(self) -> dict[str, str]:
        """What it is given through its environment that bears on speed
        (Go's own limits are its defaults unless set in ours)."""
        env = self.env()
        names = (
            "ASYNC_INDEXING",
            "QUERY_MAXIMUM_RESULTS",
            "GOMAXPROCS",
            "GOMEMLIMIT",
            "LIMIT_RESOURCES",
        )
        return {k: env.get(k, "(default)") for k in names}

    def ready(self) -> bool:
        status, _ = self._get("/v1/.well-known/ready")
        if status != 200 or not self.clustered:
            return status == 200
        _, body = self._get("/v1/nodes")
        healthy = [n for n in json.loads(body)["nodes"] if n.get("status") == "HEALTHY"]
        return len(healthy) == len(self.peers)

    def version(self) -> str:
        _, body = self._get("/v1/meta")
        return f"Weaviate {json.loads(body).get('version', '?')}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}?grpc_port={self.grpc_port}"


if __name__ == "__main__":
    sys.exit(BUILT.main())
