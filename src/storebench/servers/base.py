"""The lifecycle of a managed local engine, one mechanism for all.

A ``Server`` subclass says how to prepare a data directory, the command that
serves it and how to ask whether it is ready; this class does the rest: a free
port on 127.0.0.1, a private data directory, the process in its own process
group (killed with the group), an unprivileged user when the engine refuses
root, readiness by polling the engine (never a fixed sleep), its version, its
log kept and its tail shown when it fails, and a clean stop after normal end,
an exception, SIGINT or SIGTERM (the first of either becomes an exception) or
the interpreter's exit (atexit). A second signal, which ends storebench at
once (``storebench.common.interrupts``), kills every live server's process group
and removes its data directory first. On Linux the server also gets the
parent-death signal, so even a SIGKILLed storebench takes its servers with it
(a server that daemonises escapes it: the next run removes it with the
directory, ``common/leftovers.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import pwd
import re
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import psutil

from storebench.common import interrupts, leftovers
from storebench.errors import StorebenchError
from storebench.servers.cgroups import NodeGroup, NoQuota

_log = logging.getLogger("storebench.servers")
_live: set[Server] = set()
_CRASH = re.compile(r"(panic: |fatal error: |# A fatal error|terminate called|FATAL|SIGABRT)")
_live_lock = threading.Lock()


class ServerError(StorebenchError):
    """A managed server failed to start, or died."""


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def load_factor() -> float:
    """How much longer than on an idle machine a start may take: the 1-minute
    load average per core, at least 1, at most 4 (or $STOREBENCH_TIMEOUT_SCALE)."""
    env = os.environ.get("STOREBENCH_TIMEOUT_SCALE")
    if env:
        return max(float(env), 0.1)
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 1.0
    return min(max(per_core, 1.0), 4.0)


def scaled_timeout(base_s: float) -> float:
    """A readiness bound: ``base_s`` on an idle machine, longer under load."""
    return base_s * load_factor()


def _stop_all(now: bool = False) -> None:
    """Stop every live server (at exit); ``now``: kill them (a second signal)."""
    with _live_lock:
        servers = list(_live)
    for s in servers:
        with contextlib.suppress(Exception):
            s.kill() if now else s.stop()


atexit.register(_stop_all)
interrupts.always_at_hard_exit(lambda: _stop_all(now=True))


def check_reachable_by(path: Path, user: str | None, remedy: str) -> None:
    """Fail clearly when ``user`` (a server's, as root) cannot reach
    ``path``, naming the directory on the way it may not search, rather than
    leave the engine to fail on it with a stack trace; ``remedy``: what to do."""
    if user is None:
        return
    pw = pwd.getpwnam(user)
    p = path.resolve()
    for d in [p, *p.parents]:
        st = d.stat()
        if st.st_uid == pw.pw_uid:
            continue
        bit = stat.S_IXGRP if st.st_gid == pw.pw_gid else stat.S_IXOTH
        if not st.st_mode & bit:
            raise ServerError(
                f"{path} is not reachable by user {user} (the server's user): {d} is not "
                f"searchable by others; {remedy}"
            )


class Server:
    """One managed engine process. Subclasses set ``name`` and implement
    ``command`` (and usually ``prepare``, ``ready`` and ``version``)."""

    name: ClassVar[str]
    refuses_root: ClassVar[bool] = False  # run as an unprivileged user when we are root
    # the bound on readiness on an idle machine; scaled_timeout() stretches it
    # by the load per core (up to 4x) so a busy machine is not a failed start
    start_timeout_s: ClassVar[float] = 120.0
    stop_timeout_s: ClassVar[float] = 30.0
    # ``kill`` (a second signal): the engine's own immediate shutdown, if it
    # has one that still releases what outlives a SIGKILL (shared memory),
    # given ``kill_timeout_s``; then SIGKILL to the group
    kill_signal: ClassVar[signal.Signals] = signal.SIGKILL
    kill_timeout_s: ClassVar[float] = 5.0
    run_as: ClassVar[str] = "nobody"
    # whether storebench can start several nodes of it as one cluster
    # (``servers.cluster``; the class then implements ``join``)
    clusters: ClassVar[bool] = False
    # files it writes outside its directory whatever it is told, each named
    # by the pid ("{pid}") of one of its processes: removed after it stops
    pid_files: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = leftovers.make_dir(self.name)  # private: removed by stop or kill
        self.proc: subprocess.Popen[bytes] | None = None
        self._pids: set[int] = set()  # its processes seen alive (``pid_files``)
        with _live_lock:  # from here on every way out removes its directory
            _live.add(self)
        self.log_path = self.dir / "server.log"
        self.user: str | None = None
        if self.refuses_root and os.geteuid() == 0:
            self.user = self.run_as
        self.started_s: float | None = None  # time to readiness, for the record
        self.engine_version = ""
        self.engine_settings: dict[str, str] = {}  # what it ran with, for the record
        self.limits: tuple[float | None, int | None] = (None, None)  # cores, memory bytes
        self.group: NodeGroup | None = None  # its control group, when limited
        self.node_index, self.peers = 0, [self]  # a cluster's node: see ``join``

    def limit(self, cpus: float | None, memory_bytes: int | None) -> Server:
        """Give the server (before ``start``) its own CPU quota (cores, 0.25
        is a quarter of one) and memory limit (``servers.cgroups``)."""
        self.limits = (cpus, memory_bytes)
        return self

    # --- what subclasses provide ----------------------------------------------
    def prepare(self) -> None:
        """Initialise the data directory (runs before ``command``)."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def ready(self) -> bool:
        """True once the engine answers; the default is the port accepting."""
        return port_open(self.port)

    def version(self) -> str:
        return ""

    def join(self, index: int, nodes: list[Server]) -> None:
        """Be node ``index`` of a cluster of ``nodes`` (before ``launch``):
        the engine's settings for finding its peers go into ``prepare``."""
        self.node_index, self.peers = index, nodes

    @classmethod
    def cluster_url(cls, nodes: list[Server]) -> str:
        """What a store connects to for a cluster of ``nodes``: each node's
        URL, comma-separated (the store's client spreads requests over them)."""
        return ",".join(n.url for n in nodes)

    def running_settings(self) -> dict[str, str]:
        """The settings that bear on the engine's speed (memory, workers,
        durability) as in force once it is ready, asked of the engine where
        it can say, else as given to it: the record says what a figure was
        measured with. The default: nothing known."""
        return {}

    @property
    def url(self) -> str:
        """What a store connects to; the default: HTTP on its port."""
        return f"http://127.0.0.1:{self.port}"

    # --- helpers for subclasses ---------------------------------------------------
    def run_prepare(self, cmd: list[str], what: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        """Run a set-up command (as the server's user), failing with its output.
        It runs in a process group of its own, killed whole if storebench is
        interrupted meanwhile: ``initdb`` leaves a backend that would go on
        writing into the data directory after it is removed."""
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            user=self.user,
            env=kw.pop("env", self.env()),
            start_new_session=True,
            preexec_fn=interrupts.die_with_parent,
            **kw,
        )
        try:
            out, err = proc.communicate()
        except BaseException:
            self._signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        r = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        if r.returncode != 0:
            out = (r.stdout + r.stderr).strip().splitlines()[-15:]
            raise ServerError(
                f"{self.name}: {what} failed (exit {r.returncode}): " + " | ".join(out)
            )
        return r

    def give_to_user(self, *paths: Path) -> None:
        """Hand directories to the unprivileged user the server runs as."""
        if self.user is None:
            return
        pw = pwd.getpwnam(self.user)
        for p in paths:
            for root, _dirs, files in os.walk(p):
                os.chown(root, pw.pw_uid, pw.pw_gid)
                for f in files:
                    os.chown(os.path.join(root, f), pw.pw_uid, pw.pw_gid)
            os.chown(p, pw.pw_uid, pw.pw_gid)

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> Server:
        t0 = time.monotonic()
        try:
            self.launch()
            self.wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        return self.started(t0)

    def launch(self) -> None:
        """Prepare the directory and start the process, without waiting for
        it (a cluster launches all its nodes, then waits for each). On a
        failure the caller stops the server."""
        with _live_lock:  # again after a stop
            _live.add(self)
        if any(self.limits) and self.group is None:
            try:
                self.group = NodeGroup(self.dir.name, *self.limits)
                leftovers.note_group(self.dir, *self.group.dirs)
                self.engine_settings = self.group.describe()
            except NoQuota as exc:
                _log.warning("%s: runs unlimited: %s", self.name, exc)
                self.engine_settings = {"limits": f"not applied: {exc}"}
        self.give_to_user(self.dir)
        remedy = "set TMPDIR to a directory others can enter (such as /tmp)"
        check_reachable_by(self.dir, self.user, remedy)
        self.prepare()
        self.give_to_user(self.dir)
        log = open(self.log_path, "ab")  # noqa: SIM115 (kept open for the process)
        try:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.dir,
                env=self.env(),
                user=self.user,
                start_new_session=True,  # its own process group: we kill the group
                # a SIGKILLed storebench ends it as a second signal would
                preexec_fn=functools.partial(interrupts.die_with_parent, self.kill_signal),
            )
        finally:
            log.close()
        if self.group is not None:
            self.group.join(self.proc.pid)
        leftovers.note_server(self.dir, self.proc.pid)
        self._note_pids()

    def started(self, t0: float) -> Server:
        """What a start records once the server is ready: the time it took,
        its version and running settings."""
        self.started_s = time.monotonic() - t0
        if self.group is not None:
            self.group.apply_cpu_quota()
        self._note_pids()  # the processes it started: one may die before it stops
        self.engine_version = self.version()
        try:
            self.engine_settings = {**self.engine_settings, **self.running_settings()}
        except Exception as exc:  # the record lacks them; the run need not fail
            _log.warning("%s: could not read its settings: %s", self.name, exc)
        return self

    def wait_ready(self, t0: float, also: Sequence[Server] = ()) -> None:
        """Poll ``ready()`` until it answers, the process (or one of ``also``:
        the other nodes of its cluster) dies or time runs out
        (``start_timeout_s`` scaled by the machine's load); a slow start is
        logged every 15 s with the server's name and the time waited."""
        delay = 0.02
        limit = scaled_timeout(self.start_timeout_s)
        next_note = 15.0
        while True:
            for s in (self, *also):
                if s.proc is not None and s.proc.poll() is not None:
                    raise ServerError(
                        f"{s.node_name} exited during start-up (code {s.proc.returncode}); "
                        f"log {s.log_path}: {s.log_tail()}"
                    )
            with contextlib.suppress(Exception):
                if self.ready():
                    return
            waited = time.monotonic() - t0
            if waited > limit:
                raise ServerError(
                    f"{self.name} not ready after {waited:.0f}s (limit {limit:.0f}s: "
                    f"{self.start_timeout_s:.0f}s x load {load_factor():.1f}); log {self.log_path}: {self.log_tail()}"
                )
            if waited > next_note:
                _log.warning(
                    "%s: still starting after %.0f s (limit %.0f s)", self.name, waited, limit
                )
                next_note += 15.0
            time.sleep(delay)  # a poll interval, not a guess at start-up time
            delay = min(delay * 1.5, 0.5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def health(self, wait_s: float = 0.0) -> str | None:
        """None while the server runs; otherwise why it is gone, with its log.
        ``wait_s``: how long a server may take to finish dying (a killed JVM's
        sockets are reset before its last threads exit and it can be reaped)."""
        if self.proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=wait_s)
        if self.proc.poll() is None:
            return None
        return f"{self.name} server died (exit code {self.proc.returncode}); last log lines: {self.log_tail()}"

    def log_tail(self, lines: int = 12) -> str:
        """The log's last lines, after the first line that says why a
        process crashed (a Go panic or fatal error, a JVM's fatal error, a
        C++ abort) when the tail is only its stack dump."""
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        tail = text[-lines:]
        cause = next((ln for ln in text if _CRASH.match(ln) and ln not in tail), None)
        return (
            " | ".join(ln.strip() for ln in ([cause, "..."] if cause else []) + tail)
            or "(empty log)"
        )

    def processes(self) -> list[psutil.Process]:
        """The server's process and its children (for resource sampling)."""
        if not self.alive():
            return []
        try:
            p = psutil.Process(self.proc.pid)  # type: ignore[union-attr]
            return [p, *p.children(recursive=True)]
        except psutil.Error:
            return []

    def node_cpu(self) -> dict[str, float]:
        """CPU seconds used so far, per node (one here; a cluster has more):
        from its control group when it has one (exact), else its processes'."""
        if self.group is not None:
            return {self.node_name: self.group.cpu_seconds()}
        total = 0.0
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        return {self.node_name: total}

    @property
    def node_name(self) -> str:
        return self.name if len(self.peers) == 1 else f"node-{self.node_index}"

    @property
    def dirs(self) -> list[Path]:
        """Its data directories (a cluster has one per node)."""
        return [self.dir]

    def outside_files(self, pids: set[int]) -> list[Path]:
        return [Path(f.format(pid=pid)) for pid in pids for f in self.pid_files]

    def _note_pids(self) -> None:
        """Its processes' pids while they live (``pid_files`` names files by
        them), in its mark too: a later run removes the files after a SIGKILL."""
        if self.pid_files:
            new = {p.pid for p in self.processes()} - self._pids
            self._pids |= new
            leftovers.note_files(self.dir, self.outside_files(new))

    def stop(self) -> None:
        """Stop the whole process group: SIGTERM, then as ``kill`` (a server
        too slow to shut down still gets the signal that frees its shared
        memory before SIGKILL); remove the data directory."""
        self._note_pids()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            self._signal_group(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(self.stop_timeout_s)
        self.kill()

    def kill(self) -> None:
        """Stop without waiting for a clean shutdown (a second signal):
        ``kill_signal``, then SIGKILL to the process group; the data
        directory goes as with ``stop``."""
        self._note_pids()
        proc = self.proc
        if proc is not None and self.kill_signal != signal.SIGKILL and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, self.kill_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(self.kill_timeout_s)
        self._finish(proc)

    def _finish(self, proc: subprocess.Popen[bytes] | None) -> None:
        """The end of ``stop`` and ``kill``: SIGKILL to what is left of the
        group (forked workers), the System V segment a server killed outright
        (the OOM killer) leaves and nothing else would remove, the directory;
        only then is the server no longer live (a second signal meanwhile
        still removes it)."""
        if proc is not None:
            self._signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            leftovers.release_shared_memory({proc.pid})
            leftovers.remove_files(self.outside_files(self._pids | {proc.pid}))
        if self.group is not None:
            self.group.remove()
            self.group = None
        leftovers.remove_dir(self.dir)
        with _live_lock:
            _live.discard(self)

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(127.0.0.1:{self.port}, {self.dir})"

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
