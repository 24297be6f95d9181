"""Result files: one JSON object per run, appended atomically to a
JSON-lines file (what a record holds: ``storebench.results.records``). A record is written once, whole (a single O_APPEND write of
one line, then fsync), so readers never see half a record and a crash loses
at most the run in progress, which the runner marks before dying; what a
failed write leaves (a torn last line) is set aside before the next append
and skipped by readers. Records
pass through ``redaction.redact_obj`` when written and when read: no secret
reaches a file, nor leaves an older file through ``show`` or a report."""

from __future__ import annotations

import errno
import json
import logging
import os
import platform
import sys
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import psutil

from storebench.common.redaction import redact_obj
from storebench.errors import UserError

if TYPE_CHECKING:  # typed records read these files, not the other way round
    from storebench.results.records import RunRecord

log = logging.getLogger(__name__)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict[str, Any]:
    mem = psutil.virtual_memory()
    return {
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "memory_bytes": int(mem.total),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
    }


def storebench_version() -> str:
    try:
        return metadata.version("storebench")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"


def _default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def to_json_line(record: dict[str, Any]) -> str:
    return json.dumps(record, default=_default, allow_nan=False, separators=(",", ":")) + "\n"


def append(path: Path, record: RunRecord | dict[str, Any]) -> None:
    """Append one record (redacted) as a single write of a whole line; the
    file, and its directory, are created if needed (not the directory's
    parents: see ``outputs.check_results``). A torn last line left by an
    earlier failure is set aside first (``set_aside_torn_tail``), so the
    record never lands glued to it; a write that fails (a full disk) is
    undone to the last whole line and the record kept in a side file that
    the error names."""
    if not isinstance(record, dict):  # a RunRecord
        record = record.to_dict()
    path.parent.mkdir(exist_ok=True)
    data = to_json_line(redact_obj(record)).encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = set_aside_torn_tail(path, fd)
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes")
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, size)  # no partial line stays for later appends to build on
            kept = _keep_elsewhere(path, data)
            raise UserError(
                f"the record could not be written ({exc.strerror or exc}); "
                + (f"kept in {kept}" if kept else "and could not be kept anywhere"),
                where=str(path),
            ) from None
    finally:
        os.close(fd)


def set_aside_torn_tail(path: Path, fd: int) -> int:
    """The file's size once a last line without its newline (a write cut
    short) is moved to ``<file>.damaged``, reported in one line."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    start = size
    while start > 0:  # back to the last whole line
        chunk = os.pread(fd, min(65536, start), max(0, start - 65536))
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            start = start - len(chunk) + cut + 1
            break
        start -= len(chunk)
    torn = os.pread(fd, size - start, start)
    damaged = path.with_name(path.name + ".damaged")
    with open(damaged, "ab") as f:
        f.write(torn + b"\n")
    os.ftruncate(fd, start)
    log.warning("%s: a torn last line (%d bytes) was set aside in %s", path, len(torn), damaged)
    return start


NAME_MAX = 255  # bytes in a file name (Linux, macOS)
# the longest stem a results file may have: its names with what is added
# (``.damaged``, ``_keep_elsewhere``'s) must fit the file system
MAX_STEM = NAME_MAX - len("storebench-unwritten--01234567.jsonl")


def _keep_elsewhere(path: Path, data: bytes) -> Path | None:
    """A record that could not be appended, in the temporary directory
    (another file system, often memory) as a result file of its own."""
    kept = (
        Path(tempfile.gettempdir())
        / f"storebench-unwritten-{path.stem}-{uuid.uuid4().hex[:8]}.jsonl"
    )
    try:
        kept.write_bytes(data)
    except OSError:
        return None
    return kept


def read(path: Path) -> Iterator[dict[str, Any]]:
    """Records (redacted) of a JSON-lines file (or of every *.jsonl in a
    directory and its subdirectories), as the JSON holds them (typed: ``records.read``)."""
    yield from (rec for _, rec in read_lines(path))


def read_lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(``file:line``, record) of each record, as ``read``."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.rglob("*.jsonl"))
        if not files:
            raise UserError("no *.jsonl result files here or below", where=str(path))
    elif path.is_file():
        files = [path]
    elif path.exists():  # a device or pipe (/dev/zero would be read for ever)
        raise UserError("not a regular file", where=str(path))
    else:
        raise UserError("no such file or directory", where=str(path))
    for f in files:
        with open(f, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise UserError(f"not UTF-8 text (byte {exc.start})", where=f"{f}:{n}") from exc
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    if not line.endswith("\n"):  # torn: the next append sets it aside
                        log.warning("%s:%d: a torn last line, skipped", f, n)
                        continue
                    raise UserError(f"not a JSON record ({exc.msg})", where=f"{f}:{n}") from exc
                if not isinstance(rec, dict) or "run_id" not in rec:
                    raise UserError("not a storebench result record", where=f"{f}:{n}")
                yield f"{f}:{n}", redact_obj(rec)
