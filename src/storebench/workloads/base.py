"""The workload contract and the per-run context a workload works in.

A workload declares its parameters (a pydantic model: unknown or mistyped
keys are errors), the capabilities it cannot run without, and ``run``, which
goes through its phases using the context: make collections, time tasks and
one-shot phases, and add metrics. Each task's record (``records.TaskRecord``)
is made once, whole, from what the driver measured and what the workload
derives from it; it lands in the run's result record, even when the run
fails or is interrupted part-way."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import ConfigDict, ValidationInfo, field_validator

from storebench.common import leftovers
from storebench.common.plugins import Kind
from storebench.data.batch import DocBatch, Schema
from storebench.data.shared import Shared
from storebench.driver import Driver, Interrupted, Op, Task
from storebench.driver.choice import choose_executor
from storebench.errors import NotSupported
from storebench.measure.metrics import TaskStats
from storebench.measure.resources import ResourceSampler
from storebench.results.records import SettingResult, TaskRecord
from storebench.stores.base import AsyncView, Capability, Collection, Pace, Store
from storebench.stores.config import NoBoolNumbers
from storebench.stores.params import IndexParams, SearchParams

if TYPE_CHECKING:
    from storebench.servers.base import Server
    from storebench.servers.cluster import Cluster

MAX_SECONDS = 7 * 86_400  # a longer duration or wait is a typo (1e300 overflows the clock)
MAX_COUNT = 10**12  # a larger count is no run one machine does (nor an array numpy makes)
MAX_CLIENTS = 100_000  # each a thread, process or task: beyond what one machine starts

WORKLOADS = Kind("workload", "storebench.workloads", where="workload")


class Params(NoBoolNumbers):
    """Base of workload parameter models: unknown keys are errors, a
    boolean is not a number (pydantic would read ``n: true`` as 1), and
    numbers are finite (``duration_s: .inf`` would never end) and within
    what a run can do: seconds (``*_s``) and milliseconds (``*_ms``) up to
    ``MAX_SECONDS``, client counts (``*clients``) up to ``MAX_CLIENTS``, any
    other number up to ``MAX_COUNT``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _within_reach(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        limit, unit = MAX_COUNT, ""
        if name.endswith("_s"):
            limit, unit = MAX_SECONDS, " seconds (a week)"
        elif name.endswith("_ms"):
            limit, unit = MAX_SECONDS * 1000, " ms (a week)"
        elif name.endswith("clients"):
            limit, unit = MAX_CLIENTS, " clients"
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) > limit:
                raise ValueError(f"at most {limit:,}{unit}")
        return value


@dataclass(frozen=True)
class MemoryNeed:
    """The memory one run takes at its peak (``Workload.memory``), estimated:
    the workload's own arrays by part, and what the store is given to hold
    (its share is the store's: ``Store.memory_use``)."""

    parts: dict[str, int]  # bytes by part: data, queries, truth, clients, ...
    keys: tuple[str, ...]  # the parameters that set the size, the most telling first
    docs: int = 0  # documents the store holds
    dim: int = 0  # their vector dimension (0: none)
    field_bytes: int = 0  # scalar bytes per document
    shared: int = 0  # bytes written to the run's directory (RAM where that is tmpfs)


# a small machine's pace with an embedded store (2 cores, some load), the
# unit of ``TimeModel.work_s``: an engine's timed runs rescale it
DOC_S = 20e-6  # a document inserted, in batches
OP_S = 0.3e-3  # a timed operation of one client
REQUEST_S = 40e-6  # a short request: one small insert or read in its transaction
SCAN_S = 0.5e-6  # a document an exhaustive search scans, per query
BUILD_S = 0.15e-3  # a document an index build adds (HNSW)
TASK_S = 0.05  # a measured task's own cost: clients started, load sampled, scored


