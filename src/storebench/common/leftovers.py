"""storebench's temporary directories (``storebench-<kind>-*``: a managed
server's data, an embedded engine's files, a run's shared files), marked so
that what a hard-killed storebench left can be found and removed.

Each is made with a mark beside it (``<directory>.owner``, outside, so an
engine finds its directory as it expects): the process that made it (pid
and start time) and the servers started in it. A later run (``remove``)
takes a directory for a leftover only when its mark is there and names a
process that is gone; it kills the processes still working in it (an orphaned
server), removes the System V shared memory its servers made and nobody
holds any more, the files they wrote elsewhere, then the directory. A
directory without the mark, whose mark another user wrote, or whose maker
still runs, is never touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import tempfile
from pathlib import Path

import psutil

_log = logging.getLogger("storebench")
MARK = ".owner"  # "<pid> <start time>", then "server <pid>", "file <path>", "cgroup <dir>" lines
_IPC_RMID = 0


def _me() -> str:
    return f"{os.getpid()} {psutil.Process().create_time()!r}"


def mark_of(path: Path) -> Path:
    return path.with_name(path.name + MARK)


def make_dir(kind: str) -> Path:
    """A new private directory ``storebench-<kind>-*`` in the temporary
    directory, marked as this process's."""
    path = Path(tempfile.mkdtemp(prefix=f"storebench-{kind}-"))
    mark_of(path).write_text(_me() + "\n")
    return path


def note_server(path: Path, pid: int) -> None:
    """A server process started in ``path`` (its shared memory is found by it)."""
    with contextlib.suppress(OSError), open(mark_of(path), "a") as f:
        f.write(f"server {pid}\n")


def note_files(path: Path, files: list[Path]) -> None:
    """Files a server in ``path`` writes elsewhere (removed with the directory)."""
    if files:
        with contextlib.suppress(OSError), open(mark_of(path), "a") as f:
            f.writelines(f"file {p}\n" for p in files)


def note_group(path: Path, *groups: Path) -> None:
    """Control groups a server in ``path`` runs in (removed with it)."""
    with contextlib.suppress(OSError), open(mark_of(path), "a") as f:
        f.writelines(f"cgroup {g}\n" for g in groups)


def remove_files(files: list[Path]) -> None:
    """Files a server wrote outside its directory, and their directory once
    empty (the engine makes it again as it needs it)."""
    for f in files:
        with contextlib.suppress(OSError):
            f.unlink()
        with contextlib.suppress(OSError):
            f.parent.rmdir()


def remove_dir(path: str | os.PathLike[str]) -> None:
    """A directory ``make_dir`` made, and its mark."""
    shutil.rmtree(path, ignore_errors=True)
    mark_of(Path(path)).unlink(missing_ok=True)


def _alive(owner: str) -> bool:
    pid, _, started = owner.partition(" ")
    try:
        return repr(psutil.Process(int(pid)).create_time()) == started
    except (psutil.Error, ValueError):
        return False


def release_shared_memory(server_pids: set[int]) -> None:
    """System V segments a gone server made that no process holds (Linux)."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for row in rows:
        cols = row.split()  # key shmid perms size cpid lpid nattch ...
        if int(cols[4]) in server_pids and int(cols[6]) == 0:
            libc.shmctl(int(cols[1]), _IPC_RMID, None)


def remove() -> list[Path]:
    """Remove what hard-killed storebench processes left in the temporary
    directory (see the module's docstring), saying so in one line."""
    marks = Path(tempfile.gettempdir()).glob(f"storebench-*{MARK}")
    removed = [
        path
        for path in (m.with_name(m.name.removesuffix(MARK)) for m in marks)
        if remove_left(path)
    ]
    if removed:
        _log.warning(
            "removed what a killed storebench left: %s", ", ".join(p.name for p in removed)
        )
    return removed


def remove_left(path: Path) -> bool:
    """``path``, a directory ``make_dir`` made, with what its servers left,
    if the process that made it is gone; whether it was removed."""
    mark = mark_of(path)
    try:
        if mark.stat().st_uid != os.getuid():  # someone else's, or a forgery naming our files
            return False
        owner, *servers = mark.read_text().splitlines()
    except (OSError, ValueError):
        return False
    if _alive(owner):
        return False
    if not path.is_dir():  # removed, but not its mark
        mark.unlink(missing_ok=True)
        return False
    pids = {int(s[7:]) for s in servers if s.startswith("server ") and s[7:].isdigit()}
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info.get("cwd") or ""
        if cwd == str(path) or cwd.startswith(f"{path}/"):  # an orphaned server's
            pids.add(proc.pid)
            with contextlib.suppress(psutil.Error):
                proc.kill()
                proc.wait(5)
    release_shared_memory(pids)
    for line in servers:
        if line.startswith("cgroup /sys/fs/cgroup/"):
            with contextlib.suppress(OSError):
                Path(line[7:]).rmdir()
    remove_files([Path(line[5:]) for line in servers if line.startswith("file /")])
    remove_dir(path)
    return True
