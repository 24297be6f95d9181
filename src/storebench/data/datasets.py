"""Datasets in the data directory: import, make, load, ground truth.

The data directory is ``$STOREBENCH_DATA``, else ``$XDG_CACHE_HOME/storebench``,
else ``~/.cache/storebench``. Each dataset is one directory of ``.npy``
arrays that are memory-mapped when opened, so client processes share the
page cache instead of copying::

    <data>/<name>/meta.json          name, dim, metric, counts, source, fields
                  vectors.npy        (n, dim) float32
                  ids.npy            (n,) int64
                  queries.npy        (nq, dim) float32          (if any)
                  fields/<f>.npy     one column per scalar field
                  truth/provided.npz neighbours the source shipped (if any)
                  truth/k100-l2-all-q10000.npz   computed, reused
    <data>/downloads/                fetched files (``.part`` while incomplete)
    <data>/checksums.json            SHA-256 recorded at first download

A dataset is written into a hidden temporary directory and renamed into
place only when complete, so a failed or interrupted import leaves nothing
behind under its name.

One module (~800 lines) on purpose: import, make and load all write or
read the one on-disk layout above (``Meta``, ``_Writer``, the truth cache);
fetching the registered sets (downloads, checksums, splits) is
``data/fetch.py``, which imports through here.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from storebench.data import formats, registry, synthetic
from storebench.data.batch import DocBatch, Metric, field_kind
from storebench.data.truth import GroundTruth, Progress, exact_knn_work, pair_distances
from storebench.errors import UserError

log = logging.getLogger("storebench.data")

FORMAT_VERSION = 1
HASH_SAMPLE_ROWS = 1024  # rows of each array read for the content hash
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
Where = Any  # a storebench.data.filters.Filter, its dict form, a boolean mask; None: all rows


def data_dir() -> Path:
    """The data directory (created on first use)."""
    env = os.environ.get("STOREBENCH_DATA")
    if env:
        root = Path(env).expanduser()
    else:
        cache = os.environ.get("XDG_CACHE_HOME")
        root = (Path(cache).expanduser() if cache else Path.home() / ".cache") / "storebench"
    if root.exists() and not root.is_dir():  # else every listing would be empty, silently
        raise UserError(
            f"the data directory {root} is not a directory",
            where="STOREBENCH_DATA" if env else None,
        )
    return root


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise UserError(
            "dataset names are letters, digits, '.', '_' and '-' (not starting with '.' or '-')",
            where=repr(name),
        )
    return name


@dataclass
class Meta:
    name: str
    dim: int
    metric: Metric
    n: int
    nq: int
    fields: dict[str, str] = field(default_factory=dict)  # name -> kind
    source: dict[str, Any] = field(default_factory=dict)
    provided_truth_k: int = 0
    created: str = ""
    format_version: int = FORMAT_VERSION

    @staticmethod
    def read(path: Path) -> Meta:
        where = str(path / "meta.json")
        try:
            raw = json.loads((path / "meta.json").read_text(encoding="utf-8"))
            meta = Meta(**raw)
        except FileNotFoundError:
            raise UserError("not a storebench dataset (no meta.json)", where=str(path)) from None
        except (ValueError, TypeError) as exc:  # not JSON, not UTF-8, keys not a Meta's
            raise UserError(f"corrupt meta.json ({exc})", where=where) from None
        meta._check(where)
        return meta

    def _check(self, where: str) -> None:
        """Each value of the type and range the dataset's arrays are read with."""
        for f in fields(self):
            v = getattr(self, f.name)
            want = {"int": int, "str": str, "Metric": str}.get(str(f.type), dict)
            if not isinstance(v, want) or isinstance(v, bool):
                got = repr(v)[:40]
                raise UserError(f"corrupt meta.json ({f.name} is {got})", where=where)
        if self.n < 1 or self.dim < 1 or self.nq < 0 or self.provided_truth_k < 0:
            raise UserError(
                f"corrupt meta.json (n {self.n}, dim {self.dim}, nq {self.nq}, "
                f"provided_truth_k {self.provided_truth_k})",
                where=where,
            )
        if self.metric not in ("l2", "ip", "cosine"):
            raise UserError(f"corrupt meta.json (metric {self.metric!r})", where=where)
        for name, kind in self.fields.items():
            if kind not in ("int", "float", "bool", "str"):
                raise UserError(f"corrupt meta.json (field {name!r} of kind {kind!r})", where=where)


