"""A managed Milvus Lite server.

Milvus Lite 3 (the ``milvus-lite`` wheel) is a pure-Python engine (segments
in Arrow files, faiss for HNSW/IVF) behind Milvus's gRPC API. pymilvus can run
it inside the benchmark's own process (``MilvusClient("x.db")``), but then the
engine shares the interpreter (and its GIL) with the driver's clients and
its CPU and memory cannot be told apart from the harness's. Managed here, it
runs as its own process (``python -m milvus_lite server``) on 127.0.0.1 with
a private data directory, like every other managed engine: clients connect
over gRPC, resource sampling sees the engine alone, and client processes
reach the same server.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any, ClassVar

from storebench.servers.base import Server, ServerError, port_open

# pymilvus pings every 10 s, during calls and between them. A gRPC server with
# the library's default policy (Milvus Lite's: no ping more often than every
# 5 minutes, none without a call in flight) counts each as a strike and
# answers the third with GOAWAY "Too many pings"; pymilvus shares one channel
# per address and hands the dead one to the next client ("Fail connecting to
# server", seen in full test runs after a long index build). A benchmark's
# connections are busy or short-lived: keepalive pings off (INT_MAX).
GRPC_OPTIONS = {"grpc.keepalive_time_ms": 2**31 - 1, "grpc.keepalive_permit_without_calls": 0}


def answer(url: str, call: Callable[[Any], Any], **options: Any) -> Any:
    """What a Milvus server answers to one call on a client of its own, each
    bounded to 10 s (readiness loops around it have the real limit)."""
    from pymilvus import MilvusClient

    client = MilvusClient(uri=url, timeout=10, **options)
    try:
        return call(client)
    finally:
        client.close()


class MilvusLiteServer(Server):
    name = "milvus-lite"
    start_timeout_s: ClassVar[float] = 60.0

    def prepare(self) -> None:
        if importlib.util.find_spec("milvus_lite") is None:
            raise ServerError(
                "the managed milvus server needs milvus-lite: pip install 'storebench[milvus]'"
            )

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # its log lines reach the log file as they happen
        return env

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "milvus_lite",
            "server",
            "--data-dir",
            str(self.dir / "data"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]

    def ready(self) -> bool:
        # an open port is not yet a serving gRPC server (on a busy machine the
        # first call could time out): ready once it answers a real call
        if not port_open(self.port):
            return False
        answer(self.url, lambda c: c.get_server_version(timeout=10), grpc_options=GRPC_OPTIONS)
        return True

    def version(self) -> str:
        return f"Milvus Lite {metadata.version('milvus-lite')}"
