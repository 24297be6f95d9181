"""What a SIGKILLed storebench leaves (a managed server's directory, its
orphaned processes and shared memory) is removed by the next run, by the
marks storebench put on it; a directory without them, whose mark another
user wrote, or whose maker still runs, is left alone."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from storebench.common import leftovers
from tests.conftest import remove_unheld_shm, shm_entries, shm_files

CLI = [sys.executable, "-m", "storebench"]


def _shm_of(pids):
    rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return [r for r in rows if int(r.split()[4]) in pids]


def _working_in(path):
    out = []
    for p in psutil.process_iter(["cwd"]):
        if (p.info.get("cwd") or "").startswith(str(path)):
            out.append(p.pid)
    return out


def test_a_run_removes_what_a_killed_run_left_and_nothing_else(tmp_path):
    # the temporary directory the runs use, where the server's unprivileged
    # user (storebench as root) may enter, unlike pytest's
    tmp = Path(tempfile.mkdtemp(prefix="leftovers-"))
    tmp.chmod(0o755)
    try:
        _kill_then_run(tmp_path, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_then_run(tmp_path, tmp):
    env = os.environ | {"TMPDIR": str(tmp)}
    unmarked = tmp / "storebench-postgres-notours"
    unmarked.mkdir()
    alive = tmp / "storebench-redis-alive"
    alive.mkdir()
    leftovers.mark_of(alive).write_text(f"{os.getpid()} {psutil.Process().create_time()!r}\n")
    shm_before = shm_entries()
    killed = subprocess.Popen(
        [*CLI, "run", "crud", "--store", "pgvector", "--set", "n=20000", "--set", "grid={}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    server_dir = None
    while server_dir is None and time.monotonic() < deadline:
        for d in tmp.glob("storebench-postgres-*"):
            pid_file = d / "data" / "postmaster.pid"
            if pid_file.is_file() and "ready" in pid_file.read_text():
                server_dir = d
        time.sleep(0.2)
    assert server_dir is not None, "the server did not start"
    time.sleep(1)
    servers = set(_working_in(server_dir))
    servers.add(int((server_dir / "data" / "postmaster.pid").read_text().split()[0]))
    # storebench and its server killed together, as the OOM killer might:
    # the server's directory, processes and System V segment stay behind
    # (and its POSIX segments, which nothing can tie to it afterwards: the
    # test removes those itself)
    postmaster = int((server_dir / "data" / "postmaster.pid").read_text().split()[0])
    posix_shm = shm_files(list(servers))
    killed.send_signal(signal.SIGKILL)
    os.kill(postmaster, signal.SIGKILL)
    killed.wait(30)
    assert server_dir.exists() and _shm_of(servers)

    r = subprocess.run(
        [*CLI, "run", "crud", "--store", "memory", "--set", "n=100", "--set", "ops=10"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (said,) = [x for x in r.stderr.splitlines() if "removed what a killed storebench left: " in x]
    assert server_dir.name in said.split(": ", 1)[1].split(", ")  # its run's dir may be there too
    assert sorted(p.name for p in tmp.iterdir()) == sorted(
        [unmarked.name, alive.name, leftovers.mark_of(alive).name]
    )
    assert not _working_in(server_dir) and not _shm_of(servers)
    remove_unheld_shm(shm_before, like=posix_shm)  # its POSIX segments: see above


def test_a_mark_is_acted_on_only_when_its_user_wrote_it(tmp_path):
    # a dead maker and a "file" line naming a file of ours: as our own mark it
    # removes the file and the directory; as another user's (a forgery in a
    # shared /tmp) nothing
    victim = tmp_path / "victim"
    for forged in (False, True):
        victim.write_text("data")
        left = tmp_path / f"storebench-milvus-{int(forged)}"
        left.mkdir()
        mark = leftovers.mark_of(left)
        mark.write_text(f"999999999 0.0\nserver 999999999\nfile {victim}\n")
        if forged:
            if os.getuid() != 0:
                pytest.skip("making a mark another user owns needs root")
            os.chown(mark, 65534, 65534)
        assert leftovers.remove_left(left) is not forged
        assert victim.exists() is forged and left.exists() is forged
