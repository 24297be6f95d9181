"""The Chroma store (``chromadb.PersistentClient``, in-process): HNSW built
while documents are written, scalar fields as Chroma metadata, filters
compiled to Chroma ``where`` documents.

Each collection lives in its own directory ``<url>/<name>/`` with its own
client, so that its size on disk is exactly its own, dropping it removes its
files, and reopening it (see ``ef`` below) touches nothing else.

Parameters (neutral -> Chroma ``configuration['hnsw']``): index ``m`` ->
``max_neighbors``, ``ef_construct`` -> ``ef_construction``, search ``ef`` ->
``ef_search`` (Chroma's defaults: 16, 100, 100). Chroma fixes the graph
parameters when the collection is created and indexes during inserts: there
is no separate build step, so the store declares no ``index`` capability and
applies the index parameters at creation (``create_collection``). A changed ``ef_search`` only takes
effect once the collection's segment is loaded again, so
``set_search_params`` modifies the collection, then closes and reopens its
client.

Chroma keys documents by string: ids are converted at the edge. Chroma has
no NOT: negation is pushed down to the leaves (De Morgan, ``$ne``/``$nin``,
flipped comparisons). Vectors are stored as float32 and come back as float64
arrays of the same values (converted back: bit-exact). Chroma reports squared
Euclidean distance for l2 (converted) and 1 - ip for ip (converted to -ip).

``url`` is the directory holding the collections; without one, the store makes
a private temporary directory and removes it on close.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import chromadb
import numpy as np
from chromadb.config import Settings

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import And, Cmp, Filter, In, Not, Or, Range
from storebench.errors import UserError
from storebench.stores.base import Capability, Collection, RamUse, SearchResult, Store, StoreSpec
from storebench.stores.columns import batch_from_records, plain
from storebench.stores.config import DIRECTORY
from storebench.stores.params import HnswIndex, HnswSearch, Order

_SPACE = {"l2": "l2", "cosine": "cosine", "ip": "ip"}
_NAME = "storebench"  # the one Chroma collection inside each collection directory
_NEG_OP = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}
_CHROMA_OP = {"eq": "$eq", "ne": "$ne", "lt": "$lt", "le": "$lte", "gt": "$gt", "ge": "$gte"}

# Constant filters: Chroma has no literal true/false; they are folded away.
TRUE: dict[str, Any] = {"$true": True}
FALSE: dict[str, Any] = {"$false": True}


def _fold(op: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    absorbing, neutral = (FALSE, TRUE) if op == "$and" else (TRUE, FALSE)
    if any(p is absorbing for p in parts):
        return absorbing
    parts = [p for p in parts if p is not neutral]
    if not parts:
        return neutral
    return parts[0] if len(parts) == 1 else {op: parts}


def compile_filter(f: Filter, kinds: Mapping[str, str], negate: bool = False) -> dict[str, Any]:
    """A filter as a Chroma ``where`` document, or TRUE / FALSE.

    ``kinds`` gives each field's kind, so values are cast to it (Chroma
    compares typed values) and comparisons of an int field with a fractional
    value become the equivalent integer comparison."""
    if isinstance(f, Not):
        return compile_filter(f.part, kinds, not negate)
    if isinstance(f, And | Or):
        op = "$and" if isinstance(f, And) != negate else "$or"  # De Morgan
        return _fold(op, [compile_filter(p, kinds, negate) for p in f.parts])
    kind = kinds[f.field]
    if isinstance(f, Range):
        if negate:
            return _fold("$or", [_cmp(f.field, "lt", f.lo, kind), _cmp(f.field, "gt", f.hi, kind)])
        return _fold("$and", [_cmp(f.field, "ge", f.lo, kind), _cmp(f.field, "le", f.hi, kind)])
    if isinstance(f, In):
        values = [v for v in (_cast(v, kind) for v in f.values) if v is not None]
        if not values:
            return TRUE if negate else FALSE
        return {f.field: {"$nin" if negate else "$in": list(dict.fromkeys(values))}}
    if isinstance(f, Cmp):
        return _cmp(f.field, _NEG_OP[f.op] if negate else f.op, f.value, kind)
    raise TypeError(f"not a filter: {f!r}")


def _cast(value: Any, kind: str) -> Any:
    """The value in the field's type; None where no value of that type equals it."""
    value = plain(value)
    if kind == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == "int" and isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value


