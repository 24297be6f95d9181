"""How pgvector's rows travel: PostgreSQL's binary forms (the binary COPY
stream, binary parameters, the vector type both ways, a k-nearest reply read
by numpy) and the insert's shape (a statement or a COPY, its placeholders)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format

from storebench.data.batch import DocBatch

# binary COPY layout of fixed-width columns: (numpy big-endian dtype, bytes)
_BIN = {"int": (">i8", 8), "float": (">f8", 8), "bool": ("u1", 1)}
MAX_PARAMS = 65535  # bind parameters per statement (the protocol's int16 count)
# insert: up to this many rows one prepared multi-row INSERT, more a binary
# COPY. Measured on one connection (10 text columns; or an int, a text and a
# 128- or 960-dim vector): the INSERT is 1.2-2x the documents/s up to 32 rows
# and uses half the client CPU or less (a COPY costs ~150 us of client CPU
# however small); at 64 rows it is even, at 128 COPY is 1.1-1.4x faster.
INSERT_ROWS = 32
# the insert cursor: psycopg >= 3.2's RawCursor takes PostgreSQL's own $n
# placeholders, so a statement is not re-parsed per call (psycopg caches its
# %s conversion only up to 50 parameters: 4 rows of 11 columns)
RAW_CURSOR = getattr(psycopg, "RawCursor", None)
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
COPY_TRAILER = b"\xff\xff"


def packed(col: np.ndarray, dtype: str) -> list[bytes]:
    """Each value of a column in a fixed-width binary form (numpy scalars
    would come back in native byte order: slices of one buffer do not)."""
    raw, w = col.astype(dtype).tobytes(), np.dtype(dtype).itemsize
    return [raw[j : j + w] for j in range(0, len(raw), w)]


class VectorDumper(Dumper):
    """numpy float32 vector -> pgvector's binary input (dim, unused, floats)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        v = np.asarray(obj, dtype=">f4").ravel()
        return len(v).to_bytes(2, "big") + b"\x00\x00" + v.tobytes()


class VectorLoader(Loader):
    format = Format.BINARY

    def load(self, data: Any) -> np.ndarray:
        return decode_vector(data)


def encode_vector(v: Any) -> bytes:
    return VectorDumper.dump(None, v)  # type: ignore[arg-type]


def decode_vector(data: bytes) -> np.ndarray:
    return np.frombuffer(data, ">f4", offset=4).astype(np.float32)


def vectors_binary(vectors: np.ndarray) -> list[bytes]:
    """Each row of a vector array in pgvector's binary form."""
    vecs = np.asarray(vectors, dtype=">f4")
    head = vecs.shape[1].to_bytes(2, "big") + b"\x00\x00"
    return [head + v.tobytes() for v in vecs]


def dollars(sql: str) -> str:
    """psycopg's ``%s`` markers as PostgreSQL's own ``$n`` (asyncpg's)."""
    parts = sql.split("%s")
    out = [parts[0]]
    for k, part in enumerate(parts[1:], 1):
        out += [f"${k}", part]
    return "".join(out)


def row_types(k: int) -> tuple[np.dtype[Any], np.dtype[Any]]:
    """A reply's ids and distances as one (1, k) row each: made once per k
    (a dtype made per call costs as much as the rest of the decoding)."""
    return np.dtype((">i8", (k,))), np.dtype((">f4", (k,)))


ROW_TYPES: dict[int, tuple[np.dtype[Any], np.dtype[Any]]] = {}


def neighbours(ids: np.ndarray, dist: np.ndarray, got: bytes | None, d: bytes | None) -> None:
    """One query's row of a search result from its reply (``_knn_sql``):
    padded with -1 and inf past what was found (nothing: None)."""
    n = len(got) // 8 if got else 0
    if n:
        ids[:n] = np.frombuffer(got, ">i8")
        dist[:n] = np.frombuffer(d, ">f4")
    ids[n:] = -1
    dist[n:] = np.inf


def copy_binary(
    docs: DocBatch, fields: list[str], kinds: Mapping[str, str]
) -> tuple[list[str], bytes]:
    """One binary COPY stream for a batch: (column order, bytes).

    Fixed-width columns (id, numbers, bools, the vector) form a numpy
    structured array, one record per row; text columns go last, scattered
    in with numpy index arithmetic."""
    n = len(docs)
    fixed = [f for f in fields if kinds[f] != "str"]
    text = [f for f in fields if kinds[f] == "str"]
    has_vec = docs.vectors is not None
    ncols = 1 + len(fields) + (1 if has_vec else 0)
    spec: list[tuple[Any, ...]] = [("n", ">i2"), ("l_id", ">i4"), ("id", ">i8")]
    for i, f in enumerate(fixed):
        spec += [(f"l{i}", ">i4"), (f"f{i}", _BIN[kinds[f]][0])]
    if has_vec:
        dim = docs.vectors.shape[1]  # type: ignore[union-attr]
        spec += [("l_v", ">i4"), ("v_dim", ">i2"), ("v_pad", ">i2"), ("v", ">f4", (dim,))]
    rec = np.empty(n, np.dtype(spec))
    rec["n"] = ncols
    rec["l_id"] = 8
    rec["id"] = docs.ids
    for i, f in enumerate(fixed):
        rec[f"l{i}"] = _BIN[kinds[f]][1]
        rec[f"f{i}"] = docs.fields[f]
    if has_vec:
        rec["l_v"] = 4 + 4 * dim
        rec["v_dim"] = dim
        rec["v_pad"] = 0
        rec["v"] = docs.vectors
    columns = ["id", *fixed] + (["v"] if has_vec else []) + text
    if not text:
        return columns, COPY_HEADER + rec.tobytes() + COPY_TRAILER
    size = rec.dtype.itemsize
    encoded = [[str(s).encode() for s in docs.fields[f]] for f in text]
    lens = [np.fromiter(map(len, e), np.int64, n) for e in encoded]
    row_size: np.ndarray = size + np.sum([4 + ln for ln in lens], axis=0)
    starts = np.cumsum(row_size) - row_size
    out = np.empty(int(row_size.sum()), np.uint8)
    out[(starts[:, None] + np.arange(size)).ravel()] = rec.view(np.uint8)
    pos = starts + size
    for enc, ln in zip(encoded, lens, strict=True):
        out[(pos[:, None] + np.arange(4)).ravel()] = ln.astype(">i4").view(np.uint8)
        payload = np.frombuffer(b"".join(enc), np.uint8)
        if len(payload):
            first = np.cumsum(ln) - ln  # where each string starts in payload
            out[np.repeat(pos + 4 - first, ln) + np.arange(len(payload))] = payload
        pos = pos + 4 + ln
    return columns, COPY_HEADER + out.tobytes() + COPY_TRAILER


def binary_params(
    docs: DocBatch, fields: list[str], kinds: Mapping[str, str]
) -> list[bytes | None]:
    """A batch's parameters, row by row (id, fields, vector), in
    PostgreSQL's binary forms (bigint, double, boolean, text, vector)."""
    columns: list[list[bytes]] = [packed(docs.ids, ">i8")]
    for f in fields:
        col, kind = docs.fields[f], kinds[f]
        if kind == "str":
            columns.append([x.encode() for x in col.tolist()])
        elif kind == "bool":
            columns.append([bytes([bool(x)]) for x in col.tolist()])
        else:
            columns.append(packed(col, _BIN[kind][0]))
    if docs.vectors is not None:
        columns.append(vectors_binary(docs.vectors))
    return [x for row in zip(*columns, strict=True) for x in row]
