"""What the vector workloads share: their data, upload and search operations,
recall and precision, the phases of a search run, client CPU accounting, the
engine's own time, and the recall-target tuner.

``crud`` uses the data, the upload and search operations and the scoring;
``search``, ``tune`` and ``scale`` use all of it through ``SearchRun``.

Data: synthetic (clustered or uniform vectors, ``tags.i`` for crud, label
columns with chosen selectivities for filtered search) or a dataset from
the data directory. Ground truth is exact, per filter where one applies.

Operation factories live at module level so process clients can unpickle
them; arrays reach process clients as memory-mapped files (``Shared``),
never as copies.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from storebench.data import synthetic
from storebench.data.batch import DocBatch
from storebench.data.filters import Cmp, Filter
from storebench.data.shared import Shared
from storebench.data.truth import GroundTruth, exact_knn_bytes, pair_distances, recall_at_k
from storebench.driver import Op, Task
from storebench.driver.core import cpu_count
from storebench.errors import NotSupported, TaskFailed, UserError
from storebench.records import TaskRecord
from storebench.stores.base import Capability, Collection
from storebench.stores.params import SearchParams
from storebench.workloads.base import MemoryNeed, Params, RunContext

TAG = "tags.i"
TRUTH_K = 100  # neighbours kept per query, so ties at the k-th place are seen
SATURATED = 0.9  # client CPU at this fraction of its ceiling flags the client


# --- data ----------------------------------------------------------------------


class VectorData:
    """The documents, queries and exact ground truth: synthetic or a dataset's.

    ``p`` needs ``dataset, n, dim, metric, data, seed`` (and ``tag_values``
    when ``tags``). With a dataset, ``n`` (if given: ``resolve_dataset``
    gives it) keeps its first rows, at most all of them.
    ``tags`` adds DocArray's ``tags.i`` (uniform ints, a copy: crud updates
    it); ``labels`` adds one keyword column per selectivity (``label_1p``
    holds ``label_1p`` on ~1% of the rows, ``other`` elsewhere); a dataset
    must already have them (``storebench dataset make --labels``)."""

    def __init__(self, p: Any, *, tags: bool = False, labels: Sequence[float] = ()):
        self.p = p
        self.ds = None
        self.tags: np.ndarray | None = None
        self.labels: dict[str, np.ndarray] = {}
        self.selectivity = {synthetic.label_name(s): float(s) for s in labels}
        tag_values = getattr(p, "tag_values", None)
        if p.dataset is not None:
            from storebench.data import datasets

            self.ds = datasets.load(p.dataset, metric=p.metric)
            if self.ds.nq == 0:
                raise UserError("the dataset has no queries for find by vector", where=self.ds.name)
            self.n = p.n if "n" in p.model_fields_set else self.ds.n
            if self.n > self.ds.n:
                raise UserError(
                    f"n={self.n:,} is more than the {self.ds.n:,} rows of {self.ds.name}",
                    where="n",
                )
            if "metric" in p.model_fields_set and p.metric != self.ds.metric:
                raise UserError(
                    f"metric={p.metric}, but {self.ds.name} is {self.ds.metric}", where="metric"
                )
            self.ids = np.asarray(self.ds.ids[: self.n])
            self.vecs = self.ds.vectors if self.n == self.ds.n else self.ds.vectors[: self.n]
            self.metric = self.ds.metric
            if tags:
                if TAG in self.ds.fields:  # a copy: updates change it
                    self.tags = np.array(self.ds.fields[TAG][: self.n], dtype=np.int64)
                else:
                    self.tags = synthetic.uniform_ints(self.n, 0, tag_values or self.n, p.seed)
            for name in self.selectivity:
                if name not in self.ds.fields:
                    raise UserError(
                        f"{self.ds.name} has no {name} column for filtered search (make one: "
                        "storebench dataset make --labels 0.01,0.1,0.5,0.99)",
                        where="labels",
                    )
                self.labels[name] = self.ds.fields[name][: self.n]
            self.describe: dict[str, Any] = {
                "dataset": self.ds.name,
                "content_hash": self.ds.content_hash,
                "n": self.n,
                "rows": self.ds.n,  # the dataset's; n < rows: its first n (a prefix)
                "prefix": self.n < self.ds.n,
                "dim": self.ds.dim,
                "metric": self.metric,
            }
        else:
            self.n = p.n
            self.ids = np.arange(p.n, dtype=np.int64)
            if tags:
                self.tags = synthetic.uniform_ints(p.n, 0, tag_values or p.n, p.seed)
            self.vecs = synthetic.vectors(p.n, p.dim, p.data, p.seed)
            self.metric = p.metric
            for name, s in self.selectivity.items():
                self.labels[name] = synthetic.label_column(p.n, s, p.seed)
            self.describe = {
                "synthetic": p.data,
                "n": p.n,
                "dim": p.dim,
                "metric": p.metric,
                "seed": p.seed,
            }

    @property
    def _ids_are_rows(self) -> bool:
        ids = self.ids
        return bool(
            len(ids) == 0 or (ids[0] == 0 and ids[-1] == len(ids) - 1 and (np.diff(ids) == 1).all())
        )

    @property
    def fields(self) -> dict[str, np.ndarray]:
        out = {} if self.tags is None else {TAG: self.tags}
        return out | self.labels

    def queries(self, count: int) -> np.ndarray:
        if self.ds is not None:
            return np.ascontiguousarray(self.ds.queries[: min(count, self.ds.nq)])
        return synthetic.queries(count, self.p.dim, self.p.data, self.p.seed)

    def true_distances(
        self, queries: np.ndarray, found: np.ndarray, live: np.ndarray
    ) -> np.ndarray:
        """The exact distance from query i to each id in ``found[i]`` (inf for
        -1, an unknown id or a row ``live`` leaves out). Scoring uses it to
        count a found id that ties with the k-th true neighbour though the
        truth, cut at a fixed number of columns, does not list it."""
        found = np.asarray(found, np.int64)
        if self._ids_are_rows:
            pos = np.where((found >= 0) & (found < self.n), found, -1)
        else:
            order = np.argsort(self.ids, kind="stable")
            at = np.searchsorted(self.ids, found, sorter=order).clip(max=self.n - 1)
            pos = np.where(self.ids[order[at]] == found, order[at], -1)
        ok = pos >= 0
        ok[ok] = live[pos[ok]]
        return pair_distances(queries, self.vecs, np.where(ok, pos, -1), self.metric)

    def truth(self, live: np.ndarray, queries: np.ndarray, k: int) -> GroundTruth:
        """Exact neighbours among the rows ``live`` keeps (a boolean mask over
        the ``n`` documents: the ones left after deletes, the first m of a
        growing collection, the rows a filter selects). Cached on disk for
        datasets."""
        if self.ds is not None:
            mask = np.zeros(self.ds.n, bool)
            mask[: self.n] = live
            return self.ds.truth(k, where=mask, nq=len(queries))
        return GroundTruth.compute(self.ids, self.vecs, queries, k, self.metric, where=live)


def data_memory(
    p: Any,
    *,
    queries: int,
    truths: int,
    truth_k: int,
    n: int | None = None,
    tags: bool = False,
    per_doc: int = 0,
    keys: tuple[str, ...] = ("n", "dim"),
) -> MemoryNeed:
    """What ``VectorData`` (for ``p``, or ``n`` documents) and a run over it
    hold: the columns (a dataset's are memory-mapped from its files, not
    counted), ``queries`` query vectors, ``truths`` ground truths of
    ``truth_k`` neighbours (each with its row mask), and ``per_doc`` bytes
    per document the workload adds; what the run shares with its clients is
    written to its directory (``shared``)."""
    label_bytes = sum(4 * max(len(synthetic.label_name(s)), 5) for s in getattr(p, "labels", ()))
    row_bytes = 8 + (8 if tags else 0) + label_bytes  # ids, tags.i, label columns
    if p.dataset is not None:
        from storebench.data import datasets

        ds = datasets.load(p.dataset)
        given = n if n is not None else p.n if "n" in p.model_fields_set else ds.n
        docs, dim, nq = min(given, ds.n), ds.dim, min(queries, ds.nq)
        data = docs * (8 if tags else 0)  # tags.i is a copy (crud updates it)
        # the whole dataset is shared as its own files; a part is copied
        shared = data if docs == ds.n else docs * (4 * dim + row_bytes)
        keys = ("n", "dataset")
    else:
        docs, dim, nq = n if n is not None else p.n, p.dim, queries
        data = docs * (4 * dim + row_bytes)
        shared = data + nq * dim * 4
    return MemoryNeed(
        {
            "data": data + docs * (per_doc + truths),
            "queries": nq * dim * 4,
            "truth": truths * nq * truth_k * 12 + exact_knn_bytes(nq, truth_k),
        },
        keys,
        docs,
        dim,
        (8 if tags else 0) + label_bytes // 4,
        shared,
    )


# --- operation factories (module level: picklable for process clients) ---------


class _Inserts(Op):
    """Op i inserts batch i of rows [start, stop)."""

    def __init__(
        self,
        ids: Shared,
        fields: Mapping[str, Shared],
        vecs: Shared,
        batch: int,
        start: int,
        stop: int | None,
        coll: Collection,
    ):
        self.insert = coll.insert
        ids_a, vecs_a = ids.array, vecs.array
        cols = {k: v.array for k, v in fields.items()}
        stop = len(ids_a) if stop is None else stop
        self.batches = [
            DocBatch(
                ids_a[s : min(s + batch, stop)],
                {k: c[s : min(s + batch, stop)] for k, c in cols.items()},
                vecs_a[s : min(s + batch, stop)],
            )
            for s in range(start, stop, batch)
        ]

    def __call__(self, i: int) -> None:
        self.insert(self.batches[i])


class InsertFactory:
    """Batched inserts of rows [start, stop) of shared columns."""

    def __init__(
        self,
        ids: Shared,
        fields: Mapping[str, Shared],
        vecs: Shared,
        batch: int,
        start: int = 0,
        stop: int | None = None,
    ):
        self.args = (ids, dict(fields), vecs, batch, start, stop)

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        return _Inserts(*self.args, coll)


class _Searches(Op):
    def __init__(
        self,
        coll: Collection,
        queries: Shared,
        k: int,
        where: Filter | None,
        setting: SearchParams | None,
        owner: int,
    ):
        # a process client opened its own store from the spec: the search
        # setting the parent applied must be applied here too
        if setting is not None and setting.given() and os.getpid() != owner:
            coll.set_search_params(setting)
        self.search = coll.search
        self.q = np.ascontiguousarray(queries.array)
        self.k = k
        self.where = where
        self.found = np.full((len(self.q), k), -1, np.int64)
        self.seen = np.zeros(len(self.q), bool)

    def __call__(self, i: int) -> None:
        j = i % len(self.q)
        if self.where is None:
            self.found[j] = self.search(self.q[j : j + 1], self.k).ids[0]
        else:
            self.found[j] = self.search(self.q[j : j + 1], self.k, self.where).ids[0]
        self.seen[j] = True

    def finish(self) -> Any:
        return self.found, self.seen


class SearchFactory:
    """One query vector per op (op i: query ``i % len(queries)``); each client
    returns the ids it found per query, for recall."""

    def __init__(
        self,
        queries: Shared,
        k: int,
        where: Filter | None = None,
        setting: SearchParams | None = None,
    ):
        self.queries = queries
        self.k = k
        self.where = where
        self.setting = setting  # typed, frozen: pickled as it is to process clients
        self.owner = os.getpid()

    def __call__(self, coll: Collection, c: int, clients: int) -> Op:
        return _Searches(coll, self.queries, self.k, self.where, self.setting, self.owner)


# --- recall and precision ----------------------------------------------------------


@dataclass(frozen=True)
class Score:
    recall: float | None  # mean recall@k (ties count)
    precision: float | None  # hits over results returned (a short answer is not penalised)
    queries: int  # distinct queries scored
    short: int = 0  # queries that got fewer than k results


# the true distances of found ids for the queries (rows) given: see
# VectorData.true_distances
DistancesOf = Callable[[np.ndarray, np.ndarray], np.ndarray]


def score(
    payloads: Sequence[Any], truth: GroundTruth, k: int, distances_of: DistancesOf | None = None
) -> Score:
    """Recall@k and precision@k over the queries the clients ran (each
    client returns its (found ids, ran) pair). With ``distances_of(rows,
    found)``, a found id tied with the k-th true neighbour counts even when
    the truth's columns end before it."""
    nq = len(truth.ids)
    found = np.full((nq, k), -1, np.int64)
    seen = np.zeros(nq, bool)
    for rows, ran in payloads:
        found[ran] = rows[ran]
        seen |= ran
    if not seen.any():
        return Score(None, None, 0)
    rows = np.flatnonzero(seen)
    fd = distances_of(rows, found[rows]) if distances_of is not None else None
    return score_found(found[rows], truth[rows], k, fd)


