"""Server distributions from Maven Central, fetched once into a cache.

Some engines (Elasticsearch, OpenSearch) exist here only as zip artifacts on
Maven Central. ``ensure(dist)`` returns the unpacked distribution, fetching it
with ``mvn dependency:copy`` (checksums enforced) and unpacking it the first
time; later calls find it in the cache and return at once. A marker file is
written only after a complete unpack (and the distribution's own set-up step),
and a lock serialises concurrent fetches, so an interrupted fetch is redone,
never used half-made.

The cache is ``$STOREBENCH_DATA/dist`` when that is set; otherwise
``~/.cache/storebench/dist`` for a normal user, and ``/var/cache/storebench/dist``
for root. Root's home is not readable by the unprivileged user a server runs
as when storebench is root, and a server must read its own distribution.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storebench.common.retry import cause, run_retrying
from storebench.servers.base import ServerError
from storebench.servers.cache import locked

_MARKER = ".storebench-complete"


class DistError(ServerError):
    """A distribution could not be fetched, unpacked or set up."""


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class MavenZip:
    """A zip artifact on Maven Central, pinned by its SHA-256.

    The pin is ours, not the registry's: the registry mirror this project
    installs from serves artifacts without their ``.sha1``/``.md5`` files
    (mvn's strict checksum policy then refuses every download), so mvn runs
    with lax checksums and the zip is checked against the pin instead."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def coords(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}:zip"

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}.zip"


@dataclass(frozen=True)
class Distribution:
    """An engine distribution: a main zip whose single top directory is the
    engine's home, extra zips (plugins) and a set-up step run once after
    unpacking (``setup(home, extras)``, with the extra zips' paths)."""

    name: str  # the cache directory's name, e.g. "elasticsearch-8.19.3"
    main: MavenZip
    extras: tuple[MavenZip, ...] = ()
    setup: Callable[[Path, list[Path]], None] | None = None


def cache_dir() -> Path:
    env = os.environ.get("STOREBENCH_DATA")
    if env:
        return Path(env).expanduser() / "dist"
    if os.geteuid() == 0:
        return Path("/var/cache/storebench/dist")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "storebench" / "dist"


def home_of(dist: Distribution) -> Path:
    return cache_dir() / dist.name


def is_ready(dist: Distribution) -> bool:
    return (home_of(dist) / _MARKER).is_file()


def require_tool(name: str, why: str) -> str:
    path = shutil.which(name)
    if path is None:
        hint = {
            "mvn": "install Maven (Debian: apt-get install -y maven)",
            "java": "install Java 17 or newer (Debian: apt-get install -y openjdk-17-jre-headless)",
        }.get(name, f"install {name}")
        raise DistError(f"{why} needs `{name}`, which is not on PATH: {hint}")
    return path


def java_home() -> str:
    """The Java installation servers run with: $JAVA_HOME, else the one
    `java` on PATH belongs to."""
    env = os.environ.get("JAVA_HOME")
    if env and os.access(os.path.join(env, "bin", "java"), os.X_OK):
        return env
    java = Path(require_tool("java", "running a Java engine")).resolve()
    return str(java.parent.parent)


def maven_copy(art: MavenZip, dest: Path) -> Path:
    """Fetch one zip from Maven Central into ``dest`` (mvn verifies checksums)."""
    mvn = require_tool("mvn", f"fetching {art.coords}")
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        "--lax-checksums",  # the mirror has no checksum files: the pin below decides
        "-Dstyle.color=never",
        "dependency:copy",
        f"-Dartifact={art.coords}",
        f"-DoutputDirectory={dest}",
        "-Dmdep.overWriteReleases=true",
    ]
    # a registry that hiccups is tried again (bounded); "not found" is final
    r = run_retrying(cmd, f"mvn fetch of {art.coords}", cwd=dest, log=_log)
    out = dest / art.filename
    if r.returncode != 0 or not out.is_file():
        raise DistError(
            f"mvn could not fetch {art.coords} (exit {r.returncode}): {cause(r.stdout + r.stderr, 4)}"
        )
    verify_sha256(out, art.sha256)
    return out


def verify_sha256(path: Path, expected: str) -> None:
    """Refuse (and delete) a download whose SHA-256 is not the pinned one."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != expected:
        path.unlink(missing_ok=True)
        raise DistError(f"{path.name}: SHA-256 {h.hexdigest()} is not the pinned {expected}")


def unpack(zip_path: Path, dest: Path) -> None:
    """Unzip keeping the archive's permission bits (zipfile drops them), with
    everything readable by others (the server may run as another user)."""
    dest_abs = dest.resolve()
    with zipfile.ZipFile(zip_path) as z:
        for info in z.infolist():
            target = (dest / info.filename).resolve()
            if not target.is_relative_to(dest_abs):
                raise DistError(f"{zip_path.name}: entry {info.filename!r} escapes the archive")
            mode = (info.external_attr >> 16) & 0o777
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                os.chmod(target, 0o755)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.chmod(target, 0o755 if mode & 0o100 else 0o644)
    for root, dirs, _files in os.walk(dest):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)


def ensure(dist: Distribution) -> Path:
    """The unpacked distribution's home, fetching and setting it up if missing."""
    home = home_of(dist)
    if (home / _MARKER).is_file():
        return home
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    if root.stat().st_uid == os.geteuid():
        os.chmod(root, 0o755)  # the server's user must reach the distribution
    with locked(root / f".{dist.name}.lock"):
        if (home / _MARKER).is_file():  # another process finished it meanwhile
            return home
        shutil.rmtree(home, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{dist.name}-", dir=root))
        try:
            downloads = work / "downloads"
            main_zip = maven_copy(dist.main, downloads)
            extras = [maven_copy(a, downloads) for a in dist.extras]
            tree = work / "tree"
            unpack(main_zip, tree)
            tops = [p for p in tree.iterdir() if p.is_dir()]
            if len(tops) != 1:
                raise DistError(f"{main_zip.name}: expected one top directory, found {len(tops)}")
            if dist.setup is not None:
                dist.setup(tops[0], extras)
            (tops[0] / _MARKER).write_text(dist.main.coords + "\n")
            tops[0].rename(home)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return home
