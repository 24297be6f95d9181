"""Result records, typed: what a run wrote and what every reader reads.

One run is one ``RunRecord``: its store and parameters, its status, the
``TaskRecord`` of each measured task, run-level metrics and, for a run that
swept search parameters over one index build, one ``SettingResult`` per
setting (its own scores, and the task that ranks runs of it). Scores
(recall@k, precision@k, ...) sit in ``scores``; what each is, in
``results/scores.py``.
Workloads make ``TaskRecord``s (``TaskRecord.of`` a driver's ``TaskStats``),
the runner makes the ``RunRecord`` and ``results.append`` writes it; ``show``,
``report``, ``compare``, ``export`` and ``frames()`` read them back through
``read`` here.

Every model declares its fields and refuses others; readers read them by
attribute. Records older than ``RECORD_VERSION`` are upgraded as they are
read (``upgrade``); a record from a newer storebench is refused in one line.

Here too is the one answer to "which runs are repeats of one configuration"
(``config_identity``), used by the reports, ``compare``, ``export`` and
``--resume`` alike, and how a sweep's run splits into one configuration per
search setting (``RunRecord.per_setting``). One module (~530 lines) on
purpose: the models, their identity and the upgrade of older records change
together with the record's shape.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from storebench.errors import UserError
from storebench.results import files as results
from storebench.results import scores as catalogue
from storebench.results.scores import RECALL, Score

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from storebench.measure.metrics import TaskStats

# 1: tasks and metrics as the workloads wrote them; a sweep's recall@k in the
#    run's metrics was its first setting's.
# 2: ``settings`` (per search setting: metrics, headline), ``headline``,
#    ``store.url_given``, ``index_build`` on index tasks; a rate is None
#    where the task did no work.
# 3: scores (recall@k, precision@k) in ``scores`` (a task's, a setting's),
#    not beside the other fields; a run's are its setting's.
RECORD_VERSION = 3

IndexBuild = Literal["built", "during_insert"]


class Fields(BaseModel):
    """A record part: every field declared and typed (a key it does not
    declare is refused), read by attribute."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the fields that were given, nested parts as dicts."""
        return self.model_dump(exclude_unset=True)


