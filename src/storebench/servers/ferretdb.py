"""A managed FerretDB: the MongoDB wire protocol on SQLite, built once.

FerretDB 1.x (``github.com/FerretDB/FerretDB``, the Go module proxy) speaks
the MongoDB wire protocol over a SQLite or PostgreSQL backend; pymongo sees a
MongoDB 7.0 server. Its release process writes ``build/version/version.txt``
before building; the module proxy's copy lacks it, and a plain ``go install``
binary panics at start. So it is built from a vendored copy with that file
written (``servers/cache.py``, ``go_build_vendored``) into storebench's cache
(``engine_cache("ferretdb") / VERSION / bin``; about a minute, once)::

    python -m storebench.servers.ferretdb --install     # no-op when built

It runs with ``--handler=sqlite`` on the private directory, listens on
127.0.0.1 only, keeps its state file there too, turns telemetry off and its
debug HTTP listener (metrics, pprof; 127.0.0.1:8088 by default, so a second
server would collide) off. Readiness is a ``ping`` answered over the wire
protocol (pymongo).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

from storebench.servers.base import Server, ServerError, port_open
from storebench.servers.cache import Built, go_build_vendored

VERSION = "v1.24.2"
MODULE = "github.com/FerretDB/FerretDB"
PACKAGE = f"{MODULE}/cmd/ferretdb"
BINARY = "ferretdb"
LOG_LEVELS = ("debug", "info", "warn", "error")


def _make(work: Path) -> None:
    (work / "bin").mkdir()
    go_build_vendored(
        MODULE,
        VERSION,
        PACKAGE,
        work / "bin" / BINARY,
        {"build/version/version.txt": VERSION + "\n", "build/version/package.txt": "storebench\n"},
    )


BUILT = Built("ferretdb", BINARY, VERSION, f"{PACKAGE}@{VERSION}", _make, "Go, about a minute")


class FerretDBServer(Server):
    name = "ferretdb"
    start_timeout_s: ClassVar[float] = 60.0

    def __init__(self, log_level: str = "warn"):
        if log_level not in LOG_LEVELS:
            raise ServerError(
                f"ferretdb: unknown log_level {log_level!r} (use {', '.join(LOG_LEVELS)})"
            )
        self.binary = BUILT.require()  # before the directory exists: nothing to clean up
        super().__init__()
        self.log_level = log_level

    def prepare(self) -> None:
        (self.dir / "data").mkdir(exist_ok=True)

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--handler=sqlite",
            f"--sqlite-url=file:{self.dir / 'data'}/",
            f"--listen-addr=127.0.0.1:{self.port}",
            f"--state-dir={self.dir}",
            "--debug-addr=-",
            "--telemetry=disable",
            f"--log-level={self.log_level}",
        ]

    def running_settings(self) -> dict[str, str]:
        """Its back end and log level, as given on its command line."""
        return {"handler": "sqlite", "log_level": self.log_level}

    def _client(self):  # type: ignore[no-untyped-def]
        import pymongo

        return pymongo.MongoClient(self.url, serverSelectionTimeoutMS=2000, connectTimeoutMS=2000)

    def ready(self) -> bool:
        if not port_open(self.port):  # cheap, before a client that waits for a server
            return False
        client = self._client()
        try:
            client.admin.command("ping")
        finally:
            client.close()
        return True

    def version(self) -> str:
        client = self._client()
        try:
            info = client.admin.command("buildInfo")
        finally:
            client.close()
        ferret = info.get("ferretdbVersion", "?")
        return f"FerretDB {ferret} (MongoDB {info.get('version', '?')}, sqlite)"

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"


if __name__ == "__main__":
    sys.exit(BUILT.main())
