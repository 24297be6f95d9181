import contextlib
import os
import signal
import tempfile
from collections.abc import Iterable

import numpy as np
import pytest
from hypothesis import settings

# Tests send SIGINT to the storebench processes they start, which inherit the
# signal's disposition from this one. Started in the background by a
# non-interactive shell (`make test &`, nohup), this process ignores SIGINT,
# and so would every child: a Ctrl-C test would then measure a process that
# cannot be interrupted (it runs on, the test times out, the child is left).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from storebench.data.batch import DocBatch

# Property tests: the same examples on every run (``ci``, the default), so a
# red suite is a bug, not luck; ``HYPOTHESIS_PROFILE=explore`` searches anew.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def make_docs(n: int, dim: int = 16, seed: int = 0, start: int = 0) -> DocBatch:
    """Documents with an int, a float and a string field and clustered vectors."""
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.int64)
    fields = {
        "tags.i": rng.integers(0, 50, n, dtype=np.int64),
        "score": np.round(rng.random(n), 3),
        "label": np.array([f"l{v}" for v in rng.integers(0, 5, n)], dtype=object),
    }
    centers = rng.normal(size=(8, dim))
    vecs = (centers[rng.integers(0, 8, n)] + rng.normal(scale=0.3, size=(n, dim))).astype(
        np.float32
    )
    return DocBatch(ids, fields, vecs)


@pytest.fixture
def docs() -> DocBatch:
    return make_docs(500)


# A test skipped because a part of the machine is missing (an engine's client
# not importable, a binary not on PATH) is a set-up bug: `make test` installs
# every part. Such skips fail, unless STOREBENCH_EMBEDDED_ONLY or
# STOREBENCH_SKIP_ENGINES asked for fewer engines.
_MISSING_PART = ("could not import", "no chromium", "not on PATH")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2])
    narrowed = os.environ.get("STOREBENCH_EMBEDDED_ONLY", "") not in ("", "0") or os.environ.get(
        "STOREBENCH_SKIP_ENGINES"
    )
    if not narrowed and any(s in reason for s in _MISSING_PART):
        report.outcome = "failed"
        report.longrepr = f"a missing part skipped this test ({reason}); `make setup` installs it"


class Burners:
    """Busy-loop processes that are not this process's children (their shell
    exits at once, so they are re-parented): a run here counts their CPU as
    other processes'. ``burners(n)`` starts n; ``burners.cpu()`` is the CPU
    seconds all of them have used."""

    def __init__(self) -> None:
        self.pids: list[int] = []

    def __call__(self, n: int) -> list[int]:
        import subprocess
        import sys

        loop = f"{sys.executable} -c 'while True: pass' </dev/null >/dev/null 2>&1 & echo $!"
        out = subprocess.run(
            ["sh", "-c", f"for i in $(seq {n}); do {loop}; done"],
            capture_output=True,
            text=True,
            check=True,
        )
        new = [int(x) for x in out.stdout.split()]
        self.pids.extend(new)
        return new

    def cpu(self) -> float:
        import psutil

        times = [psutil.Process(pid).cpu_times() for pid in self.pids]
        return sum(t.user + t.system for t in times)


@pytest.fixture
def burners():
    """``Burners``; every one started is killed by its id after the test."""
    start = Burners()
    yield start
    for pid in start.pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- parallel runs (`make test`: pytest -n auto --dist loadgroup) -------------
# A file's tests stay in one worker, so its module fixtures are made once; the
# tests of one server engine share the worker that started its server (each
# worker has its own, tests/stores/servers.py): the conformance suite's
# entries join their engine's own test files.
_ENGINE_GROUPS = {
    "elasticsearch": "lucene",
    "opensearch": "lucene",
    "elasticsearch-opensearch": "lucene",
    "clusters": "lucene",  # their nodes are JVMs too: not beside the shared ones
    "milvus-lite": "milvus",
    "postgres": "pgvector",
    "ferretdb": "mongodb",
}


