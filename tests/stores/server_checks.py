"""Checks shared by the engine-server tests (test_milvus_server.py,
test_weaviate_server.py, test_ferretdb_server.py): where a server listens,
and that nothing outlives it however storebench ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

from storebench.common import leftovers
from storebench.servers.base import Server
from tests.conftest import shm_files
from tests.stores.servers import gone


def listening_ips(server: Server) -> set[str]:
    """The addresses the server's processes listen on in storebench's own
    network namespace (a server isolated in a namespace of its own shows
    only its relays here)."""
    pids = {p.pid for p in server.processes()}
    return {
        c.laddr.ip
        for c in psutil.net_connections("inet")
        if c.pid in pids and c.status == psutil.CONN_LISTEN
    }


def stop_leaves_nothing(server: Server) -> None:
    pids = [p.pid for p in server.processes()]
    assert pids and server.proc is not None and pids[0] == server.proc.pid
    datadir = server.dir
    # the files it writes outside its directory: there (the names are right),
    # then gone
    outside = server.outside_files({pids[0]})
    assert all(f.exists() for f in outside), outside
    server.stop()
    assert all(gone(p) for p in pids), "a server process outlived stop()"
    assert not datadir.exists()
    assert not any(f.exists() for f in outside), outside


PARENT = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = {path!r}
    from {module} import {cls}
    s = {cls}({args}).start()
    print(s.dir, flush=True)
    print(" ".join(str(p.pid) for p in s.processes()), flush=True)
    time.sleep(300)
    """
)


def no_orphan_after_sigkill(module: str, cls: str, args: str = "") -> None:
    """A storebench SIGKILLed while its server runs takes the server and
    every helper process with it (the parent-death signal)."""
    code = PARENT.format(path=sys.path, module=module, cls=cls, args=args)
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    datadir = None
    try:
        datadir = p.stdout.readline().strip()  # type: ignore[union-attr]
        line = p.stdout.readline()  # type: ignore[union-attr]
        assert line.strip(), f"the server did not start: {p.stderr.read()}"  # type: ignore[union-attr]
        pids = [int(x) for x in line.split()]
        assert len(pids) >= 1
        shm = shm_files(pids)
        noted = leftovers.mark_of(Path(datadir)).read_text().splitlines()
        # named by each of its processes' pids: those that wrote one
        outside = [f for f in (Path(n[5:]) for n in noted if n.startswith("file ")) if f.exists()]
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    try:
        assert all(gone(pid, within=30) for pid in pids), "a server process outlived its parent"
        assert not [f for f in shm if os.path.exists(f)], "its shared memory outlived it"
        assert not [
            r
            for r in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
            if int(r.split()[4]) in pids
        ], "its System V shared memory outlived it"
    finally:  # a SIGKILLed parent cannot remove the directory: the next run does
        if datadir:
            assert leftovers.remove_left(Path(datadir))
    assert not Path(datadir).exists()
    assert not [f for f in outside if f.exists()], "files it wrote elsewhere outlived it"
