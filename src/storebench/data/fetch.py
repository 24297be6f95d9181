"""The registered sets: fetched, checked and imported into the data directory.

A URL's file is fetched to ``<dest>.part``; an existing part is continued
with an HTTP ``Range`` request (a server that ignores it starts the file
over), a dropped connection is retried from where it stopped, and the
SHA-256 is computed on the way. Only a complete file is renamed to
``dest``, and only if its checksum matches the digest recorded at the URL's
first download (``checksums.json``); a mismatch deletes the part and says so. The progress bar (rich)
goes to stderr. A set inside a registry package comes through that
registry's client instead (``package_download``), checked against the
pinned digest, and is split into train and test here. Either is imported
with ``datasets.import_source``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storebench.data import formats, registry
from storebench.data.datasets import Dataset, check_space, data_dir, import_source
from storebench.errors import UserError

log = logging.getLogger("storebench.data")

CHUNK = 1 << 20
USER_AGENT = "storebench-dataset-fetch"


@dataclass(frozen=True)
class Downloaded:
    path: Path
    sha256: str
    size: int
    resumed_from: int  # bytes already on disk when this call started


def _hash_file(path: Path, h: hashlib._Hash, limit: int | None = None) -> int:
    done = 0
    with open(path, "rb") as f:
        while True:
            want = CHUNK if limit is None else min(CHUNK, limit - done)
            if want <= 0:
                break
            buf = f.read(want)
            if not buf:
                break
            h.update(buf)
            done += len(buf)
    return done


def progress_bar(enabled: bool | None, *columns: Any) -> Any:
    """A rich progress bar on stderr, when it is a terminal (or ``enabled``):
    the label, the bar, then ``columns``."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn

    console = Console(stderr=True)
    on = console.is_terminal if enabled is None else enabled
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *columns,
        console=console,
        transient=True,
        disable=not on,
    )


