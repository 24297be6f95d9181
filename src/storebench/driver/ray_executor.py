"""Clients as Ray actors spread over a cluster: ``--set driver.executor=ray``.

One actor per client (per lane, with ``inflight``), placed round-robin over
the cluster's client nodes (the nodes that declare the custom resource
``storebench_client``, else every alive node). Each actor opens its own store
from the picklable spec, builds its op, warms up, and waits at a barrier
actor; all clients are released together and measure. Their ``ClientResult``
(HDR histograms pickle compactly) comes back and the driver merges it
exactly, as for threads and processes. Times are rebased onto the barrier's
clock (each client notes its own clock at release), so first-start to
last-end spans machines whose monotonic clocks differ.

Data: ``Shared`` arrays (documents, queries, truth) travel as file paths
when every client node is this machine; otherwise each goes into the Ray
object store once per task and the task carries a reference, so a node
fetches it once and its clients map it zero-copy.

Failure: every wait has a limit (``driver.ray_timeout_s``). The driver asks
each client for its progress twice a second (one remote call per client, not
per op); a client that does not answer within the limit, or whose worker or
node dies, fails the task: the barrier is broken, the other clients are told
to stop and return what they measured, and ``TaskFailed`` names the lost
client. Ctrl-C or SIGTERM reaches the actors the same way (their stop flag
is set by a concurrent actor method; the timed loop reads it as it reads the
local one) and breaks the barrier, so clients waiting there return at once;
clients not yet started are given up.

Address (``driver.ray_address``): ``local`` (default) starts a private Ray on
127.0.0.1 for the scenario and stops it at the end; ``auto`` or ``HOST:PORT``
joins a running cluster. A program that already called ``ray.init`` keeps its
own connection. See docs/ray.md.

Joining or starting Ray is ``driver/ray_cluster.py``. One module (~600
lines) on purpose: the actors, the session and the executor are one
protocol (barrier, clock offsets, progress polls, stop flags) whose halves
must change together. Only these two modules import Ray.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import logging
import pickle
import threading
import time
from array import array
from collections.abc import Mapping
from typing import Any

import ray
from ray import cloudpickle
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from storebench.data.shared import Shared
from storebench.driver import loops
from storebench.driver.core import ClientResult, Controls, Task, run_client
from storebench.driver.executors import (
    ABORTED,
    NOT_STARTED,
    Executor,
    _failure,
    _per_task,
    _slots,
)
from storebench.driver.ray_cluster import connect, remove_local_temp
from storebench.errors import UserError
from storebench.stores.base import Capability, Collection

log = logging.getLogger("storebench")

CLIENT_RESOURCE = "storebench_client"  # nodes declaring it are the only client nodes
POLL_S = 0.5  # how often the driver asks each client for its progress


# --- actors -------------------------------------------------------------------------


class _Gate:
    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.release_ns = 0
        self.broken = False
        self.event = asyncio.Event()


@ray.remote(num_cpus=0)
class _Barrier:
    """All clients of a run (``gen``) wait here after their warm-up and
    leave together. One actor per session: a new one per task would cost a
    worker process start each time."""

    def __init__(self) -> None:
        self.gates: dict[int, _Gate] = {}

    def _gate(self, gen: int, parties: int) -> _Gate:
        gate = self.gates.get(gen)
        if gate is None:
            gate = self.gates[gen] = _Gate(parties)
            for old in [g for g in self.gates if g < gen - 4]:  # long finished
                del self.gates[old]
        return gate

    async def wait(self, gen: int, parties: int) -> int:
        """This actor's clock at the release; 0 when the barrier was broken."""
        gate = self._gate(gen, parties)
        gate.arrived += 1
        if gate.arrived >= gate.parties and not gate.event.is_set():
            gate.release_ns = loops.clock()
            gate.event.set()
        await gate.event.wait()
        return 0 if gate.broken else gate.release_ns

    async def abort(self, gen: int) -> None:
        gate = self._gate(gen, 0)
        gate.broken = True
        gate.event.set()

    async def clock(self) -> tuple[str, int]:
        """This actor's machine and clock, for the clients' clock offsets."""
        return ray.util.get_node_ip_address(), loops.clock()