def _cmp(field: str, op: str, value: Any, kind: str) -> dict[str, Any]:
    value = plain(value)
    if kind == "str" and op not in ("eq", "ne"):
        raise UserError(f"Chroma cannot compare strings with {op} ({field})", where="filter")
    if kind == "int" and isinstance(value, float) and not value.is_integer():
        if not math.isfinite(value):
            raise UserError(f"filter value {value!r} for {field}", where="filter")
        if op in ("eq", "ne"):
            return FALSE if op == "eq" else TRUE
        # x < 2.5 <=> x <= 2;  x > 2.5 <=> x >= 3
        op, value = {
            "lt": ("le", math.floor(value)),
            "le": ("le", math.floor(value)),
            "gt": ("ge", math.ceil(value)),
            "ge": ("ge", math.ceil(value)),
        }[op]
    return {field: {_CHROMA_OP[op]: _cast(value, kind)}}


class ChromaCollection(Collection):
    store: ChromaStore

    def __init__(self, store: ChromaStore, name: str, schema: Schema):
        super().__init__(store, name, schema)
        self.path = store._dir(name)
        self._lock = threading.Lock()  # guards reopening
        self._client = store.client(self.path)
        self._c = self._client.get_collection(_NAME, embedding_function=None)
        self._batch_max = int(self._client.get_max_batch_size())
        self._fields = list(schema.fields)
        self._kinds = dict(schema.fields)

    # --- conversions -----------------------------------------------------------
    def _metadatas(self, docs: DocBatch, fields: list[str]) -> list[dict[str, Any]] | None:
        if not fields:
            return None
        cols = [docs.fields[f].tolist() for f in fields]
        return [dict(zip(fields, row, strict=True)) for row in zip(*cols, strict=True)]

    def _batch(self, ids: list[str], metas: list[Any] | None, embs: Any, vectors: bool) -> DocBatch:
        vecs = None
        if vectors and self.schema.dim is not None:
            vecs = embs if len(ids) else []
        return batch_from_records(self.schema, ids, metas or [], lambda m, f: m[f], vecs)

    @staticmethod
    def _keys(ids: np.ndarray) -> list[str]:
        return [str(i) for i in np.asarray(ids, np.int64).tolist()]

    def _chunks(self, n: int) -> range:
        return range(0, n, self._batch_max)

    # --- contract ----------------------------------------------------------------
    def _write(self, send: Callable[..., Any], docs: DocBatch, fields: list[str]) -> None:
        """``docs`` (``fields`` of them) through ``send`` (``upsert`` or
        ``update``), in batches Chroma takes."""
        keys = self._keys(docs.ids)
        metas = self._metadatas(docs, fields)
        for s in self._chunks(len(docs)):
            e = s + self._batch_max
            send(
                ids=keys[s:e],
                embeddings=None if docs.vectors is None else docs.vectors[s:e],
                metadatas=None if metas is None else metas[s:e],
            )

    def insert(self, docs: DocBatch) -> None:
        if len(docs):
            self._write(self._c.upsert, docs, self._fields)

    def get(self, ids: np.ndarray) -> DocBatch:
        if len(ids) == 0:
            return self._batch([], [], None, vectors=True)
        include: list[Any] = ["metadatas"] + (["embeddings"] if self.schema.dim else [])
        r = self._c.get(ids=self._keys(ids), include=include)
        return self._batch(r["ids"], r["metadatas"], r.get("embeddings"), vectors=True)

    def update(self, docs: DocBatch) -> None:
        fields = list(docs.fields)
        if (fields or docs.vectors is not None) and len(docs):
            self._write(self._c.update, docs, fields)  # Chroma merges the given keys

    def delete(self, ids: np.ndarray) -> None:
        keys = self._keys(ids)
        for s in self._chunks(len(keys)):
            self._c.delete(ids=keys[s : s + self._batch_max])

    def _where(self, where: Filter | None) -> dict[str, Any] | None:
        if where is None:
            return TRUE
        return compile_filter(where, self._kinds)

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        if order is not None:
            return super().find(where, order, limit)  # Chroma cannot order
        w = self._where(where)
        if w is FALSE or limit == 0:
            return self._batch([], [], None, vectors=False)
        r = self._c.get(
            where=None if w is TRUE else w,
            limit=None if limit is None else int(limit),
            include=["metadatas"],
        )
        return self._batch(r["ids"], r["metadatas"], None, vectors=False)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        w = self._where(where)
        if len(vectors) == 0 or k == 0 or w is FALSE:
            return SearchResult.empty(len(vectors), k)
        r = self._c.query(
            query_embeddings=np.asarray(vectors, np.float32),
            n_results=k,
            where=None if w is TRUE else w,
            include=["distances"],
        )
        answers = list(zip(r["ids"], r["distances"] or [], strict=True))
        out = SearchResult.from_rows(
            answers, k, lambda a: list(zip(a[0][:k], a[1][:k], strict=True))
        )
        dist, metric = out.distances, self.schema.metric
        if metric == "l2":
            np.sqrt(np.maximum(dist, 0.0), out=dist)
        elif metric == "ip":
            dist -= np.float32(1.0)  # Chroma's ip distance is 1 - ip
        return out

    def count(self) -> int:
        return int(self._c.count())

    def set_search_params(self, params: HnswSearch) -> None:
        if params.ef is None:
            return
        with self._lock:
            with warnings.catch_warnings():  # "legacy embedding function config": none is used
                warnings.simplefilter("ignore", DeprecationWarning)
                self._c.modify(configuration={"hnsw": {"ef_search": params.ef}})
            # The loaded HNSW segment keeps its ef until it is loaded again.
            self._client.close()
            self._client = self.store.client(self.path)
            self._c = self._client.get_collection(_NAME, embedding_function=None)

    def size_bytes(self) -> int:
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for f in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(root, f)).st_size
        return total

    def close(self) -> None:
        self._client.close()

    def _drop(self) -> None:
        with self._lock:
            self._client.delete_collection(_NAME)
            self._client.close()
        shutil.rmtree(self.path, ignore_errors=True)


