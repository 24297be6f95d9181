"""SIGINT and SIGTERM: the first stops cleanly, a second exits at once.

While ``handled()`` is active (every CLI command; ``run_scenario`` from the
Python API), the first SIGINT or SIGTERM raises ``KeyboardInterrupt``
(``Terminated`` for SIGTERM) in the main thread, so one clean-up serves
both: clients are stopped, the record of the run in progress is written
with status ``interrupted``, collections are dropped, managed servers
stopped. Code that must not be cut short (a run's clean-up and its record)
runs ``shielded()``: a first signal arriving there is held and raised when
the shielded block ends.

A first signal can be lost: the ``KeyboardInterrupt`` it raises may land in
code that swallows it (an extension module's import does). So the code that
acts on an interrupt says so (``acknowledge``); until then the watcher
thread (below) delivers the signal again every ``REDELIVER_S``, and after
``REDELIVERIES`` tries ends the process as a second signal would.

A second signal ends the process at once, from a watcher thread (it reads
the interpreter's signal wake-up descriptor), so it works even while the
main thread waits in a call that never returns to Python. The functions
registered with ``at_hard_exit`` run first, newest first (the record of the
run in progress is written if it was not yet; managed servers are killed
and their data directories removed), then every process storebench started
that is still there (client processes, a local Ray cluster) is killed. The
exit status is 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM,
as after the first signal.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from storebench.errors import Terminated

SIGNALS = (signal.SIGINT, signal.SIGTERM)
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE  # 141: what a shell reports for a tool killed by SIGPIPE
_PR_SET_PDEATHSIG = 1
HARD_EXIT_LOCK_S = 10.0  # how long a hard exit waits for a record being written
REDELIVER_S = 5.0  # a first signal nothing acknowledged is delivered again after this
REDELIVERIES = 3  # then the process ends as on a second signal


def exit_status(exc: BaseException) -> int:
    """The exit status after an interrupt: 130 (SIGINT) or 143 (SIGTERM),
    by the first signal received: a library may raise a plain
    KeyboardInterrupt in place of the ``Terminated`` a SIGTERM made (Ray's
    ``ray.get`` does)."""
    term = isinstance(exc, Terminated) or _state.first == signal.SIGTERM
    return 128 + (signal.SIGTERM if term else signal.SIGINT)


def exit_interrupted(exc: BaseException, more: str = "") -> NoReturn:
    """The one line and the status an interrupt ends the command line with,
    at any moment from its first import on."""
    acknowledge()
    print(f"storebench: interrupted{more}", file=sys.stderr, flush=True)
    sys.exit(exit_status(exc))


def interrupt_for(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


class _State:
    def __init__(self) -> None:
        self.depth = 0  # nesting of handled()
        self.first: int | None = None  # the first signal's number
        self.shield = 0  # nesting of shielded()
        self.deferred: int | None = None  # a first signal held by shielded()
        self.acked = False  # the first signal's interrupt reached code that acts on it
        self.redeliver = False  # the handler raises for the next signal (the watcher's)
        self.own = 0  # signals the watcher sent itself, not to be counted
        self.hard_exit: list[Callable[[], None]] = []
        self.on_signal: list[Callable[[], None]] = []
        # held while a record is written: a hard exit waits for it, so a
        # record is never written twice nor cut in half
        self.lock = threading.RLock()
        self.wakeup: tuple[socket.socket, socket.socket] | None = None  # kept open


_state = _State()


def _say(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"storebench: {text}\n".encode())


def _handler(signum: int, frame: Any) -> None:
    """The Python-level handler (main thread): the first signal only; later
    ones are the watcher's."""
    _signalled()
    if _state.first is not None:
        if _state.redeliver and not _state.acked:
            _state.redeliver = False
            raise interrupt_for(_state.first)
        return
    _state.first = signum
    if _state.shield:
        _state.deferred = signum
        _state.acked = True
        name = signal.Signals(signum).name
        _say(f"{name}: finishing the clean-up; send it again to exit at once")
        return
    raise interrupt_for(signum)