def _clock_offset(barrier: Any, timeout_s: float, samples: int = 5) -> int:
    """What to add to this machine's monotonic clock to read the barrier's:
    0 on the barrier's machine (one clock), else the offset seen by the
    fastest of a few round trips (error at most half that round trip)."""
    here = ray.util.get_node_ip_address()
    best: tuple[int, int] | None = None
    for _ in range(samples):
        t0 = loops.clock()
        there, theirs = ray.get(barrier.clock.remote(), timeout=timeout_s)
        t1 = loops.clock()
        if there == here:
            return 0
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, theirs - (t0 + t1) // 2)
    assert best is not None
    return best[1]


class _TaskPickler(cloudpickle.Pickler):
    """Pickles a task; with ``put``, each ``Shared`` array inside it goes to
    the object store (through ``put``) and travels as an index."""

    def __init__(self, file: io.BytesIO, put: Any):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._put = put

    def persistent_id(self, obj: Any) -> Any:
        if self._put is not None and isinstance(obj, Shared):
            return self._put(obj)
        return None


class _TaskUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, arrays: list[Any]):
        super().__init__(file)
        self.arrays = arrays

    def persistent_load(self, pid: Any) -> Any:
        shared = Shared.__new__(Shared)  # the object store's read-only copy
        shared.path = f"<ray object {pid}>"
        shared._array = self.arrays[pid]
        return shared


