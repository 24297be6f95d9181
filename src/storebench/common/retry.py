"""Bounded retries for commands that download or build (one home for all).

Package registries answer "not found" at once and for good, but a connection
reset, a timed-out mirror or a registry that is busy for a minute goes away
if one waits. ``run_retrying`` runs a command up to ``tries`` times with a
doubling wait between tries, logs each failed try with its cause, and stops
at once when the output matches one of the ``definite`` patterns (a package
or artifact that does not exist: trying again cannot help).

Standard library only: ``tools/setup.py`` loads this file before any virtual
environment exists.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

# Network trouble, as the clients print it (for commands that also fail for
# other reasons, like a build).
NETWORK = re.compile(
    r"(?i)network|timed? ?out|connection|temporary failure|could not resolve|"
    r"failed to (download|fetch|get)|spurious|unexpected eof|reset by peer|\b50[234]\b"
)

# What the package clients print for a thing that does not exist. One list
# for all: a pattern of one client never appears in another's transient errors.
NOT_FOUND = (
    re.compile(r"Unable to locate package|has no installation candidate"),  # apt-get
    re.compile(r"No matching distribution found|Could not find a version that satisfies"),  # pip
    re.compile(r"Could not find artifact|was not found in https?://"),  # maven
    re.compile(r"could not find `[^`]+` in registry|no matching package named"),  # cargo
)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ERROR_LINE = re.compile(r"(?i)^(\[error\]|error\b|e:|fatal\b)")


def cause(output: str, lines: int = 6) -> str:
    """Why a command failed, on one line: its first error line (where tools
    like mvn put the reason, before pages of hints), then its last lines."""
    text = [ln.strip() for ln in _ANSI.sub("", output).splitlines()]
    text = [ln for ln in text if ln and ln not in ("[ERROR]", "[0m")]
    first = next((ln for ln in text if _ERROR_LINE.match(ln)), None)
    tail = text[-lines:]
    if first is not None and first not in tail:
        tail = [first, "...", *tail[-max(lines - 2, 1) :]]
    return " | ".join(tail) or "(no output)"


def run_retrying(
    cmd: Sequence[str],
    what: str,
    *,
    tries: int = 4,
    wait_s: float = 5.0,
    definite: Sequence[re.Pattern[str]] = NOT_FOUND,
    transient: re.Pattern[str] | None = None,
    log: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` until it succeeds, fails definitely, or has failed ``tries``
    times; return the last completed process (the caller checks its code).

    With ``transient``, only a failure whose output matches it is tried
    again (a compile error in a build is not worth another 8 minutes)."""
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    wait = wait_s
    for attempt in range(1, tries + 1):
        r = subprocess.run(list(cmd), capture_output=True, text=True, **kwargs)
        if r.returncode == 0:
            return r
        out = r.stdout + r.stderr
        if any(p.search(out) for p in definite):
            log(f"{what}: not found (no retry): {cause(out)}")
            return r
        if transient is not None and not transient.search(out):
            log(
                f"{what}: failed (exit {r.returncode}), not a network error (no retry): {cause(out)}"
            )
            return r
        if attempt == tries:
            log(f"{what}: failed {tries} times; giving up: {cause(out)}")
            return r
        log(
            f"{what}: try {attempt}/{tries} failed (exit {r.returncode}: {cause(out, 2)}); again in {wait:.0f}s"
        )
        sleep(wait)
        wait *= 2
    raise AssertionError("unreachable")
