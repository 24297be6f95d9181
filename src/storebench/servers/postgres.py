"""A managed PostgreSQL 16 with pgvector, from the ``pgserver`` wheel.

The wheel ships a complete PostgreSQL build (``initdb``, ``postgres``, the
``vector`` extension); pgserver's own Python wrapper is not used (it calls
``useradd`` and starts through ``pg_ctl``, which daemonises). Here ``initdb``
makes a cluster in the private directory with a random password for the
``storebench`` role (scram-sha-256, so no other local user can log in), and
``postgres`` runs in the foreground, listening on 127.0.0.1 only, with its
Unix socket inside the private directory.

It runs tuned to the machine (``machine_settings``: shared buffers, the
index build's memory, parallel workers, the planner's cache size) unless
asked for initdb's defaults (``tuning="initdb"``); settings given by the
user win over either. Left at initdb's defaults (128 MB of shared buffers,
64 MB for an index build) an HNSW build is several times slower than on the
settings a benchmark of PostgreSQL would use. What is in force is read back
from ``pg_settings`` once it is ready, for the record.

PostgreSQL refuses to run as root: as root it runs as ``nobody``, which
must be able to read and execute the wheel's files (a virtualenv under
/work or /opt is fine; a Python under /root is not traversable by
``nobody``, and that is said plainly at start-up).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import secrets
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Literal
from urllib.parse import quote

import psutil

from storebench.servers.base import Server, ServerError

USER = "storebench"
DATABASE = "postgres"

MiB = 1 << 20
GiB = 1 << 30
# The machine rule (machine_settings), in the spirit of PGTune's and
# VectorDBBench's advice: a quarter of RAM for shared buffers, capped (past a
# few GB the OS cache serves as well); the planner told three quarters of
# RAM can cache data; an eighth of RAM for an index build (an HNSW graph is
# built in maintenance_work_mem: 100k x 128 takes ~100 MB, 1M x 128 ~1 GB),
# capped, and never more than a quarter of what is free nor half of
# /dev/shm (a parallel build keeps its graph in dynamic shared memory there);
# every core but one as a parallel worker of the build (the leader is the
# last). Never below initdb's defaults.
SHARED_BUFFERS_SHARE, SHARED_BUFFERS_MAX = 0.25, 8 * GiB
EFFECTIVE_CACHE_SHARE = 0.75
MAINTENANCE_SHARE, MAINTENANCE_MAX, MAINTENANCE_OF_FREE = 0.125, 4 * GiB, 0.25
INITDB = {
    "shared_buffers": 128 * MiB,
    "effective_cache_size": 4 * GiB,
    "maintenance_work_mem": 64 * MiB,
}
# what the record reads back from pg_settings (with every setting given)
RECORDED = (
    "shared_buffers",
    "effective_cache_size",
    "maintenance_work_mem",
    "work_mem",
    "max_parallel_maintenance_workers",
    "max_parallel_workers",
    "max_parallel_workers_per_gather",
    "max_worker_processes",
    "max_connections",
    "synchronous_commit",
    "fsync",
    "wal_level",
    "max_wal_size",
    "dynamic_shared_memory_type",
)
Tuning = Literal["machine", "initdb"]

# memory settings and the unit of a bare number (PostgreSQL's own: 8 kB
# pages for buffers and caches, kB for work memories)
MEMORY_UNIT = {
    "shared_buffers": 8192,
    "effective_cache_size": 8192,
    "wal_buffers": 8192,
    "temp_buffers": 8192,
    "maintenance_work_mem": 1024,
    "work_mem": 1024,
    "autovacuum_work_mem": 1024,
    "logical_decoding_work_mem": 1024,
    "max_wal_size": MiB,
    "min_wal_size": MiB,
}
COUNTS = (
    "max_parallel_maintenance_workers",
    "max_parallel_workers",
    "max_parallel_workers_per_gather",
    "max_worker_processes",
    "max_connections",
)
_UNITS = {"B": 1, "kB": 1024, "MB": MiB, "GB": GiB, "TB": 1 << 40}
_MEMORY = re.compile(r"\s*(\d+)\s*(B|kB|MB|GB|TB)?\s*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


def memory_bytes(name: str, value: object) -> int:
    """A memory setting's bytes, as PostgreSQL reads it (``1GB``, ``512MB``,
    a bare number in the setting's own unit); ValueError if it would refuse it."""
    m = _MEMORY.fullmatch(str(value)) if not isinstance(value, bool | float) else None
    if m is None:
        raise ValueError(
            f"{name}: {value!r} is not a PostgreSQL memory size (a whole number, optionally "
            "with a unit B, kB, MB, GB, TB; e.g. 1GB)"
        )
    return int(m.group(1)) * (_UNITS[m.group(2)] if m.group(2) else MEMORY_UNIT[name])


def check_settings(settings: Mapping[str, object]) -> None:
    """Refuse what PostgreSQL would refuse at start, where it can be told
    without starting it: names, memory sizes, worker counts."""
    for name, value in settings.items():
        if not _NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a PostgreSQL setting name")
        if name in MEMORY_UNIT:
            memory_bytes(name, value)
        elif name in COUNTS and (isinstance(value, bool) or not str(value).strip().isdigit()):
            raise ValueError(f"{name}: {value!r} is not a whole number of 0 or more")


