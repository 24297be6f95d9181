"""The upload and search operations of the vector workloads.

Factories live at module level so process clients can unpickle them;
arrays reach process clients as memory-mapped files (``Shared``), never as
copies.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from storebench.data.batch import DocBatch
from storebench.data.filters import Filter
from storebench.data.shared import Shared
from storebench.driver import Op
from storebench.stores.base import AsyncView, Collection
from storebench.stores.params import SearchParams
from storebench.workloads.base import BatchInserts, ViewsOp


def apply_setting(coll: Collection, setting: SearchParams) -> None:
    """Set a search setting on the collection; an empty one leaves the
    engine's defaults."""
    if setting.given():
        coll.set_search_params(setting)


@dataclass(frozen=True, eq=False)
class InsertFactory:
    """Batched inserts of rows [start, stop) of shared columns."""

    ids: Shared
    fields: Mapping[str, Shared]
    vecs: Shared
    batch: int
    start: int = 0
    stop: int | None = None

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        """Op i inserts batch i."""
        ids, vecs = self.ids.array, self.vecs.array
        cols = {k: v.array for k, v in self.fields.items()}
        stop = len(ids) if self.stop is None else self.stop
        batches = [
            DocBatch(
                ids[s : min(s + self.batch, stop)],
                {k: c[s : min(s + self.batch, stop)] for k, c in cols.items()},
                vecs[s : min(s + self.batch, stop)],
            )
            for s in range(self.start, stop, self.batch)
        ]
        return BatchInserts(coll, batches)


@dataclass(frozen=True, eq=False)
class SearchFactory:
    """One query vector per op (op i: query ``i % len(queries)``); each client
    returns the ids it found per query, for recall."""

    queries: Shared
    k: int
    where: Filter | None = None
    setting: SearchParams | None = None  # typed, frozen: pickled as it is to process clients
    owner: int = field(default_factory=os.getpid)  # the process that applied ``setting``

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        return _Searches(self, coll, c, clients)


class _Searches(ViewsOp):
    def __init__(self, f: SearchFactory, coll: Collection, lane: int = 0, lanes: int = 1):
        # a process client opened its own store from the spec: the search
        # setting the parent applied must be applied here too
        if f.setting is not None and os.getpid() != f.owner:
            apply_setting(coll, f.setting)
        self.coll = coll
        self.colls = (coll,)
        self.lane, self.lanes = lane, lanes
        self.native_op: Any = None
        self.order: list[int] = []
        self.search = coll.search
        self.q = np.ascontiguousarray(f.queries.array)
        self.rows = list(self.q[:, None])  # query j as a (1, d) view, sliced once
        self.k = f.k
        # the search call's arguments after the query: a filter only where there is one
        self.args = (f.k,) if f.where is None else (f.k, f.where)
        # each query's answer as the store gave it ((1, k) ids), kept as it
        # comes: ``finish`` copies them out, not the timed op
        self.got: list[np.ndarray | None] = [None] * len(self.q)

    def __call__(self, i: int) -> None:
        j = i % len(self.rows)
        self.got[j] = self.search(self.rows[j], *self.args).ids

    def native(self) -> Any:
        """The same queries for the native loop: its slot j is this lane's
        op j, query (lane + j*lanes) mod their number (the order repeats
        after ``period`` ops; the loop sends prepared op j mod their number)."""
        q = len(self.q)
        period = q // math.gcd(q, self.lanes)
        self.order = [(self.lane + j * self.lanes) % q for j in range(period)]
        self.native_op = self.coll.native_search(self.q[self.order], self.k)
        return self.native_op

    def opened(self, view: AsyncView) -> None:  # type: ignore[override]
        self.asearch = view.search

    async def acall(self, i: int) -> None:
        j = i % len(self.rows)
        self.got[j] = (await self.asearch(self.rows[j], *self.args)).ids

    def finish(self) -> Any:
        found = np.full((len(self.q), self.k), -1, np.int64)
        seen = np.zeros(len(self.q), bool)
        for j, ids in enumerate(self.got):
            if ids is not None:
                found[j], seen[j] = ids[0], True
        if self.native_op is not None:  # the ids the native loop kept, by slot
            ids, spans = self.native_op.results()
            for j in range(len(spans) // 2):
                s, e = spans[2 * j], spans[2 * j + 1]
                if s >= 0:
                    qj = self.order[j % len(self.order)]
                    got = ids[s : min(e, s + self.k)]
                    found[qj, : len(got)] = got
                    seen[qj] = True
        return found, seen
