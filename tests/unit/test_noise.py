"""Machine load beside each task: other processes' CPU (the whole machine's
minus this process tree's and the run's own processes'), steal, the load
average, and the busy flag with its one threshold."""

import subprocess
import sys
import time

import psutil
import pytest

from storebench.data.batch import Schema
from storebench.driver import Driver, FnOp, Task
from storebench.measure import noise
from storebench.results.records import TaskRecord
from storebench.stores.base import StoreSpec


def test_busy_has_one_threshold_and_judges_no_short_sample():
    quiet = {"sampled_s": 2.0, "other_cpu_s": 0.4, "steal_s": 0.0}
    assert noise.busy(quiet) is False  # 0.2 core
    assert noise.busy(quiet | {"other_cpu_s": 1.2}) is True  # 0.6 core
    assert noise.busy(quiet | {"steal_s": 0.8}) is True  # other guests count too
    assert noise.busy(quiet | {"sampled_s": noise.MIN_SPAN_S / 2}) is None
    assert noise.busy(None) is None and noise.busy({}) is None
    assert noise.rates({"sampled_s": 0.001, "other_cpu_s": 0.01})["other_cpu_cores"] is None
    run = noise.summary(
        [
            ("upload", {"sampled_s": 0.1, "other_cpu_s": 0.1}),
            ("search", quiet | {"load_1m_end": 3.5}),
            ("unsupported", None),
        ]
    )
    assert run["sampled_s"] == 2.1 and run["other_cpu_s"] == 0.5 and run["load_1m_max"] == 3.5
    assert run["busy"] is False and run["busy_tasks"] == []
    hot = noise.summary([("s", quiet | {"other_cpu_s": 1.6})])
    assert hot["busy"] is True and hot["busy_tasks"] == ["s"] and hot["other_cpu_cores"] == 0.8
    assert noise.summary([("x", None)]) is None


def test_other_processes_cpu_is_what_this_run_does_not_own(burners):
    """Two samplers over the same second: one counts two busy loops as other
    processes, the other is told they are the run's own (as a managed
    server's are). The difference is their CPU, whatever else the machine
    does meanwhile."""
    pids = burners(2)
    time.sleep(0.2)
    procs = [psutil.Process(p) for p in pids]
    theirs = noise.LoadSampler()
    owned = noise.LoadSampler(lambda: procs)
    c0 = burners.cpu()
    time.sleep(1.5)
    burned = burners.cpu() - c0
    a, b = theirs.stop(), owned.stop()
    assert burned > 0.1  # they ran (how much depends on what else the machine runs)
    assert a["other_cpu_s"] - b["other_cpu_s"] == pytest.approx(burned, abs=0.1 + 0.1 * burned)
    # the machine was busy: while this process slept, others used its CPUs
    assert a["busy"] is True and a["other_cpu_cores"] >= burned / 1.5 - 0.1
    assert a["sampled_s"] >= 1.5 and a["cores"] == psutil.cpu_count()
    assert a["load_1m_start"] is not None and a["load_1m_end"] is not None


def test_a_child_is_ours_even_after_it_is_reaped():
    """A client process's CPU is this run's, while it runs and after it is
    reaped (then it is in the parent's children times)."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        ours0 = noise._ours(None)
        spent, deadline = 0.0, time.monotonic() + 60
        while spent <= 0.3 and time.monotonic() < deadline:  # the CPU it gets, however busy
            time.sleep(0.05)
            t = psutil.Process(child.pid).cpu_times()
            spent = t.user + t.system
    finally:
        child.kill()
        child.wait()
    assert spent > 0.2
    assert noise._ours(None) - ours0 >= spent - 0.05


class Sleeps:
    """Each op sleeps 10 ms (module level: picklable)."""

    def __call__(self, coll, c, clients):
        return FnOp(lambda i: time.sleep(0.01))


@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_the_driver_puts_the_load_on_every_task(executor):
    coll = StoreSpec("null").open().create_collection("m", Schema())
    d = Driver(executor=executor)
    stats, _ = d.run(Task("sleeps", Sleeps(), clients=2, duration_s=0.6), coll)
    load = TaskRecord.of(stats).machine_load
    # sampled around the executor's run: client start-up and warm-up included
    assert load["sampled_s"] >= stats.elapsed_ns / 1e9
    assert set(load) >= {"load_1m_start", "load_1m_end", "other_cpu_s", "steal_s", "cores"}
    assert load["busy"] is noise.busy(load) and load["busy"] in (True, False)
    stats, _ = d.once("pause", lambda: time.sleep(0.6))
    assert TaskRecord.of(stats).machine_load["sampled_s"] >= 0.6
