"""Documents as the MongoDB-like stores (``mongita``, ``mongodb``) keep them:
one document per row, ``_id`` the id, each field under its key
(``mongoquery.key``), the vector (if any) as raw float32 bytes under
``_vector``. ``MongoDocs`` encodes and decodes them; each store says how an
id and a vector's bytes are written (Mongita keys by string, MongoDB by
integer and BSON binary)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from storebench.data.batch import DocBatch, Schema
from storebench.errors import UserError
from storebench.stores.base import Collection, Store
from storebench.stores.columns import batch_from_records
from storebench.stores.document.mongoquery import key

VEC = "_vector"


class MongoDocs(Collection):
    """A collection of a store with a MongoDB-like ``db[name]``."""

    def __init__(self, store: Store, name: str, schema: Schema):
        super().__init__(store, name, schema)
        for f in schema.fields:
            if key(f) in ("_id", VEC) or f.startswith("$"):
                raise UserError(
                    f"field name {f!r} is reserved by the {store.engine} store",
                    where=f"store {store.engine}",
                )
        self.c = store.db[name]  # type: ignore[attr-defined]
        self._keys = {f: key(f) for f in schema.fields}
        self._vec = schema.dim is not None

    @staticmethod
    def id_value(id_: int) -> Any:
        """How the store writes an id as ``_id``."""
        return id_

    @staticmethod
    def vector_value(data: bytes) -> Any:
        """How the store writes a vector's float32 bytes."""
        return data

    def _docs(self, docs: DocBatch, fields: list[str]) -> Iterator[dict[str, Any]]:
        cols = [(self._keys[f], docs.fields[f].tolist()) for f in fields]
        vecs = docs.vectors if self._vec else None
        id_value, vector_value = self.id_value, self.vector_value
        for i, id_ in enumerate(docs.ids.tolist()):
            d: dict[str, Any] = {"_id": id_value(id_)}
            for k, values in cols:
                d[k] = values[i]
            if vecs is not None:
                d[VEC] = vector_value(vecs[i].tobytes())
            yield d

    def _to_batch(self, found: list[dict[str, Any]], with_vectors: bool) -> DocBatch:
        vecs = None
        if with_vectors and self._vec:
            vecs = np.frombuffer(b"".join(d[VEC] for d in found), np.float32)
        ids = [int(d["_id"]) for d in found]
        return batch_from_records(self.schema, ids, found, lambda d, f: d[self._keys[f]], vecs)
