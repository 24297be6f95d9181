"""agdb embedded: the agdb library in this process (what the social study
measured), through storebench's own extension ``storebench_agdb``
(``native/agdb_embedded``, Rust + PyO3, built by ``tools/setup.py``).

The queries are the server store's (``agdb_store.py``): the same JSON list
of agdb ``QueryType``s that agdb_server's ``/exec`` and ``/exec_mut`` take,
run by the extension with the same rules (one transaction per list, ``:N``
references to earlier results) and answered with the same JSON. So this
store is ``AgdbStore`` with another transport, :class:`EmbeddedAgdb`, in
place of the HTTP client: the graph model, filters and decoding have one
home. The extension releases the GIL while it parses, runs and answers, so
client threads overlap in agdb the way server requests do; reads share a
database, writes take it alone (agdb's own locking in the server). At most
``workers`` calls run in agdb at once (default: one per core), as the
server's tokio runtime and the study's run them: otherwise the social
scenario's 200 reader threads all run agdb at once (a load average of 60
on 2 cores, see docs/engines/agdb-embedded.md).

Storage: ``db_type`` ``mapped`` (agdb's default: a file, memory-mapped),
``file`` (file only), ``memory`` (nothing on disk): the study's three
tables. Each agdb database is a file ``<directory>/<db>`` (agdb keeps its
write-ahead log beside it as ``.<db>``). The directory is the URL, else a
private temporary one removed on close. A directory reopened later finds its
databases again (``storebench-agdb.json`` records each one's db_type).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any, Literal

from pydantic import NonNegativeInt, StrictBool

from storebench.errors import UserError
from storebench.servers.agdb import AgdbError, Query, QueryResult, ServerDatabase
from storebench.stores.base import Capability, RamUse
from storebench.stores.config import DIRECTORY, StoreOptions
from storebench.stores.graph.agdb import AgdbStore

OWNER = "storebench"  # the server's databases have owners; here one, for the same names
CATALOG = "storebench-agdb.json"
QUERY_FAILED = 470  # the HTTP status agdb_server gives a failed query (ErrorCode::DbError)


def _native() -> Any:
    try:
        import storebench_agdb
    except ImportError as exc:
        raise UserError(
            "agdb-embedded needs storebench's agdb extension (storebench_agdb), built from "
            "native/agdb_embedded with cargo and maturin: run `python tools/setup.py` "
            "(what `make test` does) or `pip install ./native/agdb_embedded`",
            where="store agdb-embedded",
        ) from exc
    return storebench_agdb


class EmbeddedAgdb:
    """The agdb databases of one directory, with the server client's methods
    (``exec``, ``exec_mut``, ``db_list``, ...): the store cannot tell them
    apart. JSON in and out, as over HTTP: encoding and decoding stay in
    Python, as the server store's do."""

    def __init__(self, directory: str | None, sync_mode: str | None = None, workers: int = 0):
        self.native = _native()
        self.directory = directory  # None: memory databases only
        self.sync_mode = sync_mode
        self.workers = workers  # agdb calls at once per database (0: no bound)
        self._dbs: dict[str, Any] = {}  # name -> storebench_agdb.Database
        self._lock = threading.Lock()  # opening, adding, deleting

    def __repr__(self) -> str:
        return f"EmbeddedAgdb({self.directory or 'memory'})"

    # --- databases -------------------------------------------------------------
    def _catalog(self) -> dict[str, str]:
        if self.directory is None:
            return {}
        try:
            with open(os.path.join(self.directory, CATALOG)) as f:
                return dict(json.load(f))
        except FileNotFoundError:
            return {}

    def _save_catalog(self, catalog: dict[str, str]) -> None:
        assert self.directory is not None
        path = os.path.join(self.directory, CATALOG)
        with open(path + ".tmp", "w") as f:
            json.dump(catalog, f)
        os.replace(path + ".tmp", path)

    def _path(self, db: str) -> str:
        if self.directory is None:
            return db  # a memory database's name only
        return os.path.join(self.directory, db)

    def _db(self, owner: str, db: str) -> Any:
        found = self._dbs.get(db) if owner == OWNER else None
        if found is not None:
            return found
        with self._lock:
            found = self._dbs.get(db)
            if found is None:
                kind = self._catalog().get(db) if owner == OWNER else None
                if kind is None:
                    raise AgdbError(404, f"db not found: {owner}/{db}", "exec")
                found = self._dbs[db] = self._open(db, kind)
        return found

    def _open(self, db: str, kind: str) -> Any:
        try:
            return self.native.Database(kind, self._path(db), self.sync_mode, self.workers)
        except self.native.QueryError as exc:
            raise AgdbError(QUERY_FAILED, str(exc), f"open {db}") from exc

    def db_list(self) -> list[ServerDatabase]:
        with self._lock:
            kinds = {**self._catalog(), **{n: d.kind for n, d in self._dbs.items()}}
        return [
            {
                "db": name,
                "owner": OWNER,
                "db_type": kind,
                "role": "admin",
                "size": int(self._db(OWNER, name).size()),
                "backup": 0,
                "created": 0,
            }
            for name, kind in sorted(kinds.items())
        ]

    def db_add(self, owner: str, db: str, db_type: str) -> None:
        with self._lock:
            catalog = self._catalog()
            if db in self._dbs or db in catalog:
                raise AgdbError(465, f"db already exists: {owner}/{db}", "db add")
            if db_type != "memory" and self.directory is None:
                raise UserError(
                    f"agdb-embedded: a {db_type} database needs a directory", where="store"
                )
            self._dbs[db] = self._open(db, db_type)
            if db_type != "memory":
                catalog[db] = db_type
                self._save_catalog(catalog)

    def db_delete(self, owner: str, db: str) -> None:
        with self._lock:
            found = self._dbs.pop(db, None)
            if found is not None:
                found.close()
            catalog = self._catalog()
            if catalog.pop(db, None) is not None:
                self._save_catalog(catalog)
        if self.directory is not None:
            for name in (db, f".{db}"):  # the database and its write-ahead log
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.directory, name))

    # --- queries ---------------------------------------------------------------
    def _run(self, run: Any, what: str, queries: list[Query]) -> list[QueryResult]:
        body = json.dumps(queries, separators=(",", ":")).encode()
        try:
            out = run(body)
        except self.native.QueryError as exc:
            raise AgdbError(QUERY_FAILED, str(exc), what) from exc
        return list(json.loads(out))

    def exec(self, owner: str, db: str, queries: list[Query]) -> list[QueryResult]:
        """Read-only queries in one read transaction (as the server's /exec)."""
        return self._run(self._db(owner, db).exec, "exec", queries)

    def exec_mut(self, owner: str, db: str, queries: list[Query]) -> list[QueryResult]:
        """Queries in one write transaction: all apply or none (/exec_mut)."""
        return self._run(self._db(owner, db).exec_mut, "exec_mut", queries)

    def optimize(self, owner: str, db: str, shrink_to_fit: bool = False) -> None:
        try:
            self._db(owner, db).optimize(shrink_to_fit)
        except self.native.QueryError as exc:
            raise AgdbError(QUERY_FAILED, str(exc), "optimize") from exc

    def version(self) -> str:
        return str(self.native.AGDB_VERSION)

    def close(self) -> None:
        with self._lock:
            dbs, self._dbs = self._dbs, {}
        for d in dbs.values():
            d.close()


