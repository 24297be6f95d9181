"""Documents as columnar batches.

A batch is ids (int64), scalar columns (one numpy array each) and an optional
float32 vector matrix. Slicing returns views, so splitting a dataset into
upload batches copies nothing; no Python object exists per document.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Metric = Literal["l2", "ip", "cosine"]
FieldKind = Literal["int", "float", "bool", "str"]

_KIND_OF_DTYPE = (
    dict.fromkeys("iu", "int") | {"f": "float", "b": "bool"} | dict.fromkeys("UTO", "str")
)


def field_kind(values: np.ndarray) -> FieldKind:
    kind = _KIND_OF_DTYPE.get(values.dtype.kind)
    if kind is None:
        raise TypeError(f"unsupported column dtype {values.dtype}")
    return kind  # type: ignore[return-value]


@dataclass(frozen=True)
class Schema:
    """What a collection holds: scalar fields by kind, the vector dimension
    and metric, which scalar fields should carry an index, and which int
    fields reference documents of another collection (field -> collection
    name): a document store keeps them as fields, a graph store as edges."""

    fields: Mapping[str, FieldKind] = field(default_factory=dict)
    dim: int | None = None
    metric: Metric = "l2"
    indexed: tuple[str, ...] = ()
    refs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (*self.indexed, *self.refs):
            if name not in self.fields:
                raise ValueError(f"field {name!r} is not in the schema")
        for name in self.refs:
            if self.fields[name] != "int":
                raise ValueError(f"reference field {name!r} must hold int ids")
        if self.metric not in ("l2", "ip", "cosine"):
            raise ValueError(f"unknown metric {self.metric!r} (use l2, ip or cosine)")


_INT64, _FLOAT32 = np.dtype(np.int64), np.dtype(np.float32)  # compared as dtypes: half the time


@dataclass(eq=False, slots=True)
class DocBatch:
    """Not frozen, as ``SearchResult``: one is made per get, and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``
    (with slots, half the time per batch). Nothing assigns to a batch."""

    ids: np.ndarray
    fields: Mapping[str, np.ndarray] = field(default_factory=dict)
    vectors: np.ndarray | None = None

    def __post_init__(self) -> None:
        ids, vectors = self.ids, self.vectors
        n = len(ids)
        if ids.ndim != 1 or ids.dtype != _INT64:
            raise TypeError("ids must be a 1-d int64 array")
        for name, col in self.fields.items():
            if len(col) != n:
                raise ValueError(f"field {name!r} has {len(col)} values for {n} ids")
        if vectors is not None:
            if vectors.dtype != _FLOAT32 or vectors.ndim != 2:
                raise TypeError("vectors must be a 2-d float32 array")
            if len(vectors) != n:
                raise ValueError(f"{len(vectors)} vectors for {n} ids")

    @classmethod
    def unchecked(
        cls, ids: np.ndarray, fields: Mapping[str, np.ndarray], vectors: np.ndarray | None
    ) -> DocBatch:
        """A batch from arrays already of the checked types and lengths, not
        checked again: an adapter's answer on a timed path (a quarter of the
        checked constructor's time; the conformance suite compares answers
        through ``take``, which checks them)."""
        batch = object.__new__(cls)
        batch.ids, batch.fields, batch.vectors = ids, fields, vectors
        return batch

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int | None:
        return None if self.vectors is None else int(self.vectors.shape[1])

    def schema(self, metric: Metric = "l2", indexed: tuple[str, ...] = ()) -> Schema:
        return Schema(
            fields={k: field_kind(v) for k, v in self.fields.items()},
            dim=self.dim,
            metric=metric,
            indexed=indexed,
        )

    def slice(self, start: int, stop: int) -> DocBatch:
        """Rows start..stop as views (no copy)."""
        return self.take(slice(start, stop))

    def take(self, rows: np.ndarray | builtins.slice) -> DocBatch:
        """Rows by position (a copy, as numpy fancy indexing is; views for a slice)."""
        return DocBatch(
            self.ids[rows],
            {k: v[rows] for k, v in self.fields.items()},
            None if self.vectors is None else self.vectors[rows],
        )

    def select(self, names: Iterable[str] | None, vectors: bool = True) -> DocBatch:
        """Only the named fields (all if None), with or without vectors."""
        cols = self.fields if names is None else {k: self.fields[k] for k in names}
        return DocBatch(self.ids, dict(cols), self.vectors if vectors else None)

    def batches(self, size: int) -> Iterator[DocBatch]:
        for start in range(0, len(self), size):
            yield self.slice(start, start + size)

    def sorted_by_id(self) -> DocBatch:
        return self.take(np.argsort(self.ids, kind="stable"))

    @staticmethod
    def concat(parts: list[DocBatch]) -> DocBatch:
        if not parts:
            return DocBatch(np.empty(0, np.int64))
        first = parts[0]
        return DocBatch(
            np.concatenate([p.ids for p in parts]),
            {k: np.concatenate([p.fields[k] for p in parts]) for k in first.fields},
            None
            if first.vectors is None
            else np.concatenate([p.vectors for p in parts if p.vectors is not None]),
        )

    @staticmethod
    def empty(schema: Schema) -> DocBatch:
        dtypes = {"int": np.int64, "float": np.float64, "bool": np.bool_, "str": np.str_}
        return DocBatch(
            np.empty(0, np.int64),
            {k: np.empty(0, dtypes[kind]) for k, kind in schema.fields.items()},
            None if schema.dim is None else np.empty((0, schema.dim), np.float32),
        )