@ray.remote(num_cpus=0, max_concurrency=3)  # type: ignore[call-overload]  # run, progress, halt at once
class _Client:
    """One client; reused for the tasks of a scenario (``gen`` tells runs apart)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gen = -1
        self.halted: set[int] = set()
        self.stop = bytearray(1)
        self.prog = array("q", [0])

    def halt(self, gen: int) -> None:
        with self.lock:
            self.halted.add(gen)
            if self.gen == gen:
                self.stop[0] = 1

    def progress(self) -> int:
        return int(self.prog[0])

    def run(
        self,
        gen: int,
        spec: Any,
        name: str,
        schema: Any,
        blob: bytes,
        refs: list[Any],
        c: int,
        parties: int,
        barrier: Any,
        timeout_s: float,
    ) -> ClientResult:
        with self.lock:
            self.gen = gen
            self.halted = {h for h in self.halted if h >= gen}  # a halt may come first
            self.stop = bytearray([1 if gen in self.halted else 0])
            self.prog = array("q", [0])
        ctl = Controls(self.stop, self.prog)

        def sync() -> None:
            try:
                released = ray.get(barrier.wait.remote(gen, parties), timeout=timeout_s)
            except GetTimeoutError:
                raise TimeoutError(
                    f"the other clients did not reach the start within {timeout_s:g} s"
                ) from None
            if not released:
                raise threading.BrokenBarrierError

        store = None
        try:
            offset = _clock_offset(barrier, timeout_s)
            arrays = ray.get(refs, timeout=timeout_s) if refs else []
            task = _TaskUnpickler(io.BytesIO(blob), arrays).load()
            store = spec.open()
            coll = store.open_collection(name, schema)
            res = run_client(task, coll, c, ctl, sync, 0).result()
        except BaseException as exc:
            barrier.abort.remote(gen)
            return _failure(c, exc)
        finally:
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()
        res.start_ns += offset  # onto the barrier's clock: one time line per task
        res.end_ns += offset
        res.driver_clock = False  # the barrier's clock, not necessarily the driver's
        return res


# --- the session: one Ray connection per process -------------------------------------


class _Session:
    def __init__(self) -> None:
        self.address = "local"
        self.timeout_s = 60.0
        self.connected: str | None = None  # the address we called ray.init for
        self.borrowed = False  # the program's own ray.init: never shut down here
        self.pool: dict[str, list[Any]] = {}  # client actors by node, reused across tasks
        self._barrier: Any = None
        self.gen = 0
        self.nodes: list[dict[str, Any]] = []
        self.tasks: list[dict[str, Any]] = []
        self.transfer: set[str] = set()
        self.exit_hook = False

    def configure(self, options: Mapping[str, Any]) -> None:
        address = str(options.get("ray_address") or "local")
        if self.connected is not None and address != self.connected:
            self.close()
        self.address = address
        self.timeout_s = float(options.get("ray_timeout_s") or 60.0)
        self.tasks = []
        self.transfer = set()

    def connect(self) -> None:
        if ray.is_initialized():
            if self.connected is None:
                self.borrowed = True
            return
        self.pool = {}
        self._barrier = None
        self.borrowed = False
        try:
            connect(self.address)
        except UserError:
            raise
        except Exception as exc:
            raise UserError(
                f"cannot start or join Ray at {self.address!r}: {type(exc).__name__}: {exc}",
                where="driver.ray_address",
            ) from exc
        self.connected = self.address
        if not self.exit_hook:
            atexit.register(self.close)
            self.exit_hook = True

    def client_nodes(self) -> list[dict[str, Any]]:
        """Alive nodes, those declaring ``storebench_client`` if any do;
        the driver's own node last (clients go elsewhere first)."""
        alive = [n for n in ray.nodes() if n.get("Alive")]
        here = ray.get_runtime_context().get_node_id()
        self.nodes = [
            {
                "node": n["NodeID"][:12],
                "ip": n.get("NodeManagerAddress"),
                "cpus": n.get("Resources", {}).get("CPU", 0),
                "object_store_mb": round(
                    n.get("Resources", {}).get("object_store_memory", 0) / 2**20
                ),
                "driver": n["NodeID"] == here,
            }
            for n in alive
        ]
        marked = [n for n in alive if n.get("Resources", {}).get(CLIENT_RESOURCE)]
        chosen = marked or alive
        chosen.sort(key=lambda n: (n["NodeID"] == here, n["NodeID"]))
        ids = {n["NodeID"][:12] for n in chosen}
        for d in self.nodes:
            d["clients"] = d["node"] in ids
        return chosen

    def actors(self, nodes: list[dict[str, Any]], n: int) -> list[tuple[Any, dict[str, Any]]]:
        """n client actors, round-robin over ``nodes``, reusing idle ones."""
        taken: dict[str, int] = {}
        out = []
        for g in range(n):
            node = nodes[g % len(nodes)]
            nid = node["NodeID"]
            have = self.pool.setdefault(nid, [])
            k = taken.get(nid, 0)
            taken[nid] = k + 1
            if k == len(have):
                have.append(
                    _Client.options(  # type: ignore[attr-defined]
                        scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False)
                    ).remote()
                )
            out.append((have[k], node))
        return out

    def barrier(self) -> Any:
        """The session's barrier actor, on the driver's node if it can be."""
        if self._barrier is None:
            here = ray.get_runtime_context().get_node_id()
            self._barrier = _Barrier.options(  # type: ignore[attr-defined]
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True)
            ).remote()
        return self._barrier

    def discard_barrier(self) -> None:
        barrier, self._barrier = self._barrier, None
        if barrier is not None:
            with contextlib.suppress(Exception):
                ray.kill(barrier, no_restart=True)

    def discard(self, actor: Any) -> None:
        for have in self.pool.values():
            if actor in have:
                have.remove(actor)
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)

    def close(self) -> None:
        pool, self.pool = self.pool, {}
        if ray.is_initialized():
            self.discard_barrier()
            for have in pool.values():
                for actor in have:
                    with contextlib.suppress(Exception):
                        ray.kill(actor, no_restart=True)
        if self.connected is not None and not self.borrowed:
            with contextlib.suppress(Exception):
                ray.shutdown()  # a local Ray we started stops with it
            remove_local_temp()
        self.connected = None
        self.borrowed = False
        self._barrier = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": "ray",
            "ray_version": ray.__version__,
            "address": self.connected or self.address,
            "local": (self.connected or self.address) == "local",
            "timeout_s": self.timeout_s,
        }
        try:
            if ray.is_initialized() and not self.nodes:
                self.client_nodes()
        except Exception as exc:  # the cluster went away: say so, keep the record
            out["nodes_error"] = f"{type(exc).__name__}: {exc}"
        out["nodes"] = self.nodes
        out["data"] = sorted(self.transfer)
        out["tasks"] = self.tasks
        return out


