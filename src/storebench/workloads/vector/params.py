"""The parameters every vector search workload has, its memory, and the
small helpers the workloads name their tasks and client counts with.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from storebench.data import synthetic
from storebench.driver.native import ClientChoice
from storebench.workloads.base import MemoryNeed, Params
from storebench.workloads.vector.data import TRUTH_K, data_memory


class DataParams(Params):
    """Where a vector workload's documents come from (``vector/data.py``): a
    dataset, else synthetic ones of this size, dimension and spread."""

    dataset: str | None = Field(
        None, description="a dataset name or path (`storebench dataset list`); default synthetic"
    )
    n: int = Field(10_000, ge=1, description="documents (with a dataset: at most its size)")
    dim: int = Field(128, ge=1, description="vector dimension (synthetic)")
    metric: Literal["l2", "ip", "cosine"] = "l2"
    data: synthetic.Kind = "embedding"
    seed: int = Field(0, ge=0, description="the random seed of synthetic data and queries")


class VectorParams(DataParams):
    """Parameters every vector search workload has."""

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
    min_window_s: float = Field(
        1.0,
        ge=0,
        description="with `ops`: each measured task runs at least this long, the query set "
        "cycled (recall over the distinct queries); 0: the `ops` queries only",
    )
    warmup: int = Field(20, ge=0, description="untimed queries per client before measuring")
    warmup_s: float = Field(0.0, ge=0, description="untimed seconds per client before measuring")
    rate: float | None = Field(
        None, gt=0, description="open loop: target queries/s over all clients (default closed)"
    )
    executor: Literal["auto", "threads", "processes", "async"] = Field(
        "auto",
        description="auto: processes for several clients where the store allows, else "
        "the driver's choice",
    )
    client: ClientChoice = Field(
        "auto",
        description="auto (the compiled loop for unfiltered search where the store has it, "
        "else python) | python | native",
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

    @field_validator("clients", mode="before", check_fields=False)
    @classmethod
    def _client_list(cls, v: Any) -> Any:
        """A workload's client counts (its ``clients``): a single count is
        a list of one; each must be >= 1."""
        if isinstance(v, int):
            v = [v]
        if isinstance(v, list):
            if not v:
                raise ValueError("give at least one client count")
            for c in v:
                if isinstance(c, int) and c < 1:
                    raise ValueError(f"client counts must be >= 1, got {c}")
        return v

    def client_counts(self) -> list[int]:
        """The client counts measured in turn (the largest: the default
        uploaders); 1 for a workload without ``clients``."""
        return list(getattr(self, "clients", None) or [1])


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