def score_found(
    found: np.ndarray, truth: GroundTruth, k: int, found_distances: np.ndarray | None = None
) -> Score:
    found = found[:, :k]
    rec = recall_at_k(found, truth, k, found_distances=found_distances)
    # recall_at_k divides the hits by min(k, true neighbours within the k-th
    # distance); the same bound gives the hits back
    kth = truth.distances[:, k - 1].astype(np.float64)
    bound = kth + np.abs(kth) * 1e-3 + 1e-6
    allowed = ((truth.distances <= bound[:, None]) & (truth.ids >= 0)).sum(axis=1)
    hits = np.rint(rec * np.minimum(k, allowed).clip(min=1))
    returned = (found >= 0).sum(axis=1)
    prec = float(hits.sum() / returned.sum()) if returned.sum() else 0.0
    return Score(float(rec.mean()), prec, len(found), int((returned < k).sum()))


# --- parameters ----------------------------------------------------------------


class VectorParams(Params):
    """Parameters every vector search workload has."""

    dataset: str | None = Field(
        None, description="a dataset name or path (`storebench dataset list`); default synthetic"
    )
    n: int = Field(10_000, ge=1, description="documents (with a dataset: at most its size)")
    dim: int = Field(128, ge=1, description="vector dimension (synthetic)")
    metric: Literal["l2", "ip", "cosine"] = "l2"
    data: Literal["clustered", "uniform"] = "clustered"
    seed: int = 0
    queries: int = Field(1_000, ge=1, description="distinct query vectors (and truth rows)")
    k: int = Field(10, ge=1, description="neighbours per query")
    batch_size: int = Field(1_000, ge=1, description="documents per insert call")
    upload_clients: int | None = Field(
        None, ge=1, description="parallel uploaders; default: the largest client count"
    )
    ops: int | None = Field(
        None, ge=1, description="queries per measured task; default: the query set once"
    )
    duration_s: float | None = Field(
        None, gt=0, description="run each measured task this long instead of `ops` queries"
    )
    warmup: int = Field(20, ge=0, description="untimed queries per client before measuring")
    warmup_s: float = Field(0.0, ge=0, description="untimed seconds per client before measuring")
    rate: float | None = Field(
        None, gt=0, description="open loop: target queries/s over all clients (default closed)"
    )
    executor: Literal["auto", "threads", "processes"] = Field(
        "auto",
        description="auto: processes for several clients where the store allows, else "
        "the driver's choice",
    )
    labels: list[float] = Field(
        default_factory=list, description="filtered search at these selectivities (0.01 = 1%)"
    )
    filter_clients: int = Field(1, ge=1, description="clients of each filtered-search task")
    engine_time: bool = Field(True, description="record the engine's own time where it has one")

    @field_validator("labels")
    @classmethod
    def _selectivities(cls, v: list[float]) -> list[float]:
        for s in v:
            if not 0.0 < s <= 1.0:
                raise ValueError(f"selectivity {s} is not in (0, 1]")
        return v

    def top_clients(self) -> int:
        """The largest client count of the run (the default uploaders)."""
        return 1


