"""Redis's async view (``Collection.aio``): an asyncio stream per event-loop
client, commands packed and replies parsed by hiredis."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import redis
import redis.asyncio

from storebench.data.batch import DocBatch
from storebench.data.filters import Filter
from storebench.stores.base import AsyncView, SearchResult
from storebench.stores.params import Order
from storebench.stores.vector.redis.codec import ID

if TYPE_CHECKING:
    from storebench.stores.vector.redis.collection import RedisCollection


class RedisAsyncView(AsyncView):
    """An asyncio stream per event-loop client, commands packed and replies
    parsed by hiredis, with the sync collection's commands and reply
    decoding: the same hashes written, the same neighbours found. Every
    command of a call is written before any reply is read, as the sync
    ``_send`` does. Not redis-py's asyncio connection: on uvloop, 8 clients
    of one-HSET inserts spent 62-81 us of client CPU per insert through it,
    against 43-48 us for the sync client (its awaits per reply cost more
    than the round trip's own work; ``benchmarks/client_models.py``)."""

    native = True
    coll: RedisCollection

    def __init__(self, coll: RedisCollection, share: AsyncView | None = None):
        super().__init__(coll, share)
        self.reader: Any = None
        self.writer: Any = None

    async def open(self) -> None:
        if self.share is not None:
            self.reader, self.writer, self.parser = (
                self.share.reader,
                self.share.writer,
                self.share.parser,
            )
            return
        import hiredis

        url = self.coll.store.spec.url or ""
        kw = redis.asyncio.ConnectionPool.from_url(url).connection_kwargs
        if "path" in kw:
            self.reader, self.writer = await asyncio.open_unix_connection(kw["path"])
        else:
            self.reader, self.writer = await asyncio.open_connection(
                kw.get("host", "localhost"), kw.get("port", 6379)
            )
        sock = self.writer.get_extra_info("socket")
        if sock is not None and "path" not in kw:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = hiredis.Reader()
        password = kw.get("password")
        if password is None and "@" not in url:
            password = os.environ.get("REDIS_PASSWORD")
        setup: list[list[Any]] = []
        if password is not None:
            user = kw.get("username")
            setup.append(["AUTH", user, password] if user else ["AUTH", password])
        if kw.get("db"):
            setup.append(["SELECT", kw["db"]])
        await self._send(setup)

    async def close(self) -> None:
        if self.share is None and self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None

    async def _send(self, commands: list[list[Any]]) -> list[Any]:
        """All ``commands`` written, then every reply read; the first error
        among them raised once all are read (the connection stays in step)."""
        if not commands:
            return []
        import hiredis

        self.writer.write(b"".join([hiredis.pack_command(tuple(c)) for c in commands]))
        parser = self.parser
        replies: list[Any] = []
        while len(replies) < len(commands):
            reply = parser.gets()
            if reply is False:
                data = await self.reader.read(1 << 16)
                if not data:
                    raise redis.ConnectionError("Redis closed the connection")
                parser.feed(data)
                continue
            replies.append(reply)
        for reply in replies:
            if isinstance(reply, hiredis.ReplyError):
                raise redis.ResponseError(str(reply))
        return replies

    async def insert(self, docs: DocBatch) -> None:
        await self._send(self.coll._hsets(docs))

    async def insert_pipelined(self, batches: Sequence[DocBatch]) -> None:
        commands: list[list[Any]] = []
        for docs in batches:
            commands += self.coll._hsets(docs)
        await self._send(commands)

    async def get(self, ids: np.ndarray) -> DocBatch:
        c = self.coll
        names = [*c._fields, ID] + (["v"] if c._vec else [])
        replies = await self._send([["HMGET", c._key(i), *names] for i in ids.tolist()])
        return c._rows([r for r in replies if r[-1] is not None], names)

    async def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        pages = self.coll._find(where, order, limit)
        try:
            command = next(pages)
            while True:
                (reply,) = await self._send([command])
                command = pages.send(reply)
        except StopIteration as done:
            return done.value

    async def search(
        self, vectors: np.ndarray, k: int, where: Filter | None = None
    ) -> SearchResult:
        c = self.coll
        vecs = np.ascontiguousarray(vectors, dtype=np.float32)
        replies = await self._send([c._knn_command(v.tobytes(), k, where) for v in vecs])
        return c._knn_result(replies, k)
