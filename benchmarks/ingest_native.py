"""storebench ``ingest`` against the engines' own load tools, on the same servers.

storebench starts one managed Redis (``servers/redis.py``) and one managed
PostgreSQL (``servers/postgres.py``) and, for each clients x pipeline point,
inserts ``--count`` documents of 10 string attributes ("some test value"),
one document per request, into a fresh collection on that server twice:

- ``storebench ingest`` (batch_size 1, ``concurrency`` = clients, ``pipeline``,
  ``executor`` as given: ingest's auto is threads; ``--executor processes``
  runs each client in a process of its own), the store given the server's
  URL (external mode: both tools hit the same server);
- the engine's tool with the same clients and pipeline depth, into a fresh
  collection our store created (same table or key prefix, same indexes):

  * ``redis-benchmark -c C -P P -n N -r 10^11`` running the command our
    Redis store sends per document, ``HSET <coll>:<id> _id <id> test1 v ..
    test10 v``; the collection's search index covers the key prefix, so the
    server indexes every HSET as it does ours. Keys are random 12-digit
    numbers below 10^11 (redis-benchmark has no sequence; ours are 0..N-1),
    so nearly all are new.
  * ``pgbench -n -M prepared -c C -j C`` with the statement our pgvector
    store sends, ``INSERT INTO <t> (id, test1..test10) VALUES (..) ON
    CONFLICT (id) DO UPDATE ..`` (strings bound as parameters; our store
    prepares it too), P of them between ``\\startpipeline`` and
    ``\\endpipeline`` (one Sync: they commit together, as in our pipeline).
    Ids are the ones storebench's lanes send: client c's m-th transaction
    inserts ids ``(m*C + c)*P + k``, k < P (a per-client counter, ``-D n=0``),
    so both fill the primary key in the same order. pgbench runs whole
    transactions per client: ``C*P*floor(N / (C*P))`` statements.

ops/s are requests (= documents) acknowledged per second, each tool counting
its own timed window: the insert task's ``requests_per_s`` for storebench
(its ``settle`` wait is not in it, as the tools have none),
redis-benchmark's requests/s, pgbench's tps without connection time x P.
After each native run the engine's own count is checked, so a tool that
silently sent nothing cannot pass.

Printed per point: native and storebench ops/s, their ratio and whether it
meets the target (``--target``, 0.8), the client CPU per request of each
(the native tool's from its rusage, storebench's from its record), and the
CPU cores each tool's clients and the server used while it inserted, and
how busy the machine's cores were then (other processes too): the server's
and the machine's from their CPU times over the tool's run, or over
storebench's insert task as its progress reports show it (to 0.1 s: use a
larger ``--count`` where a point runs for well under a second). A note
marks a storebench client that is CPU-saturated (its record's
``client_saturated``: at 90% of its ceiling, one interpreter for threads,
min(clients, cores) for processes) and a machine whose cores were 90% busy
while storebench inserted (its client, the server, and any other process):
there the client's CPU per request, not the engine, sets the rate, and a
client on other cores would go faster.

    python benchmarks/ingest_native.py [--count 20000] [--clients 1,8]
        [--pipeline 1,16] [--engines redis,postgres] [--executor auto]
        [--client python|native|auto] [--repeat 1] [--target 0.8]

``--client native`` times storebench's ingest with the native loop
(``driver/native.py``: the same requests, prepared before the clock, sent
by the compiled ``storebench_fastclient`` with the GIL released).

``--repeat R`` measures each point R times, alternating which tool goes
first, and keeps each tool's best (for a shared, noisy machine).

Needs ``redis-benchmark`` (Debian: ``apt-get install redis-tools``; it speaks
to our Redis 8) and ``pgbench`` (postgresql-client) on PATH, and the redis and
pgvector extras. redis-benchmark takes the managed server's random password
on its command line only (it reads no environment variable): the server binds
127.0.0.1 and lives only as long as this script.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psutil

from storebench.api import run
from storebench.driver.core import cpu_count
from storebench.run.progress import NoProgress
from storebench.stores.base import StoreSpec
from storebench.workloads.ingest import IngestParams, make_schema

VALUE = "some test value"
COMPLEXITY = 10
FIELDS = [f"test{j + 1}" for j in range(COMPLEXITY)]
KEYSPACE = 10**11  # redis-benchmark's __rand_int__ range: nearly every key new
BUSY = 0.9  # of the machine's cores: client and server used them all


@dataclass
class Side:
    """One tool's run of one point. CPU figures are cores (CPU seconds per
    second) over the tool's timed window."""

    ops_per_s: float
    requests: int
    client_cpu_s: float
    client_cores: float
    server_cores: float
    machine_busy: float  # of all the machine's cores, whoever used them
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def client_us(self) -> float:
        return self.client_cpu_s / self.requests * 1e6


