"""Signals: the first stops cleanly and nothing waits for ever; a second
exits at once. Signals here are real (``signal.raise_signal`` delivers to
this thread, so the interrupt lands exactly where the test puts it)."""

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from storebench.common import interrupts
from storebench.data.batch import Schema
from storebench.driver import FnOp, Interrupted, Task
from storebench.driver import executors as ex
from storebench.driver import native as native_loop
from storebench.driver.aio import AsyncExecutor
from storebench.driver.core import Controls
from storebench.driver.processes import ProcessExecutor
from storebench.errors import Terminated
from storebench.run.progress import NoProgress
from storebench.stores.base import StoreSpec

SIGNALS = [signal.SIGINT, signal.SIGTERM]


class Items:
    def __call__(self, coll, c, clients):
        return FnOp(lambda i: None)


class Held:
    """Client ``slow`` does not get through its set-up until ``release`` is
    set (a client connecting to an engine that does not answer); the others
    note that they are ready and go on to the start barrier."""

    def __init__(self, slow, ready, release):
        self.slow, self.ready, self.release = slow, ready, release

    def __call__(self, coll, c, clients):
        if c == self.slow:
            self.release.wait(60)
        else:
            self.ready.release()
        return FnOp(lambda i: None)


def signalled_at(cls, at, sig):
    """``cls`` with ``sig`` arriving just before client ``at`` is launched."""

    class Signalled(cls):
        def _watch(self, tasks, ctl, progress, launch, *rest):
            def launch_(g):
                if g == at:
                    signal.raise_signal(sig)
                launch(g)

            return super()._watch(tasks, ctl, progress, launch_, *rest)

    return Signalled


@pytest.fixture
def coll():
    return StoreSpec("null").open().create_collection("x", Schema())


def client_threads():
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith("client-") or t.name == "async-clients"
    ]


def client_processes(before=frozenset()):
    """Live children of this process not in ``before`` (the suite's shared
    managed servers are children too, started by earlier tests)."""
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before
        and p.is_running()
        and p.status() != psutil.STATUS_ZOMBIE
        and "resource_tracker" not in " ".join(p.cmdline())
    ]


class AsyncWorkers(AsyncExecutor):
    """The async executor with its clients in 4 worker processes."""

    workers = 4


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize(
    "executor",
    [ex.ThreadExecutor, ProcessExecutor, AsyncExecutor, AsyncWorkers],
    ids=["threads", "processes", "async", "async-workers"],
)
def test_a_signal_while_clients_start_stops_the_task_without_waiting_for_the_rest(
    coll, executor, sig
):
    # two clients started and waiting at the start barrier for two that
    # will never start: the barrier is broken, the two given up
    task = Task("t", Items(), clients=4, ops=1_000_000)
    before = frozenset(p.pid for p in psutil.Process().children(recursive=True))
    with interrupts.handled(), pytest.raises(Interrupted) as stopped:
        signalled_at(executor, 2, sig)(coll.store).run([task], coll, NoProgress())
    assert stopped.value.signal == sig.name
    (partial,) = stopped.value.partial
    assert partial.ops == 0 and not partial.complete
    assert not client_threads() and not client_processes(before)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_clients_waiting_at_the_start_are_released_and_a_stuck_one_left_behind(
    coll, sig, monkeypatch
):
    monkeypatch.setattr(ex, "STOP_GRACE_S", 1.0)
    ready, release = threading.Semaphore(0), threading.Event()
    task = Task("t", Held(0, ready, release), clients=4, ops=1_000_000)
    main = threading.main_thread().ident

    def interrupt_when_three_wait():
        for _ in range(3):
            ready.acquire(timeout=60)
        signal.pthread_kill(main, sig)

    threading.Thread(target=interrupt_when_three_wait, daemon=True).start()
    try:
        with interrupts.handled(), pytest.raises(Interrupted) as stopped:
            ex.ThreadExecutor(coll.store).run([task], coll, NoProgress())
        # the run ended while client 0 was still in its set-up: it did not
        # wait for it beyond the grace, and the three that waited at the
        # barrier were released by the stop, not by client 0 arriving
        assert [t.name for t in client_threads()] == ["client-0"]
        (partial,) = stopped.value.partial
        assert partial.ops == 0 and not partial.complete
    finally:
        release.set()
    deadline = time.monotonic() + 30
    while client_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not client_threads()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_signal_sets_the_stop_flag_before_the_interrupt_reaches_the_executor(sig):
    # the main thread blocks the signal: only the watcher can act on it, and
    # the interrupt comes once the main thread unblocks it
    called = threading.Event()
    with interrupts.handled(), interrupts.on_signal(called.set), pytest.raises(KeyboardInterrupt):
        with interrupts.blocked():
            signal.raise_signal(sig)
            assert called.wait(10)
        time.sleep(10)  # the interrupt lands here
    called.clear()
    with interrupts.handled(), pytest.raises(KeyboardInterrupt):
        signal.raise_signal(sig)
    assert not called.is_set()  # only inside the block


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_the_compiled_handler_sets_the_stop_flag_before_any_python_runs(sig):
    pytest.importorskip(native_loop.MODULE, reason="the native client is built by tools/setup.py")
    ctl = Controls.local(1)
    seen = []  # the flag as the Python-level handler finds it
    first = interrupts.on_signal(lambda: seen.append(ctl.stop[0]))
    flag = native_loop.stop_on_signal(ctl)
    with interrupts.handled(), pytest.raises(KeyboardInterrupt), first, flag:
        signal.raise_signal(sig)
        time.sleep(10)  # the interrupt lands here
    assert seen and seen[0] == sig  # the signal's number, not a failing client's 1
    ctl.stop[0] = 0
    with interrupts.handled(), pytest.raises(KeyboardInterrupt):
        signal.raise_signal(sig)  # outside the block: the flag is left alone
    assert ctl.stop[0] == 0


