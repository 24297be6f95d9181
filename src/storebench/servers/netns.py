"""Run a server that listens on every interface where only loopback exists.

Some engines open ports on all interfaces (``:PORT``) with no setting to
change it: Milvus 2.2/2.3's components, Weaviate's gRPC and cluster ports.
``isolated(command, relays, sockdir)`` wraps such a server's command so it
runs in a network namespace of its own with nothing but a loopback interface
(``unshare --net``; as a normal user with ``--map-root-user``): nothing it
opens is reachable from outside, and its ports cannot collide with another
server's. Each port clients need is relayed by two ``socat`` processes over
a Unix socket in the private directory: ``127.0.0.1:OUTER`` in storebench's
namespace -> ``SOCKDIR/relay-INNER.sock`` -> ``127.0.0.1:INNER`` inside.

The wrapped command keeps the server itself as the managed process: the
shells ``exec`` into ``unshare`` and then the server, so the PID the
lifecycle watches (and gives the parent-death signal) is the engine's.
The relays run under ``setpriv --pdeathsig KILL`` in the same process group,
so they end with the server, however it ends. They add two local hops to
each request: a fixed cost any benchmark of such a server includes.

A cluster of such servers (``Member``) gets a private network of its own:
node 0's namespace holds a bridge at ``node_address(0)``, and each other
node, once that bridge is up, adds a veth pair from its namespace to it and
takes ``node_address(i)``, then waits until node 0 accepts connections on
its ``join_port`` (an engine whose node gives up when its first peer is not
there yet). The nodes reach each other there, on the same ports (an engine
that finds its peers' ports from its own configuration needs that); nothing
of it touches the machine's own network. Moving a link into another
namespace needs root.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from storebench.servers.base import ServerError

TOOLS = ("unshare", "setpriv", "socat", "ip", "nsenter")
SUBNET = "10.77.0"  # a cluster's private network (its namespaces only)
BRIDGE = "sbbr"
JOIN_WAIT_S = 300  # how long a node waits for node 0 (a JVM or a raft election on busy cores)


@dataclass(frozen=True)
class Member:
    """A namespace's place in a cluster: node ``index``; ``hub``, node 0's
    PID (its namespace has the bridge); ``join_port``, node 0's port the
    others wait for."""

    index: int
    hub: int
    join_port: int


def node_address(index: int) -> str:
    """Node ``index``'s address on its cluster's private network."""
    return f"{SUBNET}.{index + 1}"


def _wait(check: str, what: str) -> str:
    """A shell loop until ``check`` succeeds, polled every 50 ms for at most
    ``JOIN_WAIT_S``, else it says ``what`` it waited for and fails."""
    return (
        f"n=0; until {check} >/dev/null 2>&1; do n=$((n+1)); [ $n -le {JOIN_WAIT_S * 20} ] || "
        f"{{ echo {shlex.quote(f'gave up after {JOIN_WAIT_S} s waiting for {what}')} >&2; exit 1; }}; "
        "sleep 0.05; done"
    )


def _on_network(t: dict[str, str], member: Member) -> list[str]:
    """Shell lines putting this namespace on its cluster's network (see the
    module's docstring)."""
    ip, node, hub = shlex.quote(t["ip"]), member.index, member.hub
    if node == 0:
        return [
            f"{ip} link add {BRIDGE} type bridge && "
            f"{ip} addr add {node_address(0)}/24 dev {BRIDGE} && {ip} link set {BRIDGE} up || exit 1"
        ]
    hub_ns = f"{shlex.quote(t['nsenter'])} --net=/proc/{hub}/ns/net"
    port = f"sbn{node}"
    socat = shlex.quote(t["socat"])
    first = f"{node_address(0)}:{member.join_port}"
    return [
        _wait(f"{hub_ns} {ip} link show {BRIDGE}", "the cluster's network (node 0)"),
        f"{ip} link add sb0 type veth peer name {port} netns {hub} || exit 1",
        f"{hub_ns} {ip} link set {port} master {BRIDGE} up || exit 1",
        f"{ip} addr add {node_address(node)}/24 dev sb0 && {ip} link set sb0 up || exit 1",
        _wait(f"{socat} -u OPEN:/dev/null TCP:{first},connect-timeout=1", f"node 0 at {first}"),
    ]


def tools() -> dict[str, str]:
    found = {t: shutil.which(t) or "" for t in TOOLS}
    missing = [t for t, path in found.items() if not path]
    if missing:
        raise ServerError(
            f"this server runs in a network namespace of its own and needs {', '.join(missing)} "
            "(Debian: apt-get install util-linux socat iproute2)"
        )
    return found


def isolated(
    command: list[str],
    relays: list[tuple[int, int]],
    sockdir: Path,
    member: Member | None = None,
) -> list[str]:
    """``command`` in a new network namespace, with each ``(outer, inner)``
    port pair relayed from 127.0.0.1:outer outside to 127.0.0.1:inner inside;
    ``member``: the namespace is a node of a cluster, on its network."""
    t = tools()
    if member is not None and os.geteuid() != 0:
        raise ServerError(
            "the nodes of this engine's cluster run in network namespaces joined by a "
            "bridge, which needs root"
        )
    # nodelay on every TCP side: without it Nagle's algorithm meets the
    # peer's delayed ACK and small gRPC/HTTP replies wait ~40 ms
    relay = f"{shlex.quote(t['setpriv'])} --pdeathsig KILL {shlex.quote(t['socat'])}"
    inside = [f"{shlex.quote(t['ip'])} link set lo up || exit 1"]
    if member is not None:
        inside += _on_network(t, member)
    outside = []
    for outer, inner in relays:
        sock = shlex.quote(str(sockdir / f"relay-{inner}.sock"))
        inside.append(
            f"{relay} UNIX-LISTEN:{sock},fork,unlink-early,backlog=1024 "
            f"TCP:127.0.0.1:{inner},nodelay &"
        )
        outside.append(
            f"{relay} TCP-LISTEN:{outer},bind=127.0.0.1,fork,reuseaddr,nodelay,backlog=1024 "
            f"UNIX-CONNECT:{sock} &"
        )
    inside.append('exec "$@"')
    outside.append('exec "$@"')
    unshare = [t["unshare"], "--net"]
    if os.geteuid() != 0:
        unshare.append("--map-root-user")
    return [
        "/bin/sh",
        "-c",
        "\n".join(outside),
        "relay",
        *unshare,
        "--",
        "/bin/sh",
        "-c",
        "\n".join(inside),
        "relay",
        *command,
    ]
