"""Fault campaign: SIGINT and SIGTERM at seeded random instants of a run.

Each trial runs the real command line (``storebench -v run crud``, small n,
4 clients) in a subprocess with a private TMPDIR, and sends a signal at a
random instant of one phase of the run: plan, server start (the store's
open: a managed server for redis and pgvector), upload (the create task and
the index build), client start-up, measuring, cleanup. The instant is an
anchor (a ``-v`` log line, or the process start for the plan) plus a seeded
random delay within the phase's usual length; the phase the signal really
landed in is read from the log lines seen before it. A quarter of the
trials send a second signal (any of the two) up to a second later. Checks:

- the process ends within 30 s of the first signal (else: a hang; it is
  killed);
- its exit status is 128 + a signal it got (130, 143), or death by that
  signal when it came before Python could handle it, or 0 when it came
  after the work was done (the record is then ``ok``);
- the record: when the run had begun (its ``run <id>:`` line), exactly one
  valid JSON line for that run, status ``interrupted`` (``ok`` if the
  signal came during the clean-up of a finished run); none otherwise;
- nothing left behind: no process storebench started (its descendants are
  polled while it runs, and any process naming the trial's TMPDIR), nothing
  in the TMPDIR (managed servers' data directories, the run's files), no
  multiprocessing semaphore (``/dev/shm/sem.mp-*``) made during the trial
  that no process holds.

It prints trials, hangs, lost records, leftover processes, directories and
semaphores, and the worst time from the first signal to the exit.

    python benchmarks/fault_campaign.py [--trials 120] [--seed 1] [--ray 8]
        [--combos memory/threads,sqlite/processes,...] [--phases plan,cleanup,...]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PHASES = ("plan", "server start", "upload", "client start-up", "measuring", "cleanup")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_BOUND_S = 30.0  # from the first signal to the process's end
SETTLE_S = 10.0  # after the exit: how long what it started may take to go
MEASURED = ("read", "update", "delete", "find_by_condition", "find_by_vector")
# how long the store's open takes, roughly (the server-start window)
OPEN_S = {"memory": 0.05, "sqlite": 0.1, "redis": 0.3, "pgvector": 0.8}
# how long the clean-up after the last task takes (a managed server stops)
CLEANUP_S = {"memory": 0.02, "sqlite": 0.03, "redis": 0.1, "pgvector": 0.15}
# from the process's start to its first log line (imports, the plan): the
# shortest seen so far, per store
PLAN_S: dict[str, float] = {}
# client start-up: threads start at once, processes import storebench
STARTUP_S = {"threads": 0.03, "processes": 2.0, "ray": 4.0}

ALL_COMBOS = (
    "memory/threads",
    "sqlite/threads",
    "sqlite/processes",
    "redis/threads",
    "redis/processes",
    "pgvector/threads",
    "pgvector/processes",
)
CHEAP_COMBOS = ("memory/threads", "sqlite/threads", "sqlite/processes", "redis/threads")


def storebench_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("storebench")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "storebench"]


@dataclass(frozen=True)
class Plan:
    """One trial: where, which phase, which signals, and the seeded draws."""

    combo: str
    phase: str
    sig: signal.Signals
    second: signal.Signals | None
    second_after_s: float
    task: str  # the measured task whose start-up or measuring is hit
    fraction: float  # where in the phase's window

    @property
    def store(self) -> str:
        return self.combo.split("/")[0]

    @property
    def executor(self) -> str:
        return self.combo.split("/")[1]

    def anchor(self) -> tuple[re.Pattern[str] | None, float]:
        """The log line the instant is measured from, and the window after it."""
        t = re.escape(self.task)
        if self.phase == "plan":
            return None, 0.9 * PLAN_S.get(self.store, 0.3)
        if self.phase == "server start":
            return re.compile(r"run \S+: crud on"), OPEN_S[self.store]
        if self.phase == "upload":
            return re.compile(r"task create: .* as "), 0.4
        if self.phase == "client start-up":
            return re.compile(rf"task {t}: .* as "), STARTUP_S[self.executor]
        if self.phase == "measuring":
            if self.executor == "ray":  # its clients log in their own processes
                return re.compile(rf"task {t}: .* as "), STARTUP_S["ray"] + 1.0
            return re.compile(rf"task {t}: measuring"), 0.2
        return re.compile(r"run \S+: ok; cleaning up"), CLEANUP_S[self.store]


def schedule(
    trials: int, seed: int, combos: tuple[str, ...], phases: tuple[str, ...] = PHASES
) -> list[Plan]:
    """Every (combo, phase, signal) in a seeded order, again and again."""
    rng = random.Random(seed)
    product = list(itertools.product(combos, phases, SIGNALS))
    plans: list[Plan] = []
    while len(plans) < trials:
        rng.shuffle(product)
        for combo, phase, sig in product[: trials - len(plans)]:
            second = rng.choice(SIGNALS) if rng.random() < 0.25 else None
            plans.append(
                Plan(
                    combo,
                    phase,
                    sig,
                    second,
                    rng.uniform(0.0, 1.0),
                    rng.choice(MEASURED),
                    rng.random(),
                )
            )
    return plans


class Live:
    """A storebench run in a subprocess: its stderr lines with their arrival
    times, and every process it started (polled while it runs)."""

    def __init__(self, cmd: list[str], env: dict[str, str]):
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a hang is killed with its group
        )
        self.lines: list[tuple[float, str]] = []
        self.cond = threading.Condition()
        self.eof = False
        self.seen: dict[int, tuple[float, str]] = {}  # pid -> (create time, name)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._poll, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self.cond:
                self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip()))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def _poll(self) -> None:
        try:
            me = psutil.Process(self.proc.pid)
        except psutil.Error:
            return
        while self.proc.poll() is None:
            try:
                for p in me.children(recursive=True):
                    if p.pid not in self.seen:
                        self.seen[p.pid] = (p.create_time(), p.name())
            except psutil.Error:
                pass
            time.sleep(0.05)

    def wait_line(self, pattern: re.Pattern[str], timeout: float) -> float | None:
        """When a storebench line matching ``pattern`` came (None: never)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, text in self.lines:
                    if text.startswith("storebench: ") and pattern.search(text):
                        return t
                left = deadline - time.monotonic()
                if self.eof or left <= 0:
                    return None
                self.cond.wait(min(left, 0.5))

    def storebench_lines(self) -> list[str]:
        with self.cond:
            return [text for _, text in self.lines if text.startswith("storebench: ")]