def _signalled() -> None:
    for fn in list(_state.on_signal):
        try:
            fn()
        except Exception as exc:
            _say(f"stopping failed: {type(exc).__name__}: {exc}")


def hard_exit(signum: int, why: str = "again") -> None:
    """Run the registered last-resort functions, then end the process."""
    got = _state.lock.acquire(timeout=HARD_EXIT_LOCK_S)
    # from here this thread keeps the GIL until it waits: the threads it would
    # hand it to (thousands of clients, some) need it no more. Not before the
    # lock: the thread writing a record would then keep the GIL from this one.
    sys.setswitchinterval(HARD_EXIT_LOCK_S)
    try:
        _say(f"{signal.Signals(signum).name} {why}: exiting at once")
        for fn in reversed(list(_state.hard_exit)):
            try:
                fn()
            except Exception as exc:  # one failing must not keep the others
                _say(f"clean-up at exit failed: {type(exc).__name__}: {exc}")
        _kill_descendants()
        if sys.stderr.isatty():  # a progress bar may have hidden the cursor
            with contextlib.suppress(OSError):
                os.write(2, b"\x1b[?25h")
    finally:
        if got:
            _state.lock.release()
        os._exit(128 + signum)


def _kill_descendants() -> None:
    import psutil

    spared = _resource_tracker()
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process().children(recursive=True):
            if p.pid != spared:
                with contextlib.suppress(psutil.Error):
                    p.kill()


def _resource_tracker() -> int | None:
    """multiprocessing's resource tracker, if this process started one: it
    outlives us by a moment and unlinks the semaphores (``/dev/shm/sem.mp-*``)
    and shared memory of the client processes killed here; killed with them,
    it left them behind."""
    module = sys.modules.get("multiprocessing.resource_tracker")
    pid = getattr(getattr(module, "_resource_tracker", None), "_pid", None)
    return pid if isinstance(pid, int) else None


def _watch(sock: socket.socket) -> None:
    seen = tries = arrived_first = 0
    while True:
        sock.settimeout(REDELIVER_S if seen == 1 and not _state.acked else None)
        try:
            data = sock.recv(64)
        except TimeoutError:  # the first signal's interrupt was not acted on
            first = _state.first
            if _state.acked or first is None:
                continue
            if tries == REDELIVERIES:
                hard_exit(first, "was not acted on")
            tries += 1
            _state.own += 1
            _state.redeliver = True
            signal.pthread_kill(threading.main_thread().ident, first)  # type: ignore[arg-type]
            continue
        except OSError:
            return
        if not data:
            return
        for b in data:
            if b in SIGNALS:
                if _state.own and b == _state.first:
                    _state.own -= 1
                    continue
                seen += 1
                if seen == 1:
                    arrived_first = b
                    _signalled()
                else:
                    # the main thread's handler may not have run yet (it runs
                    # only when that thread is back in Python): the record
                    # names the first signal, as read here in arrival order
                    if _state.first is None:
                        _state.first = arrived_first
                    hard_exit(b)


