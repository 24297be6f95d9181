"""Readers for the vector file formats the studies use.

Every reader opens lazily and never loads what is not asked for:

- TEXMEX ``.fvecs`` / ``.ivecs`` / ``.bvecs`` (each row: int32 dimension,
  then the values) and big-ann ``.fbin`` / ``.u8bin`` / ``.i8bin`` /
  ``.ibin`` (int32 rows, int32 dimension, then the values) are memory-mapped
  (``np.memmap``); the header is checked against the file size at open.
- big-ann ground truth files (int32 rows, int32 k, uint32 ids, float32
  distances).
- ann-benchmarks HDF5 (``train``, ``test``, ``neighbors``, ``distances``,
  attribute ``distance``) through h5py datasets, read in slices.
- VectorDBBench Parquet directories (``train*.parquet``, ``test.parquet``,
  ``neighbors.parquet``, ``scalar_labels.parquet``) through pyarrow, one
  record batch at a time.
- qdrant's compound layout (``vectors.npy``, ``tests.jsonl``,
  ``payloads.jsonl``), as in vector-db-benchmark's tar archives.

``VectorSource`` is the common shape: ``len``, ``dim``, ``chunks(rows)``
yielding float32 blocks, each checked for NaN and inf. Every problem is a
``UserError`` whose ``where`` is the file, so the message is one line that
names the file and the problem.

One module (~900 lines) on purpose: every reader returns the same
``VectorSource`` with the same checks, and callers reach them only through
``open_source``; each format is one section, the cut into a package of
readers if another format joins.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from storebench.data.batch import Metric
from storebench.errors import UserError

log = logging.getLogger("storebench.data")

CHUNK_ROWS = 65536
MAX_DIM = 1 << 16

VECS_DTYPES: dict[str, np.dtype[Any]] = {
    ".fvecs": np.dtype("<f4"),
    ".ivecs": np.dtype("<i4"),
    ".bvecs": np.dtype("u1"),
}
BIN_DTYPES: dict[str, np.dtype[Any]] = {
    ".fbin": np.dtype("<f4"),
    ".u8bin": np.dtype("u1"),
    ".i8bin": np.dtype("i1"),
    ".ibin": np.dtype("<i4"),
}
HDF5_SUFFIXES = (".hdf5", ".h5", ".hdf")
SUFFIXES = (*HDF5_SUFFIXES, *VECS_DTYPES, *BIN_DTYPES, ".npy", ".parquet")  # every file format
# ann-benchmarks' ``distance`` attribute (and a few spellings used elsewhere)
METRIC_NAMES: dict[str, Metric] = {
    "euclidean": "l2",
    "l2": "l2",
    "angular": "cosine",
    "cosine": "cosine",
    "dot": "ip",
    "ip": "ip",
    "inner_product": "ip",
}


def metric_of(name: str, where: str) -> Metric:
    m = METRIC_NAMES.get(str(name).lower())
    if m is None:
        raise UserError(
            f"distance {name!r} is not supported (use euclidean, angular or dot)", where=where
        )
    return m


def _bytes(n: int) -> str:
    return f"{n:,} bytes"


# a squared norm above this makes float32 distances overflow to inf (|q - x|^2 <= 4 max)
MAX_SQ_NORM = float(np.finfo(np.float32).max) / 4


def check_finite(chunk: np.ndarray, first_row: int, where: str) -> None:
    """NaN or inf anywhere in a float chunk, or a vector so long that
    distances to it overflow, is a user error naming the row."""
    if chunk.dtype.kind != "f":
        return
    ok = np.isfinite(chunk).all(axis=1) if chunk.ndim == 2 else np.isfinite(chunk)
    if not ok.all():
        row = first_row + int(np.flatnonzero(~ok)[0])
        raise UserError(f"row {row}: vector holds NaN or inf", where=where)
    if chunk.ndim == 2:
        sq = np.einsum("ij,ij->i", chunk, chunk, dtype=np.float64)
        big = np.flatnonzero(sq > MAX_SQ_NORM)
        if len(big):
            row = first_row + int(big[0])
            raise UserError(
                f"row {row}: vector too long (squared norm {sq[big[0]]:.3g}): "
                "distances would overflow float32",
                where=where,
            )


class VectorSource(Protocol):
    """Rows of vectors, read in chunks."""

    where: str

    def __len__(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        """float32 blocks of at most ``rows`` rows, each checked for NaN/inf."""
        ...


@dataclass
class ArraySource:
    """An (n, d) array as a VectorSource: numpy's (a memmap, say), or an
    h5py dataset, read a block at a time."""

    array: Any
    where: str

    def __len__(self) -> int:
        return len(self.array)

    @property
    def dim(self) -> int:
        return int(self.array.shape[1])

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        for s in range(0, len(self.array), rows):
            with reading(self.where, f"rows {s}..: unreadable"):  # a damaged HDF5 chunk
                block = np.asarray(self.array[s : s + rows], dtype=np.float32)
            check_finite(block, s, self.where)
            yield block


# --- TEXMEX .fvecs / .ivecs / .bvecs ------------------------------------------


def open_vecs(path: str | os.PathLike[str], limit: int | None = None) -> np.ndarray:
    """A TEXMEX file as an (n, d) read-only memmap view (strided: each row
    skips its 4-byte dimension). Checks the first dimension, that the size is
    a whole number of rows, and (cheaply, on a sample) the per-row headers."""
    p = Path(path)
    where = str(p)
    suffix, dtype = _suffix_dtype(p, VECS_DTYPES)
    size, (d,) = _header(p, 1)
    if not 0 < d <= MAX_DIM:
        raise UserError(
            f"first row declares dimension {d}; not a {suffix} file or corrupt", where=where
        )
    row = 4 + d * dtype.itemsize
    if size % row:
        raise UserError(
            f"size {_bytes(size)} is not a whole number of {row}-byte rows of dimension {d} "
            f"(truncated or corrupt)",
            where=where,
        )
    n = size // row
    n = n if limit is None else min(n, limit)
    if n == 0:
        return np.empty((0, d), dtype)
    raw = np.memmap(p, dtype=np.uint8, mode="r", shape=(n, row))
    sample = np.unique(np.linspace(0, n - 1, min(n, 1024)).astype(np.int64))
    dims = np.ascontiguousarray(raw[sample, :4]).view("<i4")[:, 0]
    bad = np.flatnonzero(dims != d)
    if len(bad):
        i = int(bad[0])
        raise UserError(
            f"row {int(sample[i])} declares dimension {int(dims[i])}, the file {d}", where=where
        )
    return raw[:, 4:].view(dtype)


# --- big-ann .fbin / .u8bin / .i8bin / .ibin ---------------------------------


def open_bin(path: str | os.PathLike[str], limit: int | None = None) -> np.ndarray:
    """A big-ann binary file as an (n, d) read-only memmap. The header's
    n x d must match the file size exactly."""
    p = Path(path)
    where = str(p)
    suffix, dtype = _suffix_dtype(p, BIN_DTYPES)
    size, (n, d) = _header(p, 2)
    if n < 0 or not 0 < d <= MAX_DIM:
        raise UserError(f"header declares {n} x {d}; not a {suffix} file or corrupt", where=where)
    want = 8 + n * d * dtype.itemsize
    if size != want:
        raise UserError(
            f"header declares {n:,} x {d} ({_bytes(want)}) but the file has {_bytes(size)} "
            f"({'truncated' if size < want else 'trailing data'})",
            where=where,
        )
    n = n if limit is None else min(n, limit)
    if n == 0:
        return np.empty((0, d), dtype)
    return np.memmap(p, dtype=dtype, mode="r", offset=8, shape=(n, d))


def read_bin_truth(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """big-ann ground truth: (ids (n, k) int64, distances (n, k) float32)."""
    p = Path(path)
    where = str(p)
    size, (n, k) = _header(p, 2)
    want = 8 + n * k * 8
    if n < 0 or k <= 0 or size != want:
        raise UserError(
            f"header declares {n:,} x {k} ({_bytes(want)}) but the file has {_bytes(size)}",
            where=where,
        )
    ids = np.fromfile(p, dtype="<u4", count=n * k, offset=8).reshape(n, k).astype(np.int64)
    dist = np.fromfile(p, dtype="<f4", count=n * k, offset=8 + n * k * 4).reshape(n, k)
    return ids, dist


def read_truth_file(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Provided neighbours: TEXMEX ``.ivecs``, or big-ann ground truth (ids
    and distances; whatever its suffix), or a plain ``.ibin``/``.npy`` matrix."""
    suffix = path.suffix.lower()
    if suffix == ".ivecs":
        return np.asarray(open_vecs(path), dtype=np.int64), None
    if suffix == ".npy":
        return np.asarray(open_npy(path, "iu"), dtype=np.int64), None
    if suffix == ".ibin":
        with contextlib.suppress(UserError):  # not a plain matrix: big-ann ground truth
            return np.asarray(open_bin(path), dtype=np.int64), None
    return read_bin_truth(path)


