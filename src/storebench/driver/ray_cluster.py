"""Joining or starting Ray for the Ray executor (``driver.ray_address``):
``local`` starts a private Ray on 127.0.0.1 in a private session directory
(removed after its shutdown and at a hard exit), ``auto`` or ``HOST:PORT``
joins a running cluster, kept on loopback where the address is this
machine's; the program's signal handlers stay (``connect``)."""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from typing import Any

import ray

from storebench.common import interrupts
from storebench.errors import UserError

LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024  # a local Ray's object store (data goes by path)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split(address: str) -> tuple[str, int] | None:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host, int(port)


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """Ray on this machine stays on 127.0.0.1 while this is active.

    Ray rewrites 127.0.0.1 to the machine's interface address when it
    resolves a node or cluster address (``resolve_ip_for_localhost``); on
    Linux only its "clusters disabled" switch keeps loopback. Processes Ray
    starts meanwhile inherit the switch through the environment."""
    from ray._private import ray_constants

    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    saved_env = {k: os.environ.get(k) for k in env}
    saved = ray_constants.ENABLE_RAY_CLUSTER
    os.environ.update(env)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def connect(address: str) -> None:
    """``ray.init`` for ``address`` (``local``, ``auto``, ``HOST:PORT``),
    on loopback where the address is on this machine; fails within seconds
    when nothing listens there (Ray itself retries for minutes). The
    program's SIGINT and SIGTERM handlers stay (``ray.init`` replaces the
    SIGTERM one with an exit that would skip the run's record)."""
    saved = interrupts.current()
    utils = ray._private.utils
    own = utils.set_sigterm_handler
    # not even for the time ray.init takes: a SIGTERM meanwhile would exit 15
    # without the run's record (Ray's handler calls sys.exit)
    utils.set_sigterm_handler = lambda handler: None
    try:
        _init(address)
    finally:
        utils.set_sigterm_handler = own
        interrupts.reinstall(saved)


# a local Ray's session directory (logs, sockets): Ray keeps it after its
# shutdown, so storebench gives it a private one and removes it after
_local_temp: list[str] = []


def remove_local_temp() -> None:
    while _local_temp:
        shutil.rmtree(_local_temp.pop(), ignore_errors=True)


_cleanup_registered = False


def _register_cleanup() -> None:
    """Once per process: the session directories go at exit, hard or not."""
    global _cleanup_registered
    interrupts.always_at_hard_exit(_kill_local_ray)
    atexit.register(remove_local_temp)
    _cleanup_registered = True


def _kill_local_ray() -> None:
    """At a hard exit: Ray's processes that write into the session
    directory go first (they would make it anew), then the directory."""
    import psutil

    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(t in " ".join(p.cmdline()) for t in _local_temp):
                p.kill()
    remove_local_temp()


# Ray's socket paths under its directory; a Unix socket's path holds 107 bytes
_RAY_SOCKET_TAIL = len("/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store")


def _short_temp() -> str:
    """A private directory whose Ray sockets fit a Unix socket path: in the
    temporary directory if short enough, else in /tmp."""
    temp = tempfile.mkdtemp(prefix="sbray-")
    if len(temp) + _RAY_SOCKET_TAIL > 107 and os.path.isdir("/tmp"):
        os.rmdir(temp)
        temp = tempfile.mkdtemp(prefix="sbray-", dir="/tmp")
    return temp


def _init(address: str) -> None:
    quiet: dict[str, Any] = {"logging_level": logging.WARNING, "namespace": "storebench"}
    if address == "local":
        temp = _short_temp()
        if not _cleanup_registered:
            _register_cleanup()
        _local_temp.append(temp)
        with loopback_only():
            ray.init(
                address="local",
                num_cpus=os.cpu_count() or 1,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                _temp_dir=temp,
                **quiet,
            )
        return
    if address == "auto":
        from ray._private import services

        try:
            found = services.get_ray_address_from_environment("auto", None)
        except Exception as exc:
            raise UserError(
                f"no running Ray cluster found ({exc})", where="driver.ray_address"
            ) from exc
        address = found or "auto"
    hostport = _split(address)
    if hostport is not None:
        host, port = hostport
        try:
            socket.create_connection((host.strip("[]"), port), timeout=5).close()
        except OSError as exc:
            raise UserError(
                f"no Ray cluster answers at {address}: {exc}", where="driver.ray_address"
            ) from exc
    guard = loopback_only() if hostport and _is_loopback(hostport[0]) else contextlib.nullcontext()
    with guard:
        ray.init(address=address, **quiet)
