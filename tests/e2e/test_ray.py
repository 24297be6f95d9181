"""The ray executor on a two-node Ray cluster on this machine.

Every node is pinned to 127.0.0.1 (``loopback_only``: Ray would otherwise
rewrite it to the machine's interface address), with one CPU, a 100 MB
object store and no dashboard. The cluster is started once for the module.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

ray = pytest.importorskip("ray")  # the test extra installs it (storebench[ray])

import storebench  # noqa: E402
from storebench.data.batch import Schema  # noqa: E402
from storebench.driver import Driver, FnOp, Task  # noqa: E402
from storebench.driver.core import merge  # noqa: E402
from storebench.driver.ray_cluster import loopback_only  # noqa: E402
from storebench.driver.ray_executor import RayExecutor  # noqa: E402
from storebench.errors import TaskFailed  # noqa: E402
from storebench.measure.metrics import Histogram  # noqa: E402
from storebench.run.progress import NoProgress  # noqa: E402
from storebench.stores.base import StoreSpec  # noqa: E402
from tests.stores.servers import shared_url  # noqa: E402

NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 100 * 2**20}
SMALL = {"n": 2000, "dim": 16, "batch_size": 500, "ops": 400, "warmup": 2, "clients": 2}


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    # Ray's session directories: /tmp/ray otherwise, kept after the cluster
    temp = tempfile.mkdtemp(prefix="sbray-", dir="/tmp")
    env = pytest.MonkeyPatch()
    env.setenv("RAY_TMPDIR", temp)
    with loopback_only():
        c = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
        c.add_node(**NODE)
        c.wait_for_nodes()
        ray.init(address=c.address, logging_level="WARNING")
    try:
        yield c
    finally:
        RayExecutor.teardown()
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        env.undo()


@pytest.fixture
def executor(cluster):
    RayExecutor.setup({"ray_address": cluster.address})  # ray_timeout_s: 60
    yield RayExecutor
    RayExecutor.teardown()  # kills the pooled client actors; the cluster stays


class StaggeredWarmup:
    """Client c warms up for c * 0.3 s, then each op sleeps 0.5 ms."""

    def __call__(self, coll, c, clients):
        time.sleep(c * 0.3)
        return FnOp(lambda i: time.sleep(0.0005))


def test_clients_spread_over_nodes_start_together_and_merge_exactly(executor):
    store = StoreSpec("null").open()
    coll = store.create_collection("x", Schema())
    task = Task("t", StaggeredWarmup(), clients=4, ops=2_000)
    (results,) = executor(store).run([task], coll, NoProgress())
    assert len(results) == 4 and not any(r.error for r in results)
    stats = merge(task, results)
    # merged counts are the sum of the actors' counts, histograms bucket by bucket
    assert stats.ops == sum(r.ops for r in results) == 2_000
    assert stats.latency.count == sum(r.latency.count for r in results) == 2_000
    union = Histogram()
    for r in results:
        union.merge(r.latency)
    assert stats.latency.summary() == union.summary()
    # warm-ups end 0.9 s apart, measuring starts together (the barrier)
    starts = [r.start_ns for r in results]
    assert max(starts) - min(starts) < 0.3e9
    # two clients on each node; per-node ops and CPU in the description
    shape = executor.describe()
    assert shape["ray_version"] == ray.__version__ and len(shape["nodes"]) == 2
    assert all(n["ip"] == "127.0.0.1" and n["cpus"] == 1 for n in shape["nodes"])
    (entry,) = shape["tasks"]
    assert [d["clients"] for d in entry["nodes"].values()] == [2, 2]
    assert sum(d["ops"] for d in entry["nodes"].values()) == stats.ops
    assert all(d["cpu_s"] > 0 for d in entry["nodes"].values())


def test_crud_on_sqlite_through_the_runner_records_the_cluster(cluster, tmp_path):
    sets = {
        **SMALL,
        "grid": {},
        "driver.executor": "ray",
        "driver.ray_address": cluster.address,
    }
    (rec,) = storebench.run("crud", stores=["sqlite"], set=sets, results_dir=tmp_path)
    assert rec["status"] == "ok", rec["error"]
    ex = rec["executor"]
    assert ex["name"] == "ray" and len(ex["nodes"]) == 2 and ex["data"] == ["path"]
    timed = [t for t in rec["tasks"] if t.get("clients") == 2]
    assert [t["name"] for t in timed] == [e["task"] for e in ex["tasks"]]
    for t, e in zip(timed, ex["tasks"], strict=True):
        assert t["ops"] == sum(d["ops"] for d in e["nodes"].values())
        assert sorted(d["clients"] for d in e["nodes"].values()) == [1, 1]
    assert rec["settings"][0]["scores"]["recall@10"] == 1.0  # sqlite searches exactly


RAY_START = """
ip link set lo up
export RAY_AUTH_MODE=token  # a worker's ray start needs the head's token
ray start --head --port=6379 --num-cpus=1 --include-dashboard=false \\
    --object-store-memory=100000000 --temp-dir="$TMP" --disable-usage-stats >"$TMP/head.log" 2>&1