def open_vectors(path: str | os.PathLike[str], limit: int | None = None) -> np.ndarray:
    """Any of the memory-mappable formats (TEXMEX, big-ann, .npy) by suffix."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in VECS_DTYPES:
        return open_vecs(p, limit)
    if suffix in BIN_DTYPES:
        return open_bin(p, limit)
    if suffix == ".npy":
        return open_npy(p)[:limit]
    raise UserError(f"unknown vector file type {suffix!r}", where=str(p))


def first_line(exc: BaseException) -> str:
    """An exception's message as one line (library messages span several)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


@contextlib.contextmanager
def reading(where: str, what: str, missing: str = "file not found") -> Iterator[None]:
    """What a library raises while reading a file, as a UserError that names
    it: ``missing``, or ``what (the library's first line)``."""
    try:
        yield
    except UserError:
        raise
    except FileNotFoundError:
        raise UserError(missing, where=where) from None
    except Exception as exc:  # numpy, h5py, pyarrow: ValueError, OSError, ArrowInvalid, ...
        raise UserError(f"{what} ({first_line(exc)})", where=where) from None


def check_kind(dtype: np.dtype[Any], kinds: str, where: str, what: str = "") -> None:
    """``dtype`` is of one of ``kinds`` (numpy's letters)."""
    if dtype.kind not in kinds:
        want = "integers" if kinds == "iu" else "numbers"
        raise UserError(f"{what}holds {dtype} values, expected {want}", where=where)


