"""Redis's requests for the native client (``client: native``): the very
commands the Python path sends, encoded before the clock, run by the
compiled loop on a connection of its own after the store's AUTH and SELECT."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from storebench.data.batch import DocBatch
from storebench.errors import NotSupported
from storebench.stores.native import extension
from storebench.stores.vector.redis.codec import resp_args

if TYPE_CHECKING:
    from storebench.stores.vector.redis.collection import RedisCollection
    from storebench.stores.vector.redis.store import RedisStore


def insert(coll: RedisCollection, ops: Sequence[Sequence[DocBatch]]) -> Any:
    """Operation j sends the HSETs of ``ops[j]``'s batches at once (as
    ``insert_pipelined``, ``_hsets``' very commands) and reads their
    replies."""
    return run(
        coll.store,
        [[resp_args(c) for docs in batches for c in coll._hsets(docs)] for batches in ops],
    )


def search(coll: RedisCollection, queries: np.ndarray, k: int) -> Any:
    """``search``'s FT.SEARCH, one per operation; the loop keeps the
    ids of the keys returned."""
    vecs = np.ascontiguousarray(queries, dtype=np.float32)
    ops = [[resp_args(coll._knn_command(v.tobytes(), k, None))] for v in vecs]
    return run(coll.store, ops, id_prefix=coll._bprefix)


def run(store: RedisStore, ops: list[list[list[bytes]]], id_prefix: bytes | None = None) -> Any:
    """A native op on a connection of its own (the extension's), after
    the AUTH and SELECT the store's connections send."""
    pool = store.client.connection_pool
    kw = pool.connection_kwargs
    if "path" in kw or kw.get("ssl") or "host" not in kw:
        raise NotSupported("redis", "the native client on a Unix socket or TLS")
    hello = []
    if kw.get("password"):
        user = [kw["username"]] if kw.get("username") else []
        hello.append(resp_args(["AUTH", *user, kw["password"]]))
    if kw.get("db"):
        hello.append(resp_args(["SELECT", kw["db"]]))
    ext = extension()
    return ext.redis(kw["host"], int(kw["port"]), hello, ops, id_prefix)  # type: ignore[union-attr]