def search_memory(
    p: VectorParams, n: int | None = None, keys: tuple[str, ...] = ("n", "dim")
) -> MemoryNeed:
    """A ``SearchRun``'s memory: its data, and a truth per filter at once."""
    return data_memory(
        p,
        queries=p.queries,
        truths=1 + len(p.labels),
        truth_k=max(p.k, TRUTH_K),
        n=n,
        keys=keys,
    )


def client_list(v: Any) -> Any:
    """A single client count is a list of one; each must be >= 1."""
    if isinstance(v, int):
        v = [v]
    if isinstance(v, list):
        if not v:
            raise ValueError("give at least one client count")
        for c in v:
            if isinstance(c, int) and c < 1:
                raise ValueError(f"client counts must be >= 1, got {c}")
    return v


def resolve_dataset(p: Any, stated: frozenset[str], doublings: int = 0) -> Any:
    """With a dataset, its facts are the run's (``Workload.resolve``):

    - ``n``: all its rows, unless stated: then its first n, and n larger
      than the data is refused (with ``doublings``, the largest size n x
      2**doublings must fit; unstated, n is the data's size halved that
      many times);
    - ``dim``, ``metric``: its own; a stated one that differs is refused;
    - ``queries``: its test set, unless a count is stated (at most that);
    - ``labels``: those it has columns for, unless stated (then a missing
      one is refused).

    Works from the dataset's meta or a source's headers: nothing is
    imported or written (``datasets.peek``)."""
    if p.dataset is None:
        return p
    from storebench.data import datasets

    m = datasets.peek(p.dataset, metric=p.metric if "metric" in stated else None)
    fields = type(p).model_fields
    if "dim" in stated and p.dim != m.dim:
        raise UserError(
            f"dim={p.dim}, but {m.name} holds {m.dim}-d vectors (a dataset brings its own)",
            where="dim",
        )
    if "metric" in stated and p.metric != m.metric:
        raise UserError(
            f"metric={p.metric}, but {m.name} is {m.metric} (a dataset brings its own)",
            where="metric",
        )
    if m.nq == 0:
        raise UserError(
            f"{m.name} has no queries to search with (import it with --queries or --holdout)",
            where="dataset",
        )
    up: dict[str, Any] = {"dim": m.dim, "metric": m.metric}
    grow = 2**doublings
    if "n" in stated:
        if p.n * grow > m.n:
            need = f"{p.n:,}" if not doublings else f"{p.n:,} x 2^{doublings} = {p.n * grow:,}"
            raise UserError(f"n={need} is more than the {m.n:,} rows of {m.name}", where="n")
    elif m.n < grow:
        raise UserError(f"{m.name} has {m.n:,} rows: too few to double {doublings} times", "steps")
    else:
        up["n"] = m.n // grow
    if "queries" in fields:
        if "queries" not in stated:
            up["queries"] = m.nq
        elif p.queries > m.nq:
            raise UserError(
                f"queries={p.queries:,}, but {m.name} has {m.nq:,} test queries", where="queries"
            )
    if "labels" in fields:
        have = [s for s in p.labels if synthetic.label_name(s) in m.fields]
        if "labels" not in stated:
            up["labels"] = have
        elif len(have) < len(p.labels):
            missing = next(s for s in p.labels if s not in have)
            raise UserError(
                f"{m.name} has no {synthetic.label_name(missing)} column "
                "(storebench dataset make --labels ...)",
                where="labels",
            )
    return p.model_copy(update=up)