_session = _Session()


# --- the executor ---------------------------------------------------------------------


class _Flight:
    """The driver's view of one run of clients: results as they come, a
    progress poll per client, and the time limits."""

    def __init__(
        self,
        clients: list[tuple[Any, dict[str, Any]]],
        slots: list[tuple[int, int]],
        barrier: Any,
        ctl: Controls,
        gen: int,
        timeout_s: float,
    ):
        self.clients = clients
        self.slots = slots
        self.barrier = barrier
        self.ctl = ctl
        self.gen = gen
        self.timeout_s = timeout_s
        self.pending: dict[Any, int] = {}  # run ref -> slot
        self.results: dict[int, ClientResult] = {}
        self.polls: dict[Any, tuple[int, float]] = {}  # progress ref -> (slot, sent)
        self.polled: set[int] = set()
        self.last_poll = 0.0
        self.halted_at: float | None = None
        self.lost: list[Any] = []

    def alive(self) -> bool:
        return len(self.results) < len(self.slots)

    def _fail(self, g: int, msg: str) -> None:
        self.results[g] = ClientResult.failed(msg)
        self.pending = {r: s for r, s in self.pending.items() if s != g}
        self.lost.append(self.clients[g][0])
        self.halt(broken=True)

    def _lost(self, g: int, exc: BaseException) -> None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        self._fail(g, f"{self._who(g)} lost: {type(exc).__name__}: {first}")

    def _who(self, g: int) -> str:
        node = self.clients[g][1]
        return f"client {self.slots[g][1]} (Ray node {node['NodeID'][:12]} at {node.get('NodeManagerAddress')})"

    def halt(self, broken: bool = False) -> None:
        if broken:
            self.barrier.abort.remote(self.gen)
        if self.halted_at is None:
            self.halted_at = time.monotonic()
            for g, (actor, _) in enumerate(self.clients):
                if g not in self.results:
                    actor.halt.remote(self.gen)

    def collect(self, timeout: float) -> None:
        if self.ctl.stop[0] and self.halted_at is None:
            self.halt()
        if self.pending:
            ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=timeout)
            for ref in ready:
                g = self.pending.pop(ref, None)
                if g is None or g in self.results:
                    continue
                try:
                    res = ray.get(ref, timeout=self.timeout_s)
                except (RayError, GetTimeoutError) as exc:
                    self._lost(g, exc)
                    continue
                self.results[g] = res
                if res.error and res.error != ABORTED:
                    self.halt(broken=True)
        self._poll()
        if self.halted_at is not None and time.monotonic() - self.halted_at > self.timeout_s:
            for g in range(len(self.slots)):
                if g not in self.results:
                    self._fail(g, f"{self._who(g)} did not stop within {self.timeout_s:g} s")

    def _poll(self) -> None:
        now = time.monotonic()
        if self.polls:
            refs = list(self.polls)
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                g, _sent = self.polls.pop(ref)
                try:
                    self.ctl.progress[g] = ray.get(ref, timeout=self.timeout_s)
                except (RayError, GetTimeoutError) as exc:
                    if g not in self.results:
                        self._lost(g, exc)
                self.polled.discard(g)
            for ref, (g, sent) in list(self.polls.items()):
                if g not in self.results and now - sent > self.timeout_s:
                    del self.polls[ref]
                    self.polled.discard(g)
                    self._fail(g, f"{self._who(g)} did not answer within {self.timeout_s:g} s")
        if now - self.last_poll >= POLL_S:
            self.last_poll = now
            for g, (actor, _) in enumerate(self.clients):
                if g not in self.results and g not in self.polled:
                    self.polls[actor.progress.remote()] = (g, now)
                    self.polled.add(g)


