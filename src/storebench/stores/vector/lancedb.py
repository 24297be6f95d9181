"""The LanceDB store (``lancedb``, in-process): one Lance table per collection
under the store's directory, an ``IVF_HNSW_FLAT`` vector index built after the
load, filters compiled to Lance's SQL ``where`` strings and applied as a
prefilter in vector search.

Parameters (neutral -> Lance): index ``m`` -> ``m``, ``ef_construct`` ->
``ef_construction`` (Lance's defaults: 20 and 300); search ``ef`` -> the
query's ``.ef()`` (Lance's default: 1.5 x k). The IVF layer keeps Lance's own
partition count and ``nprobes`` (at least 20). ``build_index`` also puts a
B-tree on ``id`` and on the schema's indexed fields.

Insert is an upsert (``merge_insert`` on ``id``): an existing id is replaced,
as in the other stores. Lance forbids ``.`` in column names, so fields are
stored under escaped names (``tags.i`` -> ``tags_x2e_i``). Distances come back
in Lance's terms and are converted: squared l2 -> Euclidean, ``dot`` (1 - ip)
-> -ip; cosine is already 1 - cos.

``url`` is the database directory; without one, the store makes a private
temporary directory and removes it on close.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import BTree, IvfHnswFlat
from lancedb.query import ColumnOrdering

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import Filter, to_sql
from storebench.errors import UserError
from storebench.stores.base import Capability, Collection, RamUse, SearchResult, Store, StoreSpec
from storebench.stores.config import DIRECTORY
from storebench.stores.params import HnswIndex, HnswSearch, IndexParams, Order

_LANCE_METRIC = {"l2": "l2", "cosine": "cosine", "ip": "dot"}
_ARROW_TYPE = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
_ID, _VEC = "id", "vector"
_WAIT = timedelta(seconds=7199)  # wait_for_index accepts < 2 h; local builds are synchronous


def column_name(field: str) -> str:
    """A Lance column name for a field: characters Lance rejects become _xHH_."""
    return re.sub(r"[^A-Za-z0-9_]", lambda m: f"_x{ord(m.group()):02x}_", field)


def _quote(col: str) -> str:
    return f"`{col}`"


def literal(value: Any) -> str:
    """A Lance SQL literal."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not np.isfinite(value):
            raise UserError(f"filter value {value!r} has no Lance literal", where="filter")
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise UserError(f"filter value {value!r} has no Lance literal", where="filter")


def compile_filter(f: Filter, columns: Mapping[str, str]) -> str:
    """A filter as a Lance ``where`` string (SQL with the values inlined)."""
    sql, params = to_sql(f, lambda field: _quote(columns[field]))
    pieces = sql.split("?")  # quoted column names never hold '?'
    assert len(pieces) == len(params) + 1
    out = [pieces[0]]
    for value, piece in zip(params, pieces[1:], strict=True):
        out += [literal(value), piece]
    return "".join(out)


def _vectors(col: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat, dtype=np.float32).reshape(len(arr), dim)


