"""Probe campaign: about 100 things a hostile or careless user does, through
the real command line, each in a private directory (its own TMPDIR, data
directory and results).

The probes: bad scenario files (invalid YAML, repeated keys, an alias bomb,
not UTF-8, a directory), unknown stores and scenarios, out-of-range and huge
numbers, path traversal in names, unwritable and full outputs, torn and
corrupt results files, corrupt dataset files, odd command lines, signals at
random instants (``fault_campaign.py``'s trials), a run of 2,000 client
threads stopped by SIGTERM, a managed server killed mid-run. Checks, for
each:

- the exit status: 2 for a user error, else what the probe expects;
- a user error is one line (``storebench: error: ...``, or click's
  ``Error: ...`` under its usage lines) naming what was wrong and where;
- no traceback, no ``Aborted!``;
- a run cut short keeps its record, marked (``interrupted``, ``failed``);
- nothing left behind: no process storebench started, nothing in the
  probe's TMPDIR (``fault_campaign.py``'s checks).

It prints each probe's verdict, then probes, passed, failed (by name), the
worst time from a signal to the exit and the slowest refusal.

    nice -n 5 python benchmarks/probes.py [--only NAME,...] [--signals 10] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fault_campaign as fc  # noqa: E402

RUN = ["run", "crud", "--store", "memory", "--set", "n=200", "--set", "ops=20"]
RUN += ["--set", "grid={}", "--results", "{d}/res"]
TIMEOUT_S = 120.0  # a probe still running after this hangs (it is killed)
SIGNAL_EXIT_S = 10.0  # the bound from a first signal to the exit
CLICK_USAGE = ("Usage: ", "Try '")


@dataclass
class Probe:
    name: str
    argv: list[str]  # after ``storebench``; ``{d}`` is the probe's directory
    status: tuple[int, ...] = (2,)
    needle: str = ""  # a user error's line names it (case-insensitive)
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    # while it runs: what to do to it (send a signal, kill its server);
    # returns when it acted (monotonic) or None
    act: Callable[[fc.Live, Path], float | None] | None = None
    check: Callable[[Path, str], list[str]] | None = None  # more checks: dir, stderr
    trial: fc.Plan | None = None  # a fault campaign trial, run as that campaign does


@dataclass
class Result:
    probe: str
    status: int | None = None
    wall_s: float = 0.0
    exit_s: float | None = None  # from the signal (or kill) to the exit
    failures: list[str] = field(default_factory=list)


# --- files the probes start from ---------------------------------------------


def write(rel: str, data: str | bytes) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)

    return setup


def scenario(body: str) -> Callable[[Path], None]:
    return write("s.yaml", body)


GOOD = "name: s\nworkload: crud\nstores: [memory]\nparams:\n  n: 200\n  ops: 20\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)
RECORD = None  # one real record, made once (``real_record``)


def real_record(root: Path) -> str:
    global RECORD
    if RECORD is None:
        out = root / "record"
        out.mkdir(exist_ok=True)
        subprocess.run(
            [*fc.storebench_cmd(), "-q", *(a.replace("{d}", str(out)) for a in RUN)],
            check=True,
            capture_output=True,
        )
        RECORD = (out / "res" / "crud.jsonl").read_text().splitlines()[0]
    return RECORD


def results(*lines: str | bytes, torn: str = "") -> Callable[[Path], None]:
    """res/crud.jsonl with the real record for each "R", the given lines
    else, and a torn tail."""

    def setup(d: Path) -> None:
        parts = [
            (real_record(d.parent) if x == "R" else x).encode() if isinstance(x, str) else x
            for x in lines
        ]
        body = b"".join(p + b"\n" for p in parts) + torn.encode()
        write("res/crud.jsonl", body)(d)

    return setup


def dataset(corrupt: str) -> Callable[[Path], None]:
    """A small dataset ``ds`` in the probe's data directory, one of its
    files then damaged: ``corrupt`` names it (truncated to half)."""

    def setup(d: Path) -> None:
        subprocess.run(
            [*fc.storebench_cmd(), "-q", "dataset", "make", "--name", "ds", "-n", "500"]
            + ["--dim", "8", "--queries", "20"],
            check=True,
            capture_output=True,
            env={**os.environ, "STOREBENCH_DATA": str(d / "data")},
        )
        p = d / "data" / "ds" / corrupt
        if corrupt == "meta.json":
            p.write_text("{not json")
        else:
            p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])

    return setup


# --- what is done to a running probe ----------------------------------------


def signal_when(pattern: str, sig: signal.Signals, second: bool = False, delay: float = 0.3):
    def act(live: fc.Live, d: Path) -> float | None:
        if live.wait_line(re.compile(pattern), timeout=TIMEOUT_S) is None:
            return None
        time.sleep(delay)
        t = time.monotonic()
        live.proc.send_signal(sig)
        if second:
            time.sleep(0.5)
            if live.proc.poll() is None:
                live.proc.send_signal(sig)
        return t

    return act


def signal_at_start(after_s: float, sig: signal.Signals):
    def act(live: fc.Live, d: Path) -> float | None:
        time.sleep(after_s)
        live.proc.send_signal(sig)
        return time.monotonic()

    return act


def kill_server(live: fc.Live, d: Path) -> float | None:
    """SIGKILL the managed server storebench started, while it measures."""
    if live.wait_line(re.compile(r"task read: measuring"), timeout=TIMEOUT_S) is None:
        return None
    for p in psutil.Process(live.proc.pid).children(recursive=True):
        if "server" in p.name():
            p.kill()
            return time.monotonic()
    return None


# --- checks -------------------------------------------------------------------


def record_status(*want: str, results_file: str = "res/crud.jsonl"):
    """Every line of the results file is a record; the last one's status is
    in ``want`` (a run cut short keeps its record, marked)."""

    def check(d: Path, err: str) -> list[str]:
        path = d / results_file
        if not path.exists():
            return ["no results file"]
        lines = path.read_bytes().splitlines()
        try:
            recs = [json.loads(x) for x in lines]
        except ValueError:
            return ["a line of the results file is not a record"]
        if not recs or recs[-1].get("status") not in want:
            return [f"last record {recs[-1].get('status') if recs else None}, not {want}"]
        return []

    return check


def then(argv: list[str], status: int = 0, needle: str = ""):
    """After the probe: another command on what it left works (exit
    ``status``, ``needle`` in its stderr)."""

    def check(d: Path, err: str) -> list[str]:
        r = subprocess.run(
            [*fc.storebench_cmd(), *(a.replace("{d}", str(d)) for a in argv)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        bad = []
        if r.returncode != status:
            bad.append(f"then {argv[0]}: exit {r.returncode}: {r.stderr.strip()[-200:]}")
        if needle.lower() not in r.stderr.lower():
            bad.append(f"then {argv[0]}: no {needle!r} in {r.stderr.strip()[-200:]!r}")
        if "Traceback" in r.stderr:
            bad.append(f"then {argv[0]}: traceback")
        return bad

    return check


def named(needle: str):
    return lambda d, err: [] if needle in err else [f"stderr does not name {needle}"]


def both(*checks):
    return lambda d, err: [f for c in checks for f in c(d, err)]


# --- the probes -----------------------------------------------------------------


def err(name: str, argv: list[str], needle: str, **kw) -> Probe:
    return Probe(name, argv, (2,), needle, **kw)


def run_set(name: str, assignment: str, needle: str, **kw) -> Probe:
    """``run crud`` with one more ``--set``, refused."""
    return err(name, [*RUN, "--set", assignment], needle, **kw)


def probes(signal_trials: int, seed: int) -> list[Probe]:
    S = ["run", "{d}/s.yaml", "--results", "{d}/res"]
    SEARCH_DS = ["run", "search", "--store", "memory", "--set", "dataset=ds"]
    SEARCH_DS += ["--set", "grid={}", "--set", "repeats=1", "--results", "{d}/res"]
    long_name = "x" * 300
    ps = [
        # the command line
        err("unknown command", ["frob"], "frob"),
        err("unknown option", ["run", "crud", "--frob"], "--frob"),
        err("unknown scenario", ["run", "nosuch", "--store", "memory"], "nosuch"),
        err("unknown store", ["run", "crud", "--store", "nosuch"], "nosuch"),
        err("store url bad port", ["run", "crud", "--store", "redis://h:notaport"], "port"),
        err("store option unknown", [*RUN, "--store-option", "frob=1"], "frob"),
        err("set without =", [*RUN, "--set", "n"], "--set"),
        err("set empty key", [*RUN, "--set", "=1"], "--set"),
        err("set malformed list", [*RUN, "--set", "n=[1,2"], "n"),
        run_set("unknown param", "frob=1", "frob"),
        run_set("n negative", "n=-1", "n"),
        run_set("n zero", "n=0", "n"),
        run_set("n not a number", "n=abc", "n"),
        run_set("n huge", "n=" + "9" * 30, "n"),
        run_set("n float", "n=2.5", "n"),
        run_set("n boolean", "n=true", "n"),
        run_set("n inf", "n=.inf", "n"),
        run_set("ops negative", "ops=-5", "ops"),
        run_set("dim zero", "dim=0", "dim"),
        run_set("dim huge", "dim=1000000000", "dim"),
        run_set("clients zero", "clients=0", "clients"),
        run_set("clients huge", "clients=1000000000", "clients"),
        run_set("warmup negative", "warmup=-1", "warmup"),
        run_set("k zero", "k=0", "k"),
        run_set("batch zero", "batch_size=0", "batch_size"),
        run_set("metric unknown", "metric=frob", "metric"),
        run_set("duration 1e300", "duration_s=1e300", "duration"),
        run_set("duration negative", "duration_s=-1", "duration"),
        run_set("duration nan", "duration_s=.nan", "duration"),
        run_set("repeats 1e12", "repeats=1000000000000", "repeats"),
        run_set("repeats zero", "repeats=0", "repeats"),
        run_set("grid clients zero", "grid.clients=[0]", "--set"),
        run_set("grid empty axis", "grid.index.m=[]", "grid"),
        run_set("grid unknown axis", "grid.frob=[1]", "frob"),
        run_set("name too long", f"name={long_name}", "name"),
        run_set("name traversal", "name=../../escape", "name"),
        run_set("name absolute", "name=/etc/escape", "name"),
        run_set("name empty", "name=", "name"),
        run_set("dataset unknown", "dataset=nosuch", "nosuch"),
        run_set("seed negative", "seed=-1", "seed"),
        # scenario files
        err("scenario missing", ["run", "{d}/none.yaml"], "none.yaml"),
        err(
            "scenario is a dir", ["run", "{d}/dir.yaml"], "dir.yaml", setup=write("dir.yaml/x", "")
        ),
        err("scenario not utf-8", S, "s.yaml", setup=write("s.yaml", b"name: \xff\xfe\n")),
        err("scenario empty", S, "s.yaml", setup=scenario("")),
        err("scenario invalid yaml", S, "s.yaml", setup=scenario("name: [s\nworkload: crud\n")),
        err("scenario tab", S, "s.yaml", setup=scenario("name: s\n\tworkload: crud\n")),
        err("scenario a list", S, "s.yaml", setup=scenario("- a\n- b\n")),
        err("scenario repeated key", S, "params", setup=scenario(GOOD + "params:\n  n: 5\n")),
        err("scenario alias bomb", S, "s.yaml", setup=scenario(BOMB)),
        err(
            "scenario python tag",
            S,
            "s.yaml",
            setup=scenario("name: !!python/object:os.system x\n"),
        ),
        err("scenario unknown workload", S, "frob", setup=scenario(GOOD.replace("crud", "frob"))),
        err("scenario unknown key", S, "frob", setup=scenario(GOOD + "frob: 1\n")),
        err("scenario params a number", S, "params", setup=scenario(GOOD[:44] + "params: 5\n")),
        err(
            "scenario store unknown",
            S,
            "nosuch",
            setup=scenario(GOOD.replace("[memory]", "[nosuch]")),
        ),
        err("scenario binary", S, "s.yaml", setup=write("s.yaml", os.urandom(4096))),
        Probe("scenario fine", S, (0,), setup=scenario(GOOD)),
        # outputs
        err("results is a file", [*RUN[:-1], "{d}/f"], "f", setup=write("f", "x")),
        err("results under a file", [*RUN[:-1], "{d}/f/sub"], "f", setup=write("f", "x")),
        err("results in /proc", [*RUN[:-1], "/proc/storebench-probe"], "/proc"),
        err("results file a dir", RUN, "crud.jsonl", setup=write("res/crud.jsonl/x", "")),
        Probe(
            "results on a full disk",
            RUN,
            (1, 2),
            "crud.jsonl",
            setup=lambda d: (
                (d / "res").mkdir() or (d / "res" / "crud.jsonl").symlink_to("/dev/full")
            ),
        ),
        Probe("results non-utf-8 dir", [*RUN[:-1], "{d}/r\udcff"], (0,)),
        err("init into /proc", ["init", "crud", "/proc/x.yaml"], "/proc"),
        err(
            "export into /proc",
            ["export", "{d}/res", "--out", "/proc/x.csv"],
            "/proc",
            setup=results("R"),
        ),
        err(
            "export unknown suffix",
            ["export", "{d}/res", "--out", "{d}/x.frob"],
            "--out",
            setup=results("R"),
        ),
        err(
            "report into a file",
            ["report", "{d}/res", "--out", "{d}/f"],
            "f",
            setup=both_setup(results("R"), write("f", "x")),
        ),
        # results files read back
        err("show missing", ["show", "{d}/none.jsonl"], "none.jsonl"),
        err("show empty dir", ["show", "{d}/empty"], "empty", setup=write("empty/.keep", "")),
        Probe("show empty file", ["show", "{d}/res/crud.jsonl"], (0, 2), setup=results()),
        err("show not utf-8", ["show", "{d}/res"], "crud.jsonl", setup=results(b"\xff\xfe{}")),
        err("show garbage", ["show", "{d}/res"], "crud.jsonl", setup=results("not json")),
        err("show a json list", ["show", "{d}/res"], "crud.jsonl", setup=results("[1, 2]")),
        Probe(  # shown as far as it goes: hand-made records are welcome
            "show a record missing fields",
            ["show", "{d}/res"],
            (0,),
            setup=results('{"run_id": "x"}'),
        ),
        err(
            "show binary",
            ["show", "{d}/res"],
            "crud.jsonl",
            setup=results(os.urandom(2048).replace(b"\n", b"")),
        ),
        Probe(
            "show torn tail",
            ["show", "{d}/res"],
            (0,),
            setup=results("R", torn='{"run_id": "y", "sta'),
        ),
        Probe(
            "report torn tail",
            ["report", "{d}/res", "--out", "{d}/rep"],
            (0,),
            setup=results("R", torn='{"ru'),
        ),
        Probe(
            "run after a torn tail",
            RUN,
            (0,),
            setup=results("R", torn='{"run_id": "y", "sta'),
            check=both(record_status("ok"), then(["show", "{d}/res"])),
        ),
        Probe(
            "resume after a torn tail",
            [*RUN, "--resume"],
            (0,),
            setup=results("R", torn='{"ru'),
            check=then(["show", "{d}/res"]),
        ),
        err("compare missing", ["compare", "{d}/a.jsonl", "{d}/b.jsonl"], "a.jsonl"),
        err(
            "compare bad selector",
            ["compare", "{d}/res", "{d}/res", "--a", "frob"],
            "frob",
            setup=results("R"),
        ),
        # datasets
        err("dataset make n zero", ["dataset", "make", "--name", "z", "-n", "0"], "-n"),
        err("dataset make dim zero", ["dataset", "make", "--name", "z", "--dim", "0"], "--dim"),
        err(
            "dataset make traversal", ["dataset", "make", "--name", "../escape", "-n", "10"], "name"
        ),
        err("dataset make slash", ["dataset", "make", "--name", "a/b", "-n", "10"], "name"),
        err("dataset import missing", ["dataset", "import", "{d}/none.fvecs"], "none.fvecs"),
        err(
            "dataset import unknown type",
            ["dataset", "import", "{d}/x.frob"],
            "x.frob",
            setup=write("x.frob", "1"),
        ),
        err(
            "dataset import bad fvecs",
            ["dataset", "import", "{d}/x.fvecs"],
            "x.fvecs",
            setup=write("x.fvecs", b"\xff\xff\xff\x7f" + b"\0" * 64),
        ),
        err(
            "dataset import torn fvecs",
            ["dataset", "import", "{d}/x.fvecs"],
            "x.fvecs",
            setup=write("x.fvecs", b"\x04\0\0\0" + b"\0" * 18),
        ),
        err(
            "dataset import bad npy",
            ["dataset", "import", "{d}/x.npy"],
            "x.npy",
            setup=write("x.npy", b"\x93NUMPY garbage"),
        ),
        err(
            "dataset import bad hdf5",
            ["dataset", "import", "{d}/x.hdf5"],
            "x.hdf5",
            setup=write("x.hdf5", os.urandom(1024)),
        ),
        err("dataset info unknown", ["dataset", "info", "nosuch"], "nosuch"),
        err(
            "dataset data dir a file",
            ["dataset", "list", "--local"],
            "data",
            env={"STOREBENCH_DATA": "{d}/f"},
            setup=write("f", "x"),
        ),
        Probe(  # found when the run maps it: the run fails, naming the file
            "run on a truncated dataset",
            SEARCH_DS,
            (1,),
            setup=dataset("vectors.npy"),
            check=both(
                record_status("failed", results_file="res/search.jsonl"), named("vectors.npy")
            ),
        ),
        err(
            "run on a corrupt dataset meta",
            SEARCH_DS,
            "ds",
            setup=dataset("meta.json"),
        ),
        # the environment
        Probe("tmpdir missing", RUN, (0, 2), env={"TMPDIR": "{d}/none"}),
        # signals
        Probe("SIGINT while importing", RUN, (130, -2), act=signal_at_start(0.05, signal.SIGINT)),
        Probe(
            "SIGTERM while importing", RUN, (143, -15), act=signal_at_start(0.05, signal.SIGTERM)
        ),
        Probe("SIGINT while parsing", RUN, (130,), act=signal_at_start(0.6, signal.SIGINT)),
        Probe(
            "dataset make SIGTERM",
            ["-v", "dataset", "make", "--name", "big", "-n", "50000000", "--dim", "64"],
            (143,),
            env={"STOREBENCH_DATA": "{d}/data"},
            act=signal_at_start(4.0, signal.SIGTERM),
        ),
    ]
    for sig in (signal.SIGTERM, signal.SIGINT):
        for second in (False, True):
            ps.append(
                Probe(
                    f"2000 threads {sig.name}{' twice' if second else ''}",
                    ["-v", "run", "crud", "--store", "memory", "--set", "n=4000"]
                    + ["--set", "ops=100000000", "--set", "clients=2000", "--set", "warmup=1"]
                    + ["--set", "grid={}", "--results", "{d}/res"],
                    (128 + sig,),
                    act=signal_when("task read: measuring", sig, second),
                    check=record_status("interrupted"),
                )
            )
    ps.append(
        Probe(
            "redis killed mid-run",
            ["-v", "run", "crud", "--store", "redis", "--set", "n=2000", "--set", "ops=10000000"]
            + ["--set", "grid={}", "--set", "clients=4", "--results", "{d}/res"],
            (1,),
            act=kill_server,
            check=record_status("failed", "error"),
        )
    )
    plans = fc.schedule(
        signal_trials, seed, ("memory/threads", "sqlite/threads", "sqlite/processes")
    )
    ps += [signal_trial(i, p) for i, p in enumerate(plans)]
    return ps


def both_setup(*setups):
    def setup(d: Path) -> None:
        for s in setups:
            s(d)

    return setup


def signal_trial(i: int, plan: fc.Plan) -> Probe:
    """One of ``fault_campaign.py``'s trials (a signal at a seeded random
    instant), run by ``run_probe`` through ``fc.trial``."""
    second = f" then {plan.second.name}" if plan.second else ""
    return Probe(f"signal {i}: {plan.combo} {plan.phase} {plan.sig.name}{second}", [], trial=plan)


# --- running them ---------------------------------------------------------------


def run_probe(p: Probe, d: Path) -> Result:
    out = Result(p.name)
    if p.trial is not None:
        o = fc.trial(p.trial, d)
        out.status, out.failures = o.status, o.failures
        out.exit_s = o.exit_s if o.signalled else None
        return out
    d.mkdir(parents=True)
    tmp = d / "t"
    tmp.mkdir()
    try:
        if p.setup:
            p.setup(d)
    except Exception as exc:  # the probe's own set-up: not storebench's failure
        out.failures.append(f"set-up failed: {type(exc).__name__}: {exc}")
        return out
    argv = [a.replace("{d}", str(d)) for a in p.argv]
    env = {**os.environ, "TMPDIR": str(tmp), "STOREBENCH_DATA": str(d / "data")}
    env |= {k: v.replace("{d}", str(d)) for k, v in p.env.items()}
    live = fc.Live([*fc.storebench_cmd(), *argv], env)
    acted = p.act(live, d) if p.act else None
    try:
        live.proc.wait(TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out.failures.append("hang")
        os.killpg(live.proc.pid, signal.SIGKILL)
        live.proc.wait(30)
    end = time.monotonic()
    out.wall_s = end - live.t0
    out.status = live.proc.returncode
    with live.cond:
        live.cond.wait_for(lambda: live.eof, timeout=10)
        text = [t for _, t in live.lines]
    stderr = "\n".join(text)
    if p.act and acted is None:
        out.failures.append("the instant to act never came")
    if acted is not None:
        out.exit_s = end - acted
        if p.act is not kill_server and out.exit_s > SIGNAL_EXIT_S:
            out.failures.append(f"exit {out.exit_s:.1f} s after the signal")
    if out.status not in p.status:
        last = text[-1] if text else ""
        out.failures.append(f"exit status {out.status} ({last[:160]})")
    if "Traceback" in stderr or "Aborted!" in stderr:
        out.failures.append("traceback" if "Traceback" in stderr else "Aborted!")
    if p.status == (2,):
        lines = [t for t in text if t.strip() and not t.startswith(CLICK_USAGE)]
        if len(lines) != 1:
            out.failures.append(f"{len(lines)} error lines: {' | '.join(lines)[:300]}")
        elif p.needle.lower() not in lines[0].lower():
            out.failures.append(f"does not name {p.needle!r}: {lines[0][:200]}")
    if p.check:
        out.failures += p.check(d, stderr)
    out.failures += fc._leftovers(live, tmp)
    fc._clean(live, tmp)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated probe names (substrings)")
    ap.add_argument("--signals", type=int, default=8, help="signal trials at random instants")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    chosen = probes(args.signals, args.seed)
    if args.only:
        chosen = [p for p in chosen if any(w in p.name for w in args.only.split(","))]
    t0 = time.monotonic()
    outcomes: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="probes-", dir="/tmp") as root:
        Path(root).chmod(0o755)
        for i, p in enumerate(chosen):
            r = run_probe(p, Path(root) / str(i))
            outcomes.append(r)
            when = f", exit {r.exit_s:.2f} s after the signal" if r.exit_s is not None else ""
            verdict = "; ".join(r.failures) or "ok"
            print(
                f"{i + 1:3} {p.name:40} exit {r.status} in {r.wall_s:5.1f} s{when}: {verdict}",
                flush=True,
            )
            shutil.rmtree(Path(root) / str(i), ignore_errors=True)
    failed = [r for r in outcomes if r.failures]
    refusals = [r.wall_s for r, p in zip(outcomes, chosen, strict=True) if p.status == (2,)]
    print(f"\nprobe campaign, seed {args.seed}, {time.monotonic() - t0:.0f} s")
    print(f"  probes: {len(outcomes)}")
    print(f"  passed: {len(outcomes) - len(failed)}")
    print(
        f"  failed: {len(failed)}"
        + "".join(f"\n    {r.probe}: {'; '.join(r.failures)}" for r in failed)
    )
    exits = [r.exit_s for r in outcomes if r.exit_s is not None]
    print(f"  worst time from a signal to the exit: {max(exits, default=0.0):.2f} s")
    print(f"  slowest refusal of a user error: {max(refusals, default=0.0):.2f} s")
    print("  load:", os.getloadavg())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