class RayExecutor(Executor):
    name = "ray"
    requires = frozenset({Capability.SHARED_ACROSS_PROCESSES})
    # how Shared arrays reach clients: path (a file every client node can
    # read), object_store, or auto (path when every client node is this machine)
    transfer = "auto"

    @classmethod
    def setup(cls, options: Mapping[str, Any]) -> None:
        _session.configure(options)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return _session.describe()

    @classmethod
    def teardown(cls) -> None:
        _session.close()

    def _transfer(self, nodes: list[dict[str, Any]]) -> str:
        if self.transfer != "auto":
            return self.transfer
        here = ray.util.get_node_ip_address()
        return "path" if all(n.get("NodeManagerAddress") == here for n in nodes) else "object_store"

    def run(self, tasks: list[Task], coll: Collection, progress: Any) -> list[list[ClientResult]]:
        _session.connect()
        nodes = _session.client_nodes()
        if not nodes:
            raise UserError(
                "the Ray cluster has no alive node for clients", where="driver.ray_address"
            )
        timeout_s = _session.timeout_s
        slots = _slots(tasks)
        transfer = self._transfer(nodes)
        _session.transfer.add(transfer)
        puts: dict[str, int] = {}
        refs: list[Any] = []

        def put(shared: Shared) -> int:
            if shared.path not in puts:
                puts[shared.path] = len(refs)
                refs.append(ray.put(shared.array))
            return puts[shared.path]

        blobs = []
        for task in tasks:
            buf = io.BytesIO()
            _TaskPickler(buf, put if transfer == "object_store" else None).dump(task)
            blobs.append(ray.put(buf.getvalue()))
        _session.gen += 1
        gen = _session.gen
        clients = _session.actors(nodes, len(slots))
        barrier = _session.barrier()
        ctl = Controls.local(len(slots))
        flight = _Flight(clients, slots, barrier, ctl, gen, timeout_s)
        warmup = max(t.warmup_s for t in tasks)

        def launch(g: int) -> None:
            t, c = slots[g]
            ref = clients[g][0].run.remote(
                gen,
                self.store.spec,
                coll.name,
                coll.schema,
                blobs[t],
                refs,
                c,
                len(slots),
                barrier,
                timeout_s + warmup,
            )
            flight.pending[ref] = g

        def abort(started: int) -> None:
            flight.halt(broken=True)
            launched = set(flight.pending.values())
            for g in range(started, len(slots)):
                if g not in launched and g not in flight.results:
                    flight.results[g] = ClientResult.failed(NOT_STARTED)

        try:
            interrupted = self._watch(
                tasks, ctl, progress, launch, flight.alive, flight.collect, abort
            )
        finally:
            for actor in flight.lost:
                _session.discard(actor)
            if flight.alive():  # not back within the grace after a stop: abandoned
                for g in range(len(slots)):
                    if g not in flight.results:
                        _session.discard(clients[g][0])
            if flight.lost:  # the barrier may be what was lost: a new one next time
                _session.discard_barrier()
        for t, task in enumerate(tasks):
            by_node: dict[str, dict[str, Any]] = {}
            for g, (tt, _c) in enumerate(slots):
                res = flight.results.get(g)
                if tt != t or res is None:
                    continue
                node = clients[g][1]
                d = by_node.setdefault(
                    node["NodeID"][:12],
                    {"ip": node.get("NodeManagerAddress"), "clients": 0, "ops": 0, "cpu_s": 0.0},
                )
                d["clients"] += 1
                d["ops"] += res.ops
                d["cpu_s"] = round(d["cpu_s"] + res.cpu_s, 6)
            _session.tasks.append({"task": task.name, "nodes": by_node})
        return self._finish(tasks, _per_task(tasks, slots, flight.results), interrupted)
