"""Cypher plumbing shared by the graph stores (kuzu, falkordb): identifiers,
the filter compiler, anchored reference patterns, the rules both apply to a
batch, and their collections' reads (``CypherCollection``: ``get``, ``find``).

A collection is a node label or table with an ``id`` property (``ID``) and,
when the schema has one, a vector property ``vec`` (``VEC``); reference
fields (``Schema.refs``) are edges. Filters compile to Cypher with
parameters (``to_cypher``); an equality on a reference field at the top of a
filter becomes a pattern anchored at the referenced node (``anchors``).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any, ClassVar

import numpy as np

from storebench.data.batch import DocBatch, Schema
from storebench.data.filters import SQL_CMP, And, Cmp, Filter, In, Range, boolean_text, fields_of
from storebench.errors import StorebenchError, UserError
from storebench.stores.base import Collection
from storebench.stores.columns import plain
from storebench.stores.params import Order

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


class CypherCollection(Collection):
    """What the graph stores' collections share: ``get`` and ``find`` (an
    equality on a reference at the top of a filter as a pattern anchored at
    the referenced node, the references the rest of the filter or the order
    read through their edges), over the engine's own parts: its identifiers
    (``_ident``), a reference's edge type (``_edge``) and variable number
    (``_var``), the columns read back (``_returns``) and their decoding
    (``_to_batch``)."""

    # an ``In`` list mixing ints and floats passed as floats (Kuzu binds one
    # element type per list)
    _one_type_lists: ClassVar[bool] = False

    def __init__(self, store: Any, name: str, schema: Schema):
        super().__init__(store, name, schema)
        check_fields(schema, store.engine, self._ident)
        self._node = self._ident(name)  # the node label, quoted
        self._props = [f for f in schema.fields if f not in schema.refs]
        self._refs = list(schema.refs)  # the reference fields, edges
        self._vec = schema.dim is not None

    def _ident(self, name: str) -> str:
        raise NotImplementedError

    def _edge(self, field: str) -> str | None:
        """A reference's edge type, quoted; None where its edges are gone."""
        raise NotImplementedError

    def _var(self, field: str) -> int:
        raise NotImplementedError

    def _returns(self, with_vectors: bool) -> tuple[str, str]:
        """The OPTIONAL MATCHes of the references and the RETURN list."""
        raise NotImplementedError

    def _to_batch(self, result: Any, with_vectors: bool) -> DocBatch:
        raise NotImplementedError

    def _target(self, field: str) -> str:
        return self._ident(self.schema.refs[field])

    def _column(self, field: str) -> str:
        if field in self.schema.refs:
            return f"r{self._var(field)}"
        if field not in self.schema.fields:
            where = f"store {self.store.engine} filter"
            raise UserError(f"no field {field!r} in {self.name}", where=where)
        return f"n.{self._ident(field)}"

    def get(self, ids: np.ndarray) -> DocBatch:
        opt, cols = self._returns(with_vectors=True)
        q = f"UNWIND $ids AS k MATCH (n:{self._node} {{{ID}: k}}){opt} RETURN {cols}"
        return self._to_batch(self.store.read(q, {"ids": ids.tolist()}), with_vectors=True)  # type: ignore[attr-defined]

    def find(
        self, where: Filter | None = None, order: Order = None, limit: int | None = None
    ) -> DocBatch:
        live = [f for f in self._refs if self._edge(f) is not None]
        anchored, rest = anchors(where, live)
        params: dict[str, Any] = {}
        patterns = [f"(n:{self._node})"]
        for j, (f, value) in enumerate(anchored):
            patterns.append(f"(n)-[:{self._edge(f)}]->(:{self._target(f)} {{{ID}: $a{j}}})")
            params[f"a{j}"] = value
        q = "MATCH " + ", ".join(patterns)
        # references the residual filter or the order reads: their edge's end
        needed = (fields_of(rest) if rest is not None else set()) | ({order[0]} if order else set())
        pre = [f for f in self._refs if f in needed]
        for f in pre:
            if f in live:
                q += f" OPTIONAL MATCH (n)-[:{self._edge(f)}]->(t{self._var(f)}:{self._target(f)})"
        if pre:
            q += " WITH n, " + ", ".join(
                (f"coalesce(t{self._var(f)}.{ID}, -1)" if f in live else "-1")
                + f" AS r{self._var(f)}"
                for f in pre
            )
        if rest is not None:
            one_type = self._one_type_lists
            q += " WHERE " + to_cypher(rest, self._column, params, one_type_lists=one_type)
        direction = "DESC" if order and order[1] else "ASC"
        sort = f" ORDER BY {self._column(order[0])} {direction}" if order else ""
        q += f" WITH {', '.join(['n', *(f'r{self._var(f)}' for f in pre)])}{sort}"
        if limit is not None:
            q += " LIMIT $limit"
            params["limit"] = int(limit)
        opt, cols = self._returns(with_vectors=False)
        q += f"{opt} RETURN {cols}"
        if order is not None:  # the OPTIONAL MATCHes above need not keep the order
            q += f" ORDER BY c{list(self.schema.fields).index(order[0])} {direction}"
        return self._to_batch(self.store.read(q, params), with_vectors=False)  # type: ignore[attr-defined]
