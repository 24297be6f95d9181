"""pgvector's store: the connection per thread with its session and search
settings, the vector type registered on each, prepared searches, tables
made and found, the managed PostgreSQL it declares."""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import metadata
from typing import Any, Literal
from urllib.parse import SplitResult

import numpy as np
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus, ExecStatus, Format
from pydantic import field_validator

from storebench.data.batch import Schema
from storebench.errors import UserError
from storebench.stores.base import Capability, Collection, MiB, Store, StoreSpec, redact_url
from storebench.stores.config import StoreOptions, UrlForm, check_port
from storebench.stores.params import HnswIndex, HnswSearch, IndexParams
from storebench.stores.sql.pgvector.codec import RAW_CURSOR, VectorDumper, VectorLoader
from storebench.stores.sql.pgvector.collection import BUFFER, PgVectorCollection
from storebench.stores.sql.sqlite import PerThread, quote

_SQL_TYPE = {"int": "bigint", "float": "double precision", "bool": "boolean", "str": "text"}
_MAX_IDENT = 63  # PostgreSQL truncates longer identifiers (NAMEDATALEN - 1)


def _libpq(url: str, parts: SplitResult | None) -> dict[str, Any]:
    """The connection string as libpq reads it (keywords and URI alike),
    without connecting; its ports numbers."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ValueError(str(exc)) from None
    for port in str(params.get("port") or "").split(","):
        check_port(port.strip())
    return params


class PgVectorStore(Store):
    async_ops = "native"
    engine = "pgvector"
    server = "postgres:PostgresServer"
    collection = PgVectorCollection
    capabilities = frozenset(Capability)
    Index = HnswIndex
    Search = HnswSearch
    extra = "pgvector"
    url_form = UrlForm(
        "postgresql://user[:password]@host:port/dbname or host=... port=... dbname=...",
        schemes=("postgresql", "postgres"),
        keywords=True,
        parse=_libpq,
    )
    handles = ("_conns",)

    class Options(StoreOptions):
        managed_only = ("settings", "tuning")
        settings: dict[str, str | int | float | bool] = {}  # postgresql.conf, over the tuning
        # the managed server's settings: the machine's rule, or initdb's defaults
        tuning: Literal["machine", "initdb"] = "machine"
        # a storage mode: on | off
        synchronous_commit: Literal["on", "off", "local", "remote_write", "remote_apply"] | None = (
            None
        )
        maintenance_work_mem: str | int | None = None  # for index builds, e.g. 1GB

        @field_validator("synchronous_commit", mode="before")
        @classmethod
        def _on_off(cls, v: Any) -> Any:
            if isinstance(v, bool):  # YAML reads a bare on/off as a boolean
                return "on" if v else "off"
            return v.lower() if isinstance(v, str) else v

        @field_validator("settings")
        @classmethod
        def _postgres_takes_them(cls, v: dict[str, Any]) -> dict[str, Any]:
            from storebench.servers.postgres import check_settings

            check_settings(v)
            return v

        @field_validator("maintenance_work_mem")
        @classmethod
        def _a_memory_size(cls, v: Any) -> Any:
            from storebench.servers.postgres import memory_bytes

            if v is not None:
                memory_bytes("maintenance_work_mem", v)
            return v

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self._local = threading.local()  # this thread's writer, prepared queries, settings
        self._conns = PerThread(self._connect)
        self._session_vars: dict[str, str] = {}
        self._generation = 0
        self._vector_oid = 0  # the vector type's (``_register``)
        conn = self.connection()  # fail now, not in the first timed operation
        self._vector_ready(conn)

    # --- connections -----------------------------------------------------------
    def cannot_connect(self, exc: Exception) -> UserError:
        """The one line for a connection that failed (this one's, the async view's)."""
        return UserError(
            f"cannot connect to PostgreSQL at {redact_url(self.spec.url)}: {exc}",
            where="store pgvector",
        )

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self.spec.url or "", autocommit=True)
        except psycopg.OperationalError as exc:
            raise self.cannot_connect(exc) from exc
        sync = self.options.synchronous_commit
        if sync is not None:
            conn.execute("SELECT set_config('synchronous_commit', %s, false)", [sync])
        self._register(conn)
        return conn

    def _vector_ready(self, conn: psycopg.Connection[Any]) -> None:
        """The vector extension exists (created if missing and allowed)."""
        row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        if row is None:
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                raise UserError(
                    f"the pgvector extension is not installed in {redact_url(self.spec.url)} "
                    f"and could not be created: {exc}",
                    where="store pgvector",
                ) from exc
        for c in self._conns.opened():  # connections opened before the type existed
            self._register(c)

    def _register(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute("SELECT to_regtype('vector')::oid").fetchone()
        oid = row[0] if row else None
        if not oid:
            return
        self._vector_oid = oid
        dumper = type("VectorDumper", (VectorDumper,), {"oid": oid})
        conn.adapters.register_dumper(np.ndarray, dumper)
        conn.adapters.register_loader(oid, VectorLoader)

    def connection(self) -> psycopg.Connection[Any]:
        """This thread's connection (autocommit: each statement commits)."""
        return self._conns.get()

    def _writer(self) -> psycopg.Cursor[Any]:
        """This thread's binary cursor for inserts, made once (setting one up
        is a tenth of a one-row insert's client CPU); inserts fetch nothing,
        so one cursor serves them all."""
        cur = getattr(self._local, "writer", None)
        if cur is None:
            conn = self.connection()
            if RAW_CURSOR is not None:
                cur = RAW_CURSOR(conn)
                cur.format = Format.BINARY
            else:
                cur = conn.cursor(binary=True)
            self._local.writer = cur
        return cur

    def _prepared(self, sql: str) -> Callable[[bytes], Any]:
        """This thread's runner of ``sql``, a query whose one parameter is a
        vector in pgvector's binary form: prepared on the server once per
        connection, then each call one ``PQexecPrepared`` (the GIL released
        while it waits) returning the checked result (``PGresult``, values
        binary). Without the cursor's adaptation, row building and wait
        loop, a query's client cost is little more than libpq's."""
        conn = self.connection()
        runners: dict[str, Any] | None = getattr(self._local, "prepared", None)
        if runners is None:
            runners = self._local.prepared = {}
        known: Callable[[bytes], Any] | None = runners.get(sql)
        if known is not None:
            return known
        pgconn, encoding = conn.pgconn, conn.info.encoding
        name = f"storebench_{len(runners)}".encode()

        def check(res: Any) -> Any:
            if res.status == ExecStatus.TUPLES_OK or res.status == ExecStatus.COMMAND_OK:
                return res
            if pgconn.status == ConnStatus.BAD:
                message = pgconn.get_error_message(encoding)
                raise psycopg.OperationalError(f"the connection to PostgreSQL broke: {message}")
            raise psycopg.errors.error_from_result(res, encoding=encoding)

        check(pgconn.prepare(name, sql.encode(), [self._vector_oid]))
        formats = [Format.BINARY]

        def run(vector: bytes) -> Any:
            return check(pgconn.exec_prepared(name, [vector], formats, Format.BINARY))

        runners[sql] = run
        return run

    def _set_search(self, params: HnswSearch) -> None:
        if params.ef is not None:
            self._session_vars["hnsw.ef_search"] = str(params.ef)
            self._generation += 1

    def _apply_settings(self) -> None:
        """Search settings reach each thread's connection before its next search."""
        if getattr(self._local, "generation", -1) == self._generation:
            return
        conn = self.connection()
        for k, v in self._session_vars.items():
            conn.execute("SELECT set_config(%s, %s, false)", [k, v])
        self._local.generation = self._generation

    # --- collections ---------------------------------------------------------------
    def has_collection(self, name: str) -> bool:
        row = self.connection().execute("SELECT to_regclass(%s)", [quote(name)]).fetchone()
        return row is not None and row[0] is not None

    def _check_name(self, name: str, schema: Schema) -> None:
        longest = max(
            [len(f"{name}_hnsw"), *(len(f"{name}_i{i}") for i in range(len(schema.indexed)))]
        )
        if name == BUFFER:
            raise UserError(f"{name!r} is reserved by the pgvector store", where="store pgvector")
        if len(name.encode()) > _MAX_IDENT or longest > _MAX_IDENT:
            raise UserError(
                f"collection name {name!r} is too long for PostgreSQL identifiers "
                f"({_MAX_IDENT} bytes with its index suffixes)",
                where="store pgvector",
            )

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        self._check_name(name, schema)
        cols = ["id bigint PRIMARY KEY"] + [
            f"{quote(f)} {_SQL_TYPE[k]}" for f, k in schema.fields.items()
        ]
        if schema.dim is not None:
            cols.append(f"v vector({int(schema.dim)})")
        conn = self.connection()
        with conn.transaction():
            conn.execute(f"CREATE TABLE {quote(name)} ({', '.join(cols)})")
            for i, f in enumerate(schema.indexed):
                conn.execute(f"CREATE INDEX {quote(f'{name}_i{i}')} ON {quote(name)} ({quote(f)})")
        return PgVectorCollection(self, name, schema)

    @classmethod
    def managed_memory(
        cls, options: Options, index: HnswIndex, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        from storebench.servers.postgres import memory_bytes, server_settings

        # the managed PostgreSQL keeps data on disk: shared buffers (taken
        # as the server touches them, all of them in a long run), the index
        # build's memory and its backends are its fixed share
        given = server_settings(options.tuning, options.settings)
        shared = memory_bytes("shared_buffers", given.get("shared_buffers", "128MB"))
        build = options.maintenance_work_mem or given.get("maintenance_work_mem", "64MB")
        return 0, shared + memory_bytes("maintenance_work_mem", build) + 64 * MiB

    def versions(self) -> dict[str, str]:
        conn = self.connection()
        server = conn.execute("SHOW server_version").fetchone()
        ext = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        engine = f"PostgreSQL {server[0] if server else '?'} + pgvector {ext[0] if ext else '?'}"
        impl = psycopg.pq.__impl__
        return {"engine": engine, "client": f"psycopg {metadata.version('psycopg')} ({impl})"}

    def close(self) -> None:
        self._local = threading.local()
        super().close()