def pg_size(n: int) -> str:
    """Bytes as PostgreSQL writes them (whole MB, or GB when exact)."""
    mb = max(n // MiB, 1)
    return f"{mb // 1024}GB" if mb % 1024 == 0 else f"{mb}MB"


def _shm_free() -> int | None:
    try:
        return int(psutil.disk_usage("/dev/shm").free)
    except OSError:
        return None


def machine_settings(
    total: int | None = None, free: int | None = None, cores: int | None = None
) -> dict[str, str]:
    """The settings the managed server runs with on this machine (or on one
    of ``total`` bytes of RAM, ``free`` of them available, ``cores`` CPUs):
    the rule above."""
    vm = psutil.virtual_memory()
    total = int(vm.total) if total is None else total
    free = int(vm.available) if free is None else free
    cores = (os.cpu_count() or 1) if cores is None else cores
    shared = min(int(total * SHARED_BUFFERS_SHARE), SHARED_BUFFERS_MAX)
    maintenance = min(
        int(total * MAINTENANCE_SHARE), MAINTENANCE_MAX, int(free * MAINTENANCE_OF_FREE)
    )
    shm = _shm_free()
    if shm is not None:
        maintenance = min(maintenance, shm // 2)
    return {
        "shared_buffers": pg_size(max(shared, INITDB["shared_buffers"])),
        "effective_cache_size": pg_size(
            max(int(total * EFFECTIVE_CACHE_SHARE), INITDB["effective_cache_size"])
        ),
        "maintenance_work_mem": pg_size(max(maintenance, INITDB["maintenance_work_mem"])),
        "max_worker_processes": str(max(8, cores)),
        "max_parallel_workers": str(cores),
        "max_parallel_maintenance_workers": str(max(cores - 1, 0)),
    }


def server_settings(tuning: Tuning, settings: Mapping[str, object]) -> dict[str, str]:
    """What a managed server is given beyond its fixed ones: the machine's
    rule (unless ``initdb``), then the user's settings over it."""
    base = machine_settings() if tuning == "machine" else {}
    return {**base, **{k: _pg_value(v) for k, v in settings.items()}}


def _pg_value(v: object) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def pg_install() -> Path:
    """The wheel's PostgreSQL tree (bin/, lib/, share/)."""
    # found, not imported: importing pgserver runs its own server machinery
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(
            "the managed pgvector server needs the pgserver wheel: "
            "pip install 'storebench[pgvector]'"
        )
    root = Path(next(iter(spec.submodule_search_locations))).resolve() / "pginstall"
    if not (root / "bin" / "postgres").exists():
        raise ServerError(f"pgserver has no PostgreSQL build at {root}")
    return root


class PostgresServer(Server):
    name = "postgres"
    refuses_root = True
    start_timeout_s: ClassVar[float] = 60.0
    # "immediate" shutdown: no checkpoint, but the postmaster still removes
    # its System V shared memory segment, which a SIGKILL would leave behind
    kill_signal = signal.SIGQUIT

    def __init__(self, settings: Mapping[str, object] | None = None, tuning: Tuning = "machine"):
        super().__init__()
        self.install = pg_install()
        self.bin = self.install / "bin"
        self.data = self.dir / "data"
        self.password = secrets.token_urlsafe(18)
        # the user's postgresql.conf settings, e.g. {"shared_buffers": "1GB"}
        self.settings = {k: _pg_value(v) for k, v in (settings or {}).items()}
        self.tuning = tuning
        check_settings(self.settings)
        # what it is given: the machine's rule (unless initdb), the user's over it
        self.given = server_settings(tuning, self.settings)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(LC_ALL="C", LANG="C", TZ="UTC")
        env.pop("PGDATA", None)
        return env

    def prepare(self) -> None:
        postgres = self.bin / "postgres"
        if self.user is not None and not _usable_by(self.user, postgres):
            raise ServerError(
                f"postgres: {postgres} is not readable and executable by the user "
                f"{self.user!r} the server must run as (PostgreSQL refuses root); install "
                "storebench into a virtualenv outside /root"
            )
        pwfile = self.dir / "pwfile"
        pwfile.write_text(self.password + "\n")
        self.give_to_user(pwfile)
        try:
            self.run_prepare(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    USER,
                    f"--pwfile={pwfile}",
                    "--auth=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-instructions",
                ],
                "initdb",
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def command(self) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.dir),
            "logging_collector": "off",
            "max_connections": "500",  # social opens 221 clients
            **self.given,
        }
        cmd = [str(self.bin / "postgres"), "-D", str(self.data)]
        for k, v in settings.items():
            cmd += ["-c", f"{k}={v}"]
        return cmd

    def ready(self) -> bool:
        import psycopg

        with psycopg.connect(self.url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True

    def version(self) -> str:
        out = subprocess.run(
            [str(self.bin / "postgres"), "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip()  # "postgres (PostgreSQL) 16.2"

    def running_settings(self) -> dict[str, str]:
        """From ``pg_settings``: the tuned ones, the usual suspects of a
        benchmark (``RECORDED``) and every setting the user gave."""
        import psycopg

        names = sorted({*RECORDED, *self.settings})
        with psycopg.connect(self.url, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
                [names],
            ).fetchall()
        return {"tuning": self.tuning, **{name: value for name, value in sorted(rows)}}

    @property
    def url(self) -> str:
        return (
            f"postgresql://{USER}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{DATABASE}"
        )

    def stop(self) -> None:
        # SIGINT is PostgreSQL's "fast" shutdown (roll back, disconnect
        # clients, checkpoint); the base class's SIGTERM to the process group
        # would be a "smart" one that waits for clients, then SIGKILL.
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(self.stop_timeout_s)
        super().stop()


def _usable_by(user: str, path: Path) -> bool:
    """Whether ``user`` can execute ``path`` (every directory on the way
    traversable), asked of the system rather than guessed from mode bits."""
    r = subprocess.run(["test", "-x", str(path)], user=user, check=False, capture_output=True)
    return r.returncode == 0
