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

The URL carries both ports: ``http://127.0.0.1:PORT?grpc_port=GRPC``
(the official client, ``weaviate-client`` 4, speaks REST and gRPC).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import ClassVar

from storebench.servers.base import Server, free_port
from storebench.servers.cache import Built, go_install
from storebench.servers.netns import isolated

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


class WeaviateServer(Server):
    name = "weaviate"
    start_timeout_s: ClassVar[float] = 120.0

    def __init__(self, log_level: str = "warning"):
        self.binary = BUILT.require()  # before the directory exists: nothing to clean up
        super().__init__()
        self.grpc_port = free_port()
        self.log_level = log_level
        # inside the namespace: every port of its own (REST, gRPC, gossip,
        # data, raft, raft RPC)
        self.inner = {
            k: free_port() for k in ("http", "grpc", "gossip", "data", "raft", "raft_rpc")
        }

    def __repr__(self) -> str:
        return f"WeaviateServer(127.0.0.1:{self.port}, grpc {self.grpc_port}, {self.dir})"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PERSISTENCE_DATA_PATH=str(self.dir / "data"),
            AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED="true",
            DEFAULT_VECTORIZER_MODULE="none",
            ENABLE_MODULES="",
            CLUSTER_HOSTNAME="node1",
            CLUSTER_ADVERTISE_ADDR="127.0.0.1",
            CLUSTER_BIND_ADDR="127.0.0.1",
            CLUSTER_GOSSIP_BIND_PORT=str(self.inner["gossip"]),
            CLUSTER_DATA_BIND_PORT=str(self.inner["data"]),
            GRPC_PORT=str(self.inner["grpc"]),
            RAFT_PORT=str(self.inner["raft"]),
            RAFT_INTERNAL_RPC_PORT=str(self.inner["raft_rpc"]),
            RAFT_BOOTSTRAP_EXPECT="1",
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
        return isolated(server, relays, self.dir)

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
        return status == 200

    def version(self) -> str:
        _, body = self._get("/v1/meta")
        return f"Weaviate {json.loads(body).get('version', '?')}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}?grpc_port={self.grpc_port}"


if __name__ == "__main__":
    sys.exit(BUILT.main())
