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
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from storebench.servers.base import ServerError

TOOLS = ("unshare", "setpriv", "socat", "ip")


def tools() -> dict[str, str]:
    found = {t: shutil.which(t) or "" for t in TOOLS}
    missing = [t for t, path in found.items() if not path]
    if missing:
        raise ServerError(
            f"this server runs in a network namespace of its own and needs {', '.join(missing)} "
            "(Debian: apt-get install util-linux socat iproute2)"
        )
    return found


def isolated(command: list[str], relays: list[tuple[int, int]], sockdir: Path) -> list[str]:
    """``command`` in a new network namespace, with each ``(outer, inner)``
    port pair relayed from 127.0.0.1:outer outside to 127.0.0.1:inner inside."""
    t = tools()
    # nodelay on every TCP side: without it Nagle's algorithm meets the
    # peer's delayed ACK and small gRPC/HTTP replies wait ~40 ms
    relay = f"{shlex.quote(t['setpriv'])} --pdeathsig KILL {shlex.quote(t['socat'])}"
    inside = [f"{shlex.quote(t['ip'])} link set lo up || exit 1"]
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