@dataclass(frozen=True)
class TimeModel:
    """A run's time before it runs (``Workload.time_model``): ``fixed_s``,
    the seconds its own clock sets (durations, measuring windows, warm-up
    seconds, delays), which no engine shortens; ``work_s``, the engine's
    work (documents loaded, operations timed, an index built) in seconds
    at the pace above, which ``run.progress.Sweep`` rescales by the
    engine's timed runs."""

    fixed_s: float = 0.0
    work_s: float = 0.0

    def __add__(self, other: TimeModel) -> TimeModel:
        return TimeModel(self.fixed_s + other.fixed_s, self.work_s + other.work_s)

    def __mul__(self, times: float) -> TimeModel:
        return TimeModel(self.fixed_s * times, self.work_s * times)

    @classmethod
    def requests(cls, count: float, fixed_s: float = 0.0, tasks: int = 1) -> TimeModel:
        """``count`` short requests (a small insert or read in its
        transaction) in ``tasks`` measured tasks."""
        return cls(fixed_s, count * REQUEST_S + tasks * TASK_S)


def search_time(
    queries: float, n: float, store: type[Store] | None, window_s: float = 0.0
) -> TimeModel:
    """One measured task of ``queries`` searches over ``n`` documents, run
    at least ``window_s`` (the work past it on top): an exhaustive store
    scans every document."""
    scan = n * SCAN_S if store is not None and store.exact else 0.0
    return TimeModel(window_s, TASK_S + max(0.0, queries * (OP_S + scan) - window_s))


def load_time(n: float, store: type[Store] | None) -> TimeModel:
    """``n`` documents inserted, and the index built over them where the
    store builds one, each at the store's pace (``Store.pace``)."""
    builds = store is not None and Capability.INDEX in store.capabilities
    pace = store.pace if store is not None else Pace()
    return TimeModel(0.0, n * (DOC_S * pace.upload + (BUILD_S * pace.build if builds else 0.0)))


class Workload:
    name: ClassVar[str]
    Params: ClassVar[type[Params]]
    requires: ClassVar[frozenset[Capability]] = frozenset()

    @classmethod
    def resolve(cls, params: Any, stated: frozenset[str]) -> Any:
        """The parameters with what comes from elsewhere filled in (a
        dataset's size, dimension and metric); ``stated`` names the keys the
        user gave for this run, which must agree with it (else UserError
        naming the key). Runs before ``check``, and before anything starts."""
        return params

    @classmethod
    def check(cls, params: Any) -> None:
        """Checks that need more than the model (a dataset exists, ...);
        raise UserError naming the parameter. Runs before anything starts."""

    @classmethod
    def data_identity(cls, params: Any) -> dict[str, Any]:
        """What names the data a run reads beyond its parameters, known
        before it runs (in the record's ``metrics.data``; ``--resume``
        compares them): a dataset's content hash, so a dataset file replaced under the
        same name is measured again, not taken as done. Nothing for
        generated data (its parameters name it)."""
        name = getattr(params, "dataset", None)
        if name is None:
            return {}
        from storebench.data import datasets

        ds = datasets.load(name, metric=getattr(params, "metric", None))
        return {"content_hash": ds.content_hash}

    @classmethod
    def memory(cls, params: Any) -> MemoryNeed | None:
        """What a run with these parameters holds in memory (the plan
        refuses a run that cannot fit: ``storebench.plan.memory``); None: not
        estimated."""
        return None

    @classmethod
    def time_model(cls, params: Any, settings: int, store: type[Store] | None) -> TimeModel:
        """What a run with these parameters takes (``TimeModel``), for the
        ETA; ``settings``: the search settings swept over one build;
        ``store``: the engine's class (None: not installed). Nothing here:
        not estimated."""
        return TimeModel()

    @classmethod
    def executor(cls, params: Any, store: Store | type[Store], run_executor: str | None) -> str:
        """Where a run's measured clients run, as its tasks choose it
        (``choose_executor``; the plan says it): for its most clients."""
        clients = getattr(params, "clients", 1)
        lanes = max(clients) if isinstance(clients, list | tuple) else int(clients)
        return choose_executor(store, run_executor, getattr(params, "executor", None), lanes)

    def run(self, ctx: RunContext, params: Any) -> None:
        raise NotImplementedError