def check_dataset(p: VectorParams) -> None:
    """A named dataset exists, has queries, and holds the label columns."""
    if p.dataset is None:
        return
    from storebench.data import datasets

    ds = datasets.load(p.dataset, metric=p.metric)
    if ds.nq == 0:
        raise UserError(f"{ds.name} has no queries to search with", where="dataset")
    for s in p.labels:
        name = synthetic.label_name(s)
        if name not in ds.fields:
            raise UserError(
                f"{ds.name} has no {name} column (storebench dataset make --labels ...)",
                where="labels",
            )


def setting_label(setting: SearchParams) -> str:
    return setting.label()


def task_name(kind: str, *parts: str) -> str:
    return " ".join([kind, *(p for p in parts if p)])


def powers_of_two(top: int) -> list[int]:
    """1, 2, 4, ... up to ``top`` (and ``top`` itself)."""
    out = [1]
    while out[-1] * 2 <= top:
        out.append(out[-1] * 2)
    if out[-1] != top:
        out.append(top)
    return out


# --- client CPU and engine time ------------------------------------------------------


def client_accounting(
    rec: Mapping[str, Any] | TaskRecord, executor: str, clients: int
) -> dict[str, Any]:
    """Client CPU beside the wall time, and whether the client was the bottleneck.

    The driver records each client's CPU time over its measured window. A
    process client's is its own; a thread client reads the CPU time of the
    whole process, so over N threads the sum is N times the process's. The
    client CPU per wall second ``u`` is therefore ``client_cpu_s / elapsed_s``
    for processes and that over N for threads. Its ceiling ``c`` is
    ``min(clients, usable cores)`` for processes; for threads it is 1 (one
    interpreter: the GIL runs one thread's Python at a time) unless ``u``
    itself is above 1, which shows work outside the GIL (an embedded
    engine's search, on its own threads too): then the usable cores. The
    client is *saturated* when ``u >= 0.9 c``: adding server capacity would
    not raise the throughput. For an embedded store the client process is
    also the engine, so there it says the process is CPU-bound."""
    wall = float(rec.get("elapsed_s") or 0.0)
    cpu = float(rec.get("client_cpu_s") or 0.0)
    lanes = clients * int(rec.get("inflight", 1))
    if wall <= 0:
        return {}
    procs = executor == "processes"
    per_s = cpu / wall if procs else cpu / wall / lanes
    if procs:
        ceiling = float(min(lanes, cpu_count()))
    else:
        ceiling = float(cpu_count()) if per_s > 1.0 else 1.0
    out: dict[str, Any] = {
        "client_cpu_per_s": round(per_s, 4),
        "client_cpu_ceiling": ceiling,
        "client_saturated": per_s >= SATURATED * ceiling,
    }
    if isinstance(rec.get("server_cpu_s"), int | float):
        # the sampler ran over the whole phase (setup, warm-up), not just the
        # measured part: divide by its own span where it recorded one
        span = rec.get("server_sampled_s") or wall
        out["server_cpu_per_s"] = round(float(rec["server_cpu_s"]) / span, 4)
    return out


