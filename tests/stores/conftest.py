"""Engines under the conformance suite. Each entry makes a StoreSpec for a
fresh, private instance; later engines (servers) add their entries here."""

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from storebench.stores.base import StoreSpec
from storebench.stores.params import IndexParams, SearchParams
from tests.stores import servers_java  # noqa: F401  (adds elasticsearch, opensearch)
from tests.stores.servers import shared_url, stop_all

ENGINES: dict[str, Callable[[Path], StoreSpec]] = {
    "memory": lambda tmp: StoreSpec("memory"),
    "sqlite": lambda tmp: StoreSpec("sqlite", str(tmp / "conformance.db")),
    "sqlite:memory": lambda tmp: StoreSpec(
        "sqlite", options={"mode": "memory", "synchronous": "off"}
    ),
    # agdb in this process (the storebench_agdb extension): the study's three storage kinds
    "agdb-embedded": lambda tmp: StoreSpec("agdb-embedded"),  # mapped, a private directory
    "agdb-embedded:file": lambda tmp: StoreSpec(
        "agdb-embedded", str(tmp / "agdb"), options={"db_type": "file"}
    ),
    "agdb-embedded:memory": lambda tmp: StoreSpec("agdb-embedded", options={"db_type": "memory"}),
    # servers: external mode, against one server per engine the tests started
    "agdb": lambda tmp: StoreSpec("agdb", shared_url("agdb")),  # graph: no vector search
    "pgvector": lambda tmp: StoreSpec("pgvector", shared_url("pgvector")),
    "redis": lambda tmp: StoreSpec("redis", shared_url("redis")),
    "milvus": lambda tmp: StoreSpec("milvus", shared_url("milvus")),
    "milvus-lite": lambda tmp: StoreSpec("milvus-lite", shared_url("milvus-lite")),
    "hnswlib": lambda tmp: StoreSpec("hnswlib"),
    "faiss": lambda tmp: StoreSpec("faiss"),
    "usearch": lambda tmp: StoreSpec("usearch"),
    "qdrant-edge": lambda tmp: StoreSpec("qdrant-edge", str(tmp / "qdrant")),
    "lancedb": lambda tmp: StoreSpec("lancedb", str(tmp / "lancedb")),
    "chroma": lambda tmp: StoreSpec("chroma", str(tmp / "chroma")),
    "sqlite-vec": lambda tmp: StoreSpec("sqlite-vec", str(tmp / "conformance-vec.db")),
    "elasticsearch": lambda tmp: StoreSpec("elasticsearch", shared_url("elasticsearch")),
    "opensearch": lambda tmp: StoreSpec("opensearch", shared_url("opensearch")),
    # graph and document engines: no vector search (the vector is only stored)
    "kuzu": lambda tmp: StoreSpec("kuzu", str(tmp / "kuzu.db")),
    "kuzu:memory": lambda tmp: StoreSpec("kuzu", options={"mode": "memory"}),
    "mongita": lambda tmp: StoreSpec("mongita", str(tmp / "mongita")),
    "mongita:memory": lambda tmp: StoreSpec("mongita", options={"mode": "memory"}),
    # the social study's `postgres` (pgvector, commits not waiting for the WAL
    # flush), on a server of its own: the suite plants foreign tables
    "postgres:sync-off": lambda tmp: StoreSpec(
        "pgvector",
        shared_url("postgres"),
        options={"synchronous_commit": "off"},
    ),
    "falkordb": lambda tmp: StoreSpec("falkordb", shared_url("falkordb")),
    "mariadb": lambda tmp: StoreSpec("mariadb", shared_url("mariadb")),
    "weaviate": lambda tmp: StoreSpec("weaviate", shared_url("weaviate")),
    # the MongoDB wire protocol, on the managed FerretDB (SQLite)
    "mongodb": lambda tmp: StoreSpec("mongodb", shared_url("mongodb")),
    "duckdb": lambda tmp: StoreSpec("duckdb", str(tmp / "duckdb")),
}

# Index and search parameters (neutral names) the suite builds and searches
# with, per entry of ENGINES; the engine's defaults for an entry not here.
PARAMS: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "pgvector": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "redis": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "milvus": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "milvus-lite": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "hnswlib": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "faiss": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    # usearch's multi-threaded add now and then builds a weaker graph on this
    # small clustered set (about 1 build in 300 below recall 0.9 at m=16): m=32
    "usearch": ({"m": 32, "ef_construct": 400}, {"ef": 400}),
    "qdrant-edge": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "lancedb": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "chroma": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "elasticsearch": ({"m": 16, "ef_construct": 200}, {"ef": 100}),
    "opensearch": ({"m": 16, "ef_construct": 200}, {"ef": 100}),
    "postgres:sync-off": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "duckdb": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
    "weaviate": ({"m": 16, "ef_construct": 200}, {"ef": 200}),
}

# Engines that run only by URL (no server installs here) join when a variable
# names one: STOREBENCH_<ENGINE>_URL, e.g. STOREBENCH_ARANGODB_URL=
# http://user:pass@host:8529/throwaway_db. Use a database you can throw away:
# the suite plants a collection (someone_elses_data) there and leaves it.
for _engine in ("arangodb",):
    _url = os.environ.get(f"STOREBENCH_{_engine.upper()}_URL")
    if _url:
        ENGINES[_engine] = lambda tmp, _e=_engine, _u=_url: StoreSpec(_e, _u)


@pytest.fixture(scope="session", autouse=True)
def stop_shared_servers():
    """The servers tests/stores/servers.py started stop with the session."""
    yield
    stop_all()


@pytest.fixture(params=sorted(ENGINES))
def entry(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def spec(entry: str, tmp_path: Path) -> StoreSpec:
    return ENGINES[entry](tmp_path)


@pytest.fixture
def params(entry: str, store) -> tuple[IndexParams, SearchParams]:
    """The entry's index and search parameters, as the store's models."""
    index, search = PARAMS.get(entry, ({}, {}))
    return store.Index(**index), store.Search(**search)


@pytest.fixture
def store(spec: StoreSpec):
    s = spec.open()
    yield s
    s.close()