class AgdbEmbeddedStore(AgdbStore):
    engine = "agdb-embedded"
    server = None  # agdb runs in this process
    capabilities = AgdbStore.capabilities - {Capability.SHARED_ACROSS_PROCESSES}
    extra = None  # the extension is built by tools/setup.py, not a pip extra
    url_form = DIRECTORY
    # in this process, whatever the db_type (mapped pages count too); vectors as f64
    ram = RamUse(vector=8, fields=2, overhead=256, fixed_mib=16)

    class Options(StoreOptions):
        db_type: Literal["mapped", "file", "memory"] = "mapped"
        db: str | None = None
        shrink_to_fit: StrictBool = False
        # agdb's own default (none): commits are not fsynced; commit fsyncs each
        sync_mode: Literal["none", "commit"] | None = None
        # agdb calls running at once (the server's tokio worker threads); 0: no bound
        workers: NonNegativeInt | None = None

    def _open_transport(self) -> EmbeddedAgdb:  # type: ignore[override]
        self.owner = OWNER
        opts = self.options
        directory = None if opts.db_type == "memory" else self.local_path(mkdir=True)
        workers = (os.cpu_count() or 1) if opts.workers is None else opts.workers
        return EmbeddedAgdb(directory, opts.sync_mode, workers)

    def versions(self) -> dict[str, str]:
        return {
            "engine": f"agdb {self.api.version()} (embedded)",
            "client": "storebench_agdb (Rust, PyO3): agdb's JSON queries in this process",
        }
