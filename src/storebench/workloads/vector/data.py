"""The data of a vector run: documents, queries and exact ground truth,
synthetic (embedding-like, clustered or uniform vectors, ``tags.i`` for crud, label columns
with chosen selectivities for filtered search) or a dataset's from the data
directory; the memory they take; and a dataset's facts made the run's
(``resolve_dataset``, ``check_dataset``). Ground truth is exact, per filter
where one applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from storebench.data import synthetic
from storebench.data.batch import DocBatch
from storebench.data.truth import GroundTruth, exact_knn_bytes, pair_distances
from storebench.errors import UserError
from storebench.workloads.base import MemoryNeed
from storebench.workloads.vector.scoring import DistancesOf

if TYPE_CHECKING:
    from storebench.workloads.vector.params import DataParams

TAG = "tags.i"
TRUTH_K = 100  # neighbours kept per query, so ties at the k-th place are seen


class VectorData:
    """The documents, queries and exact ground truth: synthetic or a dataset's.

    ``p`` needs ``dataset, n, dim, metric, data, seed`` (and ``tag_values``
    when ``tags``). With a dataset, ``n`` (if given: ``resolve_dataset``
    gives it) keeps its first rows, at most all of them.
    ``tags`` adds DocArray's ``tags.i`` (uniform ints, a copy: crud updates
    it); ``labels`` adds one keyword column per selectivity (``label_1p``
    holds ``label_1p`` on ~1% of the rows, ``other`` elsewhere); a dataset
    must already have them (``storebench dataset make --labels``). The
    plan checked a dataset against ``p`` (``resolve_dataset``: its size,
    metric, queries and label columns)."""

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
            self.n = p.n if "n" in p.model_fields_set else self.ds.n
            self.ids = np.asarray(self.ds.ids[: self.n])
            self.vecs = self.ds.vectors if self.n == self.ds.n else self.ds.vectors[: self.n]
            self.metric = self.ds.metric
            if tags:
                if TAG in self.ds.fields:  # a copy: updates change it
                    self.tags = np.array(self.ds.fields[TAG][: self.n], dtype=np.int64)
                else:
                    self.tags = synthetic.uniform_ints(self.n, 0, tag_values or self.n, p.seed)
            for name in self.selectivity:
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

    def rows(self, start: int, stop: int) -> DocBatch:
        """Rows [start, stop) as one batch (their vectors read into memory)."""
        cols = {f: c[start:stop] for f, c in self.fields.items()}
        return DocBatch(self.ids[start:stop], cols, np.asarray(self.vecs[start:stop]))

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

    def distances_of(self, queries: np.ndarray, live: np.ndarray) -> DistancesOf:
        """``true_distances`` for scoring: of the found ids for the queries
        (rows of ``queries``) given, among the rows ``live`` keeps."""
        return lambda rows, found: self.true_distances(queries[rows], found, live)

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


def check_dataset(p: DataParams) -> None:
    """A named dataset loads (``Workload.check``; ``resolve_dataset``, run
    before it, refused one without queries or a label column stated)."""
    if p.dataset is not None:
        from storebench.data import datasets

        datasets.load(p.dataset, metric=p.metric)
