"""The ``Driver``: hands each task to an executor (threads, processes, or a
plug-in), merges the clients' results exactly, and times one-shot phases.

It sits above the executors, which run clients with ``core.run_client``:
core (tasks, the per-client run) <- executors <- dispatch, one way."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from storebench.driver import loops
from storebench.driver.choice import choose_executor, get_executor
from storebench.driver.core import ClientResult, Interrupted, Task, merge, unix_time
from storebench.driver.executors import ABORTED, Executor
from storebench.errors import TaskFailed
from storebench.measure import noise
from storebench.measure.metrics import DEFAULT_INTERVAL_S, TaskStats
from storebench.measure.resources import ThreadPeak
from storebench.stores.base import Collection, Store

log = logging.getLogger("storebench")


def first_failure(tasks: list[Task], per_task: list[list[ClientResult]]) -> str | None:
    """What to report when clients failed: the first real error (its task,
    client, type and message), not the "aborted" of the clients it stopped.
    One client failing (even while building its op) breaks the start
    barrier for all; in a mix those others belong to other tasks too, so
    looking task by task would report an earlier task's "aborted" instead."""
    errors = [
        (task, r.error)
        for task, results in zip(tasks, per_task, strict=True)
        for r in results
        if r.error
    ]
    if not errors:
        return None
    real = [(task, e) for task, e in errors if e != ABORTED] or errors
    task, error = real[0]
    # a TaskFailed from the measuring loop already names its task
    msg = error if error.startswith("task ") else f"task {task.name}: {error}"
    aborted = len(errors) - len(real)
    others = len(real) - 1
    if others:
        msg += f" ({others} more client(s) failed)"
    if aborted:
        msg += f" ({aborted} other client(s) aborted because of it)"
    return msg


class Driver:
    """Runs tasks on a store through an executor and returns merged stats.
    Each task's stats carry ``machine_load``: how busy the machine was
    meanwhile (``storebench.measure.noise``, sampled outside the timed window);
    ``processes`` are those the run owns beyond this process tree (a
    managed server's), whose CPU is not counted as other processes'.
    ``interval_s``: the per-interval series' interval of tasks that set none.
    ``client_threads``: the most OS threads the clients held at once
    (``resources.ThreadPeak``)."""

    def __init__(
        self,
        progress: Any = None,
        executor: str | None = None,
        processes: noise.Processes | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
    ):
        from storebench.run.progress import NoProgress

        self.progress = progress or NoProgress()
        self.executor = executor  # the run's: a task's own choice aside, every task's
        self.processes = processes
        self.interval_s = interval_s
        # one executor per name and store, kept for the run: its clients
        # may serve every task (``close`` lets them go)
        self._executors: dict[tuple[str, int], Executor] = {}

    def executor_for(self, name: str, store: Store) -> Executor:
        key = (name, id(store))
        if key not in self._executors:
            self._executors[key] = get_executor(name, store)
        return self._executors[key]

    def close(self) -> None:
        """The run is over: executors let go of the clients they kept."""
        executors, self._executors = self._executors, {}
        for executor in executors.values():
            executor.close()

    def run(self, task: Task, coll: Collection) -> tuple[TaskStats, list[Any]]:
        """Time ``task`` on ``coll``; returns the stats and each client's payload."""
        return self.run_mix([task], coll)[0]

    def run_mix(self, tasks: list[Task], coll: Collection) -> list[tuple[TaskStats, list[Any]]]:
        """Run several tasks at once (their clients start together), e.g.
        writers and readers of a social network; stats come back per task."""
        tasks = [
            t if t.interval_s else dataclasses.replace(t, interval_s=self.interval_s) for t in tasks
        ]
        names = {
            choose_executor(coll.store, self.executor, t.executor, t.lanes, thinking=t.thinks)
            for t in tasks
        }
        if len(names) > 1:
            raise ValueError(f"tasks run together must share one executor, got {sorted(names)}")
        name = names.pop()
        executor = self.executor_for(name, coll.store)
        for task in tasks:
            what = task.ops or f"{task.duration_s}s"
            log.info(
                "task %s: %s on %s, %d client(s) as %s",
                task.name,
                what,
                coll.store.engine,
                task.clients,
                name,
            )
        sampler = noise.LoadSampler(self.processes)
        threads = ThreadPeak()  # the client model's cost in OS threads
        try:
            per_task = executor.run(tasks, coll, self.progress)
        except Interrupted as exc:
            load = sampler.stop()
            peak = threads.stop()
            for partial in exc.partial:
                partial.extra["machine_load"] = load
                partial.extra["client_threads"] = peak
            raise
        load = sampler.stop()
        peak = threads.stop()
        failure = first_failure(tasks, per_task)
        if failure:
            raise TaskFailed(failure)
        out = [
            (merge(task, results), [r.payload for r in results])
            for task, results in zip(tasks, per_task, strict=True)
        ]
        where = getattr(executor, "where", None)  # the async executor's loop and workers
        for stats, _ in out:
            stats.extra["machine_load"] = load
            stats.extra["client_threads"] = peak
            if where:
                stats.extra["client_loop"] = where
        return out

    def once(
        self, name: str, fn: Callable[[], Any], items: int = 1, since_ns: int | None = None
    ) -> tuple[TaskStats, Any]:
        """Time one call (a phase such as an index build or a compaction).
        ``since_ns`` (a task's ``end_ns``): time from then, not from the
        call, so nothing between that task's end and this call goes untimed
        (the call alone is then recorded as ``call_s``)."""
        sampler = noise.LoadSampler(self.processes)
        cpu0 = time.process_time()
        log.info("phase %s", name)
        with self.progress.phase(name):
            t0 = loops.clock()
            out = fn()
            t1 = loops.clock()
        cpu_s = time.process_time() - cpu0
        load = sampler.stop()
        call_ns = t1 - t0
        if since_ns is not None and since_ns <= t0:
            t0 = since_ns
        stats = TaskStats(name, ops=1, items=items, elapsed_ns=t1 - t0, cpu_s=cpu_s)
        stats.start_unix = unix_time(t0)
        stats.extra["machine_load"] = load
        stats.latency.record(np.array([t1 - t0]))
        if since_ns is not None:
            stats.extra["call_s"] = call_ns / 1e9
        return stats, out
