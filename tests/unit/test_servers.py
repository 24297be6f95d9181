"""The managed-server lifecycle, on a real server process (Python's
http.server bound to 127.0.0.1)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import psutil
import pytest

from storebench.measure.resources import ResourceSampler
from storebench.servers.base import Server, ServerError


class HttpServer(Server):
    name = "pyhttp"
    start_timeout_s = 30

    def command(self):
        return [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", str(self.port)]

    def ready(self):
        with urllib.request.urlopen(self.url, timeout=1) as r:
            return r.status == 200

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/"


class Unprivileged(HttpServer):
    refuses_root = True

    def command(self):  # a python the unprivileged user may execute
        return [
            "/usr/bin/python3",
            "-u",
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            str(self.port),
        ]


class Broken(HttpServer):
    def command(self):
        return [sys.executable, "-c", "import sys; print('bad config line 3'); sys.exit(7)"]


def gone(pid, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False


def test_start_ready_stop_leaves_nothing():
    s = HttpServer().start()
    pid, d = s.proc.pid, s.dir
    assert s.alive() and s.started_s is not None and s.health() is None
    assert psutil.Process(pid).net_connections()[0].laddr.ip == "127.0.0.1"
    s.stop()
    assert gone(pid) and not d.exists()


def test_a_server_that_cannot_start_fails_with_its_log():
    with pytest.raises(ServerError, match=r"exited during start-up \(code 7\).*bad config line 3"):
        Broken().start()


def test_kill_9_is_reported_with_the_last_log_lines():
    with HttpServer() as s:
        with pytest.raises(urllib.error.HTTPError):  # a 404 the log will show
            urllib.request.urlopen(s.url + "some-path", timeout=2)
        os.kill(s.proc.pid, signal.SIGKILL)
        s.proc.wait(5)
        msg = s.health()
        assert msg is not None and "died (exit code -9)" in msg and "some-path" in msg


class NeverReady(HttpServer):
    start_timeout_s = 0.5

    def ready(self):
        return False


def test_a_server_that_never_answers_fails_naming_it_and_the_time_waited(monkeypatch):
    monkeypatch.setenv("STOREBENCH_TIMEOUT_SCALE", "2")
    s = NeverReady()
    with pytest.raises(
        ServerError, match=r"pyhttp not ready after \d+s \(limit 1s: 0s x load 2\.0\)"
    ):
        s.start()
    assert not s.alive() and not s.dir.exists()


def test_readiness_bounds_stretch_with_the_load_per_core(monkeypatch):
    from storebench.servers import base

    monkeypatch.delenv("STOREBENCH_TIMEOUT_SCALE", raising=False)
    cores = os.cpu_count() or 1
    monkeypatch.setattr(base.os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert base.scaled_timeout(60) == 60  # an idle machine: the base bound
    monkeypatch.setattr(base.os, "getloadavg", lambda: (2.5 * cores, 0.0, 0.0))
    assert base.scaled_timeout(60) == 150
    monkeypatch.setattr(base.os, "getloadavg", lambda: (50.0 * cores, 0.0, 0.0))
    assert base.scaled_timeout(60) == 240  # at most 4x


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches user")
def test_servers_that_refuse_root_run_unprivileged():
    with Unprivileged() as s:
        assert psutil.Process(s.proc.pid).username() == "nobody"


def test_a_server_directory_its_user_cannot_reach_is_refused_naming_it(monkeypatch):
    import tempfile

    private = tempfile.mkdtemp(prefix="storebench-test-")  # 0700, root's
    monkeypatch.setattr(tempfile, "tempdir", private)  # as TMPDIR=<private>
    try:
        with pytest.raises(ServerError, match=f"{private} is not searchable.*set TMPDIR"):
            Unprivileged().start()
        assert not os.listdir(private)  # its directory went with it
    finally:
        os.rmdir(private)


PARENT = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = {path!r}
    from tests.unit.test_servers import HttpServer
    s = HttpServer().start()
    print(s.proc.pid, flush=True)
    {ending}
    """
)


@pytest.mark.parametrize(
    "ending, sig",
    [
        ("time.sleep(60)", signal.SIGTERM),
        ("time.sleep(60)", signal.SIGINT),
        ("time.sleep(60)", signal.SIGKILL),
        ("raise RuntimeError('boom')", None),
        ("pass", None),
    ],
)
def test_no_orphan_server_whatever_ends_storebench(ending, sig, tmp_path):
    code = PARENT.format(path=sys.path, ending=ending)
    # a killed parent leaves its server's directory: in the test's own, not the machine's
    env = os.environ | {"TMPDIR": str(tmp_path)}
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    pid = int(p.stdout.readline())
    if sig is not None:
        p.send_signal(sig)  # SIGTERM/SIGKILL: parent-death signal; SIGINT: atexit
    p.wait(30)
    assert gone(pid), f"server {pid} outlived its parent ({ending}, {sig})"


def test_sampler_counts_children_that_come_and_go_within_a_phase():
    # a process-per-connection server (Postgres): backends start and exit
    # while a phase runs; their CPU must still be counted
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "sys.stdin.readline()\n"
            f"for _ in range(2): subprocess.run([sys.executable, '-c', {burn!r}])\n"
            "print('done', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        root = psutil.Process(parent.pid)
        sampler = ResourceSampler(
            lambda: [root, *root.children(recursive=True)], [], interval_s=0.05
        )
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "done"
        out = sampler.stop()
        assert out["server_cpu_s"] >= 0.5, out  # two children of 0.3 s each, both gone
    finally:
        parent.kill()
        parent.wait()


def test_a_crash_log_shows_why_before_the_stack_dump(tmp_path):
    """A Go server's abort ends its log with goroutine dumps: the message
    quotes the line that says why, then the tail."""
    s = Server.__new__(Server)
    s.log_path = tmp_path / "server.log"
    dump = "\n".join(f"goroutine {i} [select]:" for i in range(40))
    s.log_path.write_text(f"starting\nfatal error: concurrent map writes\n{dump}\n")
    assert s.log_tail(3) == (
        "fatal error: concurrent map writes | ... | goroutine 37 [select]: | "
        "goroutine 38 [select]: | goroutine 39 [select]:"
    )
    s.log_path.write_text("one\ntwo\n")  # nothing crashed: the tail alone
    assert s.log_tail(3) == "one | two"
