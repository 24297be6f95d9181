"""Where storebench writes: results directories, report directories, export
files. Each is checked before any work starts, so a run or a report never
does its work only to fail when it writes: the directory exists (or only the
last part of the path is missing: the directory the user named, made when
the first file is written) and a file can really be made there.

The check is a write probe (a hidden file made and removed at once), not
``os.access``: as root ``os.access`` says yes to ``/proc`` or ``/sys``, where
no file can be made. Missing parent directories are never made: the error
names the one that is missing."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from storebench.errors import UserError


def _probe(directory: Path, where: str) -> None:
    """Make and remove a file in ``directory``, or refuse naming why."""
    try:
        fd, name = tempfile.mkstemp(prefix=".storebench-probe-", dir=directory)
    except OSError as exc:
        # /proc answers ENOENT for a directory that exists: say what it means
        why = "no file can be made there" if exc.errno == errno.ENOENT else exc.strerror
        raise UserError(f"cannot write in {directory} ({why})", where=where) from exc
    os.close(fd)
    os.unlink(name)


def _existing_parent(path: Path, where: str) -> Path:
    """The parent directory of ``path``, which must exist (never made)."""
    parent = path.absolute().parent
    if not parent.exists():
        raise UserError(
            f"directory {parent} does not exist (storebench makes no parent directories)",
            where=where,
        )
    if not parent.is_dir():
        raise UserError(f"{parent} is not a directory", where=where)
    return parent


def check_dir(path: str | os.PathLike[str], where: str) -> None:
    """A directory to write files into: an existing, writable one, or a new
    one in an existing, writable parent (the caller makes it on first use).
    ``where`` names it in the error (``--out report/``)."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise UserError("exists and is not a directory", where=where)
        _probe(p, where)
    else:
        _probe(_existing_parent(p, where), where)


def check_file(path: str | os.PathLike[str], where: str) -> None:
    """A file to write (or append to): an existing regular file that can be
    opened for writing (nothing changes in it), or a new one in an existing,
    writable directory."""
    p = Path(path)
    if p.is_dir():
        raise UserError("is a directory, not a file", where=where)
    if p.exists():
        try:
            os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            raise UserError(f"cannot write ({exc.strerror})", where=where) from exc
    else:
        _probe(_existing_parent(p, where), where)


def check_results(results_dir: str | os.PathLike[str], file_name: str, where: str) -> None:
    """A run's results directory and the file its records are appended to."""
    check_dir(results_dir, where)
    f = Path(results_dir) / file_name
    if f.exists() and not (f.is_file() or f.is_dir()):  # a device or pipe: read for ever
        raise UserError("not a regular file", where=str(f))
    if f.exists() or f.is_symlink():
        check_file(f, str(f))
