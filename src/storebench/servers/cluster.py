"""A managed cluster: several nodes of one engine, started, watched and
stopped as one server.

``build`` makes what a store runs on from its options: one ``Server`` (as
always), or a ``Cluster`` of ``nodes`` of the engine's server class, each
node a ``Server`` with its own ports, data directory, process group, log and,
if asked, its own CPU quota and memory limit (``servers.cgroups``). The
engine's server class says how a node joins (``Server.join``: the peers'
addresses, the first node bootstraps) and when a node is ready (its
``ready`` waits until the cluster has every node). All nodes are launched at
once and then waited for, so a cluster starts about as fast as its slowest
node; stop and kill reach every node, in parallel, and a failure or an
interrupt half-way stops the nodes already started.

A CPU quota is applied once the node is ready: start-up (a JVM at a quarter
of a core takes minutes) is not what a run measures. The memory limit holds
from the start.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from storebench.servers.base import Server, ServerError


def build(
    make_node: Callable[[], Server],
    nodes: int = 1,
    cpus: float | None = None,
    memory_bytes: int | None = None,
) -> Server | Cluster:
    """One server, or a cluster of ``nodes``; each node with the limits."""
    if nodes == 1:
        return make_node().limit(cpus, memory_bytes)
    return Cluster([make_node().limit(cpus, memory_bytes) for _ in range(nodes)])


class Cluster:
    """``Server``'s interface over several nodes (see the module's docstring)."""

    def __init__(self, nodes: list[Server]):
        if not type(nodes[0]).clusters:
            for n in nodes:
                n.stop()
            raise ServerError(f"{nodes[0].name}: storebench starts it as one node only")
        self.nodes = nodes
        for i, node in enumerate(nodes):
            node.join(i, nodes)
        self.name = nodes[0].name
        self.user = nodes[0].user
        self.limits = nodes[0].limits
        self.started_s: float | None = None
        self.engine_settings: dict[str, str] = {}

    @property
    def url(self) -> str:
        """Every node's URL: the client spreads its requests over them, as a
        load balancer in front of a real cluster would."""
        return type(self.nodes[0]).cluster_url(self.nodes)

    def start(self) -> Cluster:
        t0 = time.monotonic()
        try:
            for node in self.nodes:
                node.launch()
            for node in self.nodes:
                node.wait_ready(t0, also=self.nodes)
            for node in self.nodes:
                node.started(t0)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0
        self.engine_settings = {"nodes": str(len(self.nodes))}
        for node in self.nodes:
            self.engine_settings |= {
                f"{node.node_name}.{k}": v for k, v in node.engine_settings.items()
            }
        return self

    def _each(self, fn: Callable[[Server], Any]) -> None:
        """``fn`` on every node at once (a JVM takes seconds to stop)."""
        threads = [threading.Thread(target=fn, args=(n,), daemon=True) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def stop(self) -> None:
        self._each(lambda n: n.stop())

    def kill(self) -> None:
        self._each(lambda n: n.kill())

    def health(self, wait_s: float = 0.0) -> str | None:
        for node in self.nodes:
            gone = node.health(wait_s)
            if gone:
                return f"{node.node_name}: {gone}"
        return None

    def alive(self) -> bool:
        return all(n.alive() for n in self.nodes)

    def processes(self) -> list[psutil.Process]:
        return [p for n in self.nodes for p in n.processes()]

    def node_cpu(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for n in self.nodes:
            out |= n.node_cpu()
        return out

    @property
    def dirs(self) -> list[Path]:
        return [n.dir for n in self.nodes]

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            self.stop()

    def __repr__(self) -> str:
        return f"Cluster({', '.join(repr(n) for n in self.nodes)})"
