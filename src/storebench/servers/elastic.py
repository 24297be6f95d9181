"""Managed Elasticsearch and OpenSearch nodes (Lucene-based engines on Java).

Both come from Maven Central as integ-test zips (see ``servers.dist``) and
run the same way: one node (``discovery.type: single-node``), or the nodes
of a cluster (``servers.cluster``: every node seeded with the others'
transport ports, the first one bootstrapping, a cluster name of its own so
no node joins another run's cluster), each bound to 127.0.0.1 with a free
HTTP and a free transport port, its own copy of the
distribution's config directory (the engines write into it: keystore,
settings) pointed to by ``ES_PATH_CONF`` / ``OPENSEARCH_PATH_CONF``, data,
logs and temp files in the server's private directory, a small heap, disk
watermarks off (a nearly full disk must not turn the index read-only in the
middle of a run), no memory lock, and security off (Elasticsearch:
``xpack.security.enabled: false``; the OpenSearch integ-test zip has no
security plugin at all). Both refuse to run as root, so as root they run as
``nobody``.

Ready means ``GET /_cluster/health?wait_for_status=yellow`` answers (``GET /``
answers 405 in the Elasticsearch integ-test distribution).

OpenSearch gets the k-NN plugin (``opensearch-knn``) installed once, when the
distribution is unpacked. Its descriptor says ``extended.plugins=lang-painless``,
a module the integ-test zip does not ship, and the installer refuses a plugin
whose extended plugin is missing. The extension only adds k-NN functions to
Painless scripts; k-NN fields and queries do not need it. So the set-up step
rewrites that one line of the descriptor (``extended.plugins=``) in a copy of
the plugin zip and installs the copy with the official ``opensearch-plugin``
tool. Use the ``lucene`` k-NN engine: this zip has no native libraries, and
the faiss / nmslib engines crash the node.

Pre-fetch both distributions (CI, or before going offline)::

    python -m storebench.servers.elastic --fetch [elasticsearch] [opensearch]
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, ClassVar

from storebench.servers.base import Server, check_reachable_by, free_port
from storebench.servers.dist import (
    DistError,
    Distribution,
    MavenZip,
    ensure,
    java_home,
)

ELASTICSEARCH_VERSION = "8.19.3"
OPENSEARCH_VERSION = "2.19.1"
OPENSEARCH_KNN_VERSION = "2.19.1.0"


def _install_knn(home: Path, extras: list[Path]) -> None:
    """Install the k-NN plugin into an unpacked OpenSearch (see the module doc)."""
    (knn_zip,) = extras
    with tempfile.TemporaryDirectory(prefix="storebench-knn-") as tmp:
        patched = Path(tmp) / knn_zip.name
        with zipfile.ZipFile(knn_zip) as src, zipfile.ZipFile(patched, "w") as dst:
            for info in src.infolist():
                data = src.read(info)
                if info.filename == "plugin-descriptor.properties":
                    lines = data.decode("utf-8").splitlines()
                    lines = [
                        "extended.plugins=" if ln.startswith("extended.plugins=") else ln
                        for ln in lines
                    ]
                    data = ("\n".join(lines) + "\n").encode("utf-8")
                dst.writestr(info, data)
        env = dict(os.environ, OPENSEARCH_JAVA_HOME=java_home(), JAVA_HOME=java_home())
        env.pop("OPENSEARCH_PATH_CONF", None)
        r = subprocess.run(
            [str(home / "bin" / "opensearch-plugin"), "install", "--batch", patched.as_uri()],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        if r.returncode != 0:
            tail = " | ".join((r.stdout + r.stderr).strip().splitlines()[-10:])
            raise DistError(f"installing opensearch-knn failed (exit {r.returncode}): {tail}")
    for root, dirs, files in os.walk(home / "plugins"):  # readable by the server's user
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            p = os.path.join(root, f)
            os.chmod(p, os.stat(p).st_mode | 0o444)


ELASTICSEARCH = Distribution(
    f"elasticsearch-{ELASTICSEARCH_VERSION}",
    MavenZip(
        "org.elasticsearch.distribution.integ-test-zip",
        "elasticsearch",
        ELASTICSEARCH_VERSION,
        "c4b08b70523700efde9f3e4c9287229f085c2c0db1efca5c6a7d65abbdb9f2e1",
    ),
)
OPENSEARCH = Distribution(
    f"opensearch-{OPENSEARCH_VERSION}-knn-{OPENSEARCH_KNN_VERSION}",
    MavenZip(
        "org.opensearch.distribution.integ-test-zip",
        "opensearch",
        OPENSEARCH_VERSION,
        "af7152d8b7f6f1cee09d47276b32b70479fe6dd8cdbb61213f84eb7f8098b261",
    ),
    extras=(
        MavenZip(
            "org.opensearch.plugin",
            "opensearch-knn",
            OPENSEARCH_KNN_VERSION,
            "eab8c9818865bc035212eab5068cdacae164baa09d4c152f49b736d6f6b0e85c",
        ),
    ),
    setup=_install_knn,
)


class LuceneServer(Server):
    """One single-node Elasticsearch or OpenSearch; subclasses name the
    distribution and the engine's environment variables."""

    refuses_root = True
    clusters = True
    start_timeout_s = 240.0  # a JVM on 2 busy cores; readiness is polled, never waited out
    stop_timeout_s = 60.0
    dist: ClassVar[Distribution]
    launcher: ClassVar[str]  # bin/<launcher>
    config_file: ClassVar[str]
    env_prefix: ClassVar[str]  # ES / OPENSEARCH: <prefix>_PATH_CONF, _JAVA_OPTS, _TMPDIR
    # the attach socket a JVM that attaches to itself makes in /tmp whatever
    # it is told (Elasticsearch loads its entitlement agent so; a killed
    # server leaves it)
    pid_files: ClassVar[tuple[str, ...]] = ("/tmp/.java_pid{pid}",)
    bootstrap_setting: ClassVar[str]  # the first nodes to elect a master among
    extra_settings: ClassVar[dict[str, Any]] = {}

    def __init__(self, heap: str | None = None):
        # before the private directory exists: a failure here leaves nothing
        self.home = ensure(self.dist)  # fetched once; not part of the start-up time
        self._java_home = java_home()
        super().__init__()
        self.transport_port = free_port()
        # the JVM heap: -Xms512m -Xmx1g unless given (then both the same, as
        # the engines recommend)
        self.heap_opts = f"-Xms{heap} -Xmx{heap}" if heap else "-Xms512m -Xmx1g"

    @property
    def conf_dir(self) -> Path:
        return self.dir / "config"

    def prepare(self) -> None:
        remedy = "set STOREBENCH_DATA to a directory others can read"
        check_reachable_by(self.home, self.user, remedy)  # a failed start removes the directory
        shutil.copytree(self.home / "config", self.conf_dir, dirs_exist_ok=True)
        for sub in ("data", "logs", "tmp"):
            (self.dir / sub).mkdir(exist_ok=True)
        first = self.peers[0]
        discovery: dict[str, Any] = {"discovery.type": "single-node"}
        if len(self.peers) > 1:  # the first node bootstraps; the others find it
            discovery = {
                "discovery.seed_hosts": [f"127.0.0.1:{n.transport_port}" for n in self.peers],  # type: ignore[attr-defined]
                self.bootstrap_setting: [first.node_name],
            }
        settings: dict[str, Any] = {
            # unique: a node must never join another run's cluster on this machine
            "cluster.name": f"storebench-{first.port}",
            "node.name": self.node_name,
            "path.data": str(self.dir / "data"),
            "path.logs": str(self.dir / "logs"),
            "network.host": "127.0.0.1",
            "http.port": self.port,
            "transport.port": self.transport_port,
            **discovery,
            "bootstrap.memory_lock": False,
            "cluster.routing.allocation.disk.threshold_enabled": False,
            "action.destructive_requires_name": True,
            **self.extra_settings,
        }
        cpus = self.limits[0]
        if cpus:  # thread pools sized for the quota (applied once ready), as in a container
            settings["node.processors"] = max(1, math.ceil(cpus))
        # jvm.options names gc/error logs and heap dumps relative to the
        # working directory, which the OpenSearch launcher sets to the (shared,
        # read-only) distribution: make them absolute paths in our directory.
        jvm = self.conf_dir / "jvm.options"
        text = jvm.read_text()
        for old, new in (
            ("file=logs/", f"file={self.dir}/logs/"),
            ("ErrorFile=logs/", f"ErrorFile={self.dir}/logs/"),
            ("HeapDumpPath=data", f"HeapDumpPath={self.dir}/data"),
        ):
            text = text.replace(old, new)
        jvm.write_text(text)
        with open(self.conf_dir / self.config_file, "a") as f:
            f.write("\n# written by storebench\n")
            for k, v in settings.items():
                f.write(f"{k}: {json.dumps(v)}\n")

    def command(self) -> list[str]:
        return [str(self.home / "bin" / self.launcher)]

    def env(self) -> dict[str, str]:
        p, tmp = self.env_prefix, self.dir / "tmp"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JAVA_OPTS")
        }
        env.update(
            {
                f"{p}_PATH_CONF": str(self.conf_dir),
                # no /tmp/hsperfdata_<user>/<pid> (a killed JVM leaves it)
                f"{p}_JAVA_OPTS": f"{self.heap_opts} -XX:-UsePerfData",
                f"{p}_TMPDIR": str(tmp),
                # Elasticsearch's launcher (server-cli, a JVM of its own)
                # left a final-flags* directory per start in its
                # java.io.tmpdir, /tmp whatever TMPDIR says
                "CLI_JAVA_OPTS": f"-Djava.io.tmpdir={tmp} -XX:-UsePerfData",
                f"{p}_JAVA_HOME": self._java_home,
                "HOME": str(self.dir),  # nobody's home does not exist
            }
        )
        env.pop("JAVA_HOME", None)  # the launchers warn about it
        return env

    def _get(self, path: str, timeout: float = 5.0) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as r:
            return json.load(r)

    def ready(self) -> bool:
        """The cluster answers with every node joined (one, alone)."""
        health = self._get(
            f"/_cluster/health?wait_for_status=yellow&wait_for_nodes=%3E%3D{len(self.peers)}&timeout=1s"
        )
        return health.get("status") in ("green", "yellow") and not health.get("timed_out")

    def version(self) -> str:
        nodes = self._get("/_nodes/_local?filter_path=nodes.*.version")["nodes"]
        return f"{self.name} {next(iter(nodes.values()))['version']}"

    def running_settings(self) -> dict[str, str]:
        """The heap the JVM was given and got, and the processors the node
        uses (its thread pools are sized from them)."""
        nodes = self._get(
            "/_nodes/_local?filter_path=nodes.*.jvm.mem.heap_max_in_bytes,"
            "nodes.*.os.allocated_processors"
        )["nodes"]
        node = next(iter(nodes.values()))
        return {
            "heap_options": self.heap_opts,
            "heap_max_bytes": str(node["jvm"]["mem"]["heap_max_in_bytes"]),
            "allocated_processors": str(node["os"]["allocated_processors"]),
        }


