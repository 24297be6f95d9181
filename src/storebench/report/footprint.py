"""The footprint of a run, or of a part of it (a stage, a size): a managed
server's peak RSS, the collection's data and index size as the store counts
it (else the server's data directory, marked) and bytes per vector. Every
table with a footprint takes its cells from here (the summary, search, tune,
scale, streaming, crud)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storebench.report.data import Record
from storebench.results.records import as_number

# workloads whose runs hold ``n`` vectors (records before ``size_vectors``)
VECTOR_WORKLOADS = ("search", "tune", "scale")


@dataclass(frozen=True)
class Footprint:
    peak_rss: float | None  # a managed server's peak resident memory over the run
    data_bytes: float | None  # the store's own size (data and indexes), else its data directory
    vectors: int | None  # vectors the data holds (vector workloads)
    from_dir: bool = False  # data_bytes is a server's data directory, not the store's figure

    @property
    def per_vector(self) -> float | None:
        """Bytes per vector from the store's own size only: a server's data
        directory is no measure of what the vectors take (an in-memory
        server's holds its snapshots; a database's, its log and catalogs)."""
        if self.data_bytes and self.vectors and not self.from_dir:
            return self.data_bytes / self.vectors
        return None

    @property
    def any(self) -> bool:
        return self.peak_rss is not None or self.data_bytes is not None


def footprint(
    run: Record,
    where: Mapping[str, Any] | None = None,
    sized: Mapping[str, Any] | None = None,
) -> Footprint:
    """What a run's store held: the managed server's peak RSS (sampled per
    task), the size the store reports of its data and indexes (else the
    server's data directory) and the vectors it held then. ``where`` keeps
    the tasks of a part of the run by their fields (a stage: ``{"stage":
    0.8}``, a size: ``{"n": n}``), ``sized`` that part's ``size_bytes`` and
    ``size_vectors``."""
    tasks = [t for t in run.tasks if all(getattr(t, k) == v for k, v in (where or {}).items())]
    rss = [v for t in tasks if (v := as_number(t.server_peak_rss_bytes)) is not None]
    disk = [v for t in tasks if (v := as_number(t.server_data_bytes)) is not None]
    m = run.metrics if sized is None else sized
    size = next((v for k in ("size_bytes", "db_size_bytes") if (v := as_number(m.get(k)))), None)
    vectors = m.get("size_vectors")
    if not isinstance(vectors, int) and sized is None and run.workload in VECTOR_WORKLOADS:
        d = run.metrics.get("data")
        n = d.get("n") if isinstance(d, dict) else None
        vectors = n if isinstance(n, int) else run.params.get("n")
    vectors = vectors if isinstance(vectors, int) and vectors > 0 else None
    data = size if size is not None else max(disk) if disk else None
    return Footprint(max(rss) if rss else None, data, vectors, size is None and bool(disk))


def fmt_bytes(v: float | None) -> str:
    if v is None:
        return "-"
    for div, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if v >= div:
            return f"{v / div:.1f} {unit}"
    return f"{v:.0f} B"


FOOTPRINT_COLUMNS = ["peak server RSS", "data size", "bytes/vector"]


def footprint_cells(f: Footprint) -> list[str]:
    pv = f.per_vector
    data = fmt_bytes(f.data_bytes) + (" (dir)" if f.from_dir else "")
    return [fmt_bytes(f.peak_rss), data, "-" if pv is None else f"{pv:,.0f}"]


FOOTPRINT_NOTE = (
    "Peak server RSS: a managed server's resident memory, sampled over the run (the peak of "
    "its tasks); data size: the store's own count of the collection's data and indexes "
    "(a table with its indexes, keys with their index's memory), else (dir) the server's "
    "data directory, which holds an in-memory server's snapshots only and a database's log "
    "too; bytes/vector: the store's count over the vectors it held, never from a directory."
)