def landed_in(lines: list[str]) -> str:
    """The phase a signal sent after these log lines arrived in."""
    for text in reversed(lines):
        if "cleaning up" in text:
            return "cleanup"
        if re.search(r"task create: |phase build_index", text):
            return "upload"
        if re.search(r"task \S+: measuring", text):
            return "measuring"
        if re.search(r"task \S+: .* as ", text):
            return "client start-up"
        if re.search(r"run \S+: crud on", text):
            return "server start"
    return "plan"


@dataclass
class Outcome:
    plan: Plan
    landed: str = ""
    signalled: bool = False
    exit_s: float = 0.0
    status: int | None = None
    failures: list[str] = field(default_factory=list)


def trial(plan: Plan, workdir: Path, n: int = 3000, ops: int = 5000) -> Outcome:
    out = Outcome(plan)
    shm_before = _semaphores()
    tmp, res = workdir / "t", workdir / "results"  # short: a local Ray's sockets live under TMPDIR
    tmp.mkdir(parents=True)
    tmp.chmod(0o1777)  # like /tmp: a server running as an unprivileged user makes its
    for d in (workdir, workdir.parent):  # directory in it
        d.chmod(0o755)
    env = {**os.environ, "TMPDIR": str(tmp), "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [
        *storebench_cmd(),
        "-v",
        "run",
        "crud",
        "--store",
        plan.store,
        "--set",
        f"n={n}",
        "--set",
        f"ops={ops}",
        "--set",
        "clients=4",
        "--set",
        "grid={}",
        "--set",
        f"driver.executor={plan.executor}",
        "--results",
        str(res),
    ]
    live = Live(cmd, env)
    pattern, window = plan.anchor()
    base = live.t0 if pattern is None else live.wait_line(pattern, timeout=180)
    if base is not None:
        time.sleep(max(0.0, base + plan.fraction * window - time.monotonic()))
    if base is None or live.proc.poll() is not None:  # ended before the instant
        out.status = live.proc.wait(60)
        if out.status != 0:  # a run that fails by itself tests nothing here
            lines = live.storebench_lines()
            out.failures.append(f"run failed unsignalled: {lines[-1] if lines else ''}")
        _clean(live, tmp)
        return out
    out.landed = landed_in(live.storebench_lines())
    first = live.wait_line(re.compile(r"run \S+: crud on"), timeout=0)
    if first is not None:
        PLAN_S[plan.store] = min(PLAN_S.get(plan.store, 9.9), first - live.t0)
    live.proc.send_signal(plan.sig)
    sent = [plan.sig]
    t_sig = time.monotonic()
    out.signalled = True
    if plan.second is not None:
        time.sleep(plan.second_after_s)
        if live.proc.poll() is None:
            live.proc.send_signal(plan.second)
            sent.append(plan.second)
    try:
        live.proc.wait(max(0.0, t_sig + EXIT_BOUND_S - time.monotonic()))
    except subprocess.TimeoutExpired:
        out.failures.append("hang")
        os.killpg(live.proc.pid, signal.SIGKILL)
        live.proc.wait(30)
    out.exit_s = time.monotonic() - t_sig
    out.status = live.proc.returncode
    with live.cond:  # the last lines
        live.cond.wait_for(lambda: live.eof, timeout=10)
    problems, finished = _check_record(res, live.storebench_lines())
    out.failures += problems
    ok_status = {128 + s for s in sent} | {-s for s in sent}
    if finished:  # the signal came after the work: exiting anyway
        ok_status.add(0)
    if out.status not in ok_status:
        out.failures.append(f"exit status {out.status}")
    out.failures += _leftovers(live, tmp, shm_before)
    _clean(live, tmp)
    return out