class ElasticsearchServer(LuceneServer):
    name = "elasticsearch"
    dist = ELASTICSEARCH
    launcher = "elasticsearch"
    config_file = "elasticsearch.yml"
    env_prefix = "ES"
    bootstrap_setting = "cluster.initial_master_nodes"
    extra_settings = {"xpack.security.enabled": False}


class OpenSearchServer(LuceneServer):
    name = "opensearch"
    dist = OPENSEARCH
    launcher = "opensearch"
    config_file = "opensearch.yml"
    env_prefix = "OPENSEARCH"
    bootstrap_setting = "cluster.initial_cluster_manager_nodes"


SERVERS: dict[str, type[LuceneServer]] = {
    "elasticsearch": ElasticsearchServer,
    "opensearch": OpenSearchServer,
}


def fetch(*engines: str) -> dict[str, Path]:
    """Make sure the distributions are unpacked (all of them by default);
    returns each one's home. Fast when they are already cached."""
    names = engines or tuple(SERVERS)
    unknown = [e for e in names if e not in SERVERS]
    if unknown:
        raise DistError(f"unknown engine {unknown[0]!r} (known: {', '.join(SERVERS)})")
    return {e: ensure(SERVERS[e].dist) for e in names}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m storebench.servers.elastic")
    ap.add_argument("--fetch", action="store_true", help="fetch and unpack the distributions")
    ap.add_argument("engines", nargs="*", metavar="ENGINE", help=", ".join(SERVERS))
    args = ap.parse_args(argv)
    if not args.fetch:
        ap.print_help()
        return 2
    try:
        for engine, home in fetch(*args.engines).items():
            print(f"{engine}: {home}")
    except DistError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
