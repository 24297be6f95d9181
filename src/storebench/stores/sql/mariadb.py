"""The MariaDB store: tables in MariaDB (InnoDB by default), through PyMySQL
(pure Python: nothing to compile).

A collection is one table ``(id BIGINT PRIMARY KEY, <fields>, vec
LONGBLOB)`` in ``utf8mb4_nopad_bin``: strings compare byte for byte, like
the numpy reference (MariaDB's default collation ignores case and trailing
spaces). Reference fields are BIGINT columns; each field listed in
``Schema.indexed`` gets a B-tree index (indexed strings are VARCHAR(768),
the longest InnoDB indexes whole; others TEXT). The vector, when the schema
has one, is stored and returned as float32 bytes (no search).

Inserts are one multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` per batch
(PyMySQL folds ``executemany`` into one statement; an existing id is
replaced, as in every store). Filters compile with ``filters.to_sql``.
Each client thread has its own connection (autocommit).

``size_bytes`` is the table's data and index length from
``information_schema.TABLES`` after ``ANALYZE TABLE`` (InnoDB's page
counts; they lag writes until analysed). ``compact`` is ``OPTIMIZE TABLE``
on the collection's table only (InnoDB: recreate and analyse).

Without a URL it runs on a managed MariaDB (``servers/mariadb.py``,
Debian's ``mariadb-server``; started and stopped by ``stores.opening``); with
``mysql://user:password@host:port/database`` it only connects
(``MYSQL_PWD`` fills in a password the URL leaves out). Options:
``settings`` (server variables for the managed server, e.g.
``innodb_flush_log_at_trx_commit: 2``) and ``table_engine`` (``InnoDB``,
the default, or another MariaDB engine such as ``Aria``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, unquote

import numpy as np
import pymysql
from pydantic import StringConstraints, field_validator

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.errors import UserError
from storebench.stores.base import (
    DOCUMENTS,
    Capability,
    Collection,
    MiB,
    Store,
    StoreSpec,
    redact_url,
)
from storebench.stores.columns import batch_from_rows
from storebench.stores.config import StoreOptions, UrlForm
from storebench.stores.params import IndexParams, Order
from storebench.stores.sql.sqlite import PerThread, find_sql

_MAX_IDS = 10_000  # ids per IN (...) list
_MAX_IDENT = 64
VEC = "vec"


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_type(kind: str, indexed: bool) -> str:
    if kind == "str":
        return "VARCHAR(768)" if indexed else "LONGTEXT"
    return {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN"}[kind]


def _chunks(ids: np.ndarray) -> Iterable[list[int]]:
    for start in range(0, len(ids), _MAX_IDS):
        yield ids[start : start + _MAX_IDS].tolist()


class MariaDBCollection(Collection):
    store: MariaDBStore

    def __init__(self, store: MariaDBStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        for f in schema.fields:
            if f in ("id", VEC):
                raise UserError(
                    f"field name {f!r} is reserved by the mariadb store", where="store mariadb"
                )
        self._t = quote(name)
        self._fields = list(schema.fields)
        self._vec = schema.dim is not None
        scalars = ["id", *map(quote, self._fields)]
        self._select_scalars = ", ".join(scalars)
        self._select_all = ", ".join(scalars + ([VEC] if self._vec else []))

    def _cur(self) -> Any:
        return self.store.connection().cursor()

    def _params(self, docs: DocBatch, fields: list[str], id_last: bool) -> list[tuple[Any, ...]]:
        columns: list[Iterable[Any]] = [docs.fields[f].tolist() for f in fields]
        if docs.vectors is not None and self._vec:
            columns.append(map(np.ndarray.tobytes, docs.vectors))
        ids = docs.ids.tolist()
        columns = [*columns, ids] if id_last else [ids, *columns]
        return list(zip(*columns, strict=True))

    def insert(self, docs: DocBatch) -> None:
        names = ["id", *map(quote, self._fields)] + ([VEC] if self._vec else [])
        marks = ", ".join(["%s"] * len(names))
        sets = ", ".join(f"{c} = VALUES({c})" for c in names[1:]) or "id = id"
        sql = (
            f"INSERT INTO {self._t} ({', '.join(names)}) VALUES ({marks}) "
            f"ON DUPLICATE KEY UPDATE {sets}"
        )
        with self._cur() as cur:
            cur.executemany(sql, self._params(docs, self._fields, id_last=False))

    def get(self, ids: np.ndarray) -> DocBatch:
        rows: list[tuple[Any, ...]] = []
        with self._cur() as cur:
            for chunk in _chunks(ids):
                marks = ", ".join(["%s"] * len(chunk))
                cur.execute(
                    f"SELECT {self._select_all} FROM {self._t} WHERE id IN ({marks})", chunk
                )
                rows += cur.fetchall()
        return batch_from_rows(self.schema, rows, with_vectors=self._vec)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        sets = [f"{quote(f)} = %s" for f in fields] + (
            [f"{VEC} = %s"] if docs.vectors is not None and self._vec else []
        )
        if not sets:
            return
        sql = f"UPDATE {self._t} SET {', '.join(sets)} WHERE id = %s"
        conn = self.store.connection()
        with conn.cursor() as cur:
            conn.begin()  # one transaction per batch
            try:
                cur.executemany(sql, self._params(docs, fields, id_last=True))
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def delete(self, ids: np.ndarray) -> None:
        with self._cur() as cur:
            for chunk in _chunks(ids):
                marks = ", ".join(["%s"] * len(chunk))
                cur.execute(f"DELETE FROM {self._t} WHERE id IN ({marks})", chunk)

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        sql, params = find_sql(where, order, limit, "%s", quote)
        with self._cur() as cur:
            cur.execute(f"SELECT {self._select_scalars} FROM {self._t}{sql}", params)
            rows = cur.fetchall()
        return batch_from_rows(self.schema, rows, with_vectors=False)

    def count(self) -> int:
        with self._cur() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {self._t}")
            return int(cur.fetchone()[0])

    def size_bytes(self) -> int:
        with self._cur() as cur:
            cur.execute(f"ANALYZE TABLE {self._t}")
            cur.fetchall()
            cur.execute(
                "SELECT data_length + index_length FROM information_schema.TABLES "
                "WHERE table_schema = DATABASE() AND table_name = %s",
                [self.name],
            )
            row = cur.fetchone()
        return int(row[0] or 0) if row else 0

    def compact(self) -> None:
        with self._cur() as cur:
            cur.execute(f"OPTIMIZE TABLE {self._t}")
            cur.fetchall()

    def _drop(self) -> None:
        with self._cur() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {self._t}")


def _target(url: str, parts: SplitResult | None) -> dict[str, Any]:
    """What PyMySQL connects with."""
    if parts is None:  # not reached: the form takes URLs only
        raise ValueError("not a URL")
    database = unquote(parts.path.removeprefix("/"))
    if not database:
        raise ValueError("no database (the path names it)")
    if "/" in database:
        raise ValueError(f"the path is one database name, not {database!r}")
    password = unquote(parts.password) if parts.password is not None else None
    if password is None:
        password = os.environ.get("MYSQL_PWD", "")
    return {
        "host": parts.hostname,
        "port": parts.port or 3306,
        "user": unquote(parts.username or ""),
        "password": password,
        "database": database,
    }


class MariaDBStore(Store):
    engine = "mariadb"
    server = "mariadb:MariaDBServer"
    collection = MariaDBCollection
    capabilities = DOCUMENTS | {
        Capability.ORDER,
        Capability.SIZE,
        Capability.COMPACT,
        Capability.SHARED_ACROSS_PROCESSES,
    }
    extra = "mariadb"
    client_dist = "PyMySQL"
    handles = ("_conns",)
    url_form = UrlForm(
        "mysql://user:password@host:port/database", schemes=("mysql", "mariadb"), parse=_target
    )

    class Options(StoreOptions):
        managed_only = ("settings", "tuning")
        settings: dict[str, str | int | float | bool] = {}  # server variables, over the tuning
        # the managed server's variables: the machine's rule, or MariaDB's defaults
        tuning: Literal["machine", "defaults"] = "machine"
        table_engine: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")] = (
            "InnoDB"
        )

        @field_validator("settings")
        @classmethod
        def _buffer_pool_a_size(cls, v: dict[str, Any]) -> dict[str, Any]:
            from storebench.servers.mariadb import buffer_pool_bytes

            for k, value in v.items():
                if k.replace("-", "_") == "innodb_buffer_pool_size":
                    buffer_pool_bytes(str(value))
            return v

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self._target = self.check_url(self.spec.url)
        self._conns = PerThread(self._connect)
        self.connection()  # fail now, not in the first timed operation

    def _connect(self) -> Any:
        try:
            return pymysql.connect(
                **self._target, autocommit=True, charset="utf8mb4", connect_timeout=60
            )
        except pymysql.MySQLError as exc:
            raise UserError(
                f"cannot connect to MariaDB at {redact_url(self.spec.url)}: {exc}",
                where="store mariadb",
            ) from exc

    def connection(self) -> Any:
        """This thread's connection (autocommit)."""
        return self._conns.get()

    def has_collection(self, name: str) -> bool:
        with self.connection().cursor() as cur:
            cur.execute(
                "SELECT 1 FROM information_schema.TABLES "
                "WHERE table_schema = DATABASE() AND table_name = %s",
                [name],
            )
            return cur.fetchone() is not None

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        if len(name) > _MAX_IDENT:
            raise UserError(
                f"collection name {name!r} is longer than MariaDB's {_MAX_IDENT} characters",
                where="store mariadb",
            )
        coll = MariaDBCollection(self, name, schema)
        cols = ["id BIGINT NOT NULL PRIMARY KEY"] + [
            f"{quote(f)} {_sql_type(k, f in schema.indexed)}" for f, k in schema.fields.items()
        ]
        if schema.dim is not None:
            cols.append(f"{VEC} LONGBLOB")
        cols += [f"INDEX i{i} ({quote(f)})" for i, f in enumerate(schema.indexed)]
        with self.connection().cursor() as cur:
            cur.execute(
                f"CREATE TABLE {quote(name)} ({', '.join(cols)}) ENGINE={self.options.table_engine} "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
            )
        return coll

    @classmethod
    def managed_memory(
        cls, options: Options, index: IndexParams, dim: int, field_bytes: int
    ) -> tuple[int, int]:
        from storebench.servers.mariadb import buffer_pool_bytes, server_settings

        # the managed MariaDB keeps data on disk; its buffer pool is fixed
        # (taken as pages are read, all of it in a long run), with 128 MB more
        given = server_settings(options.tuning, {k: str(v) for k, v in options.settings.items()})
        pool = next(
            (v for k, v in given.items() if k.replace("-", "_") == "innodb_buffer_pool_size"),
            "128M",
        )
        return 0, buffer_pool_bytes(pool) + 128 * MiB

    def engine_version(self) -> str:
        with self.connection().cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
        return f"MariaDB {row[0] if row else '?'}"
