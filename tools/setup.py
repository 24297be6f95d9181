#!/usr/bin/env python3
"""Everything the test suite needs on this machine, installed once.

``make test`` runs this first (``make setup``); ``make demo`` runs it with
``--core`` (storebench and the usearch extra, an HNSW engine that installs
from a wheel, so the demo shows recall below 1.0); ``make bench`` adds
``--native-client`` (the compiled closed loop the ceiling measures). Each component checks what is already there and installs only
what is missing, then prints one line: what it installed and how long it
took. A second run takes seconds.

Components (system packages and python first; then two lanes side by side,
the Rust builds in one, the downloads and Go builds in the other):

  system packages    Debian packages (apt-get): Chromium (the HTML report's
                     browser test), Java 17 + Maven (Elasticsearch and
                     OpenSearch), MariaDB server, redis-tools and the
                     PostgreSQL client tools (benchmarks/ingest_native.py)
  python             the virtual environment with storebench and its test
                     extras (every engine's client), redone when
                     pyproject.toml changes
  elastic            the Elasticsearch and OpenSearch distributions from
                     Maven Central, unpacked into storebench's cache
  agdb embedded      storebench's agdb extension (native/agdb_embedded,
                     Rust + PyO3) built with maturin and installed into the
                     virtual environment; rebuilt when its sources change
                     (cargo's target directory is kept in storebench's cache)
  native client      storebench's native timed loop for PostgreSQL and Redis
                     (native/fastclient, Rust + PyO3; ``client: native``),
                     built and installed as the agdb extension is
  agdb               agdb_server built with cargo into storebench's cache
                     (about 8 minutes on 2 cores, once)
  milvus             the real Milvus standalone server (the `milvus` wheel,
                     default release) into storebench's cache; other releases
                     install on first use
  weaviate           weaviate-server built with Go into storebench's cache
                     (about 3 minutes on 2 cores, once)
  ferretdb           FerretDB built with Go into storebench's cache (about a
                     minute, once)

``STOREBENCH_EMBEDDED_ONLY=1`` leaves out what only the managed server
engines need (Java, Maven, MariaDB, socat, the distributions, agdb_server,
Milvus, Weaviate, FerretDB; embedded agdb stays); the test suite
then skips those engines' tests. Without it nothing is skipped.

Downloads are tried again on network errors (bounded, with backoff, each
failure logged with its cause); a package that does not exist fails at once
with the component's name. Standard library only: it runs before the
virtual environment exists.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_retry():  # type: ignore[no-untyped-def]
    """storebench/common/retry.py by its path (the package's dependencies may not
    be installed yet, so the package itself is not imported)."""
    spec = importlib.util.spec_from_file_location(
        "storebench_retry", ROOT / "src" / "storebench" / "common" / "retry.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


retry = _load_retry()


class SetupError(Exception):
    """A component could not be installed; the message names it."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def embedded_only() -> bool:
    return os.environ.get("STOREBENCH_EMBEDDED_ONLY", "") not in ("", "0")


# --- system packages --------------------------------------------------------------

# (what must be found, the Debian package that provides it, needed by servers only)
SYSTEM: list[tuple[tuple[str, ...], str, bool]] = [
    (("chromium", "/usr/bin/chromium"), "chromium", False),
    (("java",), "openjdk-17-jre-headless", True),
    (("mvn",), "maven", True),
    (("mariadbd", "/usr/sbin/mariadbd"), "mariadb-server", True),
    (("mariadb-install-db",), "mariadb-server", True),
    (("redis-benchmark",), "redis-tools", True),
    (("pgbench", "/usr/lib/postgresql/15/bin/pgbench"), "postgresql-client", True),
    (("psql",), "postgresql-client", True),
    (("socat",), "socat", True),  # relays for servers in a network namespace (servers/netns.py)
]


def _found(names: tuple[str, ...]) -> bool:
    return any(os.access(n, os.X_OK) if n.startswith("/") else shutil.which(n) for n in names)


