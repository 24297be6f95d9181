"""Cypher plumbing shared by the graph stores (``kuzu_store``,
``falkordb_store``): identifiers, the filter compiler, anchored reference
patterns and the rules both apply to a batch.

A collection is a node label or table with an ``id`` property (``ID``) and,
when the schema has one, a vector property ``vec`` (``VEC``); reference
fields (``Schema.refs``) are edges. Filters compile to Cypher with
parameters (``to_cypher``); an equality on a reference field at the top of a
filter becomes a pattern anchored at the referenced node (``anchors``).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

import numpy as np

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import SQL_CMP, And, Cmp, Filter, In, Range, boolean_text
from storebench.errors import StorebenchError, UserError

ID, VEC = "id", "vec"


class MissingReference(StorebenchError):
    """A reference field points at a document its collection does not hold."""


def ident(name: str, engine: str, title: str) -> str:
    """A Cypher identifier in backticks (no escape for a backtick: a name
    holding one is refused). ``engine`` is the store's name, ``title`` the
    engine's as the message spells it."""
    if "`" in name or not name:
        raise UserError(f"name {name!r} cannot be a {title} identifier", where=f"store {engine}")
    return f"`{name}`"


def check_fields(schema: Schema, engine: str, ident: Callable[[str], str]) -> None:
    """Every field name is an identifier and none is ``id`` or ``vec``."""
    for f in schema.fields:
        ident(f)
        if f in (ID, VEC):
            raise UserError(
                f"field name {f!r} is reserved by the {engine} store", where=f"store {engine}"
            )


def plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def to_cypher(
    f: Filter,
    column: Callable[[str], str],
    params: dict[str, Any],
    *,
    one_type_lists: bool = False,
) -> str:
    """Compile a filter to a Cypher boolean expression; values become
    parameters ``$p0, $p1, ...`` added to ``params``. ``one_type_lists``: an
    ``In`` list mixing ints and floats is passed as floats (Kuzu wants one
    element type per list)."""

    def param(value: Any) -> str:
        name = f"p{len(params)}"
        params[name] = value
        return f"${name}"

    def leaf(node: Filter) -> str:
        if isinstance(node, Cmp):
            return f"{column(node.field)} {SQL_CMP[node.op]} {param(plain(node.value))}"
        if isinstance(node, Range):
            col = column(node.field)
            return f"({col} >= {param(plain(node.lo))} AND {col} <= {param(plain(node.hi))})"
        if isinstance(node, In):
            if not node.values:
                return "false"
            values = [plain(v) for v in node.values]
            if one_type_lists and any(isinstance(v, float) for v in values):
                values = [float(v) for v in values]
            return f"{column(node.field)} IN {param(values)}"
        raise TypeError(f"not a filter: {node!r}")

    return boolean_text(f, leaf)


def anchors(
    where: Filter | None, refs: Container[str]
) -> tuple[list[tuple[str, int]], Filter | None]:
    """Equalities with an integer on reference fields at the top of the
    filter (one per field; they become anchored patterns) and the rest."""
    if where is None:
        return [], None
    parts = list(where.parts) if isinstance(where, And) else [where]
    found: dict[str, int] = {}
    rest: list[Filter] = []
    for p in parts:
        if (
            isinstance(p, Cmp)
            and p.op == "eq"
            and p.field in refs
            and p.field not in found
            and isinstance(plain(p.value), int)
        ):
            found[p.field] = int(p.value)
        else:
            rest.append(p)
    tail = None if not rest else rest[0] if len(rest) == 1 else And(tuple(rest))
    return list(found.items()), tail


def last_per_id(docs: DocBatch) -> DocBatch:
    """The batch with one row per id: the last of an id's rows wins (as a
    sequence of inserts would leave it)."""
    if len(np.unique(docs.ids)) == len(docs):
        return docs
    _, last = np.unique(docs.ids[::-1], return_index=True)
    return docs.take(np.sort(len(docs) - 1 - last))