def open_npy(path: Path, kinds: str = "biuf") -> np.ndarray:
    """A 2-d .npy array, memory-mapped, whose dtype is of one of ``kinds``
    (numpy's letters: numbers and booleans by default)."""
    with reading(str(path), "not a readable .npy file"):
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    if not isinstance(arr, np.ndarray):  # an .npz archive under a .npy name
        raise UserError("not a .npy file (an .npz archive?)", where=str(path))
    check_kind(arr.dtype, kinds, str(path))
    if arr.ndim != 2:
        raise UserError(f"expected a 2-d array, found shape {arr.shape}", where=str(path))
    return arr


def exists(p: Path) -> bool:
    """``p.exists()``; a name the system refuses (too long, ...) is a UserError."""
    try:
        return p.exists()
    except OSError as exc:
        raise UserError(f"not a usable path ({exc.strerror})", where=str(p)) from None


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except FileNotFoundError:
        raise UserError("file not found", where=str(p)) from None


def _header(p: Path, words: int) -> tuple[int, list[int]]:
    """The file's size and its first ``words`` little-endian int32s."""
    size = _size(p)
    if size < 4 * words:
        raise UserError(f"file too short for a header ({_bytes(size)})", where=str(p))
    with open(p, "rb") as f:
        return size, [int(v) for v in np.frombuffer(f.read(4 * words), "<i4")]