class TaskRecord(Fields):
    """One measured task (or one timed phase) of a run.

    ``ops_per_s`` and ``items_per_s`` are counted (operations or items over
    the wall time), and None where the task did no such work; ``scores``
    what a search found, scored (``results/scores.py``). Workload fields
    (the search setting, client CPU ...) sit beside."""

    name: str = "?"
    unsupported: str | None = None  # the store cannot do this task: why
    clients: int = 1
    ops: int = 0
    items: int = 0
    elapsed_s: float = 0.0
    ops_per_s: float | None = None
    items_per_s: float | None = None
    latency_ns: dict[str, int | float] = Field(default_factory=dict)
    service_ns: dict[str, int | float] | None = None  # open loop: without queueing
    errors: dict[str, int] = Field(default_factory=dict)
    skipped: dict[str, int] = Field(default_factory=dict)
    complete: bool = True
    client_cpu_s: float | None = None
    histogram: str | None = None  # HDR, compressed base64
    phase: str | None = None  # upload | index | search | ...
    search: dict[str, Any] | None = None  # the swept search setting it ran at
    setting: dict[str, Any] | None = None  # a setting the workload chose (tuned)
    executor: str | None = None
    filter: str | None = None
    selectivity: float | None = None
    n: int | None = None  # documents loaded when it ran
    # an index task: did the call build the index, or had the inserts built it?
    index_build: IndexBuild | None = None
    client_cpu_per_s: float | None = None
    client_cpu_ceiling: float | None = None
    client_saturated: bool | None = None
    server_cpu_per_s: float | None = None
    start_unix: float | None = None  # the measured start, seconds since the epoch
    # a timed task, per interval (``metrics.Series.to_record``): interval_s,
    # ops, ops_per_s, latency_ns {p50, p99, max}, hdr_interval_s, hdr (encoded
    # HDR histograms); where they apply, items_per_s, service_ns {p50, p99,
    # max} (open loop) and errors; absent in records before it and in
    # one-shot phases
    series: dict[str, Any] | None = None
    scores: dict[str, float | None] = Field(default_factory=dict)
    clamped_over_1h: int | None = None  # latencies above the histogram's range
    # the driver's: machine load over the task, the clients' OS threads and
    # (async) their loops, lanes per client, the window's floor; a phase's call
    machine_load: dict[str, Any] | None = None
    client_threads: int | None = None
    client_loop: dict[str, Any] | None = None
    inflight: int | None = None
    min_window_s: float | None = None
    call_s: float | None = None
    # a managed server beside the task (``measure/resources.py``)
    server_cpu_s: float | None = None
    server_sampled_s: float | None = None
    server_peak_rss_bytes: int | None = None
    server_data_bytes: int | None = None
    # each node's CPU seconds over the measured window (a cluster, a node with a quota)
    server_node_cpu_s: dict[str, float] | None = None
    # a search: python or native client, an open loop's rate, the queries
    # scored and those given fewer than k, the engine's own time per call
    client: str | None = None
    target_rate: float | None = None
    queries_scored: int | None = None
    short_answers: int | None = None
    engine: dict[str, Any] | None = None
    # ingest: the insert's documents and requests (their rates), the
    # settle's count and polls, whether it counts, from when it is timed
    docs: int | None = None
    requests: int | None = None
    docs_per_s: float | None = None
    requests_per_s: float | None = None
    pipeline: int | None = None
    latency_per: str | None = None  # request, or pipeline
    held: int | None = None
    polls: int | None = None
    counted: bool | None = None
    timed_from: str | None = None
    per_iter: int | None = None  # social: items per loop iteration
    busy_s: float | None = None  # social: time spent in calls
    # streaming: the stage and its last size, the lag probe's result, a
    # search's share of the inserts' time, an insert's rate kept or not
    stage: float | None = None
    n_end: int | None = None
    lag_s: float | None = None
    visible: bool | None = None
    inserting_share: float | None = None
    planned_s: float | None = None
    achieved_rate: float | None = None
    sustained: bool | None = None

    @classmethod
    def of(cls, stats: TaskStats, **fields: Any) -> TaskRecord:
        """The record of what the driver measured, with the workload's
        ``fields`` (they win over the measured ones: e.g. ``items`` when the
        last batch was short). Rates follow the final ops and items."""
        rec: dict[str, Any] = {
            "name": stats.name,
            "clients": stats.clients,
            "ops": stats.ops,
            "items": stats.items,
            "elapsed_s": stats.elapsed_ns / 1e9,
            "latency_ns": stats.latency.summary(),
            "errors": dict(stats.errors),
            "skipped": dict(stats.skipped),
            "complete": stats.complete,
            "client_cpu_s": round(stats.cpu_s, 6),
            "histogram": stats.latency.encode() if stats.latency.count else None,
        }
        if stats.service is not None:
            rec["service_ns"] = stats.service.summary()
        if stats.latency.clamped:
            rec["clamped_over_1h"] = stats.latency.clamped
        if stats.start_unix is not None:
            rec["start_unix"] = round(stats.start_unix, 6)
        if stats.series is not None and len(stats.series) and (stats.latency.count or stats.errors):
            items = fields.get("items", stats.items)  # a short last batch: the mean per op
            per_op = items / stats.ops if stats.ops else 1.0
            rec["series"] = stats.series.to_record(stats.elapsed_ns, stats.service_series, per_op)
        rec.update(stats.extra)
        rec.update(fields)
        wall = rec["elapsed_s"]
        for count, rate in (("ops", "ops_per_s"), ("items", "items_per_s")):
            if rate not in fields:
                rec[rate] = rec[count] / wall if rec[count] and wall > 0 else None
        return cls.model_validate(rec)

    @property
    def measured(self) -> bool:
        return self.unsupported is None

    def score_keys(self, score: Score | None = None) -> list[str]:
        """Its score keys (of ``score`` only, if given), in the catalogue's order."""
        return catalogue.ordered(self.scores, score)

    def points(self) -> int:
        """Intervals of its series (``metrics.Series``): points over time."""
        return len((self.series or {}).get("ops") or [])

    def number(self, key: str) -> float | None:
        """A numeric field by key; ``latency_ns.p99`` style for a latency,
        ``recall@10`` for a score."""
        part, _, sub = key.partition(".")
        if catalogue.is_key(key):
            v = self.scores.get(key)
        elif sub:
            d = getattr(self, part, None)
            v = d.get(sub) if isinstance(d, dict) else None
        else:
            v = getattr(self, key, None)
        return as_number(v)