class ChromaStore(Store):
    engine = "chroma"
    capabilities = frozenset(Capability) - {
        Capability.ORDER,
        Capability.INDEX,
        Capability.COMPACT,
        Capability.SHARED_ACROSS_PROCESSES,
        Capability.PIPELINE,
    }
    Index = HnswIndex
    Search = HnswSearch
    extra = "chroma"
    url_form = DIRECTORY
    collection = ChromaCollection
    keeps_open = True  # one chroma client per collection directory
    # its hnswlib index in this process, metadata in SQLite files
    ram = RamUse(vector=0, fields=2, hnsw_m=16)

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.path = self.local_path(mkdir=True)
        self._settings = Settings(anonymized_telemetry=False, is_persistent=True)

    def client(self, path: str) -> Any:
        return chromadb.PersistentClient(path=path, settings=self._settings)

    def _dir(self, name: str) -> str:
        if not name or name in (".", "..") or "/" in name or os.sep in name:
            raise UserError(f"collection name {name!r} is not a directory name", where="chroma")
        return os.path.join(self.path, name)

    def has_collection(self, name: str) -> bool:
        return os.path.exists(os.path.join(self._dir(name), "chroma.sqlite3"))

    def _create(self, name: str, schema: Schema, index: HnswIndex) -> Collection:
        path = self._dir(name)
        os.makedirs(path, exist_ok=True)
        hnsw: dict[str, Any] = {"space": _SPACE[schema.metric]}
        if index.m is not None:
            hnsw["max_neighbors"] = index.m
        if index.ef_construct is not None:
            hnsw["ef_construction"] = index.ef_construct
        client = self.client(path)
        try:
            client.create_collection(
                _NAME,
                configuration={"hnsw": hnsw},
                embedding_function=None,
            )
        finally:
            client.close()
        return self._open(name, schema)

    def versions(self) -> dict[str, str]:
        return {"engine": f"chroma {chromadb.__version__}", "client": "chromadb (in-process)"}