@dataclass
class Window:
    """The server's and the whole machine's CPU between two instants."""

    server: Any
    t: float = 0.0
    srv: float = 0.0
    busy: float = 0.0
    total: float = 0.0

    def start(self) -> Window:
        self.t, self.srv = time.perf_counter(), server_cpu(self.server)
        self.busy, self.total = machine_cpu()
        return self

    def stop(self) -> tuple[float, float, float]:
        """(seconds, server cores, machine busy fraction) since ``start``."""
        wall = time.perf_counter() - self.t
        busy, total = machine_cpu()
        return (
            wall,
            (server_cpu(self.server) - self.srv) / wall if wall > 0 else 0.0,
            (busy - self.busy) / (total - self.total) if total > self.total else 0.0,
        )


def server_cpu(server: Any) -> float:
    """CPU seconds the server's processes used so far, including children
    that ended (PostgreSQL's backends of closed connections)."""
    procs = server.processes()
    total = 0.0
    for k, p in enumerate(procs):
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
            if k == 0:  # the root reaped them: their time is its children's
                total += t.children_user + t.children_system
    return total


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of all cores so far."""
    t = psutil.cpu_times()
    total = sum(t)
    return total - t.idle - getattr(t, "iowait", 0.0), total


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class _Bar:
    """The insert task's progress bar, standing in to mark its measured
    window: from the first progress report with an operation done (the
    driver reports every 0.1 s) to the bar's close (all clients' results
    in, before process clients are reaped)."""

    def __init__(self, window: Window):
        self.window = window
        self.started = False
        self.measured: tuple[float, float, float] | None = None

    def update(self, done: int) -> None:
        if done and not self.started:
            self.started = True
            self.window.start()

    def close(self) -> None:
        if self.started:
            self.measured = self.window.stop()


class _Marks(NoProgress):
    def __init__(self, window: Window):
        self.bar = _Bar(window)

    def task(
        self,
        name: str,
        total: int | None = None,
        duration_s: float | None = None,
        starting: str | None = None,
    ) -> Any:
        return self.bar if name == "insert" else super().task(name, total, duration_s, starting)


def storebench_side(
    engine: str, server: Any, count: int, clients: int, pipeline: int, executor: str, client: str
) -> Side:
    """The insert task of one ``ingest`` run: requests/s and client CPU from
    its record; the server's and the machine's CPU over its measured window."""
    from storebench.run import progress  # the module (storebench.run is the API's function)

    marks = _Marks(Window(server))

    def make_progress(enabled: bool | None = None) -> NoProgress:  # where run() gets its bar
        return marks

    real = progress.make_progress
    progress.make_progress = make_progress
    try:
        with tempfile.TemporaryDirectory(prefix="storebench-ingest-native-") as tmp:
            (rec,) = run(
                "ingest",
                [f"{engine}={server.url}"],
                {
                    "count": count,
                    "concurrency": clients,
                    "batch_size": 1,
                    "pipeline": pipeline,
                    "complexity": COMPLEXITY,
                    "executor": executor,
                    "client": client,
                    "grid": {},
                },
                results_dir=tmp,
            )
    finally:
        progress.make_progress = real
    if rec["status"] != "ok":
        raise RuntimeError(f"storebench {engine}: {rec['status']}: {rec['error']}")
    t = next(t for t in rec["tasks"] if t["name"] == "insert")
    cpu = float(t["client_cpu_s"])
    _, srv, busy = marks.bar.measured or (0.0, 0.0, 0.0)
    return Side(
        float(t["requests_per_s"]),
        int(t["requests"]),
        cpu,
        cpu / float(t["elapsed_s"]),
        srv,
        busy,
        {k: t.get(k) for k in ("executor", "client", "client_saturated", "client_cpu_ceiling")},
    )


def native_collection(engine: str, url: str) -> tuple[Any, Any]:
    """A fresh collection of ingest's shape, made by our own store."""
    store = StoreSpec(engine, url).open()
    schema = make_schema(IngestParams.model_validate({"complexity": COMPLEXITY}))
    return store, store.create_collection(f"sb_native_{uuid.uuid4().hex[:8]}", schema)


def timed_tool(
    cmd: list[str], server: Any, env: dict[str, str] | None = None
) -> tuple[str, float, tuple[float, float, float]]:
    """Runs a tool: (stdout, its CPU seconds, (seconds, server cores,
    machine busy) over its run)."""
    cpu0, window = children_cpu(), Window(server).start()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    return out, children_cpu() - cpu0, window.stop()


