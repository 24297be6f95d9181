"""pgvector's requests for the native client (``client: native``): the
statements the Python path sends, prepared once, every parameter encoded in
binary before the clock, run by the compiled loop on a connection of its
own with this store's session settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from storebench.data.batch import DocBatch
from storebench.errors import NotSupported
from storebench.stores.native import extension
from storebench.stores.sql.pgvector.codec import (
    INSERT_ROWS,
    RAW_CURSOR,
    binary_params,
    vectors_binary,
)

if TYPE_CHECKING:
    from storebench.stores.sql.pgvector.collection import PgVectorCollection
    from storebench.stores.sql.pgvector.store import PgVectorStore


def insert(coll: PgVectorCollection, ops: Sequence[Sequence[DocBatch]]) -> Any:
    """The statements ``insert_pipelined`` sends (``_insert_sql``, one per
    batch size, prepared once), each batch's parameters in binary; an
    operation's batches end with one Sync, so they commit together as
    in the Python pipeline (one batch: as ``insert``'s one statement)."""
    if RAW_CURSOR is None:  # the statements' $n placeholders
        raise NotSupported("pgvector", "the native client for insert (psycopg < 3.2)")
    if any(len(b) == 1 and len(b[0]) > INSERT_ROWS for b in ops):  # insert would COPY
        raise NotSupported(
            "pgvector", f"the native client for inserts of over {INSERT_ROWS} rows (a COPY)"
        )
    statements: dict[str, int] = {}
    prepared: list[list[tuple[int, list[bytes | None]]]] = []
    for batches in ops:
        op = []
        for docs in batches:
            if len(docs):
                sql = coll._insert_sql(docs)
                params = binary_params(docs, coll._fields, coll._kinds)
                op.append((statements.setdefault(sql, len(statements)), params))
        prepared.append(op)
    return run(coll.store, list(statements), prepared)


def search(coll: PgVectorCollection, queries: np.ndarray, k: int) -> Any:
    """``search``'s ORDER BY with the query vector bound once, in binary;
    the loop keeps the ids returned."""
    sql = f"SELECT id FROM {coll._t} ORDER BY v {coll._op} $1 LIMIT {int(k)}"
    ops = [[(0, [v])] for v in vectors_binary(queries)]
    return run(coll.store, [sql], ops, ids=True)


def run(store: PgVectorStore, statements: list[str], ops: list[Any], ids: bool = False) -> Any:
    """A native op on a connection of its own (the extension's), with
    the store's session settings (search settings, synchronous_commit)."""
    info = store.connection().info
    host = info.host
    if host.startswith("/"):  # a Unix socket: the extension speaks TCP
        raise NotSupported("pgvector", "the native client on a Unix socket")
    setup = [f"SET {k} = '{v}'" for k, v in store._session_vars.items()]
    sync = store.options.synchronous_commit
    if sync is not None:
        setup.append(f"SET synchronous_commit = '{sync}'")
    ext = extension()
    return ext.postgres(  # type: ignore[union-attr]
        host if host else "127.0.0.1",
        int(info.port),
        info.user,
        info.password or "",
        info.dbname,
        setup,
        statements,
        ops,
        ids,
    )
