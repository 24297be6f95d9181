"""One server per engine per test session, started on first use.

The conformance suite runs the server engines in *external* mode: each
test gets ``StoreSpec(engine, url=shared_url(engine))`` against a server
the tests started themselves (starting one per test would be too slow).
Servers stop at the end of the session (the ``stop_shared_servers``
fixture in conftest.py, with the lifecycle's own atexit as a backstop).

An engine whose server cannot start fails its tests loudly; only
``STOREBENCH_SKIP_ENGINES=pgvector,redis`` or ``STOREBENCH_EMBEDDED_ONLY=1``
(every managed server engine; never set by CI) skips them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storebench.errors import UserError
from storebench.servers.base import Server
from storebench.stores.base import StoreSpec
from storebench.stores.opening import open_store
from tests.conftest import remove_unheld_shm, shm_entries, shm_files


def _postgres() -> Server:
    from storebench.servers.postgres import PostgresServer

    return PostgresServer()


def _redis() -> Server:
    from storebench.servers.redis import RedisServer

    return RedisServer()


def _milvus() -> Server:
    from storebench.servers.milvus_standalone import MilvusServer

    return MilvusServer()


def _milvus_lite() -> Server:
    from storebench.servers.milvus import MilvusLiteServer

    return MilvusLiteServer()


def _agdb() -> Server:
    from storebench.servers.agdb import AgdbServer

    return AgdbServer()


def _falkordb() -> Server:
    from storebench.servers.falkordb import FalkorDBServer

    return FalkorDBServer()


def _ferretdb() -> Server:
    from storebench.servers.ferretdb import FerretDBServer

    return FerretDBServer()


def _weaviate() -> Server:
    from storebench.servers.weaviate import WeaviateServer

    return WeaviateServer()


def _mariadb() -> Server:
    from storebench.servers.mariadb import MariaDBServer

    return MariaDBServer()


FACTORIES: dict[str, Callable[[], Server]] = {
    "agdb": _agdb,
    "pgvector": _postgres,
    "redis": _redis,
    "milvus": _milvus,  # the real Milvus standalone (each in its own network namespace)
    "milvus-lite": _milvus_lite,
    "falkordb": _falkordb,
    "mariadb": _mariadb,
    "mongodb": _ferretdb,
    "weaviate": _weaviate,
    "postgres": _postgres,  # a second PostgreSQL, for pgvector's storage modes
}

_servers: dict[str, Server] = {}
_lock = threading.Lock()


# engines whose tests need a server the tests start (or a distribution or
# binary that tools/setup.py installs)
SERVER_ENGINES = {*FACTORIES, "elasticsearch", "opensearch", "weaviate", "ferretdb"}


def embedded_only() -> bool:
    return os.environ.get("STOREBENCH_EMBEDDED_ONLY", "") not in ("", "0")


def skipped(engine: str) -> bool:
    if embedded_only() and engine in SERVER_ENGINES:
        return True
    return engine in {e.strip() for e in os.environ.get("STOREBENCH_SKIP_ENGINES", "").split(",")}


def shared_server(engine: str) -> Server:
    """The session's server for ``engine`` (started now if it is the first use)."""
    if skipped(engine):
        pytest.skip(f"{engine} skipped by STOREBENCH_SKIP_ENGINES / STOREBENCH_EMBEDDED_ONLY")
    with _lock:
        server = _servers.get(engine)
        if server is None or not server.alive():
            server = FACTORIES[engine]().start()
            _servers[engine] = server
        return server


def shared_url(engine: str) -> str:
    return shared_server(engine).url


def stop_all() -> None:
    """Stops the shared servers side by side: each waits for its own clean shutdown."""
    from concurrent.futures import ThreadPoolExecutor

    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    with ThreadPoolExecutor(max(len(servers), 1)) as pool:
        list(pool.map(Server.stop, servers))


# --- helpers for the engine tests (test_pgvector.py, test_redis.py, ...) ------


def gone(pid: int, within: float = 15.0) -> bool:
    """The process has exited (or is a zombie nobody reaped yet)."""
    import time

    import psutil

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def check_managed(spec: StoreSpec) -> None:
    """A spec without a URL: the store starts its server, works, and close
    stops it, leaving no process and no data directory."""
    import numpy as np

    from tests.conftest import make_docs

    assert spec.url is None
    with pytest.raises(UserError, match="managed server"):
        spec.open()  # the store alone never starts a server (client processes open it)
    opened = open_store(spec)
    store, server = opened.store, opened.server
    try:
        assert server is not None and server.alive()
        pid, datadir = server.proc.pid, server.dir  # type: ignore[union-attr]
        assert store.spec.url == server.url  # process clients reach the same server
        assert opened.server_facts()["startup_s"] > 0  # type: ignore[index]
        docs = make_docs(300)
        coll = store.create_collection("sb_managed", docs.schema())
        coll.insert(docs)
        assert coll.count() == 300
        res = coll.search(docs.vectors[:5], 1)
        assert res.ids[:, 0].tolist() == [0, 1, 2, 3, 4]
        assert np.allclose(res.distances[:, 0], 0, atol=1e-3)
        pids = [p.pid for p in server.processes()]
    finally:
        opened.close()
    assert opened.server is None
    assert all(gone(p) for p in [pid, *pids]), "a server process outlived close()"
    assert not datadir.exists()