def engine_delta(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    op: str,
    ours_ns: float | None,
) -> dict[str, Any] | None:
    """The engine's own time per call over a measured task, from its
    cumulative counters read before and after (``Store.engine_stats``)."""
    if not after or op not in after:
        return None
    b = (before or {}).get(op) or {"calls": 0, "time_s": 0.0}
    a = after[op]
    calls = int(a["calls"]) - int(b["calls"])
    spent = float(a["time_s"]) - float(b["time_s"])
    if calls <= 0:
        return None
    out: dict[str, Any] = {
        "command": a.get("command", op),
        "calls": calls,
        "time_s": round(spent, 6),
        "mean_ns": spent / calls * 1e9,
    }
    if ours_ns is not None:
        out["client_share_ns"] = ours_ns - out["mean_ns"]
    return out


def index_fields(rec: TaskRecord, built: bool | None) -> dict[str, Any]:
    """An index task's record from what ``build_index`` returned: False
    (the inserts built it) is a step that did no work: no items, no rates."""
    if built is False:
        return {"index_build": "during_insert", "items": 0, "ops_per_s": None}
    return {"index_build": "built", "ops_per_s": None}


def index_metrics(
    ctx: RunContext, rec: TaskRecord | None, into: dict[str, Any] | None = None
) -> None:
    """The run's (or a step's, ``into``) index metrics: ``index`` says
    whether a build step built it or the upload did; ``index_s`` is the
    build's time, only where there was a build."""
    out = ctx.metrics if into is None else into
    if rec is None:
        return
    if rec.index_build == "during_insert":
        out["index"] = "during upload"
    else:
        out["index"] = "built"
        out["index_s"] = rec.elapsed_s