def test_thread_clients_keep_the_switch_interval_and_stop_on_a_signal(coll):
    interval = sys.getswitchinterval()
    task = Task("t", Items(), clients=8, ops=100_000_000)
    with interrupts.handled(), pytest.raises(Interrupted):
        signalled_at(ex.ThreadExecutor, 4, signal.SIGTERM)(coll.store).run(
            [task], coll, NoProgress()
        )
    assert sys.getswitchinterval() == interval and not client_threads()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_first_signal_in_a_shielded_block_is_raised_when_it_ends(sig):
    done = []
    with interrupts.handled():
        with pytest.raises(KeyboardInterrupt) as caught, interrupts.shielded():
            signal.raise_signal(sig)
            done.append("the rest of the block")
        assert done == ["the rest of the block"]
        assert isinstance(caught.value, Terminated) == (sig == signal.SIGTERM)
        assert interrupts.exit_status(caught.value) == 128 + sig


SECOND = textwrap.dedent(
    """
    import signal, sys, threading
    sys.path[:0] = {path!r}
    from storebench.common import interrupts
    with interrupts.handled(), interrupts.at_hard_exit(lambda: open({marker!r}, "w").write("x")):
        try:
            signal.raise_signal({sig})
        except KeyboardInterrupt:
            print("first", flush=True)
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # stuck for ever: only the second signal ends this
    """
)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_second_signal_exits_at_once_after_the_last_resort_functions(tmp_path, sig):
    marker = tmp_path / "written"
    code = SECOND.format(path=sys.path, marker=str(marker), sig=int(sig))
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "first"
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + sig, err
    assert f"{sig.name} again: exiting at once" in err
    assert marker.read_text() == "x"


BACK_TO_BACK = textwrap.dedent(
    """
    import sys, threading, time
    sys.path[:0] = {path!r}
    from storebench.common import interrupts
    def note():
        open({marker!r}, "w").write(str(interrupts.first_signal()))
    with interrupts.handled(), interrupts.at_hard_exit(note):
        # the handler cannot run while the main thread is in a call that does
        # not return (and signals go to the watcher): said once it is there
        with interrupts.blocked():
            threading.Timer(0.5, lambda: print("waiting", flush=True)).start()
            time.sleep(60)
    """
)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_two_signals_back_to_back_name_the_signal_received(tmp_path, sig):
    # both reach the watcher while the main thread's handler cannot run
    marker = tmp_path / "first"
    code = BACK_TO_BACK.format(path=sys.path, marker=str(marker))
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "waiting"
    p.send_signal(sig)
    time.sleep(0.5)  # two pending at once would be one: the kernel does not queue them
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + sig, err
    assert marker.read_text() == sig.name


