"""A managed PostgreSQL 16 with pgvector, from the ``pgserver`` wheel.

The wheel ships a complete PostgreSQL build (``initdb``, ``postgres``, the
``vector`` extension); pgserver's own Python wrapper is not used (it calls
``useradd`` and starts through ``pg_ctl``, which daemonises). Here ``initdb``
makes a cluster in the private directory with a random password for the
``storebench`` role (scram-sha-256, so no other local user can log in), and
``postgres`` runs in the foreground, listening on 127.0.0.1 only, with its
Unix socket inside the private directory.

PostgreSQL refuses to run as root: as root it runs as ``nobody``, which
must be able to read and execute the wheel's files (a virtualenv under
/work or /opt is fine; a Python under /root is not traversable by
``nobody``, and that is said plainly at start-up).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import signal
import subprocess
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote

from storebench.servers.base import Server, ServerError

USER = "storebench"
DATABASE = "postgres"


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

    def __init__(
        self,
        datadir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        settings: dict[str, str] | None = None,
    ):
        super().__init__(datadir, keep)
        self.install = pg_install()
        self.bin = self.install / "bin"
        self.data = self.dir / "data"
        self.password = secrets.token_urlsafe(18)
        # extra postgresql.conf settings, e.g. {"shared_buffers": "1GB"}
        self.settings = dict(settings or {})

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
            **self.settings,
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