def setting_metrics(recs: Sequence[TaskRecord | None], k: int) -> dict[str, Any]:
    """A search setting's own metrics: the recall and precision of its
    first unfiltered scored task (the fewest clients; every client count
    runs the same queries)."""
    for rec in recs:
        if rec is not None and rec.measured and not rec.filter:
            got = {key: rec.get(key) for key in (f"recall@{k}", f"precision@{k}")}
            if got[f"recall@{k}"] is not None:
                return got
    return {}


# --- the recall-target tuner ----------------------------------------------------------


@dataclass
class Tuning:
    """The smallest value reaching the target, and every probe made."""

    param: str
    target: float
    value: int | None  # None: not reached up to the maximum
    recall: float | None  # recall at ``value`` (or at the best probe)
    probes: list[tuple[int, float]] = field(default_factory=list)  # sorted by value
    monotone: bool = True
    violations: list[tuple[int, int]] = field(default_factory=list)  # (lower, higher) pairs
    reached: bool = True

    @property
    def best(self) -> int:
        """``value``, else the probe with the highest recall."""
        if self.value is not None:
            return self.value
        return max(self.probes, key=lambda pr: (pr[1], -pr[0]))[0]

    def record(self) -> dict[str, Any]:
        return {
            "param": self.param,
            "target": self.target,
            "value": self.value,
            "recall": self.recall,
            "reached": self.reached,
            "monotone": self.monotone,
            "violations": [list(v) for v in self.violations],
            "probes": [[v, r] for v, r in self.probes],
        }


def tune(
    recall_of: Callable[[int], float],
    target: float,
    start: int,
    maximum: int,
    param: str = "ef",
    tolerance: float = 0.002,
) -> Tuning:
    """Smallest integer ``v`` in [start, maximum] with ``recall_of(v) >= target``.

    Doubles from ``start`` until the target is reached (or ``maximum`` is
    probed), then bisects between the last value below the target and the
    first one above it. Bisection assumes recall does not fall as ``v``
    grows; every probe is kept and the assumption is checked afterwards: a
    probe whose recall is lower than a smaller value's by more than
    ``tolerance`` is a violation and marks the result not monotone."""
    if start < 1 or maximum < start:
        raise ValueError(f"tuning range [{start}, {maximum}] is empty")
    probes: dict[int, float] = {}
    target_ = target - 1e-9  # a mean of per-query recalls carries rounding

    def at(v: int) -> float:
        if v not in probes:
            probes[v] = float(recall_of(v))
        return probes[v]

    lo: int | None = None
    hi: int | None = None
    v = start
    while True:
        if at(v) >= target_:
            hi = v
            break
        lo = v
        if v >= maximum:
            break
        v = min(v * 2, maximum)
    if hi is not None and lo is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if at(mid) >= target_:
                hi = mid
            else:
                lo = mid
    pts = sorted(probes.items())
    violations = []
    best_below = -math.inf
    best_at = 0
    for v_, r in pts:
        if r < best_below - tolerance:
            violations.append((best_at, v_))
        if r > best_below:
            best_below, best_at = r, v_
    t = Tuning(param, target, hi, None, pts, not violations, violations, hi is not None)
    t.recall = probes[t.best]
    return t


