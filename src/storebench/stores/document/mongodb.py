"""The MongoDB store: any server that speaks the MongoDB wire protocol, with
pymongo; FerretDB (on SQLite) is its managed server.

A collection is a MongoDB collection of one document per id: ``_id`` the id
(an int64), each field under its name (a dot written as U+FF0E, as MongoDB
tools do, since a dot is a path into a sub-document), the vector, when the
schema has one, as float32 bytes under ``_vector`` (only stored and
returned: no vector search; FerretDB 1.x has none). Each field listed in
``Schema.indexed`` gets a single-field index.

Filters compile to one MongoDB query document (``stores/document/mongoquery.py``, the
compiler the mongita store shares): plain field operators, alternatives
under ``$or``. An insert replaces a document with the same id (one
``ReplaceOne`` upsert per document, sent as one unordered bulk write).

``url``: ``mongodb://[user:password@]host[:port][/database]`` (the database
defaults to ``storebench``). Without one, a FerretDB server is started on
127.0.0.1 with a private directory and stops with the store.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult

import numpy as np
import pymongo
from bson.binary import Binary
from pymongo.operations import ReplaceOne, UpdateOne

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter
from storebench.errors import UserError
from storebench.stores.base import DOCUMENTS, Capability, RamUse, Store, StoreSpec, redact_url
from storebench.stores.columns import last_per_id
from storebench.stores.config import UrlForm
from storebench.stores.document.mongodocs import VEC, MongoDocs
from storebench.stores.document.mongoquery import key, to_mongodb
from storebench.stores.params import IndexParams, Order

DATABASE = "storebench"


def _database(url: str, parts: SplitResult | None) -> str:
    db = (parts.path if parts is not None else "").strip("/")
    if "/" in db or any(c in db for c in ' ."$\\'):
        raise ValueError(f"database name {db!r} is not a MongoDB database name")
    return db or DATABASE


URL_FORM = UrlForm(
    "mongodb://[user:password@]host[:port][/database]", schemes=("mongodb",), parse=_database
)


class MongoCollection(MongoDocs):
    store: MongoStore

    vector_value = staticmethod(Binary)  # BSON binary

    def insert(self, docs: DocBatch) -> None:
        docs = last_per_id(docs)
        ops = [
            ReplaceOne({"_id": d["_id"]}, d, upsert=True)
            for d in self._docs(docs, list(self.schema.fields))
        ]
        if ops:
            self.c.bulk_write(ops, ordered=False)

    def get(self, ids: np.ndarray) -> DocBatch:
        found = list(self.c.find({"_id": {"$in": ids.tolist()}}))
        return self._to_batch(found, with_vectors=True)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        if not fields and docs.vectors is None:
            return
        ops = []
        for d in self._docs(docs, fields):
            if docs.vectors is None:
                d.pop(VEC, None)
            ops.append(UpdateOne({"_id": d.pop("_id")}, {"$set": d}))
        if ops:
            self.c.bulk_write(ops, ordered=False)

    def delete(self, ids: np.ndarray) -> None:
        self.c.delete_many({"_id": {"$in": ids.tolist()}})

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        cursor = self.c.find(to_mongodb(where), {VEC: 0})
        if order is not None:
            k = self._keys[order[0]]
            # ties in a stable order (by id), as the other stores give them
            cursor = cursor.sort([(k, -1 if order[1] else 1), ("_id", 1)])
        if limit is not None:
            if int(limit) == 0:
                return self._to_batch([], with_vectors=False)
            cursor = cursor.limit(int(limit))
        return self._to_batch(list(cursor), with_vectors=False)

    def count(self) -> int:
        return int(self.c.count_documents({}))

    def _drop(self) -> None:
        self.store.db.drop_collection(self.name)


class MongoStore(Store):
    engine = "mongodb"
    server = "ferretdb:FerretDBServer"
    collection = MongoCollection
    capabilities = DOCUMENTS | {Capability.ORDER, Capability.SHARED_ACROSS_PROCESSES}
    extra = "mongodb"
    client_dist = "pymongo"
    url_form = URL_FORM
    ram = RamUse(fields=2, overhead=256, fixed_mib=64)  # FerretDB on SQLite: pages cached
    handles = ("client",)

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        url = self.spec.url
        assert url is not None
        self.client: Any = pymongo.MongoClient(url, serverSelectionTimeoutMS=10_000)
        try:
            info = self.client.admin.command("buildInfo")
        except pymongo.errors.PyMongoError as exc:
            raise UserError(
                f"cannot reach a MongoDB server at {redact_url(url)}: {exc}", where="store mongodb"
            ) from exc
        self._engine = _engine_name(info)
        self.db = self.client[self.check_url(url)]

    def has_collection(self, name: str) -> bool:
        return name in self.db.list_collection_names()

    def _create(self, name: str, schema: Schema, index: IndexParams) -> MongoCollection:
        coll = MongoCollection(self, name, schema)
        self.db.create_collection(name)  # now, so other clients can open it before any insert
        for f in schema.indexed:
            coll.c.create_index(key(f))
        return coll

    def location(self) -> str:
        return f"database {self.db.name}"

    def engine_version(self) -> str:
        return self._engine


def _engine_name(info: dict[str, Any]) -> str:
    """FerretDB says so in buildInfo; MongoDB gives only its version."""
    if info.get("ferretdbVersion"):
        return f"FerretDB {info['ferretdbVersion']} (MongoDB {info.get('version', '?')})"
    return f"MongoDB {info.get('version', '?')}"