def as_number(v: Any) -> float | None:
    """``v`` as a float where it is a number (a bool is none), else None."""
    return None if isinstance(v, bool) or not isinstance(v, int | float) else float(v)


class SettingResult(Fields):
    """One search setting of a run: its own scores (its first unfiltered
    scored task's) and the task that ranks its runs."""

    search: dict[str, Any] = Field(default_factory=dict)
    headline: str | None = None
    scores: dict[str, float | None] = Field(default_factory=dict)


class StoreInfo(Fields):
    engine: str = "?"
    url: str | None = None  # redacted
    # the user gave the url (else storebench chose it: a managed server's
    # address, a private temporary directory); None in records before v2
    url_given: bool | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    index: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, Any] = Field(default_factory=dict)


class RunRecord(Fields):
    """One run. Only ``run_id`` is required: a hand-made record may lack the rest."""

    record_version: int = RECORD_VERSION
    run_id: str
    key: str | None = None  # the planned run's address (repeat included)
    scenario: str | None = None
    workload: str | None = None
    mode: str = "default"
    repeat: int = 0
    store: StoreInfo = Field(default_factory=StoreInfo)
    params: dict[str, Any] = Field(default_factory=dict)
    grid_point: dict[str, Any] = Field(default_factory=dict)
    search_sweep: dict[str, list[Any]] = Field(default_factory=dict)
    not_applicable: list[str] = Field(default_factory=list)
    status: str = "?"
    error: str | None = None
    traceback: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    versions: dict[str, Any] = Field(default_factory=dict)
    machine: dict[str, Any] = Field(default_factory=dict)
    server: dict[str, Any] | None = None
    # the topology the store reports (nodes; where each shard's copies live)
    topology: dict[str, Any] | None = None
    executor: dict[str, Any] | None = None
    tasks: list[TaskRecord] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    settings: list[SettingResult] = Field(default_factory=list)
    # the task whose ops/s ranks runs of this configuration (``headline``)
    headline: str | None = None
    cleanup_errors: list[str] | None = None
    machine_load: dict[str, Any] | None = None  # its tasks' (``noise.summary``)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def scores(self) -> dict[str, float | None]:
        """The run's scores: its one search setting's (a sweep's are each setting's)."""
        return self.settings[0].scores if len(self.settings) == 1 else {}

    def task(self, name: str) -> TaskRecord | None:
        for t in self.tasks:
            if t.name == name:
                return t
        return None

    def headline_task(self) -> TaskRecord | None:
        """The task that ranks this run among its repeats (``headline``)."""
        name = self.headline or headline_of(self.tasks)
        t = self.task(name) if name else None
        return t if t is not None and t.measured else None

    @property
    def index_during_insert(self) -> bool:
        """The engine built its index as documents arrived: the upload
        includes it and the index step had nothing left to do."""
        return any(t.index_build == "during_insert" for t in self.tasks)

    def per_setting(self) -> list[RunRecord]:
        """One record per search setting of a sweep (the index built once,
        each setting measured in turn): its store's search parameters include
        the setting, its tasks are the shared ones (upload, index) plus the
        setting's, its scores and headline the setting's. The run id stays:
        these are views of one run. A run with no setting to split is itself."""
        if not any(s.search for s in self.settings):
            return [self]
        out = []
        for s in self.settings:
            store = self.store.model_copy(update={"search": {**self.store.search, **s.search}})
            out.append(
                self.model_copy(
                    update={
                        "store": store,
                        "tasks": [t for t in self.tasks if not t.search or t.search == s.search],
                        "headline": s.headline
                        or headline_of([t for t in self.tasks if t.search == s.search]),
                        "settings": [s],
                        "search_sweep": {},
                    }
                )
            )
        return out

    def identity(self) -> dict[str, Any]:
        return config_identity(self)


# --- the headline task -------------------------------------------------------------