def _suffix_dtype(p: Path, dtypes: dict[str, np.dtype[Any]]) -> tuple[str, np.dtype[Any]]:
    suffix = p.suffix.lower()
    if suffix not in dtypes:
        raise UserError(f"not a {'/'.join(dtypes)} file (suffix {suffix!r})", where=str(p))
    return suffix, dtypes[suffix]


# --- a whole source: base, queries, provided truth, fields ---------------------


@dataclass
class SourceSet:
    """What a file or directory brings: base vectors, optional queries,
    provided neighbours (positions into base) and distances, scalar fields,
    ids, and the metric if the source says it."""

    base: VectorSource
    queries: VectorSource | None = None
    neighbors: np.ndarray | None = None  # (nq, K) positions into base
    distances: np.ndarray | None = None
    metric: Metric | None = None
    ids: np.ndarray | None = None
    fields: dict[str, np.ndarray] = field(default_factory=dict)
    kind: str = ""
    files: list[str] = field(default_factory=list)
    closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for c in self.closers:
            c.close()


# --- HDF5 (ann-benchmarks) -----------------------------------------------------


def open_hdf5(path: Path) -> SourceSet:
    try:
        import h5py
    except ImportError:
        raise UserError(
            "reading HDF5 needs h5py: pip install 'storebench[hdf5]'", where=str(path)
        ) from None
    where = str(path)
    try:
        f = h5py.File(path, "r")
    except FileNotFoundError:
        raise UserError("file not found", where=where) from None
    except OSError as exc:
        msg = str(exc).split("(", 1)[-1].rstrip(")") if "(" in str(exc) else str(exc)
        raise UserError(f"not a readable HDF5 file ({msg})", where=where) from None
    try:
        return _hdf5_source(f, where)
    except (OSError, KeyError, RuntimeError) as exc:  # h5py on a damaged file
        f.close()
        raise UserError(f"not a readable HDF5 file ({first_line(exc)})", where=where) from None
    except BaseException:
        f.close()
        raise


def _h5_member(f: Any, name: str, kinds: str, where: str) -> Any:
    """Dataset ``name`` (None when absent): 2-d, of one of numpy's ``kinds``."""
    import h5py

    if name not in f:
        return None
    d = f[name]
    if not isinstance(d, h5py.Dataset):
        raise UserError(f"{name!r} is a {type(d).__name__.lower()}, not a dataset", where=where)
    check_kind(d.dtype, kinds, where, f"{name!r} ")
    if d.ndim != 2:
        raise UserError(f"{name!r} has shape {d.shape}, expected 2-d", where=where)
    return d


def _hdf5_source(f: Any, where: str) -> SourceSet:
    train = _h5_member(f, "train", "biuf", where)
    if train is None:
        raise UserError(
            f"no 'train' dataset (found: {', '.join(sorted(f.keys())) or 'nothing'}); "
            "not an ann-benchmarks file",
            where=where,
        )
    metric = None
    if "distance" in f.attrs:
        raw = f.attrs["distance"]
        metric = metric_of(raw.decode() if isinstance(raw, bytes) else str(raw), where)
    queries = None
    test = _h5_member(f, "test", "biuf", where)
    if test is not None:
        if test.shape[1] != train.shape[1]:
            raise UserError(
                f"'test' has shape {test.shape}, 'train' dimension {train.shape[1]}",
                where=where,
            )
        queries = ArraySource(test, f"{where}:test")
    neighbors = distances = None
    nb = _h5_member(f, "neighbors", "iu", where)
    if nb is not None:
        neighbors = np.asarray(nb[:], dtype=np.int64)
        if queries is None or len(neighbors) != len(queries):
            raise UserError(
                f"'neighbors' has shape {neighbors.shape} for "
                f"{0 if queries is None else len(queries)} test vectors",
                where=where,
            )
        neighbors = ids_to_positions(neighbors, None, len(train), f"{where}:neighbors")
        dist = _h5_member(f, "distances", "biuf", where)
        if dist is not None:
            distances = np.asarray(dist[:], dtype=np.float32)
            if distances.shape != neighbors.shape:
                raise UserError(
                    f"'distances' has shape {distances.shape}, 'neighbors' {neighbors.shape}",
                    where=where,
                )
    base = ArraySource(train, f"{where}:train")
    return SourceSet(
        base, queries, neighbors, distances, metric, kind="hdf5", files=[where], closers=[f]
    )