def _xdist_group(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    entry = callspec.params.get("entry") if callspec else None
    if isinstance(entry, str):
        engine = entry.split(":")[0]
    elif item.path.parent.name == "stores":
        engine = item.path.stem.removeprefix("test_").removesuffix("_server").replace("_", "-")
    else:
        return str(item.path)
    return "engine:" + _ENGINE_GROUPS.get(engine, engine)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_xdist_group(item)))


# --- shared memory the suite leaves ---------------------------------------------
# The machine running the suite is reused: a segment in /dev/shm that no live
# process holds is RAM lost until reboot (a SIGKILLed PostgreSQL leaves up to
# its maintenance_work_mem there). The controlling process (not an xdist
# worker) lists /dev/shm before the suite; after it, every new entry nothing
# maps or holds open is removed and fails the suite by name.
_SHM = "/dev/shm"


def shm_files(pids: Iterable[int | str], open_too: bool = False) -> set[str]:
    """The POSIX shared memory files (``/dev/shm/...``) these processes map
    (``open_too``: or hold open)."""
    out: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                out.update(line.split(None, 5)[5].strip() for line in f if f" {_SHM}/" in line)
            if open_too:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    out.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return {f.removesuffix(" (deleted)") for f in out if f.startswith(f"{_SHM}/")}


def shm_entries() -> set[str]:
    try:
        return {f"{_SHM}/{name}" for name in os.listdir(_SHM)}
    except OSError:
        return set()


def _shm_inodes_in_use() -> set[int]:
    """The inodes of /dev/shm files any live process maps or holds open. By
    inode, not name: glibc's sem_open maps a temporary file and then links it
    to its name, so the map shows the temporary name, "(deleted)"."""
    out: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as f:
                out.update(int(line.split(None, 5)[4]) for line in f if f" {_SHM}/" in line)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(f"{_SHM}/"):
                    out.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
        except OSError:
            continue
    return out


# per-user directories their tools keep: pytest's own (it prunes them), and
# the JVMs' (a launcher makes one whatever it is told; the Elasticsearch
# tests check that no file is left in it)
_TMP_KEPT = ("pytest-of-", "hsperfdata_")


def tmp_entries() -> set[str]:
    """The temporary directory's entries, but per-user ones of ``_TMP_KEPT``."""
    tmp = tempfile.gettempdir()
    return {f"{tmp}/{name}" for name in os.listdir(tmp) if not name.startswith(_TMP_KEPT)}


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        session.config.stash[_shm_key] = shm_entries()
        session.config.stash[_tmp_key] = tmp_entries()


def remove_unheld_shm(before: set[str], like: set[str] | None = None) -> list[str]:
    """Remove the /dev/shm entries made since ``before`` (named like one of
    ``like``: the same name but for its trailing digits) that no live process
    maps or holds open, and return them. What a SIGKILLed engine leaves there
    (PostgreSQL's segments, made and dropped as it works) nothing can tie to
    it afterwards: a test that kills one on purpose removes them this way."""
    new = shm_entries() - before
    if like is not None:
        kinds = {name.rstrip("0123456789") for name in like}
        new = {name for name in new if name.rstrip("0123456789") in kinds}
    in_use = _shm_inodes_in_use() if new else set()
    removed = []
    for path in sorted(new):
        with contextlib.suppress(OSError):  # gone meanwhile: its owner removed it
            if os.stat(path).st_ino not in in_use:
                os.unlink(path)
                removed.append(path)
    return removed


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_shm_key, None)
    if before is None:
        return
    leaked = remove_unheld_shm(before)
    if leaked:
        print(f"\nthe suite left shared memory no process holds (removed): {', '.join(leaked)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    # what the engines and tests make in /tmp goes with them (the machine is reused)
    left = sorted(tmp_entries() - session.config.stash[_tmp_key])
    if left:
        print(f"\nthe suite left these in the temporary directory: {', '.join(left)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_shm_key = pytest.StashKey[set[str]]()
_tmp_key = pytest.StashKey[set[str]]()