def is_dataset_dir(path: Path) -> bool:
    """A storebench dataset directory: its ``meta.json`` is ours (it has
    ``format_version``). A ``meta.json`` another tool left beside its files
    (in a VectorDBBench directory, say) does not make one; an unreadable one
    beside our arrays is ours, and reads as corrupt."""
    try:
        raw = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return formats.exists(path / "vectors.npy") and formats.exists(path / "ids.npy")
    return isinstance(raw, dict) and "format_version" in raw


def no_metric(where: str, hint: str = "--metric l2, ip or cosine") -> UserError:
    return UserError(f"the source does not say its metric: give {hint}", where=where)


def _mask_key(mask: np.ndarray | None) -> str:
    if mask is None:
        return "all"
    h = hashlib.sha256(np.packbits(mask).tobytes())
    h.update(str(len(mask)).encode())
    return h.hexdigest()[:16]


class Dataset:
    """A dataset in the data directory. Arrays are read-only memmaps."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.meta = m = Meta.read(self.path)
        self.name, self.dim, self.metric, self.n, self.nq = m.name, m.dim, m.metric, m.n, m.nq

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, n={self.n}, dim={self.dim}, metric={self.metric!r}, nq={self.nq})"

    def __len__(self) -> int:
        return self.n

    # --- arrays
    def _array(self, rel: str, shape: tuple[int, ...], want: str) -> np.ndarray:
        """``rel`` memory-mapped, refused unless of ``shape`` and of ``want``:
        a dtype's name, or a field's kind."""
        path = self.path / rel
        with formats.reading(str(path), "corrupt dataset file", "dataset file missing"):
            a = np.load(path, mmap_mode="r", allow_pickle=False)
        got: str | None
        try:
            got = field_kind(a) if rel.startswith("fields/") else str(a.dtype)
        except TypeError:  # a field of a dtype no kind has
            got = None
        if a.shape != shape or got != want:
            raise UserError(
                f"{rel} holds {a.shape} {a.dtype}, meta.json says {shape} {want}",
                where=str(self.path),
            )
        return a

    @cached_property
    def vectors(self) -> np.ndarray:
        return self._array("vectors.npy", (self.n, self.dim), "float32")

    @cached_property
    def ids(self) -> np.ndarray:
        return self._array("ids.npy", (self.n,), "int64")

    @cached_property
    def queries(self) -> np.ndarray:
        """(nq, dim) float32; an empty matrix when the dataset has none."""
        if self.nq == 0:
            return np.empty((0, self.dim), np.float32)
        return self._array("queries.npy", (self.nq, self.dim), "float32")

    @cached_property
    def fields(self) -> dict[str, np.ndarray]:
        return {
            f: self._array(f"fields/{f}.npy", (self.n,), k) for f, k in self.meta.fields.items()
        }

    @property
    def docs(self) -> DocBatch:
        """All documents as one batch of memmap views (nothing is read yet)."""
        return DocBatch(self.ids, dict(self.fields), self.vectors)

    # --- filters and truth
    def mask(self, where: Where) -> np.ndarray | None:
        """A boolean row mask for a filter (a Filter, its dict form, or a mask)."""
        if where is None:
            return None
        if isinstance(where, np.ndarray):
            if where.dtype != np.bool_ or where.shape != (self.n,):
                raise UserError(
                    f"a row mask must be bool of shape ({self.n},), got {where.dtype} {where.shape}",
                    where=self.name,
                )
            return where
        from storebench.data import filters

        try:
            f = filters.parse(where)
        except ValueError as exc:
            raise UserError(str(exc), where=self.name) from None
        missing = filters.fields_of(f) - set(self.meta.fields)
        if missing:
            raise UserError(
                f"filter names field(s) {', '.join(sorted(missing))}; the dataset has: "
                f"{', '.join(self.meta.fields) or 'no fields'}",
                where=self.name,
            )
        try:
            filters.check_kinds(f, self.meta.fields)
        except ValueError as exc:
            raise UserError(str(exc), where=self.name) from None
        cols = {k: self.fields[k] for k in filters.fields_of(f)}
        return np.asarray(filters.evaluate(f, cols), dtype=bool)

    def _truth_files(self) -> Iterator[tuple[Path, int, str, str, int]]:
        d = self.path / "truth"
        if not d.is_dir():
            return
        for p in d.glob("k*-*-*-q*.npz"):
            m = re.match(r"k(\d+)-(\w+)-(\w+)-q(\d+)\.npz$", p.name)
            if m:
                yield p, int(m.group(1)), m.group(2), m.group(3), int(m.group(4))

    def cached_truth(
        self, k: int, where: Where = None, metric: Metric | None = None, nq: int | None = None
    ) -> GroundTruth | None:
        """The truth from disk if some cached or provided file covers the request."""
        metric = metric or self.metric
        nq = self.nq if nq is None else nq
        key = _mask_key(self.mask(where))
        best: tuple[int, int, Path] | None = None
        for p, kk, mm, hh, qq in self._truth_files():
            fits = mm == metric and hh == key and kk >= k and qq >= nq
            if fits and (best is None or (kk, qq) < best[:2]):
                best = (kk, qq, p)
        if best is not None:
            return _read_truth(best[2], nq, k)
        prov = self.path / "truth" / "provided.npz"
        if (
            key == "all"
            and metric == self.metric
            and prov.exists()
            and self.meta.provided_truth_k >= k
        ):
            return _read_truth(prov, min(nq, self.nq), k)
        return None

    def truth(
        self,
        k: int = 100,
        where: Where = None,
        *,
        metric: Metric | None = None,
        nq: int | None = None,
        recompute: bool = False,
        threads: int | None = None,
        progress: Callable[[int], contextlib.AbstractContextManager[Progress]] | None = None,
    ) -> GroundTruth:
        """Exact k nearest documents (by id) of the first ``nq`` queries (all
        by default), among the rows ``where`` selects (all by default).
        Computed once and cached in ``truth/`` keyed by (k, metric, filter
        rows, nq); a cached answer for a larger k or more queries serves a
        smaller request, and so does the truth the source shipped (unless
        ``recompute``). ``progress(work)`` is opened only to compute: the
        callback told of the work done."""
        metric = metric or self.metric
        nq = self.nq if nq is None else min(nq, self.nq)
        if self.nq == 0:
            raise UserError(
                "the dataset has no queries; import it with --queries or --holdout",
                where=self.name,
            )
        if k < 1:
            raise UserError(f"k must be at least 1, got {k}", where=self.name)
        mask = self.mask(where)
        if not recompute:
            hit = self.cached_truth(k, mask, metric, nq)
            if hit is not None:
                return hit
        t0 = time.perf_counter()
        rows = self.n if mask is None else int(mask.sum())
        with progress(exact_knn_work(rows, nq)) if progress else contextlib.nullcontext() as bar:
            gt = GroundTruth.compute(
                self.ids, self.vectors, self.queries[:nq], k, metric, mask, threads, bar
            )
        took = time.perf_counter() - t0
        among = "all rows" if mask is None else f"{rows} filtered rows"
        log.info(
            "ground truth for %s: k=%d, %d queries, %s in %.1f s", self.name, k, nq, among, took
        )
        out = self.path / "truth" / f"k{k}-{metric}-{_mask_key(mask)}-q{nq}.npz"
        with contextlib.suppress(OSError):  # a read-only data dir still answers
            _write_truth(out, gt)
        return gt

    @cached_property
    def content_hash(self) -> str:
        """A fingerprint of what the dataset holds, cheap at any size: its
        metric and, for each array (vectors, ids, queries, fields), the file's
        size, shape and dtype and an even sample of its rows (the first and
        last among them). Records name a dataset by it."""
        h = hashlib.sha256(self.metric.encode())
        # the checked arrays: a file of another shape is refused, not hashed
        arrays = {"vectors.npy": self.vectors, "ids.npy": self.ids}
        if self.nq:
            arrays["queries.npy"] = self.queries
        arrays |= {f"fields/{f}.npy": self.fields[f] for f in sorted(self.meta.fields)}
        for rel, a in arrays.items():
            size = (self.path / rel).stat().st_size
            h.update(f"{rel}:{size}:{a.shape}:{a.dtype.str};".encode())
            if len(a):
                rows = np.unique(np.linspace(0, len(a) - 1, min(len(a), HASH_SAMPLE_ROWS)))
                h.update(np.ascontiguousarray(a[rows.astype(np.int64)]).tobytes())
        return h.hexdigest()[:16]

    def info(self) -> dict[str, Any]:
        m = self.meta
        size = sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
        cached = sorted(
            f"k={kk} {mm} {'all rows' if hh == 'all' else 'filter ' + hh} q={qq}"
            for _, kk, mm, hh, qq in self._truth_files()
        )
        return {
            "name": m.name,
            "path": str(self.path),
            "n": m.n,
            "dim": m.dim,
            "metric": m.metric,
            "queries": m.nq,
            "fields": m.fields,
            "provided_truth_k": m.provided_truth_k,
            "cached_truth": cached,
            "bytes": size,
            "content_hash": self.content_hash,
            "source": m.source,
            "created": m.created,
        }


def _read_truth(path: Path, nq: int, k: int) -> GroundTruth:
    """The first ``nq`` rows and ``k`` columns of a truth file, which has them."""
    try:
        with np.load(path, allow_pickle=False) as z:
            ids, dist = z["ids"], z["distances"]
            if ids.ndim != 2 or ids.shape != dist.shape or ids.shape[0] < nq or ids.shape[1] < k:
                raise ValueError(f"ids {ids.shape}, distances {dist.shape}; {nq} x {k} needed")
            return GroundTruth(ids[:nq, :k].astype(np.int64), dist[:nq, :k].astype(np.float32))
    except Exception as exc:  # not a zip, a member missing or damaged, of another shape
        msg = f"corrupt ground truth file ({formats.first_line(exc)}); delete it to compute again"
        raise UserError(msg, where=str(path)) from None


def _write_truth(path: Path, gt: GroundTruth) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, ids=gt.ids, distances=gt.distances)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --- writing datasets ------------------------------------------------------------


class _Writer:
    """Builds a dataset in a hidden temporary directory; ``commit`` renames it
    into place. Leaving the ``with`` block without commit removes it all."""

    def __init__(self, root: Path, name: str, replace: bool):
        self.root = root
        self.name = _check_name(name)
        self.final = root / name
        self.replace = replace
        if self.final.exists() and not replace:
            raise UserError(
                "a dataset of that name exists (use --force to replace it)", where=str(self.final)
            )
        root.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=root))
        self.committed = False

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.committed:
            shutil.rmtree(self.dir, ignore_errors=True)

    def array(self, rel: str, shape: tuple[int, ...], dtype: Any) -> np.memmap[Any, Any]:
        p = self.dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return np.lib.format.open_memmap(p, mode="w+", dtype=dtype, shape=shape)

    def save(self, rel: str, arr: np.ndarray) -> None:
        p = self.dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        np.save(p, np.ascontiguousarray(arr), allow_pickle=False)

    def commit(self, meta: Meta) -> Dataset:
        meta.created = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        (self.dir / "meta.json").write_text(json.dumps(asdict(meta), indent=2) + "\n")
        old = None
        if self.final.exists():
            if not self.replace:
                raise UserError("a dataset of that name appeared meanwhile", where=str(self.final))
            old = self.root / f".{self.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.final, old)
        os.replace(self.dir, self.final)
        self.committed = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return Dataset(self.final)


def check_space(root: Path, need: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    if need > free:
        raise UserError(
            f"needs about {need / 1e9:.1f} GB, only {free / 1e9:.1f} GB free", where=str(root)
        )


def _copy_vectors(
    w: _Writer,
    rel: str,
    src: formats.VectorSource,
    dim: int,
    skip: np.ndarray | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
) -> int:
    """Stream ``src`` into ``rel`` (float32), leaving out rows in ``skip``."""
    n_src = len(src) if limit is None else min(limit, len(src))
    n_out = n_src - (0 if skip is None else int(skip[:n_src].sum()))
    out = w.array(rel, (n_out, dim), np.float32)
    row = 0  # source rows consumed
    pos = 0  # rows written
    for block in src.chunks():
        if row >= n_src:
            break
        block = block[: n_src - row]
        if block.shape[1] != dim:
            raise UserError(
                f"rows from {row}: dimension {block.shape[1]}, expected {dim}", where=src.where
            )
        kept = block if skip is None else block[~skip[row : row + len(block)]]
        out[pos : pos + len(kept)] = kept
        pos += len(kept)
        row += len(block)
        if progress is not None:
            progress(len(block))
    if pos != n_out:
        raise UserError(
            f"the source yielded {row:,} rows; its header promised {n_src:,} (truncated?)",
            where=src.where,
        )
    out.flush()
    del out
    return n_out


def import_source(
    src: formats.SourceSet,
    name: str,
    *,
    metric: Metric | None = None,
    holdout: int = 0,
    limit: int | None = None,
    seed: int = 0,
    replace: bool = False,
    source_info: Mapping[str, Any] | None = None,
    root: Path | None = None,
    progress: Progress | None = None,
) -> Dataset:
    """Copy a source into the data directory as memory-mappable arrays,
    validating every vector on the way."""
    root = root or data_dir()
    metric = metric or src.metric
    if metric is None:
        raise no_metric(src.files[0] if src.files else name)
    if metric not in ("l2", "ip", "cosine"):
        raise UserError(f"unknown metric {metric!r} (use l2, ip or cosine)", where=name)
    base = src.base
    dim = base.dim
    n_src = len(base) if limit is None else min(limit, len(base))
    if n_src == 0:
        raise UserError("no base vectors", where=base.where)
    if dim < 1:
        raise UserError("the vectors have dimension 0", where=base.where)
    skip = None
    held: np.ndarray | None = None
    if src.queries is None and holdout:
        if holdout >= n_src:
            raise UserError(f"cannot hold out {holdout} of {n_src} rows", where=base.where)
        held = np.sort(np.random.default_rng([seed, 99]).choice(n_src, holdout, replace=False))
        skip = np.zeros(n_src, bool)
        skip[held] = True
    nq_src = 0 if src.queries is None else len(src.queries)
    check_space(root, (n_src + nq_src) * dim * 4 + n_src * 8)
    with _Writer(root, name, replace) as w:
        n = _copy_vectors(w, "vectors.npy", base, dim, skip, n_src, progress)
        nq = 0
        if src.queries is not None:
            nq = _copy_vectors(w, "queries.npy", src.queries, dim)
        elif skip is not None:  # the held-out rows, read back from the source
            nq = _copy_vectors(w, "queries.npy", base, dim, ~skip, n_src)
        ids = src.ids[:n_src] if src.ids is not None else np.arange(n_src, dtype=np.int64)
        if skip is not None:
            ids = ids[~skip]
        if len(np.unique(ids)) != len(ids):
            raise UserError("the source's ids are not unique", where=base.where)
        w.save("ids.npy", ids.astype(np.int64))
        kinds: dict[str, str] = {}
        for fname, col in src.fields.items():
            col = np.asarray(col)[:n_src]
            if skip is not None:
                col = col[~skip]
            if col.dtype == object:
                col = col.astype(str)
            kinds[fname] = field_kind(col)
            w.save(f"fields/{fname}.npy", col)
        provided_k = 0
        if src.neighbors is not None and limit is None and skip is None and nq:
            nb = src.neighbors
            if len(nb) != nq:
                raise UserError(f"{len(nb)} neighbour lists for {nq} queries", where=src.files[-1])
            # distances recomputed in our metric's own terms, so they agree
            # with computed truth and with what stores report
            vec = np.load(w.dir / "vectors.npy", mmap_mode="r")
            qv = np.load(w.dir / "queries.npy", mmap_mode="r")
            dist = pair_distances(qv, vec, nb, metric)
            # keep the source's order but make ties and rounding consistent
            order = np.argsort(dist, axis=1, kind="stable")
            nb = np.take_along_axis(nb, order, axis=1)
            dist = np.take_along_axis(dist, order, axis=1)
            nb_ids = np.where(nb >= 0, ids[np.maximum(nb, 0)], -1)
            _write_truth(w.dir / "truth" / "provided.npz", GroundTruth(nb_ids, dist))
            provided_k = int(nb.shape[1])
            del vec, qv
        info: dict[str, Any] = {"kind": src.kind, "files": src.files, **(source_info or {})}
        if limit is not None:
            info["limit"] = limit
        if held is not None:
            info |= {"holdout": holdout, "seed": seed}
        meta = Meta(
            name, dim, metric, n, nq, fields=kinds, source=info, provided_truth_k=provided_k
        )
        return w.commit(meta)


def import_path(
    path: str | os.PathLike[str],
    name: str | None = None,
    *,
    queries: str | os.PathLike[str] | None = None,
    truth: str | os.PathLike[str] | None = None,
    metric: Metric | None = None,
    holdout: int = 0,
    limit: int | None = None,
    seed: int = 0,
    replace: bool = False,
    progress: Callable[[int], contextlib.AbstractContextManager[Progress]] | None = None,
    default_metric: Metric | None = None,
) -> Dataset:
    """Import a file or directory (any known format) into the data directory.
    ``metric`` overrides what the source says; ``default_metric`` is used
    only where it says nothing. ``progress(rows)``, given the rows to copy,
    opens the callback told of each block copied."""
    p = Path(path)
    name = name or default_name(p)
    src = formats.open_source(p, queries=queries, truth=truth, metric=metric, limit=limit)
    if src.metric is None:
        src.metric = default_metric
    rows = len(src.base) if limit is None else min(limit, len(src.base))
    try:
        st = p.stat()
        with progress(rows) if progress else contextlib.nullcontext(None) as bar:
            return import_source(
                src,
                name,
                metric=metric,
                holdout=holdout,
                limit=limit,
                seed=seed,
                replace=replace,
                source_info={"path": str(p.resolve()), "size": st.st_size, "mtime": st.st_mtime},
                progress=bar,
            )
    finally:
        src.close()


def default_name(p: Path) -> str:
    stem = p.name if p.is_dir() else p.stem
    stem = re.sub(r"(_base|\.base)$", "", stem)
    return re.sub(r"[^A-Za-z0-9._-]", "-", stem).lstrip(".-") or "dataset"


# --- synthetic ---------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticSpec:
    n: int
    dim: int
    kind: synthetic.Kind = "embedding"
    metric: Metric = "l2"
    nq: int = 1000
    seed: int = 0
    clusters: int = 64
    tag_values: int | None = None  # tags.i in [0, tag_values); default n; 0: no tags
    labels: tuple[float, ...] = ()  # selectivities, e.g. (0.01, 0.1, 0.5, 0.99)
    strings: int = 0  # arangob complexity: string attributes per document
    string_size: int = 16

    def default_name(self) -> str:
        return f"synthetic-{self.kind}-{self.n}x{self.dim}-{self.metric}-s{self.seed}"


def make_synthetic(
    spec: SyntheticSpec,
    name: str | None = None,
    *,
    replace: bool = False,
    root: Path | None = None,
    progress: Progress | None = None,
) -> Dataset:
    """Generate a dataset chunk by chunk straight into the data directory."""
    if spec.n < 1 or spec.dim < 1 or spec.nq < 0:
        raise UserError("synthetic data needs n >= 1, dim >= 1 and queries >= 0", where="make")
    if spec.kind not in synthetic.KINDS:
        raise UserError(
            f"unknown kind {spec.kind!r} (use {', '.join(synthetic.KINDS)})", where="make"
        )
    for s in spec.labels:
        if not 0.0 < s <= 1.0:
            raise UserError(f"label selectivity {s} is not in (0, 1]", where="make")
    root = root or data_dir()
    name = name or spec.default_name()
    per_row = spec.dim * 4 + 8 + 8 + len(spec.labels) * 40 + spec.strings * spec.string_size * 4
    check_space(root, spec.n * per_row + spec.nq * spec.dim * 4)
    with _Writer(root, name, replace) as w:
        parts = synthetic.vector_chunks(spec.n, spec.dim, spec.kind, spec.seed, spec.clusters)
        synthetic.fill(w.array("vectors.npy", (spec.n, spec.dim), np.float32), parts, progress)
        if spec.nq:
            queries = synthetic.queries(spec.nq, spec.dim, spec.kind, spec.seed, spec.clusters)
            w.save("queries.npy", queries)
        w.save("ids.npy", np.arange(spec.n, dtype=np.int64))
        kinds: dict[str, str] = {}
        tag_values = spec.n if spec.tag_values is None else spec.tag_values
        if tag_values:
            tags = synthetic.uniform_int_chunks(spec.n, 0, tag_values, spec.seed)
            synthetic.fill(w.array("fields/tags.i.npy", (spec.n,), np.int64), tags)
            kinds["tags.i"] = "int"
        for s in spec.labels:
            lname = synthetic.label_name(s)
            col = w.array(f"fields/{lname}.npy", (spec.n,), f"<U{max(len(lname), 5)}")
            synthetic.fill(col, synthetic.label_chunks(spec.n, s, spec.seed))
            kinds[lname] = "str"
        if spec.strings:
            size = spec.string_size
            cols = {
                f"test{a + 1}": w.array(f"fields/test{a + 1}.npy", (spec.n,), f"<U{size}")
                for a in range(spec.strings)
            }
            pos = 0
            for chunk in synthetic.string_chunks(spec.n, spec.strings, size, spec.seed):
                for k, v in chunk.items():
                    cols[k][pos : pos + len(v)] = v
                pos += len(v)
            for k, c in cols.items():
                c.flush()
                kinds[k] = "str"
            del cols
        source = {"kind": "synthetic", "spec": asdict(spec)}
        return w.commit(
            Meta(name, spec.dim, spec.metric, spec.n, spec.nq, fields=kinds, source=source)
        )


# --- finding datasets --------------------------------------------------------------


def local_names(root: Path | None = None) -> list[str]:
    root = root or data_dir()
    if not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if not p.name.startswith(".") and (p / "meta.json").exists()
    )


def _locate(name_or_path: str | os.PathLike[str], root: Path) -> tuple[Dataset | None, Path, str]:
    """Where ``load`` finds a dataset: (the dataset, its path, its name) when
    it is in the data directory or is a dataset directory, else (None, the
    source to import, the name it is imported under)."""
    s = os.fspath(name_or_path)
    p = Path(s).expanduser()
    looks_like_path = os.sep in s or p.suffix.lower() in formats.SUFFIXES
    if looks_like_path or (formats.exists(p) and not formats.exists(root / s)):
        if is_dataset_dir(p):
            ds = Dataset(p)
            return ds, p, ds.name
        if not formats.exists(p):
            raise UserError("file not found", where=s)
        name = default_name(p)
        if formats.exists(root / name / "meta.json"):
            ds = Dataset(root / name)
            src = ds.meta.source
            st = p.stat()
            if (
                src.get("path") == str(p.resolve())
                and src.get("size") == st.st_size
                and src.get("mtime") == st.st_mtime
            ):
                return ds, ds.path, name
            raise UserError(
                f"a different dataset named {name!r} is already imported; "
                f"import this one under another name (storebench dataset import {s} --name NAME)",
                where=s,
            )
        return None, p, name
    if formats.exists(root / s / "meta.json"):
        return Dataset(root / s), root / s, s
    if s in registry.REGISTRY:
        raise UserError(
            f"dataset {s!r} is registered but not downloaded: run `storebench dataset fetch {s}`",
            where="dataset",
        )
    local = local_names(root)
    raise UserError(
        f"unknown dataset {s!r} (local: {', '.join(local) or 'none'}; "
        f"registered: {', '.join(registry.REGISTRY)})",
        where="dataset",
    )


def load(
    name_or_path: str | os.PathLike[str], *, root: Path | None = None, metric: Metric | None = None
) -> Dataset:
    """A dataset by name (imported, made or fetched into the data directory),
    or by path: a dataset directory, or a file/directory in a known format,
    which is imported on first use (and reused while it is unchanged);
    ``metric`` is its metric where the source does not say one."""
    ds, p, name = _locate(name_or_path, root or data_dir())
    if ds is not None:
        return ds
    log.info("importing %s as %s", p, name)
    return import_path(p, name, default_metric=metric)


def peek(
    name_or_path: str | os.PathLike[str], *, root: Path | None = None, metric: Metric | None = None
) -> Meta:
    """What ``load`` would give (name, n, dim, metric, queries, fields), from
    the source's headers when it is not imported yet: nothing is written."""
    ds, p, name = _locate(name_or_path, root or data_dir())
    if ds is not None:
        return ds.meta
    src = formats.open_source(p)
    try:
        m = src.metric or metric
        if m is None:
            raise no_metric(src.files[0] if src.files else str(p), "--set metric=l2, ip or cosine")
        nq = 0 if src.queries is None else len(src.queries)
        fields = {f: "" for f in src.fields}
        source = {"path": str(p.resolve()), "kind": src.kind}
        return Meta(name, src.base.dim, m, len(src.base), nq, fields=fields, source=source)
    finally:
        src.close()