# --- Parquet (VectorDBBench) ---------------------------------------------------


class ParquetSource:
    """A list<float> column of one or more Parquet files, read by batches."""

    def __init__(self, files: Sequence[Path], column: str):
        import pyarrow.parquet as pq

        self.files = list(files)
        self.column = column
        self.where = str(self.files[0]) if len(self.files) == 1 else str(self.files[0].parent)
        self.parquet_files = []
        n = 0
        for p in self.files:
            with reading(str(p), "not a readable Parquet file"):
                pf = pq.ParquetFile(p, memory_map=True)
            names = pf.schema_arrow.names
            if column not in names:
                raise UserError(f"no column {column!r} (columns: {', '.join(names)})", where=str(p))
            self.parquet_files.append(pf)
            n += pf.metadata.num_rows
        self._n = n
        self._dim: int | None = None
        for pf, p in zip(self.parquet_files, self.files, strict=True):
            first = next(self._batches(pf, str(p), 0, 1), None)
            if first is not None:
                self._dim = first.shape[1]
                break

    def __len__(self) -> int:
        return self._n

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise UserError("no rows", where=self.where)
        return self._dim

    def _batches(self, pf: Any, where: str, first: int, rows: int) -> Iterator[np.ndarray]:
        row = first
        batches = pf.iter_batches(batch_size=rows, columns=[self.column])
        while True:
            with reading(where, f"rows from {row}: unreadable"):  # a damaged page
                batch = next(batches, None)
            if batch is None:
                return
            arr = list_column_to_matrix(batch.column(0), where, row, self._dim)
            row += len(arr)
            yield arr

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        row = 0
        for pf, p in zip(self.parquet_files, self.files, strict=True):
            for block in self._batches(pf, str(p), row, rows):
                block = block.astype(np.float32, copy=False)
                check_finite(block, row, str(p))
                row += len(block)
                yield block