ray start --address=127.0.0.1:6379 --num-cpus=1 --resources='{"storebench_client": 2}' \\
    --object-store-memory=100000000 --disable-usage-stats >"$TMP/worker.log" 2>&1
"$PY" -m storebench run crud --store sqlite --results "$TMP/r" --no-progress \\
    --set n=2000 --set ops=200 --set clients=2 --set 'grid={}' \\
    --set driver.executor=ray --set driver.ray_address=127.0.0.1:6379
"""


def test_a_cluster_from_ray_start_runs_the_clients_on_the_node_that_declares_them():
    """docs/ray.md's set-up as a user types it: ``ray start --head``, a
    worker ``ray start --address`` declaring ``storebench_client``, then
    ``storebench run`` naming the head. Ray's own command refuses a second
    node while it keeps to loopback, so the cluster lives in a network
    namespace of its own whose only device is loopback (nothing reachable
    from outside), and a PID namespace of its own: every process Ray starts
    ends with the script. The token is the test's own (Ray would keep
    one in ~/.ray)."""
    tmp = Path(tempfile.mkdtemp(prefix="sbray-"))  # short: Ray's socket paths have a limit
    try:
        done = subprocess.run(
            ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
            + ["sh", "-ec", RAY_START],
            env={
                **os.environ,
                "TMP": str(tmp),
                "RAY_AUTH_TOKEN": secrets.token_hex(32),
                "PY": sys.executable,
                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
        logs = "".join(p.read_text() for p in tmp.glob("*.log"))
        assert done.returncode == 0, done.stderr + logs
        (rec,) = [json.loads(x) for x in (tmp / "r" / "crud.jsonl").read_text().splitlines()]
        assert rec["status"] == "ok", rec["error"]
        ex = rec["executor"]
        assert not ex["local"] and len(ex["nodes"]) == 2
        assert all(n["ip"] == "127.0.0.1" for n in ex["nodes"])
        (worker,) = [n["node"] for n in ex["nodes"] if n["clients"]]
        timed = [t for t in rec["tasks"] if t.get("clients") == 2]
        assert len(timed) == len(ex["tasks"]) > 0
        for t, e in zip(timed, ex["tasks"], strict=True):
            assert list(e["nodes"]) == [worker], e  # each client names its node: the worker
            assert e["nodes"][worker]["clients"] == 2 and e["nodes"][worker]["ops"] == t["ops"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_search_on_a_managed_redis_with_queries_through_the_object_store(
    cluster, tmp_path, monkeypatch
):
    monkeypatch.setattr(RayExecutor, "transfer", "object_store")
    sets = {
        "n": 1500,
        "dim": 16,
        "queries": 100,
        "min_window_s": 0,  # each task: the 100 queries exactly
        "batch_size": 500,
        "warmup": 2,
        "repeats": 1,
        "clients": [2],
        "labels": [],
        "grid": {"index.m": [16], "index.ef_construct": [200], "search.ef": [200]},
        "driver.executor": "ray",
        "driver.ray_address": cluster.address,
    }
    (rec,) = storebench.run(
        "search", stores=[f"redis={shared_url('redis')}"], set=sets, results_dir=tmp_path
    )
    assert rec["status"] == "ok", rec["error"]
    ex = rec["executor"]
    assert ex["data"] == ["object_store"]
    searches = [t for t in rec["tasks"] if t.get("phase") == "search"]
    assert searches and len(ex["tasks"]) == 1 + len(searches)  # the upload, then these
    for t, e in zip(searches, ex["tasks"][1:], strict=True):
        assert t["ops"] == 100 == sum(d["ops"] for d in e["nodes"].values())
        assert sorted(d["clients"] for d in e["nodes"].values()) == [1, 1]
        # the queries reached the clients intact: recall is the index's, not noise
        assert t["scores"]["recall@10"] > 0.95


def test_ingest_on_a_managed_redis_lands_every_document_once(cluster, tmp_path):
    sets = {
        "count": 1000,
        "concurrency": 2,
        "batch_size": 10,
        "complexity": 3,
        "driver.executor": "ray",
        "driver.ray_address": cluster.address,
    }
    (rec,) = storebench.run(
        "ingest", stores=[f"redis={shared_url('redis')}"], set=sets, results_dir=tmp_path
    )
    assert rec["status"] == "ok", rec["error"]
    task, settle = rec["tasks"]  # the inserts, then the wait until Redis holds them
    assert settle["name"] == "settle" and settle["held"] == 1000
    (entry,) = rec["executor"]["tasks"]
    assert task["ops"] == 100 == sum(d["ops"] for d in entry["nodes"].values())
    assert task["items"] == 1000 and len(entry["nodes"]) == 2


class PidFiles:
    """Each client writes its process id, then does 1 ms ops."""

    def __init__(self, where: str):
        self.where = where

    def __call__(self, coll, c, clients):
        Path(self.where, f"{c}.pid").write_text(str(os.getpid()))
        return FnOp(lambda i: time.sleep(0.001))


def test_a_killed_client_fails_the_task_within_the_time_limit(executor, tmp_path):
    coll = StoreSpec("null").open().create_collection("k", Schema())
    killed: list[float] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # they are measuring
        os.kill(int((tmp_path / "1.pid").read_text()), signal.SIGKILL)
        killed.append(time.monotonic())

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    task = Task("long", PidFiles(str(tmp_path)), clients=2, ops=10_000_000)
    with pytest.raises(TaskFailed, match="client 1 .*lost"):
        Driver(executor="ray").run(task, coll)
    done = time.monotonic()
    t.join(5)
    assert killed and done - killed[0] < 15  # well inside the limit (ray_timeout_s: 60)


def test_a_signal_while_actors_start_stops_the_task_at_once(executor, monkeypatch):
    from storebench.common import interrupts
    from storebench.driver import Interrupted
    from storebench.driver import executors as ex
    from tests.unit.test_interrupts import Items, signalled_at

    # two actors started and waiting at the barrier actor for two never
    # launched: the barrier is broken at once; the clients are waited for
    # as long as it takes (no grace cut), and it takes far less than the
    # ray_timeout_s (60 s) they would wait at an unbroken barrier
    monkeypatch.setattr(ex, "STOP_GRACE_S", 600.0)
    coll = StoreSpec("null").open().create_collection("s", Schema())
    task = Task("t", Items(), clients=4, ops=10_000_000)
    t0 = time.monotonic()
    with interrupts.handled(), pytest.raises(Interrupted) as stopped:
        signalled_at(executor, 2, signal.SIGTERM)(coll.store).run([task], coll, NoProgress())
    assert time.monotonic() - t0 < 30
    assert stopped.value.signal == "SIGTERM"
    (partial,) = stopped.value.partial
    assert partial.ops == 0 and not partial.complete


def ray_pids() -> set[int]:
    out = set()
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "gcs_server" in cmd or "raylet" in cmd:
            out.add(p.pid)
    return out


def test_ctrl_c_stops_the_actors_and_the_local_ray_the_run_started(tmp_path):
    before = ray_pids()
    p = subprocess.Popen(
        [sys.executable, "-m", "storebench", "-v", "run", "crud", "--store", "sqlite"]
        + ["--set", "n=2000", "--set", "ops=1000000", "--set", "clients=2"]
        + ["--set", "grid={}", "--set", "driver.executor=ray", "--results", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives it
    )
    seen = ""
    deadline = time.monotonic() + 120
    while "task read:" not in seen and time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        seen += line
    assert "task read:" in seen, seen
    time.sleep(3)  # the clients are measuring
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C reaches the whole group
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    (rec,) = [json.loads(line) for line in (tmp_path / "crud.jsonl").read_text().splitlines()]
    assert rec["status"] == "interrupted"
    assert rec["executor"]["local"] and rec["executor"]["nodes"][0]["ip"] == "127.0.0.1"
    read = rec["tasks"][1]
    assert read["name"] == "read" and not read["complete"] and 0 < read["ops"] < 1_000_000
    deadline = time.monotonic() + 15
    while ray_pids() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ray_pids() - before, "the local Ray outlived the run"


def test_a_store_that_lives_in_one_process_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(Exception, match="memory cannot serve ray clients"):
        storebench.run(
            "crud", stores=["memory"], set={"driver.executor": "ray"}, results_dir=tmp_path
        )
    with pytest.raises(Exception, match="ray_timeout_s"):
        storebench.run(
            "crud", stores=["sqlite"], set={"driver.ray_timeout_s": 0}, results_dir=tmp_path
        )
    assert not list(tmp_path.iterdir())