LOST = textwrap.dedent(
    """
    import signal, sys, time
    sys.path[:0] = {path!r}
    from storebench.common import interrupts
    interrupts.REDELIVER_S = 0.5
    with interrupts.handled():
        try:
            signal.raise_signal({sig})
        except KeyboardInterrupt:
            pass  # swallowed, as an extension module's import can
        print("lost", flush=True)
        while True:
            try:
                while True:
                    time.sleep(0.05)
            except KeyboardInterrupt as exc:
                if {act}:
                    interrupts.acknowledge()
                    print("delivered again", flush=True)
                    sys.exit(interrupts.exit_status(exc))
                # lost again
    """
)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("act", [True, False], ids=["acted-on", "never-acted-on"])
def test_a_lost_first_signal_is_delivered_again_until_acted_on(sig, act):
    code = LOST.format(path=sys.path, sig=int(sig), act=act)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 128 + sig, p.stderr
    if act:
        assert p.stdout.split() == ["lost", "delivered", "again"]
    else:  # delivered again and again, then the end a second signal gives
        assert p.stdout.split() == ["lost"]
        assert f"{sig.name} was not acted on: exiting at once" in p.stderr


def test_the_record_of_the_run_in_progress_is_written_by_a_hard_exit(tmp_path):
    from storebench.run.runner import _Recorder
    from storebench.stores.opening import OpenStore
    from storebench.workloads.base import RunContext

    store = StoreSpec("sqlite").open()  # in a private temporary directory
    private = Path(store.spec.url).parent
    assert private.is_dir()
    ctx = RunContext("r1", store, None)
    ctx.tasks.append({"name": "create", "ops": 3})
    recorder = _Recorder(tmp_path / "x.jsonl")
    recorder.begin({"run_id": "r1", "status": "running", "error": None})
    recorder.ctx, recorder.opened = ctx, OpenStore(store)
    work = ctx.workdir  # made on first use
    recorder.at_hard_exit()
    (line,) = (tmp_path / "x.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert rec["status"] == "interrupted" and "exited at once" in rec["error"]
    assert rec["tasks"] == [{"name": "create", "ops": 3}]
    assert not work.exists() and not private.exists()
    recorder.at_hard_exit()  # once only
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 1


def test_the_exit_status_follows_the_first_signal_even_if_a_library_replaced_the_interrupt(
    monkeypatch,
):
    # Ray's ray.get re-raises a plain KeyboardInterrupt in place of ours
    monkeypatch.setattr(interrupts._state, "first", signal.SIGTERM)
    assert interrupts.exit_status(KeyboardInterrupt()) == 143
    monkeypatch.setattr(interrupts._state, "first", signal.SIGINT)
    assert interrupts.exit_status(KeyboardInterrupt()) == 130
    assert interrupts.exit_status(Terminated()) == 143
    monkeypatch.setattr(interrupts._state, "first", None)
    assert interrupts.exit_status(KeyboardInterrupt()) == 130


def test_a_latch_still_opens_after_an_interrupt_lands_in_its_wait_as_it_is_set():
    # an Event's wait interrupted as another thread sets it could keep its
    # inner lock held, and the next wait then never returned
    for _ in range(200):
        latch, sent = ex.Latch(), threading.Event()
        assert not latch.wait(0) and not latch.is_set()
        setter = threading.Timer(0.001, lambda latch=latch: (latch.set(), latch.set()))
        raiser = threading.Timer(
            0.001, lambda sent=sent: (signal.raise_signal(signal.SIGINT), sent.set())
        )
        try:
            setter.start()
            raiser.start()
            latch.wait(5)
            sent.wait(5)
            for _ in range(5):  # the interrupt lands by now, if not in the wait
                time.sleep(0.002)
        except KeyboardInterrupt:
            pass
        setter.join()
        raiser.join()
        assert latch.wait(1) and latch.is_set()