def list_column_to_matrix(col: Any, where: str, first_row: int, dim: int | None) -> np.ndarray:
    """A pyarrow list/fixed-size-list column of numbers as an (n, d) array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    if col.null_count:
        bad = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise UserError(f"row {first_row + bad}: vector is null", where=where)
    t = col.type
    if not (
        pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    ) or not (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)):
        raise UserError(f"vector column has type {t}, expected a list of numbers", where=where)
    if pa.types.is_fixed_size_list(t):
        d = t.list_size
    else:
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        d = int(lengths[0]) if n else (dim or 0)
        wrong = np.flatnonzero(lengths != (dim if dim is not None else d))
        if len(wrong):
            i = int(wrong[0])
            raise UserError(
                f"row {first_row + i}: vector has dimension {int(lengths[i])}, "
                f"expected {dim if dim is not None else d}",
                where=where,
            )
    if dim is not None and d != dim:
        raise UserError(f"rows from {first_row}: dimension {d}, expected {dim}", where=where)
    values = col.flatten()
    if values.null_count:
        raise UserError(f"rows from {first_row}: a vector holds a null value", where=where)
    return values.to_numpy(zero_copy_only=False).reshape(n, d)


def _read_parquet_column(path: Path, column: str) -> Any:
    import pyarrow.parquet as pq

    with reading(str(path), f"cannot read column {column!r}"):
        return pq.read_table(path, columns=[column]).column(0)


def _scalar_column(col: Any, name: str, where: str) -> np.ndarray:
    """A column of ids or labels: integers, floats, booleans or strings, no nulls."""
    import pyarrow as pa

    t = col.type
    if not (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    ):
        raise UserError(
            f"column {name!r} has type {t}, expected numbers, booleans or strings", where=where
        )
    if col.null_count:
        raise UserError(f"column {name!r} holds nulls", where=where)
    out = col.to_numpy(zero_copy_only=False)
    return out.astype(str) if out.dtype == object else out


def open_parquet(path: Path, metric: Metric | None = None) -> SourceSet:
    """A VectorDBBench dataset directory, or a single Parquet file of base vectors."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(
            "reading Parquet needs pyarrow: pip install 'storebench[parquet]'", where=str(path)
        ) from None
    if path.is_dir():
        train = sorted(
            p for p in path.glob("*.parquet") if "train" in p.name and "shuffle" not in p.name
        ) or sorted(path.glob("shuffle_train*.parquet"))
        if not train:
            raise UserError("no train*.parquet file in the directory", where=str(path))
        test = path / "test.parquet"
        nbr = path / "neighbors.parquet"
        labels = path / "scalar_labels.parquet"
        _check_vdb_files(path, train)
    else:
        train, test, nbr, labels = [path], None, None, None
    base = ParquetSource(train, "emb")
    files = [str(p) for p in train]
    id_parts = []
    for p, pf in zip(train, base.parquet_files, strict=True):
        if "id" in pf.schema_arrow.names:
            part = _scalar_column(_read_parquet_column(p, "id"), "id", str(p))
            check_kind(part.dtype, "iu", str(p), "column 'id' ")
            id_parts.append(part.astype(np.int64))
    ids = np.concatenate(id_parts) if id_parts and len(id_parts) == len(train) else None
    queries = None
    neighbors = None
    if test is not None and test.exists():
        queries = ParquetSource([test], "emb")
        files.append(str(test))
        if queries.dim != base.dim:
            raise UserError(
                f"queries have dimension {queries.dim}, the base {base.dim}", where=str(test)
            )
        if nbr is not None and nbr.exists():
            files.append(str(nbr))
            col = _read_parquet_column(nbr, "neighbors_id")
            nb_ids = list_column_to_matrix(col, str(nbr), 0, None).astype(np.int64)
            if len(nb_ids) != len(queries):
                raise UserError(
                    f"{len(nb_ids)} neighbour lists for {len(queries)} queries", where=str(nbr)
                )
            neighbors = ids_to_positions(nb_ids, ids, len(base), str(nbr))
    fields: dict[str, np.ndarray] = {}
    if labels is not None and labels.exists():
        files.append(str(labels))
        with reading(str(labels), "not a readable Parquet file"):
            tbl = pq.read_table(labels)
        for name in tbl.column_names:
            if name == "id":
                continue
            col = _scalar_column(tbl.column(name), name, str(labels))
            if len(col) != len(base):
                raise UserError(
                    f"column {name!r} has {len(col)} rows for {len(base)} vectors",
                    where=str(labels),
                )
            fields[name] = col
    return SourceSet(
        base, queries, neighbors, metric=metric, ids=ids, fields=fields, kind="parquet", files=files
    )


def _check_vdb_files(path: Path, train: list[Path]) -> None:
    """Every Parquet file of a VectorDBBench directory is one it has: the
    base (``train*``, or ``shuffle_train*``, the same rows shuffled),
    ``test``, ``neighbors``, ``scalar_labels``, and its truths for filtered
    cases (``neighbors_*``: not used, filtered truth is computed). Another
    one is refused by name: reading past it could leave out data meant to be
    read. Files of other kinds (``meta.json``, a README) are not data."""
    known = {"test.parquet", "neighbors.parquet", "scalar_labels.parquet"}
    for p in sorted(path.glob("*.parquet")):
        if p in train or p.name in known:
            continue
        if p.name.startswith(("neighbors_", "shuffle_train")):
            log.info("%s: not used (a truth for filtered cases, or the shuffled base)", p)
            continue
        raise UserError(
            "not a file of a VectorDBBench dataset (train*, shuffle_train*, test, neighbors*, "
            "scalar_labels .parquet): move it out of the directory",
            where=str(p),
        )