def headline_of(tasks: Iterable[TaskRecord]) -> str | None:
    """For a record that names none (older records): the unfiltered task
    scored for recall with the most clients (at the largest size), else the
    first measured task of more than one operation."""
    measured = [t for t in tasks if t.measured]
    scored = [t for t in measured if t.score_keys(RECALL) and not t.filter]
    if scored:
        best = max(scored, key=lambda t: (t.n or 0, t.clients))
        return best.name
    for t in measured:
        if t.ops > 1:
            return t.name
    return None


# --- configuration identity ----------------------------------------------------------


def private_location(url: Any) -> bool:
    """A path an embedded store made for itself (a ``storebench-*``
    temporary directory, or a file in one), for records that do not say
    whether the user gave their url (before version 2)."""
    if not isinstance(url, str) or "://" in url:
        return False
    return any(part.startswith("storebench-") for part in Path(url).parts)


def url_identifies(rec: RunRecord) -> bool:
    """Whether the store's url is part of what the run measured: a url the
    user gave names their server or file; one storebench chose (a managed
    server's address with its new port, a private temporary directory) is
    different every run and names nothing."""
    if rec.store.url is None:
        return False
    if rec.store.url_given is not None:
        return rec.store.url_given
    return not (rec.server or {}).get("managed") and not private_location(rec.store.url)


# identity keys a planned run cannot know before it runs (``--resume``); of
# the dataset's, it knows the content hash (``Workload.data_identity``)
KNOWN_AFTER_RUN = ("versions.", "executor", "dataset.")
KNOWN_BEFORE_RUN = ("dataset.content_hash",)


def _flatten(prefix: str, d: Mapping[str, Any], out: dict[str, Any]) -> None:
    for k, v in sorted(d.items()):
        out[f"{prefix}.{k}"] = v


def config_identity(rec: RunRecord) -> dict[str, Any]:
    """What makes a run the configuration it is, as dotted keys: the
    workload, its mode and parameters (clients among them), the engine and
    its version, the store's options, index and search parameters (a sweep
    record's per-setting view includes its setting), the url when the user
    gave it, where the clients ran, and the dataset's identity where the
    record has one. Never the run id, the repeat, the time, nor an address
    storebench chose for itself."""
    store = rec.store
    out: dict[str, Any] = {
        "workload": rec.workload,
        "mode": rec.mode,
        "store.engine": store.engine,
        "store.url": store.url if url_identifies(rec) else None,
        "versions.engine": rec.versions.get("engine"),
        "executor": (rec.executor or {}).get("name"),
    }
    for part in ("options", "index", "search"):
        _flatten(f"store.{part}", getattr(store, part) or {}, out)
    _flatten("params", rec.params, out)
    if isinstance(data := rec.metrics.get("data"), dict):  # as the workload described it
        _flatten("dataset", data, out)
    return out