def redis_native(server: Any, count: int, clients: int, pipeline: int) -> tuple[Side, int]:
    """redis-benchmark's requests/s for our HSET, and the documents held after."""
    store, coll = native_collection("redis", server.url)
    try:
        parts = urlsplit(server.url)
        fields = [x for f in FIELDS for x in (f, VALUE)]
        cmd = [
            "redis-benchmark",
            "-h",
            parts.hostname or "127.0.0.1",
            "-p",
            str(parts.port),
            "-a",
            unquote(parts.password or ""),
            "-c",
            str(clients),
            "-n",
            str(count),
            "-P",
            str(pipeline),
            "-r",
            str(KEYSPACE),
            "--csv",
            "HSET",
            f"{coll.name}:__rand_int__",
            "_id",
            "__rand_int__",
            *fields,
        ]
        out, cpu, (wall, srv, busy) = timed_tool(cmd, server)
        rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0] != "test"]
        if not rows:
            raise RuntimeError(f"redis-benchmark printed no result: {out!r}")
        rps = float(rows[-1][1])
        return Side(rps, count, cpu, cpu / wall, srv, busy), coll.count()
    finally:
        coll.drop()
        store.close()


def pgbench_script(table: str, clients: int, pipeline: int) -> str:
    """P INSERTs per transaction; client c's m-th transaction inserts ids
    (m*C + c)*P + k, as storebench's lane c's m-th operation does."""
    cols = ", ".join(["id", *(f'"{f}"' for f in FIELDS)])
    sets = ", ".join(f'"{f}" = EXCLUDED."{f}"' for f in FIELDS)
    values = ", ".join(":v" for _ in FIELDS)
    lines = [
        f"\\set id{k} (:n * {clients} + :client_id) * {pipeline} + {k}" for k in range(pipeline)
    ]
    lines.append("\\set n :n + 1")  # per client, kept across its transactions
    if pipeline > 1:
        lines.append("\\startpipeline")
    for k in range(pipeline):
        lines.append(
            f'INSERT INTO "{table}" ({cols}) VALUES (:id{k}, {values}) '
            f"ON CONFLICT (id) DO UPDATE SET {sets};"
        )
    if pipeline > 1:
        lines.append("\\endpipeline")
    return "\n".join(lines) + "\n"