def check_ann(spec: StoreSpec, index: dict, ef: int, metric: str = "l2") -> float:
    """build_index with ``index``, search with ``ef``: recall and distances."""
    import numpy as np

    from storebench.data.truth import GroundTruth, recall_at_k
    from tests.conftest import make_docs

    store = spec.open()
    try:
        docs = make_docs(3000, dim=32, seed=3)
        queries = make_docs(50, dim=32, seed=4).vectors
        if metric != "l2":  # HNSW is no maximum-inner-product index: unit vectors
            docs.vectors[:] /= np.linalg.norm(docs.vectors, axis=1, keepdims=True)
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        params = store.Index(**index)  # at creation too: an engine may fix it there
        schema = docs.schema(metric)  # type: ignore[arg-type]
        coll = store.create_collection("sb_ann", schema, params)
        for b in docs.batches(1000):
            coll.insert(b)
        coll.build_index(params)
        coll.set_search_params(store.Search(ef=ef))
        truth = GroundTruth.compute(docs.ids, docs.vectors, queries, 20, metric)  # type: ignore[arg-type]
        res = coll.search(queries, 10)
        recall = float(recall_at_k(res.ids, truth, 10).mean())
        hit = res.ids[:, 0] == truth.ids[:, 0]
        np.testing.assert_allclose(
            res.distances[hit, 0], truth.distances[hit, 0], rtol=1e-3, atol=1e-3
        )
        assert coll.count() == len(docs)
        coll.drop()
    finally:
        store.close()
    return recall


# grid={}: one run (the crud scenario's HNSW grid would make six)
# small runs: the memory check (which counts a machine-tuned server's whole
# shared_buffers) is not what these tests check, and the servers of a
# parallel test worker beside them leave less available than a run needs
SMALL_RUN = {"n": 2000, "dim": 16, "batch_size": 500, "ops": 200, "warmup": 2, "grid": {}}
SMALL_RUN |= {"driver.memory_check": False}


def crud_run(store: str, results: Path, **params: Any) -> dict[str, Any]:
    """One crud run through the real runner (``store`` is ENGINE or ENGINE=URL)."""
    import storebench

    (rec,) = storebench.run(
        "crud", stores=[store], set={**SMALL_RUN, **params}, results_dir=results
    )
    return rec


def kill_during_run(engine: str, results: Path, monkeypatch: Any) -> tuple[dict[str, Any], float]:
    """Runs crud on a managed ``engine``, SIGKILLs its server once the read
    task is measuring; returns the record and seconds from kill to record."""
    import logging
    import signal
    import time

    from storebench.servers import base

    started: list[Server] = []
    real_start = base.Server.start

    def spy(self: Server) -> Server:
        started.append(self)
        return real_start(self)

    monkeypatch.setattr(base.Server, "start", spy)
    measuring = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "task read: measuring":
                measuring.set()

    killed_at: list[float] = []
    mapped: set[str] = set()

    finished = threading.Event()

    def killer() -> None:
        while not finished.is_set():
            if measuring.wait(0.05) and started:
                pid = started[-1].proc.pid  # type: ignore[union-attr]
                mapped.update(shm_files([pid, *(p.pid for p in started[-1].processes())]))
                os.kill(pid, signal.SIGKILL)
                killed_at.append(time.monotonic())
                return

    log = logging.getLogger("storebench")
    handler, level = Watch(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    t = threading.Thread(target=killer, daemon=True)
    shm_before = shm_entries()
    t.start()
    try:
        rec = crud_run(engine, results, ops=10_000_000)  # far more than it can do
        done = time.monotonic()
    finally:
        finished.set()
        log.removeHandler(handler)
        log.setLevel(level)
    t.join(5)
    # what the SIGKILLed engine leaves in /dev/shm (named like what it mapped)
    remove_unheld_shm(shm_before, like=mapped)
    assert killed_at, f"the read task never started measuring: {rec['status']}: {rec['error']}"
    assert started and all(not s.alive() for s in started)
    assert gone(started[-1].proc.pid)  # type: ignore[union-attr]
    return rec, done - killed_at[0]
