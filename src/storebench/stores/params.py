"""A store's index and search parameters, typed.

Each store declares ``Index`` (build parameters) and ``Search`` (search
parameters): models of neutral names (``m``, ``ef_construct``, ``ef``) that
the adapter maps to its engine's own inside ``build_index`` and
``set_search_params``. ``Scenario.plan`` is the one place that validates
them (a scenario's values and grid axes, errors naming the key and line);
the run then carries the models down to the adapter, which only reads
attributes. Every field is optional: None is the engine's default (or, for
a search parameter, the value already in force). Beside them, a ``find``'s
``Order``."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

Order = tuple[str, bool] | None  # a find's order: (field, descending); None: any


def _whole(value: Any) -> Any:
    """A whole number as written, never a boolean, a float or a string
    (pydantic would read ``true`` as 1 and ``"64"`` as 64)."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or isinstance(value, str):
        if value is None:
            return value
        raise PydanticCustomError("whole_number", "expected a whole number")
    return int(value)  # numpy integers too


# a positive whole number (a graph degree, a candidate list's length, ...)
Positive = Annotated[int, BeforeValidator(_whole), Field(ge=1)]


class EngineParams(BaseModel):
    """Base of index and search parameter models: frozen (a run's values are
    shared by its settings and clients), unknown names refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(cls.model_fields)

    def given(self) -> dict[str, Any]:
        """The values set, by neutral name: what records show (the
        scenario's own values, never a default filled in)."""
        return self.model_dump(exclude_unset=True)

    def label(self) -> str:
        """``ef=64 ...`` for task names (empty: the engine's defaults)."""
        return " ".join(f"{k}={v}" for k, v in self.given().items())

    def with_(self, **values: Any) -> Self:
        """These values over this model's, validated (tuning probes a value)."""
        return type(self).model_validate(self.given() | values)


class IndexParams(EngineParams):
    """A store without index parameters keeps this one: it takes none."""


class SearchParams(EngineParams):
    """A store without search parameters keeps this one: it takes none."""


class HnswIndex(IndexParams):
    m: Positive | None = None  # neighbours per node
    ef_construct: Positive | None = None  # the candidate list while building


class HnswSearch(SearchParams):
    ef: Positive | None = None  # the candidate list while searching