def pgbench_native(server: Any, count: int, clients: int, pipeline: int) -> tuple[Side, int]:
    """pgbench's statements/s (transactions/s x pipeline), and the rows after."""
    store, coll = native_collection("pgvector", server.url)
    try:
        parts = urlsplit(server.url)
        per_client = max(1, count // (clients * pipeline))
        with tempfile.TemporaryDirectory(prefix="storebench-pgbench-") as tmp:
            script = Path(tmp, "insert.sql")
            script.write_text(pgbench_script(coll.name, clients, pipeline))
            cmd = [
                "pgbench",
                "-n",  # no vacuum of pgbench's own tables (there are none)
                "-M",
                "prepared",
                "-h",
                parts.hostname or "127.0.0.1",
                "-p",
                str(parts.port),
                "-U",
                unquote(parts.username or ""),
                "-c",
                str(clients),
                "-j",
                str(clients),
                "-t",
                str(per_client),
                "-D",
                f"v={VALUE}",
                "-D",
                "n=0",
                "-f",
                str(script),
                parts.path.lstrip("/") or "postgres",
            ]
            # the password by environment, not on the command line
            env = dict(os.environ, PGPASSWORD=unquote(parts.password or ""))
            out, cpu, (wall, srv, busy) = timed_tool(cmd, server, env)
        m = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", out, re.M)
        if not m:
            raise RuntimeError(f"pgbench printed no tps: {out!r}")
        sent = per_client * clients * pipeline
        rps = float(m.group(1)) * pipeline
        return Side(rps, sent, cpu, cpu / wall, srv, busy), coll.count()
    finally:
        coll.drop()
        store.close()


ENGINES: dict[str, tuple[str, str, Callable[[Any, int, int, int], tuple[Side, int]]]] = {
    # name: (storebench store, native tool, runner)
    "redis": ("redis", "redis-benchmark", redis_native),
    "postgres": ("pgvector", "pgbench", pgbench_native),
}


def start(engine: str) -> Any:
    if engine == "redis":
        from storebench.servers.redis import RedisServer

        return RedisServer().start()
    from storebench.servers.postgres import PostgresServer

    return PostgresServer().start()


def note(ours: Side, cores: int) -> str:
    """Where storebench's client CPU is the bound, say so."""
    marks = []
    if ours.extra.get("client_saturated"):
        ceiling = ours.extra.get("client_cpu_ceiling")
        marks.append(f"client saturated ({ours.client_cores:.2f} of {ceiling:g} cores)")
    if ours.machine_busy >= BUSY:
        others = max(0.0, ours.machine_busy * cores - ours.client_cores - ours.server_cores)
        marks.append(
            f"{cores} cores busy: client {ours.client_cores:.2f}"
            f" + server {ours.server_cores:.2f} + others {others:.2f}"
        )
    return "; ".join(marks)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--count", type=int, default=20_000, help="documents per run")
    ap.add_argument("--clients", default="1,8", help="client counts, comma-separated")
    ap.add_argument("--pipeline", default="1,16", help="pipeline depths, comma-separated")
    ap.add_argument("--engines", default="redis,postgres", help=f"of {', '.join(ENGINES)}")
    ap.add_argument(
        "--executor",
        default="auto",
        choices=["auto", "threads", "processes"],
        help="storebench's clients (ingest's auto: threads)",
    )
    ap.add_argument(
        "--client",
        default="auto",
        choices=["python", "native", "auto"],
        help="storebench's client (its default, auto: the native timed loop where it is built)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per point; each tool's best kept")
    ap.add_argument("--target", type=float, default=0.8, help="storebench / native to reach")
    a = ap.parse_args(argv)
    clients = [int(x) for x in a.clients.split(",")]
    pipelines = [int(x) for x in a.pipeline.split(",")]
    engines = a.engines.split(",")
    for e in engines:
        if e not in ENGINES:
            ap.error(f"unknown engine {e!r}")
        if shutil.which(ENGINES[e][1]) is None:
            print(f"{ENGINES[e][1]} is not on PATH (see this script's docstring)", file=sys.stderr)
            return 1
    cores = cpu_count()
    rows: list[tuple[str, int, int, Side, Side]] = []
    problems: list[str] = []
    t0 = time.monotonic()
    for e in engines:
        store_engine, tool, native = ENGINES[e]
        server = start(e)
        try:
            for c in clients:
                for p in pipelines:
                    best: dict[str, Side] = {}
                    for r in range(a.repeat):
                        for side in ("native", "storebench")[:: 1 if r % 2 == 0 else -1]:
                            if side == "native":
                                got, held = native(server, a.count, c, p)
                                if held < 0.99 * got.requests:  # random keys collide, rarely
                                    problems.append(
                                        f"{e} c={c} P={p}: {tool} sent {got.requests},"
                                        f" engine holds {held}"
                                    )
                            else:
                                got = storebench_side(
                                    store_engine, server, a.count, c, p, a.executor, a.client
                                )
                            if side not in best or got.ops_per_s > best[side].ops_per_s:
                                best[side] = got
                    nat, ours = best["native"], best["storebench"]
                    rows.append((e, c, p, nat, ours))
                    print(
                        f"  {e} clients={c} pipeline={p}: {tool} {nat.ops_per_s:,.0f}/s,"
                        f" storebench {ours.ops_per_s:,.0f}/s ({ours.extra['executor']},"
                        f" {ours.extra['client']})",
                        file=sys.stderr,
                    )
        finally:
            server.stop()
    load = os.getloadavg()[0]
    print(
        f"ingest, {a.count} documents of {COMPLEXITY} strings, batch 1, client {a.client},"
        f" {cores} cores,"
        f" load {load:.1f}, best of {a.repeat}, {time.monotonic() - t0:.0f} s"
    )
    head = (
        f"{'engine':<9} {'clients':>7} {'pipeline':>8} {'native ops/s':>13}"
        f" {'storebench ops/s':>17} {'ratio':>6} {f'>={a.target:g}':>6}"
        f" {'client us/req':>15} {'client+server cores':>25} {'busy':>9}  note"
    )
    print(head)
    met = 0
    for e, c, p, nat, ours in rows:
        ratio = ours.ops_per_s / nat.ops_per_s
        met += ratio >= a.target
        print(
            f"{e:<9} {c:>7} {p:>8} {nat.ops_per_s:>13,.0f} {ours.ops_per_s:>17,.0f}"
            f" {ratio:>6.2f} {'yes' if ratio >= a.target else 'NO':>6}"
            f" {nat.client_us:>6.1f} / {ours.client_us:>6.1f}"
            f"  {nat.client_cores:.2f}+{nat.server_cores:.2f} / {ours.client_cores:.2f}+"
            f"{ours.server_cores:.2f}"
            f" {nat.machine_busy:>4.0%}/{ours.machine_busy:<4.0%}  {note(ours, cores)}"
        )
    print(
        f"target met at {met} of {len(rows)} points. native: redis-benchmark (the HSET our"
        " store sends) / pgbench (our prepared INSERT .. ON CONFLICT, the same ids)."
    )
    print(
        "Pairs are native / storebench. client us/req: the clients' CPU per request;"
        " client+server cores: CPU seconds per second of the clients and of the server while"
        f" each inserted; busy: of the machine's {cores} cores, whoever used them (other"
        " processes too). Where the client is saturated or the cores are busy, the client's"
        " CPU per request, not the engine, sets the rate: a Python client and the server"
        " compete for the same cores."
    )
    for msg in problems:
        print(f"count check: {msg}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