# a metric stated in a file beside the data (``meta.json``), under these keys
SIDE_METRIC_KEYS = ("metric", "metric_type", "distance")


def side_metric(path: Path) -> Metric | None:
    """The metric a directory's ``meta.json`` states (VectorDBBench's and
    other tools' spellings: ``metric_type: COSINE``, ``distance: angular``),
    or None: no such file, not JSON, or no metric in it."""
    f = path / "meta.json"
    try:
        raw = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(raw, dict):
        for key in SIDE_METRIC_KEYS:
            if isinstance(raw.get(key), str):
                return metric_of(raw[key], f"{f}: {key}")
    return None


def ids_to_positions(nb_ids: np.ndarray, ids: np.ndarray | None, n: int, where: str) -> np.ndarray:
    """Neighbour ids (-1 padded) as row positions, given the base's ids."""
    if ids is None:
        pos = nb_ids.copy()
    else:
        order = np.argsort(ids, kind="stable")
        srt = ids[order]
        idx = np.searchsorted(srt, nb_ids)
        idx = np.minimum(idx, len(srt) - 1)
        found = srt[idx] == nb_ids
        pos = np.where(found, order[idx], -1)
        unknown = (~found) & (nb_ids >= 0)
        if unknown.any():
            r, c = (int(v[0]) for v in np.nonzero(unknown))
            raise UserError(
                f"query {r}: neighbour id {int(nb_ids[r, c])} is not a base id", where=where
            )
    bad = (pos >= n) | (pos < -1)
    if bad.any():
        r, c = (int(v[0]) for v in np.nonzero(bad))
        raise UserError(
            f"query {r}: neighbour {int(pos[r, c])} is outside the {n:,} base rows", where=where
        )
    return pos.astype(np.int64)


# --- qdrant compound layout (vectors.npy + tests.jsonl) ------------------------