class LanceCollection(Collection):
    store: LanceStore

    def __init__(self, store: LanceStore, name: str, schema: Schema, table: Any):
        super().__init__(store, name, schema)
        self._t = table
        self._cols = {f: column_name(f) for f in schema.fields}
        self._metric = _LANCE_METRIC[schema.metric]
        self._ef: int | None = None
        self._scalar_cols = [_ID, *self._cols.values()]

    # --- conversions -----------------------------------------------------------
    def _table(self, docs: DocBatch, fields: list[str]) -> pa.Table:
        arrays: dict[str, pa.Array] = {_ID: pa.array(docs.ids, pa.int64())}
        for f in fields:
            arrays[self._cols[f]] = pa.array(docs.fields[f], _ARROW_TYPE[self.schema.fields[f]])
        if docs.vectors is not None:
            flat = pa.array(np.ascontiguousarray(docs.vectors).reshape(-1), pa.float32())
            arrays[_VEC] = pa.FixedSizeListArray.from_arrays(flat, docs.vectors.shape[1])
        return pa.table(arrays)

    def _batch(self, t: pa.Table, vectors: bool) -> DocBatch:
        fields = {}
        for f, col in self._cols.items():
            values = t.column(col).to_numpy(zero_copy_only=False)
            fields[f] = values.astype(object) if self.schema.fields[f] == "str" else values
        vecs = _vectors(t.column(_VEC), self.schema.dim or 0) if vectors else None
        ids = np.asarray(t.column(_ID).to_numpy(zero_copy_only=False), np.int64)
        return DocBatch(ids, fields, vecs)

    @staticmethod
    def _id_list(ids: np.ndarray) -> str:
        return ", ".join(map(str, np.asarray(ids, np.int64).tolist()))

    # --- contract ----------------------------------------------------------------
    def insert(self, docs: DocBatch) -> None:
        (
            self._t.merge_insert(_ID)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(self._table(docs, list(self._cols)))
        )

    def get(self, ids: np.ndarray) -> DocBatch:
        if len(ids) == 0:
            return DocBatch.empty(self.schema)
        cols = [*self._scalar_cols, *([_VEC] if self.schema.dim else [])]
        t = self._t.search().where(f"{_ID} IN ({self._id_list(ids)})").select(cols).to_arrow()
        return self._batch(t, vectors=self.schema.dim is not None)

    def update(self, docs: DocBatch) -> None:
        if not docs.fields and docs.vectors is None:
            return
        # merge_insert with a subset of the columns updates only those columns
        self._t.merge_insert(_ID).when_matched_update_all().execute(
            self._table(docs, list(docs.fields))
        )

    def delete(self, ids: np.ndarray) -> None:
        if len(ids):
            self._t.delete(f"{_ID} IN ({self._id_list(ids)})")

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        q = self._t.search()
        if where is not None:
            q = q.where(compile_filter(where, self._cols))
        q = q.select(self._scalar_cols)
        if order is not None:
            q = q.order_by(
                [ColumnOrdering(column_name=self._cols[order[0]], ascending=not order[1])]
            )
        if limit is not None:
            q = q.limit(int(limit))
        return self._batch(q.to_arrow(), vectors=False)

    def search(self, vectors: np.ndarray, k: int, where: Filter | None = None) -> SearchResult:
        nq = len(vectors)
        if nq == 0 or k == 0:
            return SearchResult.empty(nq, k)
        queries = np.asarray(vectors, np.float32)
        q = self._t.search(queries[0] if nq == 1 else queries).distance_type(self._metric)
        q = q.limit(k)
        if self._ef is not None:
            q = q.ef(self._ef)
        if where is not None:
            q = q.where(compile_filter(where, self._cols), prefilter=True)
        t = q.select([_ID, "_distance"]).to_arrow()
        found = t.column(_ID).to_numpy()
        d = t.column("_distance").to_numpy()
        if nq == 1:  # one query's rows, no query_index: nearest first (stable to be sure)
            order = np.argsort(d, kind="stable")[:k]
            return SearchResult.from_flat(found[order], self._distance(d[order]), [len(order)], k)
        qi = t.column("query_index").to_numpy().astype(np.int64)
        order = np.lexsort((d, qi))  # per query, nearest first (a stable sort)
        found, d, qi = found[order], d[order], qi[order]
        keep = np.arange(len(qi)) - np.searchsorted(qi, qi) < k  # each query's first k
        counts = np.bincount(qi[keep], minlength=nq)
        return SearchResult.from_flat(found[keep], self._distance(d[keep]), counts, k)

    def _distance(self, d: np.ndarray) -> np.ndarray:
        if self._metric == "l2":
            return np.sqrt(np.maximum(d, 0.0))
        if self._metric == "dot":
            return d - np.float32(1.0)
        return d

    def count(self) -> int:
        return int(self._t.count_rows())

    def build_index(self, params: HnswIndex) -> None:
        """IVF_HNSW_FLAT on the vectors plus B-trees on id and the indexed
        fields; returns once Lance reports every row indexed."""
        names = []
        if self.schema.dim is not None:
            cfg: dict[str, Any] = {"distance_type": self._metric}
            if params.m is not None:
                cfg["m"] = params.m
            if params.ef_construct is not None:
                cfg["ef_construction"] = params.ef_construct
            self._t.create_index(_VEC, config=IvfHnswFlat(**cfg), replace=True)
            names.append(f"{_VEC}_idx")
        for col in [_ID, *(self._cols[f] for f in self.schema.indexed)]:
            self._t.create_index(col, config=BTree(), replace=True)
            names.append(f"{col}_idx")
        self._t.wait_for_index(names, timeout=_WAIT)

    def set_search_params(self, params: HnswSearch) -> None:
        if params.ef is not None:
            self._ef = params.ef

    def size_bytes(self) -> int:
        return _tree_size(self.store.table_path(self.name))

    def compact(self) -> None:
        """Merge small fragments, fold new rows into the indexes, and remove
        every older version of the table (this store is its only user)."""
        with warnings.catch_warnings():  # "removes every version": that is the point
            warnings.simplefilter("ignore", UserWarning)
            self._t.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)

    def _drop(self) -> None:
        self.store.db.drop_table(self.name)


def _tree_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(FileNotFoundError):  # removed by a concurrent cleanup
                total += os.lstat(os.path.join(root, f)).st_size
    return total


class LanceStore(Store):
    engine = "lancedb"
    capabilities = frozenset(Capability) - {Capability.SHARED_ACROSS_PROCESSES, Capability.PIPELINE}
    Index = HnswIndex
    Search = HnswSearch
    extra = "lancedb"
    client_dist = "lancedb"
    url_form = DIRECTORY
    # the data is in Lance files; the loaded IVF_HNSW_FLAT index is in RAM
    ram = RamUse(vector=0, overhead=0, hnsw_m=20)

    def __init__(self, spec: StoreSpec):
        super().__init__(spec)
        self.path = self.local_path()
        self.db = lancedb.connect(self.path)

    def table_path(self, name: str) -> str:
        return os.path.join(self.path, f"{name}.lance")

    def has_collection(self, name: str) -> bool:
        return os.path.isdir(self.table_path(name))

    def _arrow_schema(self, schema: Schema) -> pa.Schema:
        cols = [column_name(f) for f in schema.fields]
        if len(set(cols)) != len(cols) or {_ID, _VEC} & set(cols):
            raise UserError(
                f"field names {list(schema.fields)} collide in Lance column names", where="schema"
            )
        fields = [pa.field(_ID, pa.int64(), nullable=False)]
        fields += [
            pa.field(c, _ARROW_TYPE[k]) for c, k in zip(cols, schema.fields.values(), strict=True)
        ]
        if schema.dim is not None:
            fields.append(pa.field(_VEC, pa.list_(pa.float32(), schema.dim)))
        return pa.schema(fields)

    def _create(self, name: str, schema: Schema, index: IndexParams) -> Collection:
        table = self.db.create_table(name, schema=self._arrow_schema(schema), mode="create")
        return LanceCollection(self, name, schema, table)

    def _open(self, name: str, schema: Schema) -> Collection:
        if not self.has_collection(name):
            raise UserError(f"no table {name!r} in {self.path}", where="store lancedb")
        return LanceCollection(self, name, schema, self.db.open_table(name))

    def engine_version(self) -> str:
        return f"lance (lancedb {lancedb.__version__})"