def _check_record(res: Path, lines: list[str]) -> tuple[list[str], bool]:
    """What is wrong with the results file, and whether the run had
    finished measuring (its record ``ok``)."""
    began = [m.group(1) for t in lines if (m := re.search(r"run (\S+): crud on", t))]
    path = res / "crud.jsonl"
    raw = path.read_text().splitlines() if path.exists() else []
    records = []
    for line in raw:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            return ["invalid record"], False
    if not began:
        return (["record without a run"] if records else []), False
    if len(records) != 1:
        return ["lost record" if not records else f"{len(records)} records"], False
    (rec,) = records
    if rec.get("run_id") != began[0] or not isinstance(rec.get("tasks", []), list):
        return ["record of another run"], False
    if rec["status"] == "interrupted":
        return [], False
    cleaned = any(f"run {began[0]}: ok; cleaning up" in t for t in lines)
    if rec["status"] == "ok" and cleaned:
        return [], True  # the signal came after the measuring
    return [f"record status {rec['status']}: {rec.get('error')}"], False


def _semaphores() -> dict[str, int]:
    """multiprocessing's named semaphores in /dev/shm, by inode."""
    out = {}
    for e in os.scandir("/dev/shm"):
        if e.name.startswith("sem.mp-"):
            with contextlib.suppress(OSError):
                out[e.name] = e.inode()
    return out


def _held_shm_inodes() -> set[int]:
    """The inodes of /dev/shm files any live process maps (glibc's sem_open
    maps a temporary name, so by inode)."""
    held: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
            held.update(int(line.split(None, 5)[4]) for line in f if " /dev/shm/" in line)
    return held


