"""Signals and pipes as a user meets them, on the real command line: every
command exits 130 on Ctrl-C and 143 on SIGTERM, a closed pipe ends output
quietly with 141, and the fault campaign (benchmarks/fault_campaign.py)
in small: signals at seeded random instants of runs, none of which may
hang, lose its record or leave a process or a directory behind.

``STOREBENCH_FAULT_TRIALS=N`` (default 6) sets the campaign's size here and
``STOREBENCH_FAULT_SEED`` its seed; the full campaign (>= 100 trials, every
executor and store) is ``python benchmarks/fault_campaign.py``."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.stores import servers as S

CLI = [sys.executable, "-m", "storebench"]
ROOT = Path(__file__).resolve().parents[2]


def load_campaign():
    spec = importlib.util.spec_from_file_location(
        "fault_campaign", ROOT / "benchmarks" / "fault_campaign.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["fault_campaign"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_compare_into_a_closed_pipe_exits_quietly_with_141(tmp_path):
    r = subprocess.run(
        [*CLI, "run", "crud", "--store", "memory", "--store", "sqlite"]
        + ["--set", "n=300", "--set", "ops=20", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    results = str(tmp_path / "crud.jsonl")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line (| head -0)
    p = subprocess.run(
        [*CLI, "compare", results, results, "--a", "store=memory", "--b", "store=sqlite"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    os.close(write)
    assert p.returncode == 141 and p.stderr == ""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_during_dataset_make_exits_like_every_command(tmp_path, sig):
    data = tmp_path / "data"
    p = subprocess.Popen(
        [*CLI, "dataset", "make", "--name", "big", "-n", "50000000", "--dim", "64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "STOREBENCH_DATA": str(data)},
    )
    deadline = time.monotonic() + 120
    while not list(data.glob(".big.*")) and time.monotonic() < deadline:  # it is writing
        time.sleep(0.05)
    assert list(data.glob(".big.*")), "dataset make never started writing"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1] == "storebench: interrupted"
    assert "Aborted!" not in err and "Traceback" not in err
    assert not [x for x in data.iterdir() if "big" in x.name]  # nothing under the name


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
@pytest.mark.skipif(S.skipped("redis"), reason="STOREBENCH_SKIP_ENGINES")
def test_a_second_signal_exits_at_once_leaving_the_record_and_no_server(tmp_path, sig):
    import psutil

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.Popen(
        [*CLI, "-v", "run", "crud", "--store", "redis", "--set", "n=2000"]
        + ["--set", "ops=10000000", "--set", "grid={}", "--results", str(tmp_path / "res")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    seen = ""
    while "task read: measuring" not in seen:
        line = p.stderr.readline()
        assert line, seen
        seen += line
    (server,) = psutil.Process(p.pid).children()
    p.send_signal(sig)
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + sig, err
    (line,) = (tmp_path / "res" / "crud.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert rec["status"] == "interrupted" and rec["error"].startswith(f"interrupted by {sig.name}")
    assert [t["name"] for t in rec["tasks"]][:2] == ["create", "build_index"]
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert not list(tmp.iterdir())  # the server's data directory and the run's files


@pytest.mark.parametrize("twice", [False, True], ids=["once", "twice"])
def test_2000_client_threads_exit_within_10_s_of_sigterm_1_s_of_a_second_keeping_the_record(
    tmp_path, twice
):
    from storebench.servers.base import scaled_timeout

    # 10 s (1 s after a second signal) on an idle machine; scaled by the load
    # there was before the run's own threads
    bound = scaled_timeout(1 if twice else 10)
    p = subprocess.Popen(
        [*CLI, "-v", "run", "crud", "--store", "memory", "--set", "n=4000", "--set", "warmup=1"]
        + ["--set", "ops=100000000", "--set", "clients=2000", "--set", "grid={}"]
        + ["--results", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = ""
    while "task read: measuring" not in seen:  # all 2,000 through the start barrier
        line = p.stderr.readline()
        assert line, seen
        seen += line
    p.send_signal(signal.SIGTERM)
    if twice:
        time.sleep(0.2)  # the clients are still ending
        p.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    # each line with when it came, so that a slow exit says where its time went
    lines = [f"{time.monotonic() - sent:5.1f} s {line}" for line in iter(p.stderr.readline, "")]
    p.wait(timeout=300)
    took = time.monotonic() - sent
    err = "".join(lines)
    assert p.returncode == 143 and "Traceback" not in err, err
    assert took < bound, f"exit {took:.1f} s after the last SIGTERM, over {bound:.0f} s:\n{err}"
    (line,) = (tmp_path / "crud.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert rec["status"] == "interrupted" and rec["error"].startswith("interrupted by SIGTERM")


def test_signals_at_random_instants_never_hang_lose_a_record_or_leave_anything():
    fc = load_campaign()
    trials = int(os.environ.get("STOREBENCH_FAULT_TRIALS", "6"))
    seed = int(os.environ.get("STOREBENCH_FAULT_SEED", "7"))
    combos = tuple(c for c in fc.CHEAP_COMBOS if not S.skipped(c.split("/")[0]))
    outcomes = fc.campaign(fc.schedule(trials, seed, combos))
    print(fc.summary(outcomes))
    failed = [(o.plan, o.failures) for o in outcomes if o.failures]
    assert not failed
