"""MongoDB query documents from storebench filters, for the MongoDB-like stores
(``mongita``, ``mongodb``).

``conjunctions(f)`` writes a filter as alternatives of conjunctions, each a
plain query document with only field operators (``$eq $ne $gt $gte $lt $lte
$in $nin``, implicit AND across fields): a negated comparison becomes its
opposite, a negated range two alternatives. Mongita has no ``$and``, ``$or``,
``$nor`` or ``$not`` (it answers them with no documents, silently) and runs
one query per alternative; MongoDB takes the alternatives as one ``$or``
(``to_mongodb``). Field names are document keys with dots written as U+FF0E,
as MongoDB tools do (a dot is a path into a sub-document).
"""

from __future__ import annotations

import itertools
from typing import Any

from storebench.data.filters import And, Cmp, Filter, In, Not, Or, Range
from storebench.errors import UserError
from storebench.stores.columns import plain

MAX_ALTERNATIVES = 512
_OP = {"eq": "$eq", "ne": "$ne", "lt": "$lt", "le": "$lte", "gt": "$gt", "ge": "$gte"}
_NEG_OP = {"eq": "$ne", "ne": "$eq", "lt": "$gte", "le": "$gt", "gt": "$lte", "ge": "$lt"}

Literal = tuple[str, str, Any]  # (field, $op, value)


def key(field: str) -> str:
    """The document key of a field (dots are paths to Mongita)."""
    return field.replace(".", "\uff0e")


def _nnf(f: Filter, neg: bool, where: str) -> list[list[Literal]]:
    """Alternatives (OR) of conjunctions (AND) of literals."""
    if isinstance(f, Cmp):
        op = (_NEG_OP if neg else _OP)[f.op]
        return [[(f.field, op, plain(f.value))]]
    if isinstance(f, Range):
        lo, hi = plain(f.lo), plain(f.hi)
        if neg:
            return [[(f.field, "$lt", lo)], [(f.field, "$gt", hi)]]
        return [[(f.field, "$gte", lo), (f.field, "$lte", hi)]]
    if isinstance(f, In):
        return [[(f.field, "$nin" if neg else "$in", [plain(v) for v in f.values])]]
    if isinstance(f, Not):
        return _nnf(f.part, not neg, where)
    if isinstance(f, And | Or):
        conj = isinstance(f, And) != neg  # De Morgan
        parts = [_nnf(p, neg, where) for p in f.parts]
        if not conj:
            return [alt for p in parts for alt in p]
        size = 1
        for p in parts:
            size *= len(p)
        if size > MAX_ALTERNATIVES:
            raise UserError(
                f"filter has {size} alternatives once written as plain queries "
                f"(the limit here: {MAX_ALTERNATIVES})",
                where=where,
            )
        return [[lit for alt in combo for lit in alt] for combo in itertools.product(*parts)]
    raise TypeError(f"not a filter: {f!r}")


def _query(conj: list[Literal]) -> dict[str, Any] | None:
    """One conjunction as a Mongita query (operators merged per field), or
    None when it can match nothing."""
    by_field: dict[str, dict[str, Any]] = {}
    for field, op, value in conj:
        ops = by_field.setdefault(key(field), {})
        if op == "$ne":  # several per field: one $nin
            op, value = "$nin", [value]
        if op not in ops:
            ops[op] = value
        elif op == "$eq":
            if ops[op] != value:
                return None
        elif op == "$in":
            ops[op] = [v for v in ops[op] if v in value]
        elif op == "$nin":
            ops[op] = ops[op] + value
        elif op in ("$gt", "$gte"):
            ops[op] = max(ops[op], value)
        else:  # $lt, $lte
            ops[op] = min(ops[op], value)
    for ops in by_field.values():
        if "$in" in ops and not ops["$in"]:
            return None
    return by_field


def conjunctions(f: Filter | None, where: str) -> list[dict[str, Any]]:
    """Queries whose union is the filter; ``where`` names the store in errors."""
    if f is None:
        return [{}]
    out = []
    for conj in _nnf(f, False, where):
        q = _query(conj)
        if q is not None:
            out.append(q)
    return out


def to_mongodb(f: Filter | None) -> dict[str, Any]:
    """One MongoDB query document for the filter (alternatives under ``$or``;
    a filter that can match nothing, a query that matches nothing)."""
    queries = conjunctions(f, "store mongodb filter")
    if len(queries) == 1:
        return queries[0]
    return {"$or": queries} if queries else {"_id": {"$in": []}}