def download(
    url: str,
    dest: str | os.PathLike[str],
    sha256: str | None = None,
    *,
    size: int | None = None,
    byte_limit: int | None = None,
    progress: bool | None = None,
    retries: int = 5,
    timeout: float = 60.0,
    label: str | None = None,
) -> Downloaded:
    """Fetch ``url`` to ``dest`` (resuming ``dest.part``) and return its
    SHA-256. ``sha256`` given: a different digest deletes the part and is a
    ``UserError``. ``byte_limit``: fetch only the first that many bytes (a
    prefix of a huge file, as big-ann subsets are cut). ``size``: the
    expected size, when known, for the bar and a check."""
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    want = byte_limit if byte_limit is not None else size
    h = hashlib.sha256()
    have = 0
    if part.exists():
        have = _hash_file(part, h, byte_limit)
        if byte_limit is not None and part.stat().st_size > byte_limit:
            os.truncate(part, byte_limit)
    resumed_from = have
    attempt = 0
    total = want

    def again(msg: str, pause: bool = True) -> None:
        """A failed attempt: error ``msg`` once ``retries`` are spent, else a doubling pause."""
        nonlocal attempt
        attempt += 1
        if attempt > retries:
            raise UserError(msg, where=url) from None
        if pause:
            time.sleep(min(0.1 * 2**attempt, 5.0))

    from rich.progress import DownloadColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()
    with progress_bar(progress, *columns) as bar:
        task = bar.add_task(label or dest.name, total=total, completed=have)
        while True:
            if want is not None and have >= want:
                break
            headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
            if have or byte_limit is not None:
                end = "" if byte_limit is None else str(byte_limit - 1)
                headers["Range"] = f"bytes={have}-{end}"
            req = urllib.request.Request(url, headers=headers)
            try:
                resp = urllib.request.urlopen(req, timeout=timeout)
            except urllib.error.HTTPError as exc:
                if exc.code == 416 and have:
                    # nothing left to send: what we have is the whole file
                    m = re.match(r"bytes \*/(\d+)", exc.headers.get("Content-Range", ""))
                    if m is None or int(m.group(1)) == have:
                        break
                    have, h = 0, hashlib.sha256()  # the file changed: start over
                    part.unlink(missing_ok=True)
                    continue
                raise UserError(
                    f"download failed: HTTP {exc.code} {exc.reason}", where=url
                ) from None
            except (urllib.error.URLError, OSError) as exc:
                again(f"download failed: {getattr(exc, 'reason', exc)}")
                continue
            with resp:
                status = resp.status
                if have and status == 200:
                    # the server ignored the range: start the file over
                    have, h = 0, hashlib.sha256()
                    part.unlink(missing_ok=True)
                elif status == 206:
                    m = re.match(
                        r"bytes (\d+)-(\d+)/(\d+|\*)", resp.headers.get("Content-Range", "")
                    )
                    if m is None or int(m.group(1)) != have:
                        raise UserError(
                            f"download failed: server answered range {resp.headers.get('Content-Range')!r} "
                            f"to a request from byte {have}",
                            where=url,
                        )
                    if m.group(3) != "*" and byte_limit is None:
                        total = int(m.group(3))
                elif status != 200:
                    raise UserError(f"download failed: HTTP {status}", where=url)
                if status == 200:
                    length = resp.headers.get("Content-Length")
                    if length is not None and byte_limit is None:
                        total = int(length)
                if total is not None:
                    bar.update(task, total=total, completed=have)
                mode = "ab" if have else "wb"
                try:
                    with open(part, mode) as f:
                        while True:
                            if byte_limit is not None and have >= byte_limit:
                                break
                            buf = resp.read(CHUNK)
                            if not buf:
                                break
                            if byte_limit is not None:
                                buf = buf[: byte_limit - have]
                            f.write(buf)
                            h.update(buf)
                            have += len(buf)
                            bar.update(task, completed=have)
                except (TimeoutError, OSError, http.client.HTTPException) as exc:
                    again(
                        f"download failed after {retries} retries: {exc}; "
                        f"{have:,} bytes kept in {part} for a later resume"
                    )
                    continue
            if total is not None and have < total:  # the connection closed early: resume
                again(
                    f"download failed: connection closed at {have:,} of {total:,} bytes "
                    f"after {retries} retries; the part is kept for a later resume",
                    pause=False,
                )
                continue
            break
    if byte_limit is not None and have < byte_limit:
        raise UserError(
            f"download failed: the file has {have:,} bytes, fewer than the {byte_limit:,} wanted",
            where=url,
        )
    digest = h.hexdigest()
    if sha256 is not None and digest != sha256.lower():
        part.unlink(missing_ok=True)
        raise UserError(
            f"checksum mismatch: expected sha256 {sha256.lower()}, got {digest}; "
            f"the downloaded file was deleted",
            where=url,
        )
    if size is not None and byte_limit is None and have != size:
        part.unlink(missing_ok=True)
        raise UserError(
            f"size mismatch: expected {size:,} bytes, got {have:,}; the downloaded file was deleted",
            where=url,
        )
    os.replace(part, dest)
    return Downloaded(dest, digest, have, resumed_from)


def package_download(pkg: registry.Package, dest_dir: Path) -> Path:
    """The package file through its registry's own client (pip here: its
    index, proxy and cache settings apply), checked against the pinned
    SHA-256; a mismatch deletes it."""
    if pkg.client != "pip":
        raise UserError(f"no client for {pkg.client!r} packages", where=pkg.requirement)
    dest = dest_dir / pkg.filename
    if not dest.exists():
        dest_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        done = subprocess.run(
            [*cmd, "--disable-pip-version-check", "-d", str(dest_dir), pkg.requirement],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not dest.exists():
            last = (done.stderr.strip().splitlines() or ["no file saved"])[-1]
            raise UserError(f"pip download failed: {last}", where=pkg.requirement)
    h = hashlib.sha256()
    _hash_file(dest, h)
    if h.hexdigest() != pkg.sha256:
        dest.unlink()
        raise UserError(
            f"checksum mismatch: expected sha256 {pkg.sha256}, got {h.hexdigest()}; "
            "the downloaded file was deleted",
            where=pkg.requirement,
        )
    return dest


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
    entry = registry.REGISTRY.get(name)
    if entry is None:
        raise UserError(
            f"unknown dataset {name!r} (registered: {', '.join(registry.REGISTRY)})",
            where="dataset",
        )
    root = root or data_dir()
    target = name if limit is None else f"{name}.first{limit}"
    if (root / target).exists() and not replace:
        return Dataset(root / target)
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
