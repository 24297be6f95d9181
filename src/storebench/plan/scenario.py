"""Scenario files: YAML, validated, with errors that name the key and line.

A scenario names a workload, the stores to run it on, the workload's
parameters and an optional grid (each key a list; the plan is their cartesian
product). ``--set key=value`` overrides any key (``params.`` may be left off
for workload parameters); values are read as YAML scalars.

Reading the file and the command line's overrides, and where an error
points (a line or a flag), is ``plan/loading.py``; here are the file's model,
``Run`` and the plan it expands to.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from storebench.driver.choice import choose_executor, executor_class
from storebench.errors import UserError
from storebench.plan import loading
from storebench.results import files as results
from storebench.stores.base import StoreSpec, store_class
from storebench.stores.config import SpecError, StoreOptions
from storebench.stores.params import EngineParams, IndexParams, SearchParams
from storebench.workloads.base import workload_class

MAX_RUNS = 100_000  # a plan larger than this is a typo (repeats: 1000000), not a study
_key = functools.partial(json.dumps, sort_keys=True)  # a grid value, comparable


class StoreEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    engine: str
    url: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    index: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, Any] = Field(default_factory=dict)


class DriverConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    executor: str | None = None  # threads | processes | plug-in; default: the store's preference
    # the ray executor: "local" starts a private Ray on 127.0.0.1 for the run;
    # "auto" or HOST:PORT joins a running cluster (docs/ray.md)
    ray_address: str = "local"
    ray_timeout_s: float = Field(default=60.0, gt=0)  # limit on every wait for a Ray client
    # the async executor: worker processes, one event loop each (0: a loop
    # in this process; None: by the machine, driver/aio.py workers_for),
    # and the loop (auto: uvloop where installed)
    workers: int | None = Field(default=None, ge=0)
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    # the per-interval latency and throughput series of every timed task
    interval_s: float = Field(default=1.0, gt=0)
    # refuse a plan whose largest run needs more memory than is available
    # (storebench.plan.memory, before any run); not an executor setting
    memory_check: bool = True


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    workload: str
    mode: Literal["default", "compat"] = "default"
    repeats: int = Field(1, ge=1)
    stores: list[StoreEntry] = Field(min_length=1)
    driver: DriverConfig = Field(default_factory=DriverConfig)
    params: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    # grid axes that step together, the i-th value of each (data and nodes
    # doubled together), instead of across one another
    together: list[list[str]] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        # the results file is <results dir>/<name>.jsonl: nothing that leaves it
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
            raise ValueError(
                "a scenario name is a plain file name (letters, digits, '.', '_', '-'; "
                "not starting with '.')"
            )
        if len(v) > results.MAX_STEM:  # then the file system refuses the results file
            raise ValueError(f"at most {results.MAX_STEM} characters (it names the results file)")
        return v

    @field_validator("stores", mode="before")
    @classmethod
    def _short_stores(cls, v: Any) -> Any:
        # "memory" is short for {engine: memory}
        if isinstance(v, list):
            for s in v:
                if s is None:  # YAML reads a bare null (or an empty item) as None
                    raise ValueError(
                        "empty store entry (a store named null must be quoted: 'null')"
                    )
            return [{"engine": s} if isinstance(s, str) else s for s in v]
        return v


@dataclass(frozen=True)
class Run:
    """One point of the plan: a workload on one store with fixed parameters,
    all of them validated (the index and search parameters as the store's
    ``Index`` and ``Search`` models, carried down to the adapter)."""

    scenario: str
    workload: str
    spec: StoreSpec  # how to reach the store (engine, url, options)
    params: Any  # the workload's validated Params model
    mode: str
    repeat: int
    grid_point: dict[str, Any]
    executor: str | None
    not_applicable: tuple[str, ...] = ()  # grid keys this engine does not have
    driver: dict[str, Any] = field(default_factory=dict)  # executor settings (driver.*)
    index: IndexParams = field(default_factory=IndexParams)  # the store's build parameters
    search: SearchParams = field(default_factory=SearchParams)  # the entry's fixed ones
    # each search setting the run measures (the index is built once for
    # them): the product of the grid's search.X axes over ``search``
    searches: tuple[SearchParams, ...] = (SearchParams(),)

    @property
    def sweep(self) -> dict[str, list[Any]]:
        """The search parameters ``searches`` vary, with their values."""
        fixed, given = self.search.given(), [s.given() for s in self.searches]
        keys = [k for g in given for k in g if any(h.get(k) != fixed.get(k) for h in given)]
        return {k: list(dict.fromkeys(g[k] for g in given)) for k in dict.fromkeys(keys)}

    def store_info(self) -> dict[str, Any]:
        """The store as records show it: ``spec.describe()`` and the index
        and search parameters given (no credentials)."""
        return self.spec.describe() | {"index": self.index.given(), "search": self.search.given()}

    @property
    def key(self) -> str:
        """Stable address of this run's parameters (for --resume)."""
        blob = json.dumps(
            [
                self.scenario,
                self.workload,
                self.store_info(),
                self.params.model_dump(),
                self.mode,
                self.repeat,
            ],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Scenario:
    def __init__(
        self,
        source: Path,
        raw: dict[str, Any],
        lines: loading.Lines,
        overrides: dict[str, str],
        file_keys: frozenset[str] = frozenset(),
    ):
        self.source = source
        self.lines = lines
        self.overrides = overrides  # dotted key -> "--set key" for error messages
        self.file_keys = file_keys  # workload parameters the file itself states
        self.file = self._validate(raw)
        self._runs: list[Run] | None = None  # the plan, made once

    @classmethod
    def load(
        cls,
        name_or_path: str,
        sets: list[str] = (),  # type: ignore[assignment]
        stores: list[str] = (),  # type: ignore[assignment]
        values: dict[str, Any] | None = None,
        store_options: list[str] = (),  # type: ignore[assignment]
    ) -> Scenario:
        """``sets`` are ``key=value`` texts (values read as YAML, as on the
        command line); ``values`` the same keys with values already typed
        (from Python: not parsed again); ``store_options`` are
        ``ENGINE.KEY[.SUB]=VALUE`` texts (``--store-option``), set in the
        options of every store of that engine."""
        top = set(ScenarioFile.model_fields)
        scenario = cls(*loading.read(name_or_path, sets, stores, values, store_options, top))
        scenario.plan()  # checks workload params, stores and grid before anything runs
        return scenario

    def _validate(self, raw: dict[str, Any]) -> ScenarioFile:
        try:
            data = ScenarioFile.model_validate(raw)
        except ValidationError as exc:
            raise self.error(*loading.first_error(exc)) from exc
        # the plan's size, blamed on its largest factor
        factors = {("repeats",): data.repeats, ("stores",): len(data.stores)}
        factors |= {("grid", k): len(v) for k, v in data.grid.items()}
        if math.prod(factors.values()) > MAX_RUNS:
            msg = f"repeats x stores x grid values make more than {MAX_RUNS:,} runs"
            raise self.error(max(factors, key=factors.__getitem__), msg)
        return data

    def error(self, loc: tuple[Any, ...], msg: str) -> UserError:
        return loading.error(self.source, self.lines, self.overrides, loc, msg)

    def stated(self, grid_keys: list[str]) -> frozenset[str]:
        """The workload parameters given for this run (``Workload.resolve``):
        those set from the command line or Python, every grid axis, and the
        file's own only when the file also names the dataset. A file's
        ``n: 10000`` sizes its synthetic data; with ``--set dataset=X`` the
        dataset brings its own."""
        user = {k.removeprefix("params.") for k in self.overrides if k.startswith("params.")}
        axes = {k.removeprefix("params.") for k in grid_keys}
        mine = self.file_keys if "dataset" in self.file_keys and "dataset" not in user else set()
        return frozenset(user | axes | mine)

    def _param_loc(self, key: str, grid_keys: list[str]) -> tuple[Any, ...]:
        for g in grid_keys:
            if key == g.removeprefix("params."):
                return ("grid", g)
        return ("params", *key.split("."))

    def plan(self) -> list[Run]:
        """The runs, made (and every parameter validated) once: ``load``
        makes them, a runner takes them from here."""
        if self._runs is None:
            self._runs = self._make_plan()
        return list(self._runs)

    def _engine_params(
        self, model: type[EngineParams], given: dict[str, Any], loc: tuple[Any, ...], engine: str
    ) -> Any:
        """``given`` as a store's ``Index`` or ``Search`` model; an error
        naming the key (at ``loc``) and where it was given."""
        try:
            return model.model_validate(given)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = err["loc"][0] if err["loc"] else None
            if err["type"] == "extra_forbidden":
                kind = "index" if issubclass(model, IndexParams) else "search"
                known = ", ".join(model.names()) or "none"
                msg = f"unknown {kind} parameter for {engine} (known: {known})"
            else:
                msg = f"{err['msg']} (got {err['input']!r})"
            where = loc if loc[0] == "grid" or key is None else (*loc, key)
            raise self.error(where, msg) from exc

    def _make_plan(self) -> list[Run]:
        f = self.file
        wl = workload_class(f.workload)
        checked = []  # each store's options, typed
        for i, entry in enumerate(f.stores):
            try:
                cls = store_class(entry.engine)
            except UserError as exc:
                raise self.error(("stores", i, "engine"), str(exc).split(": ", 1)[-1]) from exc
            try:  # the URL and options as the store reads them (connecting to nothing)
                checked.append(cls.check_spec(entry.url, entry.options))
            except SpecError as exc:
                raise self.error(("stores", i, *exc.key), exc.message) from exc
            missing = sorted(str(c) for c in wl.requires - cls.capabilities)
            if missing:
                raise self.error(
                    ("stores", i),
                    f"{entry.engine} cannot run {f.workload}: no {', '.join(missing)}",
                )
            try:
                executor = executor_class(choose_executor(cls, f.driver.executor))
            except UserError as exc:
                raise self.error(("driver", "executor"), str(exc).split(": ", 1)[-1]) from exc
            missing = sorted(str(c) for c in executor.requires - cls.capabilities)
            if missing:
                raise self.error(
                    ("driver", "executor"),
                    f"{entry.engine} cannot serve {executor.name} clients: no {', '.join(missing)}",
                )
        for key, values in f.grid.items():
            if not values:
                raise self.error(("grid", key), "empty: a grid axis needs at least one value")
        for key in f.grid:
            head = key.split(".")[0]
            if (
                head not in ("params", "index", "search", "store")
                and head not in wl.Params.model_fields
            ):
                raise self.error(
                    ("grid", key),
                    "grid keys are workload parameters, index.X, search.X "
                    "or store.X (a store option)",
                )
        classes = [store_class(e.engine) for e in f.stores]
        for key in f.grid:
            kind, _, name = key.partition(".")
            # a grid key no store here has: an error when the user just typed
            # it (--set), else it collapses (recorded as not_applicable), as a
            # scenario's HNSW grid does for exact stores
            if (
                kind in ("index", "search")
                and f"grid.{key}" in self.overrides
                and not any(
                    name in (c.Search if kind == "search" else c.Index).names() for c in classes
                )
            ):
                raise self.error(
                    ("grid", key), f"no store in this scenario has {kind} parameter {name!r}"
                )
            # a store option no store has is a typo wherever it was written
            if kind == "store" and not any(name in c.Options.names() for c in classes):
                raise self.error(("grid", key), f"no store in this scenario has option {name!r}")
        self._check_together()
        param_keys = [k for k in f.grid if not k.startswith(("index.", "search.", "store."))]
        index_keys = [k for k in f.grid if k.startswith("index.")]
        search_keys = [k for k in f.grid if k.startswith("search.")]
        option_keys = [k for k in f.grid if k.startswith("store.")]
        engines = [
            self._store_params(i, e, index_keys, search_keys, option_keys)
            for i, e in enumerate(f.stores)
        ]
        stated = self.stated(param_keys)
        fields = wl.Params.model_fields
        runs = []
        for point in itertools.product(*(f.grid[k] for k in param_keys)):
            params = dict(f.params) | {
                k.removeprefix("params."): v for k, v in zip(param_keys, point, strict=True)
            }
            try:
                model = wl.Params.model_validate(params)
            except ValidationError as exc:
                loc, msg = loading.first_error(exc)
                at = self._param_loc(str(loc[0]), param_keys)  # a grid axis: its key
                raise self.error(at if at[0] == "grid" else ("params", *loc), msg) from exc
            try:
                model = wl.resolve(model, stated)
                wl.check(model)
            except UserError as exc:
                # an error naming a parameter points at where it was given;
                # one naming a file (a dataset's) stays as it is
                if (exc.where or "").split(".")[0] not in fields:
                    raise
                msg = str(exc).removeprefix(f"{exc.where}: ")
                raise self.error(self._param_loc(exc.where or "", param_keys), msg) from exc
            for i, entry in enumerate(f.stores):
                sp = engines[i]
                variants = sp.variants or [(dict(entry.options), checked[i], {})]
                for (options, typed, option_point), index in itertools.product(
                    variants, sp.indexes
                ):
                    spec = StoreSpec(entry.engine, entry.url, options, typed)
                    gp = (
                        dict(zip(param_keys, point, strict=True))
                        | option_point
                        | sp.grid_point(index)
                    )
                    for r in range(f.repeats):
                        runs.append(
                            Run(
                                f.name,
                                f.workload,
                                spec,
                                model,
                                f.mode,
                                r,
                                gp,
                                f.driver.executor,
                                sp.not_applicable,
                                f.driver.model_dump(exclude={"executor", "memory_check"}),
                                index,
                                sp.search,
                                sp.searches,
                            )
                        )
        return [r for r in runs if self._in_step(r.grid_point)]

    def _check_together(self) -> None:
        """``together``: grid axes (not ``search.X``, a sweep inside a run),
        each in one group, of distinct values and as many as the others'."""
        f, seen = self.file, set()
        for i, group in enumerate(f.together):
            axes = [[_key(v) for v in f.grid.get(k, ())] for k in group]
            problems = [
                (len(group) < 2, "a group steps two or more grid axes together"),
                *((k not in f.grid, f"{k!r} is not a grid axis here") for k in group),
                *((k.startswith("search."), f"{k!r} is swept inside each run") for k in group),
                *((k in seen, f"{k!r} is in two groups") for k in group),
                (len({len(a) for a in axes}) > 1, "axes stepped together need as many values each"),
                *(
                    (len(set(a)) < len(a), f"{k!r}: a value repeats")
                    for k, a in zip(group, axes, strict=True)
                ),
            ]
            for bad, message in problems:
                if bad:
                    raise self.error(("together", i), message)
            seen |= set(group)

    def _in_step(self, point: dict[str, Any]) -> bool:
        """The grid point takes the same step of every ``together`` group
        (an axis a store does not have does not count for it)."""
        steps = {k: [_key(v) for v in vs] for k, vs in self.file.grid.items()}
        return all(
            len({steps[k].index(_key(point[k])) for k in group if k in point}) < 2
            for group in self.file.together
        )

    def _store_params(
        self,
        i: int,
        entry: StoreEntry,
        index_keys: list[str],
        search_keys: list[str],
        option_keys: list[str],
    ) -> _StoreParams:
        """A store entry's index and search parameters, typed: its own values,
        and the grid's ``index.X`` / ``search.X`` axes the engine has; and its
        options across the grid's ``store.X`` axes it has (the others
        collapse for it: recorded as not applicable)."""
        cls = store_class(entry.engine)
        at = ("stores", i)
        own_options = [k for k in option_keys if k.removeprefix("store.") in cls.Options.names()]
        for key in own_options:  # each value as the store reads it, named by the grid key
            name = key.removeprefix("store.")
            for v in self.file.grid[key]:
                try:
                    cls.check_spec(entry.url, dict(entry.options) | {name: v})
                except SpecError as exc:
                    raise self.error(("grid", key), exc.message) from exc
        variants = []
        for combo in itertools.product(*(self.file.grid[k] for k in own_options)):
            point = dict(zip(own_options, combo, strict=True))
            options = dict(entry.options) | {k.removeprefix("store."): v for k, v in point.items()}
            variants.append((options, cls.check_spec(entry.url, options), point))
        at_index = (*at, "index")
        # the entry's own values first (an error names their key), then each grid value
        self._engine_params(cls.Index, entry.index, at_index, entry.engine)
        search = self._engine_params(cls.Search, entry.search, (*at, "search"), entry.engine)
        own_index = [k for k in index_keys if k.removeprefix("index.") in cls.Index.names()]
        own_search = [k for k in search_keys if k.removeprefix("search.") in cls.Search.names()]
        axes = [(k, cls.Index) for k in own_index] + [(k, cls.Search) for k in own_search]
        for key, model in axes:
            name = key.partition(".")[2]
            for v in self.file.grid[key]:  # named by the grid key's line
                self._engine_params(model, {name: v}, ("grid", key), entry.engine)
        names = [k.removeprefix("index.") for k in own_index]
        points = itertools.product(*(self.file.grid[k] for k in own_index))
        indexes = [
            self._engine_params(
                cls.Index, entry.index | dict(zip(names, p, strict=True)), at_index, entry.engine
            )
            for p in points
        ]
        sweep = {k.removeprefix("search."): list(self.file.grid[k]) for k in own_search}
        searches = tuple(
            self._engine_params(
                cls.Search,
                entry.search | dict(zip(sweep, combo, strict=True)),
                (*at, "search"),
                entry.engine,
            )
            for combo in itertools.product(*sweep.values())
        )
        return _StoreParams(
            indexes,
            own_index,
            search,
            searches,
            tuple(
                k
                for k in index_keys + search_keys + option_keys
                if k not in own_index + own_search + own_options
            ),
            variants if own_options else [],
        )


@dataclass(frozen=True)
class _StoreParams:
    """One store entry's parameters across the grid (``Scenario._store_params``)."""

    indexes: list[IndexParams]  # one run per index setting (the grid's index.X axes)
    index_keys: list[str]  # the grid's index.X axes this engine has
    search: SearchParams  # the entry's fixed search parameters
    searches: tuple[SearchParams, ...]  # the grid's search.X axes it has over them
    not_applicable: tuple[str, ...]
    # the entry's options across the grid's store.X axes it has: (options,
    # typed, grid point) each; empty without such an axis (the entry's own)
    variants: list[tuple[dict[str, Any], StoreOptions, dict[str, Any]]] = field(
        default_factory=list
    )

    def grid_point(self, index: IndexParams) -> dict[str, Any]:
        return {k: getattr(index, k.removeprefix("index.")) for k in self.index_keys}
