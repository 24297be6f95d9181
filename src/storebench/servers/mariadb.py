"""A managed MariaDB from Debian's ``mariadb-server`` package.

``mariadb-install-db`` makes a fresh data directory in the private directory
(``--no-defaults``: the system's /etc/mysql files are not read), then
``mariadbd`` runs in the foreground, listening on 127.0.0.1 only, with its
socket, pid file and temporary files inside the private directory. An init
file (0600, removed once the server is ready) creates the ``storebench``
user, allowed from 127.0.0.1 only, with a random password, and the
``storebench`` database. ``mariadbd`` refuses to run as root: as root the
server runs as ``nobody``.

It runs tuned to the machine (``machine_settings``: InnoDB's buffer pool,
its page cache, is a quarter of RAM, not 128 MB) unless asked for MariaDB's
defaults (``tuning="defaults"``). ``settings`` adds server variables over
either (``{"innodb_flush_log_at_trx_commit": "2"}``: the log written at each
commit but flushed to disk once a second).

Not on PyPI: install the package (Debian/Ubuntu: ``apt-get install -y
mariadb-server``); the server's service is never started or touched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from typing import ClassVar, Literal
from urllib.parse import quote

import psutil

from storebench.servers.base import Server, ServerError

USER = "storebench"
DATABASE = "storebench"

MiB = 1 << 20
# the machine rule, as for the managed PostgreSQL's shared buffers: a quarter
# of RAM for the buffer pool (with O_DIRECT, InnoDB's only cache), at most
# 8 GB, never below MariaDB's default 128 MB
BUFFER_POOL_SHARE, BUFFER_POOL_MAX, BUFFER_POOL_DEFAULT = 0.25, 8 << 30, 128 * MiB
Tuning = Literal["machine", "defaults"]
# what the record reads back (SHOW GLOBAL VARIABLES), with every setting given
RECORDED = (
    "innodb_buffer_pool_size",
    "innodb_log_file_size",
    "innodb_flush_log_at_trx_commit",
    "innodb_flush_method",
    "innodb_io_capacity",
    "mhnsw_max_cache_size",
    "mhnsw_default_m",
    "sync_binlog",
    "log_bin",
    "max_connections",
    "thread_handling",
)


def machine_settings(total: int | None = None) -> dict[str, str]:
    """The server variables the managed server runs with on this machine
    (or on one of ``total`` bytes of RAM)."""
    total = int(psutil.virtual_memory().total) if total is None else total
    pool = max(min(int(total * BUFFER_POOL_SHARE), BUFFER_POOL_MAX), BUFFER_POOL_DEFAULT)
    return {"innodb_buffer_pool_size": f"{pool // MiB}M"}


def server_settings(tuning: Tuning, settings: dict[str, str]) -> dict[str, str]:
    """What a managed server is given: the machine's rule (unless
    ``defaults``), the user's settings over it (either spelling, - or _)."""
    base = machine_settings() if tuning == "machine" else {}
    given = {k.replace("-", "_"): v for k, v in settings.items()}
    return {**{k: v for k, v in base.items() if k not in given}, **settings}


def buffer_pool_bytes(value: str) -> int:
    """``innodb_buffer_pool_size`` in bytes (``6026M``, ``4G``, a number)."""
    text = value.strip().upper()
    scale = {"K": 1 << 10, "M": MiB, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    if not digits.isdigit():
        raise ValueError(f"innodb_buffer_pool_size: {value!r} is not a size (e.g. 4G, 512M)")
    return int(digits) * scale


def mariadb_binaries() -> tuple[str, str]:
    """(mariadb-install-db, mariadbd), from PATH or Debian's places."""
    found = []
    for name, fallback in (
        ("mariadb-install-db", "/usr/bin/mariadb-install-db"),
        ("mariadbd", "/usr/sbin/mariadbd"),
    ):
        path = shutil.which(name) or (fallback if os.access(fallback, os.X_OK) else None)
        if path is None:
            raise ServerError(
                f"the managed mariadb server needs `{name}`: install MariaDB "
                "(Debian/Ubuntu: apt-get install -y mariadb-server)"
            )
        found.append(path)
    return found[0], found[1]


class MariaDBServer(Server):
    name = "mariadb"
    refuses_root = True
    start_timeout_s: ClassVar[float] = 90.0

    def __init__(self, settings: dict[str, str] | None = None, tuning: Tuning = "machine"):
        super().__init__()
        self.install_db, self.mariadbd = mariadb_binaries()
        self.data = self.dir / "data"
        self.password = secrets.token_urlsafe(18)
        self.settings = {str(k): str(v) for k, v in (settings or {}).items()}
        self.tuning = tuning
        self.given = server_settings(tuning, self.settings)
        self.init_file = self.dir / "init.sql"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(LC_ALL="C", LANG="C", TZ="UTC")
        for k in ("MYSQL_HOST", "MYSQL_TCP_PORT", "MYSQL_UNIX_PORT", "MYSQL_PWD"):
            env.pop(k, None)
        return env

    def prepare(self) -> None:
        (self.dir / "tmp").mkdir(exist_ok=True)
        self.give_to_user(self.dir / "tmp")
        self.run_prepare(
            [
                self.install_db,
                "--no-defaults",
                f"--datadir={self.data}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
                f"--tmpdir={self.dir / 'tmp'}",
            ],
            "mariadb-install-db",
            cwd=self.dir,
        )
        pw = self.password.replace("\\", "\\\\").replace("'", "\\'")
        self.init_file.touch(mode=0o600)
        self.init_file.write_text(
            f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{pw}';\n"
            f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1';\n"
            f"CREATE DATABASE IF NOT EXISTS {DATABASE};\n"
        )
        self.give_to_user(self.dir)

    def command(self) -> list[str]:
        settings = {
            "datadir": str(self.data),
            "socket": str(self.dir / "mariadb.sock"),
            "pid-file": str(self.dir / "mariadbd.pid"),
            "tmpdir": str(self.dir / "tmp"),
            "port": str(self.port),
            "bind-address": "127.0.0.1",
            "init-file": str(self.init_file),
            "max_connections": "1000",
            **self.given,
        }
        return [
            self.mariadbd,
            "--no-defaults",
            "--skip-name-resolve",
            *(f"--{k}={v}" for k, v in settings.items()),
        ]

    def ready(self) -> bool:
        import pymysql

        conn = pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=self.password,
            database=DATABASE,
            connect_timeout=2,
        )
        conn.close()
        return True

    def start(self) -> Server:
        super().start()
        self.init_file.unlink(missing_ok=True)  # done: the password leaves the disk
        return self

    def version(self) -> str:
        out = subprocess.run(
            [self.mariadbd, "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip()

    def running_settings(self) -> dict[str, str]:
        """``SHOW GLOBAL VARIABLES`` of InnoDB's memory and durability, the
        vector index's cache, connections, and every setting given."""
        import pymysql

        names = sorted({*RECORDED, *(k.replace("-", "_") for k in self.settings)})
        conn = pymysql.connect(
            host="127.0.0.1", port=self.port, user=USER, password=self.password, connect_timeout=5
        )
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ("
                    + ", ".join(["%s"] * len(names))
                    + ")",
                    names,
                )
                found = {str(k): str(v) for k, v in sorted(cur.fetchall())}
        finally:
            conn.close()
        return {"tuning": self.tuning, **found}

    @property
    def url(self) -> str:
        return f"mysql://{USER}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{DATABASE}"
