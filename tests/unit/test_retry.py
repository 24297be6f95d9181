"""Bounded retries for downloads and builds (storebench/common/retry.py), with real
subprocesses: a script that fails a set number of times, then succeeds."""

import sys

from storebench.common.retry import NETWORK, cause, run_retrying


def flaky(tmp_path, failures: int, message: str) -> list[str]:
    """A command that prints ``message`` and fails ``failures`` times, then succeeds."""
    counter = tmp_path / "count"
    code = (
        "import pathlib,sys\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1))\n"
        f"if n < {failures}:\n"
        f"    print({message!r}, file=sys.stderr); sys.exit(1)\n"
        "print('done')\n"
    )
    return [sys.executable, "-c", code]


def test_a_transient_failure_is_tried_again_until_it_succeeds(tmp_path):
    logged, waits = [], []
    r = run_retrying(
        flaky(tmp_path, 2, "Connection reset by peer"),
        "fetch x",
        log=logged.append,
        sleep=waits.append,
    )
    assert r.returncode == 0 and r.stdout.strip() == "done"
    assert len(logged) == 2 and all("fetch x: try" in m and "Connection reset" in m for m in logged)
    assert waits == [5.0, 10.0]  # doubling backoff


def test_tries_are_bounded_and_the_last_failure_is_returned(tmp_path):
    logged = []
    r = run_retrying(
        flaky(tmp_path, 99, "timed out"),
        "fetch y",
        tries=3,
        log=logged.append,
        sleep=lambda s: None,
    )
    assert r.returncode == 1
    assert (tmp_path / "count").read_text() == "3"
    assert "failed 3 times" in logged[-1]


def test_not_found_is_final_at_once(tmp_path):
    logged = []
    cmd = flaky(tmp_path, 99, "E: Unable to locate package no-such-thing")
    r = run_retrying(cmd, "apt-get install", log=logged.append, sleep=lambda s: None)
    assert r.returncode == 1 and (tmp_path / "count").read_text() == "1"
    assert "not found (no retry)" in logged[0] and "no-such-thing" in logged[0]


def test_with_a_transient_pattern_other_failures_are_not_retried(tmp_path):
    logged = []
    cmd = flaky(tmp_path, 99, "error[E0308]: mismatched types")
    r = run_retrying(
        cmd, "cargo install", transient=NETWORK, log=logged.append, sleep=lambda s: None
    )
    assert r.returncode == 1 and (tmp_path / "count").read_text() == "1"
    assert "not a network error" in logged[0]


def test_the_cause_is_the_first_error_line_not_the_help_text():
    out = (
        "\x1b[0m[ERROR] Failed to execute goal ...: Checksum validation failed\n"
        "[ERROR] \n[ERROR] -> [Help 1]\n[ERROR] To see the full stack trace ...\n"
        "[ERROR] [Help 1] http://example.invalid/help\n"
    )
    c = cause(out, 3)
    assert c.startswith("[ERROR] Failed to execute goal") and "Checksum validation failed" in c
    assert "\x1b" not in c
