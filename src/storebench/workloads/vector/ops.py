"""The upload and search operations of the vector workloads.

Factories live at module level so process clients can unpickle them;
arrays reach process clients as memory-mapped files (``Shared``), never as
copies.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from storebench.data.batch import DocBatch
from storebench.data.filters import Filter
from storebench.data.shared import Shared
from storebench.driver import Op
from storebench.stores.base import Collection
from storebench.stores.params import SearchParams


def apply_setting(coll: Collection, setting: SearchParams) -> None:
    """Set a search setting on the collection; an empty one leaves the
    engine's defaults."""
    if setting.given():
        coll.set_search_params(setting)


class _Inserts(Op):
    """Op i inserts batch i of rows [start, stop)."""

    def __init__(
        self,
        ids: Shared,
        fields: Mapping[str, Shared],
        vecs: Shared,
        batch: int,
        start: int,
        stop: int | None,
        coll: Collection,
    ):
        self.coll = coll
        self.insert = coll.insert
        ids_a, vecs_a = ids.array, vecs.array
        cols = {k: v.array for k, v in fields.items()}
        stop = len(ids_a) if stop is None else stop
        self.batches = [
            DocBatch(
                ids_a[s : min(s + batch, stop)],
                {k: c[s : min(s + batch, stop)] for k, c in cols.items()},
                vecs_a[s : min(s + batch, stop)],
            )
            for s in range(start, stop, batch)
        ]

    def __call__(self, i: int) -> None:
        self.insert(self.batches[i])

    async def aopen(self) -> None:
        self.view = self.coll.aio()
        await self.view.open()
        self.ainsert = self.view.insert

    async def acall(self, i: int) -> None:
        await self.ainsert(self.batches[i])

    async def aclose(self) -> None:
        await self.view.close()


class InsertFactory:
    """Batched inserts of rows [start, stop) of shared columns."""

    def __init__(
        self,
        ids: Shared,
        fields: Mapping[str, Shared],
        vecs: Shared,
        batch: int,
        start: int = 0,
        stop: int | None = None,
    ):
        self.args = (ids, dict(fields), vecs, batch, start, stop)

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        return _Inserts(*self.args, coll)


class _Searches(Op):
    def __init__(
        self,
        coll: Collection,
        queries: Shared,
        k: int,
        where: Filter | None,
        setting: SearchParams | None,
        owner: int,
        lane: int = 0,
        lanes: int = 1,
    ):
        # a process client opened its own store from the spec: the search
        # setting the parent applied must be applied here too
        if setting is not None and os.getpid() != owner:
            apply_setting(coll, setting)
        self.coll = coll
        self.lane, self.lanes = lane, lanes
        self.native_op: Any = None
        self.order: list[int] = []
        self.search = coll.search
        self.q = np.ascontiguousarray(queries.array)
        self.k = k
        self.where = where
        self.found = np.full((len(self.q), k), -1, np.int64)
        self.seen = np.zeros(len(self.q), bool)

    def __call__(self, i: int) -> None:
        j = i % len(self.q)
        if self.where is None:
            self.found[j] = self.search(self.q[j : j + 1], self.k).ids[0]
        else:
            self.found[j] = self.search(self.q[j : j + 1], self.k, self.where).ids[0]
        self.seen[j] = True

    def native(self) -> Any:
        """The same queries for the native loop: its slot j is this lane's
        op j, query (lane + j*lanes) mod their number (the order repeats
        after ``period`` ops; the loop sends prepared op j mod their number)."""
        q = len(self.q)
        period = q // math.gcd(q, self.lanes)
        self.order = [(self.lane + j * self.lanes) % q for j in range(period)]
        self.native_op = self.coll.native_search(self.q[self.order], self.k)
        return self.native_op

    async def aopen(self) -> None:
        self.view = self.coll.aio()
        await self.view.open()
        self.asearch = self.view.search

    async def acall(self, i: int) -> None:
        j = i % len(self.q)
        if self.where is None:
            self.found[j] = (await self.asearch(self.q[j : j + 1], self.k)).ids[0]
        else:
            self.found[j] = (await self.asearch(self.q[j : j + 1], self.k, self.where)).ids[0]
        self.seen[j] = True

    async def aclose(self) -> None:
        await self.view.close()

    def finish(self) -> Any:
        if self.native_op is not None:  # the ids the native loop kept, by slot
            ids, spans = self.native_op.results()
            for j in range(len(spans) // 2):
                s, e = spans[2 * j], spans[2 * j + 1]
                if s >= 0:
                    qj = self.order[j % len(self.order)]
                    got = ids[s : min(e, s + self.k)]
                    self.found[qj, : len(got)] = got
                    self.seen[qj] = True
        return self.found, self.seen


class SearchFactory:
    """One query vector per op (op i: query ``i % len(queries)``); each client
    returns the ids it found per query, for recall."""

    def __init__(
        self,
        queries: Shared,
        k: int,
        where: Filter | None = None,
        setting: SearchParams | None = None,
    ):
        self.queries = queries
        self.k = k
        self.where = where
        self.setting = setting  # typed, frozen: pickled as it is to process clients
        self.owner = os.getpid()

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        return _Searches(
            coll, self.queries, self.k, self.where, self.setting, self.owner, c, clients
        )
