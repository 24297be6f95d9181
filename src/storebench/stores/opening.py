"""Opening a store for a run: the one place a managed server is started.

A store given no URL may declare the server it can be managed with
(``Store.managed_server``); ``open_store`` starts that server, opens the
store on the server's URL and keeps both, so the store only ever sees a URL
and the run (the runner, the Python API, the tests) stops what it started.
Client processes and Ray actors open the store's spec, which holds that
URL: they never start a second server (``StoreSpec.open`` refuses a spec
that would need one).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from storebench.stores.base import Store, StoreSpec
from storebench.stores.config import ClusterOptions

if TYPE_CHECKING:
    from storebench.servers.base import Server
    from storebench.servers.cluster import Cluster


class OpenStore:
    """A live store and the managed server it runs on (None: an embedded
    engine, or a server the user gave by URL)."""

    def __init__(self, store: Store, server: Server | Cluster | None = None):
        self.store = store
        self.server = server

    def health(self, wait_s: float = 0.0) -> str | None:
        """None if the engine is fine; else what happened to it (a managed
        server that died, with its last log lines), waiting up to ``wait_s``
        for a server that is still dying."""
        return self.server.health(wait_s) if self.server is not None else None

    def server_facts(self) -> dict[str, Any] | None:
        """For the record: how the managed server ran (None when external)."""
        if self.server is None:
            return None
        return {
            "managed": True,
            "startup_s": self.server.started_s,
            "user": self.server.user,
            "settings": self.server.engine_settings,
        }

    def close(self) -> None:
        """The store first (its connections, its private directory), then
        the server; the server stops even if the store fails to close."""
        try:
            self.store.close()
        finally:
            if self.server is not None:
                self.server.stop()
                self.server = None

    def abandon(self) -> None:
        """What ``close`` does, without waiting on the engine (a second
        signal ends storebench at once): kill the server."""
        try:
            self.store.abandon()
        finally:
            if self.server is not None:
                self.server.kill()

    def __enter__(self) -> OpenStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def servers_started(spec: StoreSpec) -> int:
    """The server processes ``open_store(spec)`` would start (nothing is
    built or started to tell): 0 (embedded, or a URL), 1, or a managed
    cluster's nodes."""
    options, make = spec.server_maker()
    if make is None:
        return 0
    return int(options.topology()["nodes"]) if isinstance(options, ClusterOptions) else 1


def open_store(spec: StoreSpec) -> OpenStore:
    """The store of ``spec``, on its managed server if it has no URL and the
    store declares one (started here, stopped by ``OpenStore.close``). If
    opening fails or is interrupted half-way, what was started goes: the
    store's private directory (``StoreSpec.open``), then the server."""
    if spec.url is not None:
        return OpenStore(spec.open())
    options, make = spec.server_maker()
    if make is None:  # embedded, or a store that needs a URL (it says so as it opens)
        return OpenStore(spec.open())
    server: Server | Cluster | None = None
    try:
        server = make()
        server.start()
        store = spec.with_(url=server.url, checked_options=options).open()
    except BaseException:
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop()
        raise
    return OpenStore(store, server)