def digest(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def config_id(rec: RunRecord, drop: Iterable[str] = (), keep: Iterable[str] = ()) -> str:
    """A short id of ``config_identity`` (keys in ``drop``, or starting with
    one ending in ``.``, left out, except those in ``keep``)."""
    drop, keep = tuple(drop), frozenset(keep)
    ident = {
        k: v
        for k, v in config_identity(rec).items()
        if k in keep
        or (k not in drop and not any(d.endswith(".") and k.startswith(d) for d in drop))
    }
    return digest(ident)


def plan_id(rec: RunRecord) -> tuple[str, int]:
    """A run's configuration without what only running tells, and its
    repeat: ``--resume`` skips a planned run whose plan_id an ok record has."""
    return config_id(rec, KNOWN_AFTER_RUN, KNOWN_BEFORE_RUN), rec.repeat


# --- reading, older versions ---------------------------------------------------------


def _settings_from_tasks(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for t in tasks:
        s = t.get("search")
        if isinstance(s, dict) and s and s not in found:
            found.append(s)
    out = []
    for s in found:
        mine = [TaskRecord.model_validate(t) for t in tasks if t.get("search") == s]
        # the first unfiltered scored task (fewest clients)
        scored = [x.scores for x in mine if x.measured and not x.filter and x.score_keys(RECALL)]
        out.append({"search": s, "headline": headline_of(mine), "scores": next(iter(scored), {})})
    return out


def _scores_apart(part: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A record part without its score keys (before version 3), and those."""
    scores = {k: v for k, v in part.items() if catalogue.is_key(k)}
    return {k: v for k, v in part.items() if k not in scores}, scores


def _declared(part: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Before version 3 records kept any key: those no longer written go."""
    return {k: v for k, v in part.items() if k in model.model_fields}


def upgrade(raw: dict[str, Any], where: str = "") -> dict[str, Any]:
    """A record of an older version in the current form (a copy)."""
    version = raw.get("record_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise UserError(f"record_version {version!r} is not a number", where=where or None)
    if version > RECORD_VERSION:
        raise UserError(
            f"record_version {version} is newer than this storebench reads "
            f"({RECORD_VERSION}): upgrade storebench",
            where=where or None,
        )
    if version == RECORD_VERSION:
        return raw
    rec = dict(raw)
    given = rec.get("tasks")
    tasks = []
    for t in given if isinstance(given, list) else []:
        if isinstance(t, dict):
            rest, scores = _scores_apart(t)
            tasks.append(_declared(rest, TaskRecord) | ({"scores": scores} if scores else {}))
    if isinstance(given, list):
        rec["tasks"] = tasks
    if "settings" not in rec:
        rec["settings"] = _settings_from_tasks(tasks)
    else:  # version 2: a setting's scores were its metrics
        rec["settings"] = [
            {k: v for k, v in s.items() if k != "metrics"} | {"scores": s.get("metrics") or {}}
            for s in rec["settings"]
            if isinstance(s, dict)
        ]
    if isinstance(rec.get("metrics"), dict):
        # a run's scores were its one setting's, or (version 1) a sweep's
        # first setting's: each setting's own now
        rec["metrics"], scores = _scores_apart(rec["metrics"])
        if scores and not rec["settings"]:
            rec["settings"] = [{"scores": scores}]
    rec["record_version"] = RECORD_VERSION
    return _declared(rec, RunRecord)


def parse(raw: Mapping[str, Any] | RunRecord, where: str = "") -> RunRecord:
    """A record (a dict as read from a file, or a record already) as a
    ``RunRecord``; a field of the wrong type is a one-line error naming it."""
    if isinstance(raw, RunRecord):
        return raw
    try:
        return RunRecord.model_validate(upgrade(dict(raw), where))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise UserError(
            f"not a storebench result record ({loc}: {err['msg']})", where=where or None
        ) from exc


def parse_task(raw: Mapping[str, Any] | TaskRecord) -> TaskRecord:
    return raw if isinstance(raw, TaskRecord) else TaskRecord.model_validate(dict(raw))


def parse_all(recs: Iterable[Mapping[str, Any] | RunRecord]) -> list[RunRecord]:
    return [parse(r) for r in recs]


def read(path: str | Path) -> Iterator[RunRecord]:
    """Records (redacted) of a JSON-lines file or of every ``*.jsonl`` under
    a directory, typed; an unreadable one names its file and line."""
    for where, raw in results.read_lines(Path(path)):
        yield parse(raw, where)


def load(paths: str | Path | Iterable[str | Path]) -> list[RunRecord]:
    """The records of files and directories, said in a line when two
    invocations wrote the same runs (``separate_invocations``)."""
    if isinstance(paths, str | Path):
        paths = [paths]
    recs = [r for p in paths for r in read(p)]
    if twice := separate_invocations(recs):
        log.warning("%s", twice)
    return recs


def separate_invocations(recs: Iterable[RunRecord]) -> str:
    """A line naming two ok runs of one planned run (the same configuration
    and repeat: its ``key``), if any: separate invocations wrote into the
    same results, and readers count their runs as repeats."""
    first: dict[str, RunRecord] = {}
    for r in recs:
        if r.ok and r.key and (a := first.setdefault(r.key, r)) is not r:
            return (
                f"runs {a.run_id} and {r.run_id} ({r.scenario}, {r.store.engine}) are both "
                f"repeat {r.repeat} of one configuration: separate invocations wrote these "
                "results, and their runs are counted as repeats"
            )
    return ""