class ViewsOp(Op):
    """An op whose event-loop client (``acall``) works on async views
    (``Collection.aio``) of ``colls``, one each, all on one connection;
    ``opened`` binds what ``acall`` calls (one lookup fewer per op)."""

    colls: tuple[Collection, ...] = ()

    async def aopen(self) -> None:
        first: AsyncView | None = None
        self.views: list[AsyncView] = []
        for coll in self.colls:
            view = coll.aio(first)
            await view.open()
            self.views.append(view)
            first = first or view
        self.opened(*self.views)

    def opened(self, *views: AsyncView) -> None:
        pass

    async def aclose(self) -> None:
        for view in reversed(getattr(self, "views", [])):
            await view.close()


class BatchInserts(ViewsOp):
    """Op i inserts ``batches[i]`` (prepared before timing) into ``coll``."""

    def __init__(self, coll: Collection, batches: list[DocBatch]):
        self.colls = (coll,)
        self.insert = coll.insert
        self.batches = batches

    def __call__(self, i: int) -> None:
        self.insert(self.batches[i])

    def opened(self, view: AsyncView) -> None:  # type: ignore[override]
        self.ainsert = view.insert

    async def acall(self, i: int) -> None:
        await self.ainsert(self.batches[i])


@dataclass
class RunContext:
    """What a workload sees during one run. The index and search parameters
    are the run's (``scenario.Run``), typed: the workload hands them to the
    collection as they are (not given: the store's defaults)."""

    run_id: str
    store: Store
    driver: Driver
    mode: str = "default"
    index: IndexParams = None  # type: ignore[assignment]  # the index the run builds
    search: SearchParams = None  # type: ignore[assignment]  # the entry's fixed search params
    # each search setting to measure: the sweep's product over ``search``
    searches: tuple[SearchParams, ...] = None  # type: ignore[assignment]
    tasks: list[TaskRecord] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)  # run-level (shared by settings)
    setting_results: list[SettingResult] = field(default_factory=list)  # per search setting
    headline: str | None = None  # the task that ranks this run among its repeats
    collections: list[Collection] = field(default_factory=list)
    # the managed server the store runs on (``stores.opening``): sampled
    # beside each task; None for an embedded engine or one given by URL
    server: Server | Cluster | None = None
    _workdir: Path | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.index is None:
            self.index = self.store.Index()
        if self.search is None:
            self.search = self.store.Search()
        if self.searches is None:
            self.searches = (self.search,)

    @property
    def workdir(self) -> Path:
        """A private directory for the run's shared files, made on first use
        (most runs need none); ``remove_workdir`` deletes it."""
        if self._workdir is None:
            self._workdir = leftovers.make_dir("run")
        return self._workdir

    def remove_workdir(self) -> None:
        if self._workdir is not None:
            leftovers.remove_dir(self._workdir)
            self._workdir = None

    def collection(self, name: str, schema: Schema) -> Collection:
        """A new collection whose name marks it as this run's own."""
        coll = self.store.create_collection(
            f"storebench_{self.run_id[-8:]}_{name}", schema, self.index
        )
        self.collections.append(coll)
        return coll

    def share(self, name: str, array: np.ndarray) -> Shared:
        return Shared(array, self.workdir / f"{name}.npy")

    def executor_name(self, task: Task) -> str:
        """The executor a task's clients run on (for its record)."""
        return choose_executor(
            self.store, self.driver.executor, task.executor, task.lanes, thinking=task.thinks
        )

    def measure(
        self, task: Task, coll: Collection, derive: Derive | None = None, **fields: Any
    ) -> tuple[TaskStats, list[Any]]:
        """Time a task; its record (``fields`` and what ``derive`` adds) joins
        the run's even if it is interrupted."""
        return self.measure_mix([task], coll, derive, **fields)[0]

    def measure_mix(
        self,
        tasks: list[Task],
        coll: Collection,
        derive: Derive | None = None,
        per_task: list[dict[str, Any]] | None = None,
        **fields: Any,
    ) -> list[tuple[TaskStats, list[Any]]]:
        """Time tasks that run at the same time; each gets its own record:
        the measured stats, ``fields`` (and ``per_task[i]``), and what
        ``derive(record, payloads)`` computes from them (recall, client CPU,
        ...) before the record is added: a record is made whole, once."""
        res: dict[str, Any] = {}
        try:
            with self._resources(res) as sampler:
                out = self.driver.run_mix(tasks, coll)
        except Interrupted as exc:
            for partial in exc.partial:
                partial.extra.update(res)
                self.tasks.append(TaskRecord.of(partial, **fields))
            raise
        for i, (stats, payloads) in enumerate(out):
            stats.extra.update(res)
            if sampler is not None:  # each node's CPU over this task's measured window
                nodes = sampler.node_cpu_during(stats.start_unix, stats.elapsed_ns / 1e9)
                if nodes is not None:
                    stats.extra["server_node_cpu_s"] = nodes
            own = fields | (per_task[i] if per_task else {})
            self._add(stats, own, derive, payloads)
        return out

    def _add(self, stats: TaskStats, fields: dict[str, Any], derive: Any, arg: Any) -> None:
        rec = TaskRecord.of(stats, **fields)
        if derive is None:
            self.tasks.append(rec)
            return
        try:
            more = dict(derive(rec, arg))
        except BaseException:
            self.tasks.append(rec)  # what was measured stays, whatever failed after
            raise
        self.tasks.append(TaskRecord.of(stats, **(fields | more)))

    @contextlib.contextmanager
    def _resources(self, out: dict[str, Any]) -> Iterator[ResourceSampler | None]:
        """Samples a managed server's RSS, CPU and data size while a phase
        runs (a cluster's nodes, or a node with a quota: each node's CPU)."""
        server = self.server
        if server is None:
            yield None
            return
        per_node = len(server.dirs) > 1 or any(server.limits)
        sampler = ResourceSampler(
            server.processes, server.dirs, server.node_cpu if per_node else None
        )
        try:
            yield sampler
        finally:
            out.update(sampler.stop())

    def once(
        self,
        name: str,
        fn: Callable[[], Any],
        items: int = 1,
        since_ns: int | None = None,
        derive: Derive | None = None,
        **fields: Any,
    ) -> Any:
        """Time one call; ``since_ns`` (a measured task's ``end_ns``) times it
        from that task's end instead (see ``Driver.once``). ``derive(record,
        result)`` adds fields from what the call returned."""
        res: dict[str, Any] = {}
        with self._resources(res):
            stats, out = self.driver.once(name, fn, items, since_ns)
        stats.extra.update(res)
        self._add(stats, fields, derive, out)
        return out

    def unsupported(self, task: str, exc: NotSupported) -> None:
        """A task the store cannot do: recorded as such, never silently skipped."""
        self.tasks.append(TaskRecord(name=task, unsupported=str(exc)))

    def setting_done(
        self, setting: SearchParams, headline: str | None, scores: Mapping[str, float | None]
    ) -> None:
        """One search setting measured: its own scores (recall@k, ...) and
        the task that ranks runs at it (``records.SettingResult``)."""
        self.setting_results.append(
            SettingResult(search=setting.given(), headline=headline, scores=dict(scores))
        )

    def run_headline(self) -> str | None:
        if self.headline is not None:
            return self.headline
        return self.setting_results[0].headline if len(self.setting_results) == 1 else None


# derive(record, payloads or the call's result) -> more fields for the record
Derive = Callable[[TaskRecord, Any], Mapping[str, Any]]


def workload_names() -> list[str]:
    return WORKLOADS.names()


def workload_class(name: str) -> type[Workload]:
    cls: type[Workload] = WORKLOADS.load(name)
    return cls
