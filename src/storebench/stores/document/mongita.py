"""The Mongita store: an embedded, pure-Python document database with a
pymongo-like API (``mongita``).

A collection is a Mongita collection of one document per id: ``_id`` the id
as a decimal string (Mongita accepts only strings and ObjectIds as ``_id``),
each field under its name (a dot becomes U+FF0E, as MongoDB tools do, since
Mongita reads a dot as a path into a sub-document), the vector, when the
schema has one, as float32 bytes under ``_vector`` (only stored and returned:
no search). Reference fields are plain int fields. Each field listed in
``Schema.indexed`` gets a single-field index (Mongita has no compound ones).

Filters: Mongita's query language has the field operators ``$eq $ne $gt
$gte $lt $lte $in $nin`` and implicit AND across fields, but no ``$and``,
``$or``, ``$nor`` or ``$not`` (it answers them with no documents, silently).
So ``to_mongita`` turns a filter into negation normal form (a negated
comparison is its opposite, a negated range two alternatives) and then into
alternatives of conjunctions, each one a plain Mongita query; ``find`` runs
one query per alternative and merges the answers (by id; with ``order`` and
``limit``, each query is sorted and limited, then the union is).

``url`` is the storage directory (``MongitaClientDisk``); without one, a
private temporary directory removed on close. Option ``mode: memory`` is
``MongitaClientMemory`` (this process only; no size). Mongita keeps its
documents in this process, so clients are threads, and its reads are not
safe against its writes (a read during an insert can fail with "dictionary
changed size during iteration" or find nothing), so the store serialises
every call with one lock. It has no compaction
command (the disk engine defragments a collection's file by itself when more
than half of it is free space).
"""

from __future__ import annotations

import os
import threading
from importlib import metadata
from typing import Any, ClassVar

import numpy as np
from mongita import MongitaClientDisk, MongitaClientMemory

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.stores.base import DOCUMENTS, Capability, Collection, RamUse, Store, StoreSpec
from storebench.stores.columns import last_per_id
from storebench.stores.config import DIRECTORY, InMemoryMode
from storebench.stores.document.mongodocs import MongoDocs
from storebench.stores.document.mongoquery import conjunctions, key
from storebench.stores.params import IndexParams, Order

DATABASE = "storebench"


def to_mongita(f: Filter | None) -> list[dict[str, Any]]:
    """Queries whose union is the filter (Mongita has no $or/$and/$nor/$not)."""
    return conjunctions(f, "store mongita filter")


class MongitaCollection(MongoDocs):
    store: MongitaStore

    id_value = staticmethod(str)  # Mongita keys documents by string

    def insert(self, docs: DocBatch) -> None:
        docs = last_per_id(docs)
        sids = [str(i) for i in docs.ids.tolist()]
        # an insert replaces an existing document, as in every store (a
        # delete is a write that rewrites the collection's metadata: only
        # when there is something to replace)
        rows = list(self._docs(docs, list(self.schema.fields)))
        with self.store.lock:
            if self.c.count_documents({"_id": {"$in": sids}}):
                self.c.delete_many({"_id": {"$in": sids}})
            self.c.insert_many(rows)

    def get(self, ids: np.ndarray) -> DocBatch:
        with self.store.lock:
            found = list(self.c.find({"_id": {"$in": [str(i) for i in ids.tolist()]}}))
        return self._to_batch(found, with_vectors=True)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        if not fields and docs.vectors is None:
            return
        with self.store.lock:
            for d in self._docs(docs, fields):  # Mongita has no bulk write
                self.c.update_one({"_id": d.pop("_id")}, {"$set": d})

    def delete(self, ids: np.ndarray) -> None:
        with self.store.lock:
            self.c.delete_many({"_id": {"$in": [str(i) for i in ids.tolist()]}})

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        queries = to_mongita(where)
        sort = None if order is None else [(self._keys[order[0]], -1 if order[1] else 1)]
        kw: dict[str, Any] = {}
        if sort is not None:
            kw["sort"] = sort
        if limit is not None:
            kw["limit"] = int(limit)
        if len(queries) == 1:
            with self.store.lock:
                found = list(self.c.find(queries[0], **kw))
        else:
            seen: dict[str, dict[str, Any]] = {}
            with self.store.lock:
                for q in queries:
                    for d in self.c.find(q, **kw):
                        seen.setdefault(d["_id"], d)
            found = list(seen.values())
            if order is not None:
                k = self._keys[order[0]]
                found.sort(key=lambda d: d[k], reverse=order[1])
            if limit is not None:
                found = found[: int(limit)]
        return self._to_batch(found, with_vectors=False)

    def count(self) -> int:
        with self.store.lock:
            return int(self.c.count_documents({}))

    def _drop(self) -> None:
        with self.store.lock:
            self.store.db.drop_collection(self.name)


class MongitaDiskCollection(MongitaCollection):
    def size_bytes(self) -> int:
        """The collection's files: its data file (with the holes deleted and
        shrunk documents leave) and its metadata."""
        path = os.path.join(self.store.path, f"{DATABASE}.{self.name}")
        total = 0
        for root, _dirs, files in os.walk(path):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        return total


class MongitaStore(Store):
    """Options: ``mode`` (``file``, the default, or ``memory``)."""

    async_ops = "inline"
    engine = "mongita"
    capabilities = DOCUMENTS | {Capability.ORDER, Capability.SIZE}
    extra = "mongita"
    url_form = DIRECTORY
    # a Python dict per document, in this process (the disk engine caches them)
    ram = RamUse(fields=2, overhead=1024)
    Options = InMemoryMode
    handles = ("client",)
    collection: ClassVar[type[MongitaCollection]] = MongitaDiskCollection  # in memory: the base

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.path = ""
        if self.options.mode == "memory":
            self.client: Any = MongitaClientMemory()
            self.capabilities = MongitaStore.capabilities - {Capability.SIZE}  # type: ignore[misc]
            self.collection = MongitaCollection  # type: ignore[misc]
        else:
            self.path = self.local_path()
            self.client = MongitaClientDisk(host=self.path)
        self.db = self.client[DATABASE]
        # Mongita's reads are not safe against its writes (a read during an
        # insert can raise "dictionary changed size during iteration" or see
        # an empty collection): every call takes this lock
        self.lock = threading.RLock()

    def has_collection(self, name: str) -> bool:
        with self.lock:
            return name in self.db.list_collection_names()

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        coll = self.collection(self, name, schema)
        # Mongita makes a collection on its first write: a delete of nothing
        # makes it now, so other clients can open it before any insert
        with self.lock:
            coll.c.delete_many({"_id": {"$in": []}})
            for f in schema.indexed:
                coll.c.create_index(key(f))
        return coll

    def versions(self) -> dict[str, str]:
        v = metadata.version("mongita")
        return {"engine": f"Mongita {v}", "client": f"mongita {v} (embedded)"}
