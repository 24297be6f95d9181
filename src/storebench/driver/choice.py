"""Which executor runs a task's clients: the executors by name (threads and
processes built in, others through the ``storebench.executors`` entry
points), the choice for a task (``choose_executor``), their per-run set-up."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from storebench.common.plugins import Kind
from storebench.driver.core import cpu_count
from storebench.driver.executors import Executor, ThreadExecutor, _active
from storebench.driver.processes import ProcessExecutor
from storebench.stores.base import Capability, Store

EXECUTORS = Kind(
    "executor",
    "storebench.executors",
    where="driver.executor",
    builtin={"threads": ThreadExecutor, "processes": ProcessExecutor},
)


def executor_names() -> list[str]:
    return EXECUTORS.names()


def executor_class(name: str) -> type[Executor]:
    cls: type[Executor] = EXECUTORS.load(name)
    return cls


# a workload's ``executor`` parameter (``choose_executor``)
ExecutorChoice = Literal["auto", "threads", "processes", "async"]


def choose_executor(
    store: Store | type[Store],
    run: str | None,
    task: str | None = None,
    lanes: int = 1,
    *,
    auto_processes: bool = True,
    thinking: bool = False,
) -> str:
    """Where a task's clients run: the one decision, made for the plan's
    check, the runner's set-up, the driver and the records alike.

    The task's own choice (a workload's ``executor`` parameter,
    ``ExecutorChoice``, or ``Task.executor``) as asked; none or ``auto``:
    the run's (``driver.executor``), else the store's ``client_mode``.
    ``auto`` with no run choice: processes when the task has several
    ``lanes`` (clients x in-flight streams) and the store can serve process
    clients, since thread clients share one interpreter (the GIL) and cheap
    requests make that the limit. A workload whose clients measured faster
    as threads passes ``auto_processes=False``: its ``auto`` is then the
    store's choice (ingest: see there).

    ``auto`` for clients that mostly pause (``thinking``: think time) and
    outnumber the cores: the ``async`` executor (``driver/aio.py``, one
    event loop) where the store's ops can run there (``Store.async_ops``),
    else the store's choice, never a process each. Measured with social's
    221 clients (load 8-10 from other work on 2 cores): memory p50/p99 10-66
    / 116-300 us as async against 29-109 / 2,600-28,000 us as threads,
    sqlite 24-78 / 310-1,870 against 82-218 / 39,000-44,000, the same ops/s,
    5 OS threads against 217-224. Not for clients that never pause: tune's
    100 pgvector search clients (load 16-55 from other work) made 1,291-1,843
    queries/s on one loop (1,184-1,489 over 2 or 4 worker loops) against
    2,386-3,352 as threads, at less client CPU per query (116 against 128
    us): the kernel shares the cores per thread, and one loop thread gets a
    sliver of them beside the server's 100 backends and the machine's other
    work; there ``async`` is for asking (6 OS threads against 105)."""
    if task is not None and task != "auto":
        return task
    if run is not None:
        return run
    if task == "auto" and thinking and lanes > cpu_count():
        return "async" if store.async_ops else store.client_mode
    if (
        task == "auto"
        and auto_processes
        and lanes > 1
        and Capability.SHARED_ACROSS_PROCESSES in store.capabilities
    ):
        return "processes"
    return store.client_mode


def get_executor(name: str, store: Store) -> Executor:
    return executor_class(name)(store)


def setup_executor(name: str, options: Mapping[str, Any]) -> type[Executor]:
    """The executor class for a run, set up with the run's driver settings."""
    cls = executor_class(name)
    cls.setup(options)
    _active[name] = cls
    return cls


@contextlib.contextmanager
def executors_released() -> Iterator[None]:
    """Around a scenario's runs: each executor set up lets go of what it
    started when they end, however they end."""
    try:
        yield
    finally:
        while _active:
            _active.popitem()[1].teardown()