def system_packages() -> str:
    wanted = [
        pkg
        for names, pkg, servers in SYSTEM
        if not (servers and embedded_only()) and not _found(names)
    ]
    missing = list(dict.fromkeys(wanted))
    if not missing:
        return "all present"
    if shutil.which("apt-get") is None:
        raise SetupError(
            f"missing {', '.join(missing)} and there is no apt-get here: install them with "
            "this system's package manager (see README, 'What make test installs')"
        )
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = retry.run_retrying([*sudo, "apt-get", "update", "-qq"], "apt-get update", log=log, env=env)
    if r.returncode != 0:
        raise SetupError(f"apt-get update failed: {retry.cause(r.stdout + r.stderr)}")
    r = retry.run_retrying(
        [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        f"apt-get install {' '.join(missing)}",
        log=log,
        env=env,
    )
    if r.returncode != 0:
        raise SetupError(
            f"apt-get install {' '.join(missing)} failed: {retry.cause(r.stdout + r.stderr)}"
        )
    return "installed " + " ".join(missing)


# --- the Python environment ----------------------------------------------------------


def python_env(venv: Path, extras: str) -> Callable[[], str]:
    def install() -> str:
        python = venv / "bin" / "python"
        stamp = venv / f".setup-{extras}"
        pyproject = ROOT / "pyproject.toml"
        if (
            stamp.is_file()
            and stamp.stat().st_mtime >= pyproject.stat().st_mtime
            and python.exists()
        ):
            return "up to date"
        made = ""
        if not python.exists():
            r = subprocess.run(
                [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True
            )
            if r.returncode != 0:
                raise SetupError(
                    f"python -m venv {venv} failed: {retry.cause(r.stdout + r.stderr)}"
                )
            made = f"created {venv}, "
        r = retry.run_retrying(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-e",
                f"{ROOT}[{extras}]",
            ],
            f"pip install -e .[{extras}]",
            log=log,
            cwd=ROOT,
        )
        if r.returncode != 0:
            raise SetupError(
                f"pip install -e .[{extras}] failed: {retry.cause(r.stdout + r.stderr)}"
            )
        stamp.touch()
        return f"{made}installed storebench[{extras}]"

    return install


# --- storebench's Rust extensions (embedded agdb, the native client) -----------------

AGDB_CRATE = ROOT / "native" / "agdb_embedded"
AGDB_MODULE = "storebench_agdb"
FASTCLIENT_CRATE = ROOT / "native" / "fastclient"
FASTCLIENT_MODULE = "storebench_fastclient"


def crate_hash(crate: Path) -> str:
    """A hash of what the build reads (manifests, lock file, sources): the
    extension is rebuilt only when one of them changes."""
    h = hashlib.sha256()
    files = [crate / n for n in ("Cargo.toml", "Cargo.lock", "pyproject.toml", "build.rs")]
    files += sorted((crate / "src").rglob("*.rs"))
    for f in files:
        if f.is_file():
            h.update(f.relative_to(crate).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _cargo_bin() -> Path | None:
    found = shutil.which("cargo")
    if found:
        return Path(found).parent
    home = Path(os.path.expanduser("~")) / ".cargo" / "bin"
    return home if (home / "cargo").is_file() else None


def cache_root() -> Path:
    """storebench's cache (as storebench.servers.agdb.install_root's parent)."""
    env = os.environ.get("STOREBENCH_DATA")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "storebench"


def rust_extension(venv: Path, crate: Path, module: str, what: str) -> Callable[[], str]:
    """A set-up step building the PyO3 extension ``crate`` (importable as
    ``module``) with maturin and installing it into the venv; rebuilt only
    when its sources change (a stamp with their hash), cargo's target
    directory kept in storebench's cache."""
    rel = crate.relative_to(ROOT).as_posix()

    def install() -> str:
        python = venv / "bin" / "python"
        digest = crate_hash(crate)
        stamp = venv / f".setup-{crate.name.replace('_', '-')}"
        if stamp.is_file() and stamp.read_text().strip() == digest:
            r = subprocess.run(
                [str(python), "-c", f"import {module}"], capture_output=True, text=True
            )
            if r.returncode == 0:
                return f"up to date ({digest})"
        cargo = _cargo_bin()
        if cargo is None:
            raise SetupError(
                f"building {what} needs cargo (a Rust toolchain with edition 2024, "
                "Rust >= 1.85: https://rustup.rs); Debian's packaged cargo is too old"
            )
        env = dict(
            os.environ,
            PATH=f"{cargo}{os.pathsep}{os.environ.get('PATH', '')}",
            CARGO_TARGET_DIR=str(cache_root() / crate.name.replace("_", "-") / "target"),
        )
        # pip builds the wheel with maturin (from PyPI, in an isolated build
        # environment) and installs it; a download that fails is tried again
        r = retry.run_retrying(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--force-reinstall",
                "--no-deps",
                str(crate),
            ],
            f"pip install {rel}",
            transient=retry.NETWORK,
            log=log,
            env=env,
            cwd=ROOT,
        )
        if r.returncode != 0:
            raise SetupError(f"building {rel} failed: {retry.cause(r.stdout + r.stderr, 10)}")
        stamp.write_text(digest + "\n")
        return f"built and installed {module} ({digest})"

    return install


def agdb_embedded(venv: Path) -> Callable[[], str]:
    return rust_extension(venv, AGDB_CRATE, AGDB_MODULE, "the agdb extension")


def native_client(venv: Path) -> Callable[[], str]:
    return rust_extension(venv, FASTCLIENT_CRATE, FASTCLIENT_MODULE, "the native client")


def module_step(venv: Path, *args: str) -> Callable[[], str]:
    """Run ``python -m <module> ...`` in the venv; its last stdout line says what is there."""

    def run() -> str:
        r = subprocess.run(
            [str(venv / "bin" / "python"), "-m", *args],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )  # stderr (retries, errors) goes straight to the terminal
        if r.returncode != 0:
            raise SetupError(
                f"`python -m {' '.join(args)}` failed (exit {r.returncode}); see above"
            )
        return "; ".join(r.stdout.strip().splitlines()) or "done"

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/setup.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default=str(ROOT / ".venv"), help="the virtual environment")
    ap.add_argument(
        "--core", action="store_true", help="storebench and its usearch extra (make demo)"
    )
    ap.add_argument(
        "--native-client",
        action="store_true",
        help="with --core: the native client's module too (make bench: the compiled loop)",
    )
    args = ap.parse_args(argv)
    venv = Path(args.venv)
    if not venv.is_absolute():
        venv = ROOT / venv
    Step = tuple[str, Callable[[], str] | None]
    # Lanes run side by side (each in order): the Rust builds in one, the
    # downloads and Go builds in the other, so one's downloads overlap the
    # other's compiling.
    lanes: list[list[Step]]
    if args.core:
        lanes = [[("python", python_env(venv, "usearch"))]]
        if args.native_client:
            lanes[0].append(("native client", native_client(venv)))
    else:
        servers = not embedded_only()

        def server(module: str, flag: str) -> Callable[[], str] | None:
            return module_step(venv, f"storebench.servers.{module}", flag) if servers else None

        lanes = [
            [
                ("agdb embedded", agdb_embedded(venv)),
                ("native client", native_client(venv)),
                ("agdb", server("agdb", "--install")),
            ],
            [
                ("elastic", server("elastic", "--fetch")),
                ("milvus", server("milvus_standalone", "--install")),
                ("weaviate", server("weaviate", "--install")),
                ("ferretdb", server("ferretdb", "--install")),
            ],
        ]
        first: list[Step] = [
            ("system packages", system_packages),
            ("python", python_env(venv, "test")),
        ]
        t_all = time.monotonic()
        if not run_lane(first):
            return 1
    with concurrent.futures.ThreadPoolExecutor(len(lanes)) as pool:
        ok = all(list(pool.map(run_lane, lanes)))
    if not args.core:
        log(f"setup: done in {time.monotonic() - t_all:.1f} s")
    return 0 if ok else 1


def run_lane(steps: list[tuple[str, Callable[[], str] | None]]) -> bool:
    """The steps in order, a line each (what, how long); False at the first
    that fails (its error said), leaving the rest of the lane undone."""
    for name, step in steps:
        if step is None:
            log(f"setup: {name:16} skipped (STOREBENCH_EMBEDDED_ONLY)")
            continue
        t0 = time.monotonic()
        try:
            what = step()
        except SetupError as exc:
            log(f"setup: {name}: error: {exc}")
            return False
        log(f"setup: {name:16} {what} ({time.monotonic() - t0:.1f} s)")
    return True


if __name__ == "__main__":
    sys.exit(main())
