"""The Maven Central distribution cache (servers/dist.py) without a network:
where the cache lives, unpacking, the marker that makes a half-done fetch
invisible, clear errors for missing tools and unreadable paths, and the
float32 round trip of the JSON the Lucene stores write."""

import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import orjson
import pytest

from storebench.servers import dist
from storebench.servers.base import ServerError, check_reachable_by
from storebench.servers.dist import DistError, Distribution, MavenZip


def _zip(path, entries):
    with zipfile.ZipFile(path, "w") as z:
        for name, mode, data in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = (mode & 0xFFFF) << 16
            z.writestr(info, data)
    return path


FAKE = Distribution("fake-1.0", MavenZip("org.example", "fake", "1.0", "0" * 64))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STOREBENCH_DATA", str(tmp_path / "data"))
    return tmp_path / "data" / "dist"


def test_the_cache_is_under_storebench_data_when_set(cache):
    assert dist.cache_dir() == cache
    assert dist.home_of(FAKE) == cache / "fake-1.0"


def test_unpack_keeps_execute_bits_and_makes_everything_readable(tmp_path):
    z = _zip(
        tmp_path / "a.zip",
        [
            ("top/", stat.S_IFDIR | 0o700, b""),
            ("top/bin/run", stat.S_IFREG | 0o750, b"#!/bin/sh\n"),
            ("top/conf/secret.yml", stat.S_IFREG | 0o600, b"a: 1\n"),
        ],
    )
    dist.unpack(z, tmp_path / "out")
    run = tmp_path / "out/top/bin/run"
    assert os.stat(run).st_mode & 0o777 == 0o755
    assert os.stat(tmp_path / "out/top/conf/secret.yml").st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / "out/top").st_mode & 0o777 == 0o755


def test_unpack_refuses_an_entry_outside_the_archive(tmp_path):
    z = _zip(tmp_path / "evil.zip", [("../evil", stat.S_IFREG | 0o644, b"x")])
    with pytest.raises(DistError, match="escapes"):
        dist.unpack(z, tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_ensure_fetches_once_then_reuses_the_cache(cache, tmp_path, monkeypatch):
    z = _zip(tmp_path / "fake-1.0.zip", [("fake-1.0/bin/x", stat.S_IFREG | 0o755, b"")])
    fetched = []

    def copy(art, dest):
        fetched.append(art.coords)
        return z

    monkeypatch.setattr(dist, "maven_copy", copy)
    home = dist.ensure(FAKE)
    assert home == cache / "fake-1.0" and (home / "bin/x").is_file()
    assert dist.is_ready(FAKE)
    monkeypatch.setenv("PATH", "")  # no mvn, no java: the cache suffices
    assert dist.ensure(FAKE) == home
    assert fetched == ["org.example:fake:1.0:zip"]
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == ["fake-1.0"]


def test_a_failed_setup_leaves_nothing_that_looks_ready(cache, tmp_path, monkeypatch):
    z = _zip(tmp_path / "fake-1.0.zip", [("fake-1.0/bin/x", stat.S_IFREG | 0o755, b"")])
    monkeypatch.setattr(dist, "maven_copy", lambda art, dest: z)

    def broken(home, extras):
        raise DistError("plugin install failed")

    with pytest.raises(DistError, match="plugin install failed"):
        dist.ensure(Distribution("fake-1.0", FAKE.main, setup=broken))
    assert not dist.is_ready(FAKE)
    assert [p for p in cache.iterdir() if not p.name.startswith(".fake-1.0.lock")] == []
    assert (dist.ensure(FAKE) / "bin/x").is_file()  # a retry completes


def test_missing_maven_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DistError, match=r"needs `mvn`.*apt-get install -y maven"):
        dist.maven_copy(FAKE.main, tmp_path / "dl")


def test_an_unreachable_distribution_names_the_blocking_directory():
    base = Path(tempfile.mkdtemp(prefix="storebench-test-"))  # pytest's tmp_path is 0700
    try:
        os.chmod(base, 0o755)
        private = base / "private"
        (private / "dist").mkdir(parents=True)
        os.chmod(private, 0o700)
        with pytest.raises(ServerError, match=f"{private} is not searchable.*; do this"):
            check_reachable_by(private / "dist", "nobody", "do this")
        os.chmod(private, 0o755)
        check_reachable_by(private / "dist", "nobody", "")
        check_reachable_by(private / "dist", None, "")
    finally:
        shutil.rmtree(base)


def test_float32_vectors_survive_the_json_round_trip():
    from storebench.stores.lucene.common import _json_vectors, float32_exact

    rng = np.random.default_rng(1)
    v = np.concatenate(
        [
            rng.normal(size=(200, 64)).astype(np.float32),
            (rng.normal(size=(50, 64)) * 1e-20).astype(np.float32),
            (rng.normal(size=(50, 64)) * 1e20).astype(np.float32),
        ]
    )
    rows = [orjson.loads(r) for r in _json_vectors(v)]
    assert float32_exact(rows).tobytes() == v.tobytes()


def test_a_download_that_is_not_the_pinned_one_is_refused_and_removed(tmp_path):
    z = _zip(tmp_path / "fake-1.0.zip", [("top/a", stat.S_IFREG | 0o644, b"x")])
    with pytest.raises(DistError, match="is not the pinned"):
        dist.verify_sha256(z, "0" * 64)
    assert not z.exists()
    z = _zip(tmp_path / "fake-1.0.zip", [("top/a", stat.S_IFREG | 0o644, b"x")])
    import hashlib

    dist.verify_sha256(z, hashlib.sha256(z.read_bytes()).hexdigest())  # the pinned one passes
    assert z.exists()