# --- the phases of a search run ----------------------------------------------------------


class SearchRun:
    """One run of a vector search workload: load, index, count check, then
    measured searches at chosen settings and client counts."""

    def __init__(self, ctx: RunContext, p: VectorParams, name: str, n: int | None = None):
        self.ctx = ctx
        self.p = p
        # n: the documents the run needs when not p.n (scale: its largest size)
        self.data = VectorData(p if n is None else p.model_copy(update={"n": n}), labels=p.labels)
        if n is not None and n > self.data.n:
            raise UserError(
                f"sizes up to {n:,} need that many documents; the data has {self.data.n:,}",
                where="steps",
            )
        self.k = p.k
        self.truth_k = max(p.k, TRUTH_K)
        ctx.metrics["data"] = self.data.describe
        first = DocBatch(
            self.data.ids[:1],
            {f: c[:1] for f, c in self.data.fields.items()},
            np.asarray(self.data.vecs[:1]),
        )
        self.coll = ctx.collection(
            name, first.schema(self.data.metric, indexed=tuple(self.data.labels))
        )
        self.shared_ids = ctx.share("ids", self.data.ids)
        self.shared_vecs = ctx.share("vecs", self.data.vecs)
        self.shared_fields = {
            f: ctx.share(f"field{i}", c) for i, (f, c) in enumerate(self.data.fields.items())
        }
        self.queries = self.data.queries(p.queries)
        self.data.describe["queries"] = len(self.queries)
        self.shared_q = ctx.share("queries", self.queries)
        self.loaded = 0
        self.truths: dict[str | None, GroundTruth] = {}
        self.lives: dict[str | None, np.ndarray] = {}  # the rows each truth covers

    # --- executors
    def executor(self, clients: int) -> str:
        """The task's executor: as asked, else processes for several clients
        where the store can serve them (queries reach them memory-mapped),
        else the run's or the store's: ``RunContext.executor_for``."""
        return self.ctx.executor_for(self.p.executor, clients)

    def executor_name(self, task: Task) -> str:
        return self.ctx.executor_name(task)

    # --- load, index, count
    def upload(self, stop: int, name: str = "upload") -> None:
        """Insert rows [loaded, stop) in batches by parallel uploaders."""
        p, ctx = self.p, self.ctx
        start = self.loaded
        batches = -(-(stop - start) // p.batch_size)
        clients = min(p.upload_clients or p.top_clients(), batches)
        task = Task(
            name,
            InsertFactory(
                self.shared_ids, self.shared_fields, self.shared_vecs, p.batch_size, start, stop
            ),
            clients=clients,
            ops=batches,
            items_per_op=p.batch_size,
            executor=self.executor(clients),
        )
        ctx.measure(
            task,
            self.coll,
            phase="upload",
            n=stop,
            items=stop - start,  # the last batch may be short
            executor=self.executor_name(task),
        )
        self.loaded = stop
        self.count_check(stop, f"after {name}")

    def count_check(self, expected: int, when: str) -> None:
        """The engine's own count must equal what was loaded: a run against a
        half-empty collection is a failed run, not a fast one."""
        held = self.coll.count()
        self.ctx.metrics.setdefault("count_checks", []).append(
            {"when": when, "expected": expected, "held": held}
        )
        if held != expected:
            raise TaskFailed(
                f"count check {when}: {self.ctx.store.engine} holds {held:,} of "
                f"{expected:,} documents"
            )

    def build_index(self, name: str = "build_index") -> TaskRecord | None:
        """Time the index build (the adapter returns once the engine says it
        is ready); None for a store without one (exact search). An engine
        that indexed during the upload builds nothing: the record says so
        (``index_build``) and has no build rate."""
        ctx = self.ctx
        if not ctx.store.supports(Capability.INDEX):
            return None
        ctx.once(
            name,
            lambda: self.coll.build_index(ctx.index),
            items=self.loaded,
            derive=index_fields,
            phase="index",
            n=self.loaded,
        )
        rec = ctx.tasks[-1]
        self.count_check(self.loaded, f"after {name}")
        return rec

    # --- truth
    def truth(self, label: str | None) -> GroundTruth:
        """Exact neighbours among the loaded rows (those with the label)."""
        key = label
        if key not in self.truths:
            live = np.zeros(self.data.n, bool)
            live[: self.loaded] = True
            if label is not None:
                live &= np.asarray(self.data.labels[label]) == label
            self.truths[key] = self.data.truth(live, self.queries, self.truth_k)
            self.lives[key] = live
        return self.truths[key]

    def distances_of(self, label: str | None) -> DistancesOf:
        """True distances of found ids, among the rows ``truth(label)`` covers."""
        live = self.lives[label]
        return lambda rows, found: self.data.true_distances(self.queries[rows], found, live)

    def reset_truth(self) -> None:
        self.truths.clear()
        self.lives.clear()

    # --- search
    def apply(self, setting: SearchParams) -> None:
        if setting.given():  # else the engine's defaults
            self.coll.set_search_params(setting)

    def measure(
        self,
        name: str,
        setting: SearchParams,
        clients: int,
        label: str | None = None,
        setting_key: str = "search",
        **extra: Any,
    ) -> TaskRecord | None:
        """One measured search task; its record gets recall@k, precision@k,
        client CPU accounting and the engine's own time per call. The
        setting goes under ``setting_key``: ``search`` for a swept setting
        (reports then treat each as a configuration of its own), ``setting``
        for one the workload chose (tuned)."""
        p, ctx = self.p, self.ctx
        where: Filter | None = Cmp(label, "eq", label) if label is not None else None
        if where is not None:
            try:
                ctx.store.require({Capability.FILTERED_SEARCH})
            except NotSupported as exc:
                ctx.unsupported(name, exc)
                return None
        truth = self.truth(label)
        task = Task(
            name,
            SearchFactory(self.shared_q, self.k, where, setting),
            clients=clients,
            ops=None if p.duration_s else (p.ops or len(self.queries)),
            duration_s=p.duration_s,
            warmup_ops=p.warmup,
            warmup_s=p.warmup_s,
            rate=p.rate,
            executor=self.executor(clients),
        )
        executor = self.executor_name(task)
        extra = {"phase": "search", setting_key: setting.given(), "executor": executor} | extra
        if label is not None:
            extra |= {"filter": label, "selectivity": self.data.selectivity[label]}
        if p.rate is not None:
            extra["target_rate"] = p.rate
        before = ctx.store.engine_stats() if p.engine_time else None

        def scored(rec: TaskRecord, payloads: list[Any]) -> dict[str, Any]:
            s = score(payloads, truth, self.k, self.distances_of(label))
            out: dict[str, Any] = {
                f"recall@{self.k}": s.recall,
                f"precision@{self.k}": s.precision,
                "queries_scored": s.queries,
                "short_answers": s.short,
            }
            out |= client_accounting(rec, executor, clients)
            after = ctx.store.engine_stats() if p.engine_time else None
            eng = engine_delta(before, after, "search", rec.latency_ns.get("mean"))
            if eng is not None:
                out["engine"] = eng
            return out

        ctx.measure(task, self.coll, scored, **extra)
        return ctx.tasks[-1]

    def recall_at(self, setting: SearchParams, label: str | None = None) -> float:
        """Recall@k at a setting, untimed (for tuning): every query, in
        batches, through the same search call."""
        self.apply(setting)
        truth = self.truth(label)
        where = Cmp(label, "eq", label) if label is not None else None
        found = np.full((len(self.queries), self.k), -1, np.int64)
        for s in range(0, len(self.queries), 100):
            q = self.queries[s : s + 100]
            res = (
                self.coll.search(q, self.k) if where is None else self.coll.search(q, self.k, where)
            )
            found[s : s + len(q)] = res.ids[:, : self.k]
        fd = self.distances_of(label)(np.arange(len(found)), found)
        r = score_found(found, truth, self.k, fd).recall
        return 0.0 if r is None else r

    def filtered(
        self, setting: SearchParams, suffix: str, setting_key: str = "search", **extra: Any
    ) -> None:
        """Filtered search at each selectivity (recall against filtered truth)."""
        for label, s in self.data.selectivity.items():
            pct = f"{s * 100:g}%"
            self.measure(
                task_name("filtered", pct, suffix, f"c={self.p.filter_clients}"),
                setting,
                self.p.filter_clients,
                label,
                setting_key,
                **extra,
            )
