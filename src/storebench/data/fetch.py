"""The registered sets: fetched, checked and imported into the data directory.

A URL's file is downloaded (resuming) and checked against the digest
recorded at its first download (``checksums.json``); a set inside a
registry package comes through that registry's client, checked against the
pinned digest, and is split into train and test here. Either is imported
with ``datasets.import_source``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tarfile
import tempfile
import uuid
import zipfile
from pathlib import Path

import numpy as np

from storebench.data import formats, registry
from storebench.data.datasets import Dataset, check_space, data_dir, import_source
from storebench.errors import UserError

log = logging.getLogger("storebench.data")


def recorded_checksums(root: Path | None = None) -> dict[str, str]:
    p = (root or data_dir()) / "checksums.json"
    try:
        return dict(json.loads(p.read_text()))
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise UserError(f"corrupt checksum record ({exc})", where=str(p)) from None


def _record_checksum(root: Path, key: str, digest: str) -> None:
    p = root / "checksums.json"
    sums = recorded_checksums(root)
    sums[key] = digest
    tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(sums, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, p)


def _mirrored(url: str, mirror: str | None) -> str:
    if not mirror:
        return url
    from urllib.parse import urlsplit

    return mirror.rstrip("/") + urlsplit(url).path


def _safe_extract(archive: Path, into: Path) -> None:
    try:
        with tarfile.open(archive) as tf:
            for m in tf.getmembers():
                target = (into / m.name).resolve()
                if not str(target).startswith(str(into.resolve())) or m.issym() or m.islnk():
                    raise UserError(f"unsafe member {m.name!r} in archive", where=str(archive))
            tf.extractall(into)  # noqa: S202 - members checked above
    except tarfile.TarError as exc:
        raise UserError(f"not a readable tar archive ({exc})", where=str(archive)) from None


def fetch(
    name: str,
    *,
    mirror: str | None = None,
    progress: bool | None = None,
    keep_download: bool = False,
    replace: bool = False,
    root: Path | None = None,
    limit: int | None = None,
) -> Dataset:
    """Download a registered dataset (resuming, checked) and import it.
    ``limit``: only the first that many rows (of a package's set, shuffled
    first: a random sample), as ``NAME.firstLIMIT``."""
    entry = registry.get(name)
    if entry is None:
        raise UserError(
            f"unknown dataset {name!r} (registered: {', '.join(registry.names())})",
            where="dataset",
        )
    root = root or data_dir()
    target = name if limit is None else f"{name}.first{limit}"
    if (root / target).exists() and not replace:
        return Dataset(root / target)
    from storebench.data.download import download, package_download

    mirror = mirror or os.environ.get("STOREBENCH_MIRROR")
    dl_dir = root / "downloads"
    check_space(root, entry.approx_bytes + entry.stored_bytes)
    sums = recorded_checksums(root)
    got: dict[str, Path] = {}
    for f in entry.files:
        key = f.url if f.byte_limit is None else f"{f.url}#bytes=0-{f.byte_limit - 1}"
        fname = f.filename if f.byte_limit is None else f"{f.filename}.first{f.byte_limit}"
        dest = dl_dir / entry.name / fname
        known = f.sha256 or sums.get(key)
        if dest.exists():
            got[f.role] = dest
            continue
        url, label = _mirrored(f.url, mirror), f"{entry.name}: {f.filename}"
        res = download(
            url, dest, known, size=f.size, byte_limit=f.byte_limit, progress=progress, label=label
        )
        if known is None:
            _record_checksum(root, key, res.sha256)
            log.info("recorded sha256 %s for %s", res.sha256, key)
        got[f.role] = dest
    if entry.package is not None:
        got["archive"] = package_download(entry.package, dl_dir / entry.name)
    tmpdir: Path | None = None
    try:
        if entry.package is not None:
            src = _split(got["archive"], entry, limit)
        elif entry.format == "hdf5":
            src = formats.open_source(got["archive"], metric=entry.metric)
        elif entry.format == "compound-tgz":
            tmpdir = Path(tempfile.mkdtemp(prefix=f".{name}.x.", dir=root))
            _safe_extract(got["archive"], tmpdir)
            found = [p.parent for p in tmpdir.rglob("vectors.npy")]
            if not found:
                raise UserError("no vectors.npy in the archive", where=str(got["archive"]))
            src = formats.open_source(found[0], metric=entry.metric)
        else:  # big-ann binaries
            base = got["base"]
            if entry.limit is not None:
                _patch_bin_header(base, entry.limit, entry.dim)
            src = formats.open_source(
                base, queries=got.get("queries"), truth=got.get("truth"), metric=entry.metric
            )
        try:
            if src.base.dim != entry.dim:
                raise UserError(
                    f"the file holds {src.base.dim}-d vectors; {name} is registered as {entry.dim}-d",
                    where=src.base.where,
                )
            if limit is None and len(src.base) != entry.n:
                log.warning(
                    "%s: %d base vectors, the registry says %d", name, len(src.base), entry.n
                )
            ds = import_source(
                src,
                target,
                metric=entry.metric,
                limit=limit,
                replace=replace,
                source_info={
                    "registry": name,
                    "urls": [f.url for f in entry.files],
                    **({"package": entry.package.requirement} if entry.package else {}),
                },
                root=root,
            )
        finally:
            src.close()
        if entry.package is not None:  # a set split here: its truth, computed once
            ds.truth(entry.truth_k or 100)
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
    if not keep_download:
        shutil.rmtree(dl_dir / entry.name, ignore_errors=True)
    return ds


def _split(archive: Path, entry: registry.Entry, limit: int | None) -> formats.SourceSet:
    """The vectors inside a package, shuffled and split into train and test
    with a fixed seed as ann-benchmarks split its sets: ``entry.nq`` test
    queries (a tenth of a ``limit``ed set), ids the rows' places in the file."""
    assert entry.package is not None
    with zipfile.ZipFile(archive) as zf, zf.open(entry.package.member) as f:
        rows = np.load(f)
    where = f"{archive}:{entry.package.member}"
    order = np.random.default_rng(0).permutation(len(rows))[:limit]
    nq = min(entry.nq or 0, len(order) // 10)
    base, queries = (formats.ArraySource(rows[part], where) for part in (order[nq:], order[:nq]))
    ids = order[nq:].astype(np.int64)
    return formats.SourceSet(base, queries, metric=entry.metric, ids=ids, kind="npy", files=[where])


def _patch_bin_header(path: Path, n: int, dim: int) -> None:
    """A prefix of a big-ann file keeps the full file's header: make it say
    what the prefix holds (idempotent)."""
    with open(path, "r+b") as f:
        f.write(np.array([n, dim], "<i4").tobytes())