def _test_line(
    raw: bytes, shape: tuple[int, ...], where: str
) -> tuple[list[float] | None, list[int]]:
    """One line of tests.jsonl: its query and the positions of its closest
    vectors (ids are row numbers here); (None, []) for a blank line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"bad test line (not UTF-8 at byte {exc.start})", where=where) from None
    if not line.strip():
        return None, []
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise UserError(f"bad test line ({exc})", where=where) from None
    if not isinstance(row, dict) or "query" not in row:
        raise UserError("bad test line (expected an object with a 'query')", where=where)
    n, dim = shape
    q, ids = row["query"], row.get("closest_ids") or []
    number = (int, float)
    if (
        not isinstance(q, list)
        or len(q) != dim
        or not all(isinstance(v, number) and not isinstance(v, bool) for v in q)
    ):
        raise UserError(f"bad test line ('query' is not a list of {dim} numbers)", where=where)
    if not isinstance(ids, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n for v in ids
    ):
        raise UserError(
            f"bad test line ('closest_ids' is not a list of row numbers below {n:,})", where=where
        )
    return q, ids


def open_compound(path: Path, metric: Metric | None = None) -> SourceSet:
    vec = path / "vectors.npy"
    base_arr = open_npy(vec)
    files = [str(vec)]
    queries = None
    neighbors = None
    tests = path / "tests.jsonl"
    if tests.exists():
        files.append(str(tests))
        qs: list[list[float]] = []
        nbs: list[list[int]] = []
        with open(tests, "rb") as f:
            for i, raw in enumerate(f, 1):
                q, ids = _test_line(raw, base_arr.shape, f"{tests}:{i}")
                if q is not None:
                    qs.append(q)
                    nbs.append(ids)
        if qs:
            queries = ArraySource(np.asarray(qs, dtype=np.float32), str(tests))
        width = max((len(x) for x in nbs), default=0)
        if width:
            nb = np.full((len(nbs), width), -1, np.int64)
            for i, x in enumerate(nbs):
                nb[i, : len(x)] = x
            neighbors = ids_to_positions(nb, None, len(base_arr), str(tests))
    base = ArraySource(base_arr, str(vec))
    return SourceSet(base, queries, neighbors, metric=metric, kind="compound", files=files)


# --- dispatch -------------------------------------------------------------------


def _texmex_dir(path: Path) -> tuple[Path, Path | None, Path | None] | None:
    for suffix in (".fvecs", ".bvecs"):
        base = sorted(path.glob(f"*base{suffix}"))
        if base:
            q = sorted(path.glob(f"*query{suffix}"))
            gt = sorted(path.glob("*groundtruth.ivecs"))
            return base[0], (q[0] if q else None), (gt[0] if gt else None)
    return None


def _bin_dir(path: Path) -> tuple[Path, Path | None, Path | None] | None:
    bins = [p for p in sorted(path.iterdir()) if p.suffix.lower() in BIN_DTYPES]
    base = [p for p in bins if p.name.startswith("base")]
    if not base:
        return None
    q = [p for p in bins if p.name.startswith("query")]
    gt = [p for p in sorted(path.iterdir()) if p.name.lower().startswith("gt")]
    return base[0], (q[0] if q else None), (gt[0] if gt else None)


def open_source(
    path: str | os.PathLike[str],
    *,
    queries: str | os.PathLike[str] | None = None,
    truth: str | os.PathLike[str] | None = None,
    metric: Metric | None = None,
    limit: int | None = None,
) -> SourceSet:
    """Open whatever ``path`` is (a file of a known format, or a directory in
    one of the known layouts), with optional separate query and truth files."""
    p = Path(path)
    if not exists(p):
        raise UserError("file not found", where=str(p))
    q_path = Path(queries) if queries is not None else None
    t_path = Path(truth) if truth is not None else None
    suffix = p.suffix.lower()
    if p.is_dir():
        metric = metric or side_metric(p)
        if (p / "vectors.npy").exists():
            src = open_compound(p, metric)
        elif list(p.glob("*.parquet")):
            src = open_parquet(p, metric)
        elif (found := _texmex_dir(p) or _bin_dir(p)) is not None:
            base, q0, t0 = found
            return open_source(
                base, queries=q_path or q0, truth=t_path or t0, metric=metric, limit=limit
            )
        else:
            raise UserError(
                "no dataset found in the directory (expected *.hdf5, *base.fvecs, base.*bin, "
                "*.parquet or vectors.npy)",
                where=str(p),
            )
    elif suffix in HDF5_SUFFIXES:
        src = open_hdf5(p)
        if metric is not None:
            src.metric = metric
    elif suffix == ".parquet":
        src = open_parquet(p, metric)
    elif suffix in VECS_DTYPES or suffix in BIN_DTYPES or suffix == ".npy":
        arr = open_vectors(p, limit)
        src = SourceSet(
            base=ArraySource(arr, str(p)), metric=metric, kind=suffix.lstrip("."), files=[str(p)]
        )
    else:
        raise UserError(
            f"unknown dataset format {suffix or '(no suffix)'!r} "
            f"(known: {' '.join(s for s in SUFFIXES if s not in ('.h5', '.hdf'))}, or a directory)",
            where=str(p),
        )
    if q_path is not None:
        q_arr = open_vectors(q_path)
        if q_arr.shape[1] != src.base.dim:
            raise UserError(
                f"queries have dimension {q_arr.shape[1]}, the base {src.base.dim}",
                where=str(q_path),
            )
        src.queries = ArraySource(q_arr, str(q_path))
        src.files.append(str(q_path))
    if t_path is not None and limit is not None:
        # neighbours among all rows are not the neighbours among the first `limit`
        log.warning("%s: ignored with a row limit; ground truth will be computed", t_path)
    elif t_path is not None:
        nb, dist = read_truth_file(t_path)
        nq = 0 if src.queries is None else len(src.queries)
        if len(nb) != nq:
            raise UserError(f"{len(nb)} neighbour lists for {nq} queries", where=str(t_path))
        src.neighbors = ids_to_positions(nb, None, len(src.base), str(t_path))
        src.distances = dist
        src.files.append(str(t_path))
    return src