def _install() -> Callable[[], None]:
    """Handlers and the watcher; returns what puts things back."""
    reader, writer = _state.wakeup = socket.socketpair()
    writer.setblocking(False)
    old = {s: signal.getsignal(s) for s in SIGNALS}
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(reader,), daemon=True, name="signals")
    watcher.start()
    _state.depth, _state.first, _state.deferred = 1, None, None
    _state.acked, _state.redeliver, _state.own = False, False, 0
    for s in SIGNALS:
        signal.signal(s, _handler)

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(old_fd)
        _state.depth, _state.first, _state.deferred = 0, None, None
        writer.close()  # the watcher reads the end and stops
        watcher.join(5)
        reader.close()
        _state.wakeup = None

    return restore


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM as described above, for the ``with`` block.
    Nested uses share the outer one; outside the main thread it does
    nothing (Python delivers signals to the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _state.depth:
        _state.depth += 1
        try:
            yield
        finally:
            _state.depth -= 1
        return
    restore = _install()
    try:
        yield
    finally:
        restore()


def handle_until_exit() -> None:
    """``handled()`` for the rest of the process (the command line), its
    exit included; call ``finishing()`` when the work is done."""
    if threading.current_thread() is threading.main_thread() and not _state.depth:
        _install()


def finishing() -> None:
    """The work is done and the process exiting (servers left over are
    stopped at exit): a first signal from now on is only noted, a second
    still exits at once."""
    _state.shield += 1
    _state.acked = True


def acknowledge() -> None:
    """The interrupt reached code that acts on it (stops clients, records
    the run, exits): the watcher stops delivering it again."""
    _state.acked = True


def reinstall(saved: dict[int, Any]) -> None:
    """Put back handlers a library replaced (``saved`` from ``current()``)."""
    if threading.current_thread() is threading.main_thread():
        for s, h in saved.items():
            if h is not None and signal.getsignal(s) is not h:
                signal.signal(s, h)


def current() -> dict[int, Any]:
    return {s: signal.getsignal(s) for s in SIGNALS}


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """A first signal arriving inside is held until the block ends, then
    raised (a second one still exits at once)."""
    _state.shield += 1
    try:
        yield
    finally:
        _state.shield -= 1
        if not _state.shield and _state.deferred is not None:
            signum, _state.deferred = _state.deferred, None
            raise interrupt_for(signum)  # the user's stop outranks another error


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Hold off a hard exit (e.g. while a record is being written)."""
    with _state.lock:
        yield


def await_interrupt(timeout_s: float = REDELIVER_S) -> None:
    """A signal's effect was seen (a stop flag its handler set) before its
    interrupt reached the main thread: wait here for the interrupt, raised
    at this thread's next turn. Returns after ``timeout_s`` if none came
    (one swallowed on its way is delivered again by the watcher)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.005)


def on_signal(fn: Callable[[], None]) -> contextlib.AbstractContextManager[None]:
    """Call ``fn`` at once on a signal inside the block, from whichever of
    the main thread's handler and the watcher thread gets the GIL first:
    with many threads holding the GIL in turn, each wait for it takes
    seconds, and the interrupt's way up the main thread's stack meets
    several. ``fn`` must be quick and may be called more than once (it
    sets a stop flag)."""
    return _registered(_state.on_signal, fn)


def at_hard_exit(fn: Callable[[], None]) -> contextlib.AbstractContextManager[None]:
    """Call ``fn`` (from the watcher thread) if a second signal ends the
    process inside the block."""
    return _registered(_state.hard_exit, fn)


@contextlib.contextmanager
def _registered(fns: list[Callable[[], None]], fn: Callable[[], None]) -> Iterator[None]:
    fns.append(fn)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            fns.remove(fn)


def always_at_hard_exit(fn: Callable[[], None]) -> None:
    """Like ``at_hard_exit`` for the life of the process (as ``atexit``)."""
    _state.hard_exit.append(fn)


@contextlib.contextmanager
def blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread for the block (a child
    started inside inherits the mask); one arriving meanwhile is delivered
    after it, not lost."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> None:
    """This process gets ``sig`` (SIGKILL unless it has a shutdown of its own
    that is quick and releases more) when its parent dies (Linux; elsewhere
    nothing). The signal follows the parent's *thread* that started the
    process, so start children from a thread that outlives them (the
    main thread)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


def client_process(parent: int) -> bool:
    """At the start of a client process its parent started with both signals
    blocked (``blocked()``, so none came before): the parent decides when to
    stop, so both are ignored here, and the process dies with the parent,
    even a parent ended by SIGKILL or a second signal. False: the parent
    died before that took effect (the process should end)."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    die_with_parent()
    return os.getppid() == parent


def first_signal() -> str | None:
    """The name of the first signal received while ``handled()`` is active."""
    return signal.Signals(_state.first).name if _state.first is not None else None
