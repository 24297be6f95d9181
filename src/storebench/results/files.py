"""Result files: one JSON object per run, appended atomically to a
JSON-lines file (what a record holds: ``storebench.results.records``). A record is written once, whole (a single O_APPEND write of
one line, then fsync), so readers never see half a record and a crash loses
at most the run in progress, which the runner marks before dying. Records
pass through ``redaction.redact_obj`` when written and when read: no secret
reaches a file, nor leaves an older file through ``show`` or a report."""

from __future__ import annotations

import json
import os
import platform
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import psutil

from storebench.errors import UserError
from storebench.common.redaction import redact_obj

if TYPE_CHECKING:  # typed records read these files, not the other way round
    from storebench.results.records import RunRecord

Status = Literal["ok", "failed", "interrupted", "skipped"]


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
    """Append one record (redacted) as a single write; the file, and its
    directory, are created if needed (not the directory's parents: see
    ``outputs.check_results``)."""
    if not isinstance(record, dict):  # a RunRecord
        record = record.to_dict()
    path.parent.mkdir(exist_ok=True)
    data = to_json_line(redact_obj(record)).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # never seen on local files; fail loudly if it happens
            raise OSError(f"short write to {path}: {written} of {len(data)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: Path) -> Iterator[dict[str, Any]]:
    """Records (redacted) of a JSON-lines file (or of every *.jsonl under a
    directory), as the JSON holds them (typed: ``records.read``)."""
    for _, rec in read_lines(path):
        yield rec


def read_lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(``file:line``, record) of each record, as ``read``."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise UserError("no *.jsonl result files here", where=str(path))
    elif path.exists():
        files = [path]
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
                    raise UserError(f"not a JSON record ({exc.msg})", where=f"{f}:{n}") from exc
                if not isinstance(rec, dict) or "run_id" not in rec:
                    raise UserError("not a storebench result record", where=f"{f}:{n}")
                yield f"{f}:{n}", redact_obj(rec)