def _leftovers(live: Live, tmp: Path, shm_before: dict[str, int]) -> list[str]:
    deadline = time.monotonic() + SETTLE_S
    while True:
        alive = []
        for pid, (created, name) in live.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{name}[{pid}]")
            except psutil.Error:
                pass
        for p in psutil.process_iter(["pid", "cmdline"]):
            if str(tmp) in " ".join(p.info["cmdline"] or []):
                alive.append(f"{p.info['cmdline'][0]}[{p.info['pid']}]")
        files = sorted(x.name for x in tmp.iterdir()) if tmp.exists() else []
        new = {n: i for n, i in _semaphores().items() if n not in shm_before}
        held = _held_shm_inodes() if new else set()
        sems = sorted(n for n, i in new.items() if i not in held)
        if (not alive and not files and not sems) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    found = []
    if alive:
        found.append("leftover processes: " + ", ".join(sorted(set(alive))))
    if files:
        inside = sorted(str(f.relative_to(tmp)) for f in tmp.rglob("*"))
        more = f" ({', '.join(inside[:8])}{', ...' if len(inside) > 8 else ''})"
        found.append("leftover files: " + ", ".join(files) + more)
    if sems:
        found.append("leftover semaphores: " + ", ".join(sems))
        for n in sems:  # made during the trial, held by nothing: its own
            with contextlib.suppress(OSError):
                os.unlink(f"/dev/shm/{n}")
    return found


def _clean(live: Live, tmp: Path) -> None:
    """After the checks: whatever a failed trial left goes (it was ours)."""
    for pid, (created, _name) in live.seen.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == created:
                p.kill()
        except psutil.Error:
            pass
    shutil.rmtree(tmp, ignore_errors=True)


def campaign(plans: list[Plan], say=print) -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="fc-", dir="/tmp") as root:
        for i, plan in enumerate(plans):
            o = trial(plan, Path(root) / str(i))
            outcomes.append(o)
            second = f" then {plan.second.name}" if plan.second else ""
            what = (
                f"{o.landed:15} exit {o.status} after {o.exit_s:5.2f} s"
                if o.signalled
                else "ended before the instant"
            )
            verdict = "; ".join(o.failures) or "ok"
            say(
                f"{i + 1:3} {plan.combo:19} {plan.phase:15} {plan.sig.name}{second:14} -> {what}: {verdict}"
            )
    return outcomes


def summary(outcomes: list[Outcome]) -> dict[str, object]:
    signalled = [o for o in outcomes if o.signalled]

    def count(prefix: str) -> int:
        return sum(any(f.startswith(prefix) for f in o.failures) for o in signalled)

    return {
        "trials": len(signalled),
        "ended before the instant": len(outcomes) - len(signalled),
        "hangs": count("hang"),
        "lost records": count("lost record"),
        "bad records": count("invalid record") + count("record ") + count("2 records"),
        "bad exit status": count("exit status"),
        "runs failed unsignalled": sum(
            any(f.startswith("run failed") for f in o.failures) for o in outcomes
        ),
        "leftover processes": count("leftover processes"),
        "leftover files": count("leftover files"),
        "leftover semaphores": count("leftover semaphores"),
        "worst time to exit s": round(max((o.exit_s for o in signalled), default=0.0), 2),
        "landed in": {p: sum(o.landed == p for o in signalled) for p in PHASES},
        "second signals": sum(o.plan.second is not None for o in signalled),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--combos", default=",".join(ALL_COMBOS))
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--ray", type=int, default=0, help="extra trials on sqlite/ray")
    args = ap.parse_args()
    phases = tuple(args.phases.split(","))
    plans = schedule(args.trials, args.seed, tuple(args.combos.split(",")), phases)
    if args.ray:
        plans += schedule(args.ray, args.seed + 1, ("sqlite/ray",), phases)
    t0 = time.monotonic()
    outcomes = campaign(plans)
    s = summary(outcomes)
    print(f"\nfault campaign, seed {args.seed}, {time.monotonic() - t0:.0f} s")
    for k, v in s.items():
        print(f"  {k}: {v}")
    print("  load:", os.getloadavg())
    failed = [o for o in outcomes if o.failures]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
