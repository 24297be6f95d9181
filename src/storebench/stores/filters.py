"""One engine-neutral filter language.

Nodes: comparisons (eq, ne, lt, le, gt, ge), range (inclusive at both ends,
like SQL BETWEEN), in, and, or, not. ``evaluate`` is the numpy reference every
engine's compiler is tested against; ``to_sql`` is the compiler for SQL
engines. Other engines bring their own compiler in their adapter module.

The YAML/dict form, for scenario files::

    {"tags.i": {"lt": 500}}                  # one comparison
    {"tags.i": 7}                            # eq
    {"tags.i": {"range": [10, 20]}}          # 10 <= x <= 20
    {"label": {"in": ["a", "b"]}}
    {"and": [..., ...]}, {"or": [...]}, {"not": {...}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

CmpOp = Literal["eq", "ne", "lt", "le", "gt", "ge"]
CMP_OPS: tuple[CmpOp, ...] = ("eq", "ne", "lt", "le", "gt", "ge")
SQL_CMP = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_NP_CMP: dict[str, Callable[[Any, Any], np.ndarray]] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


@dataclass(frozen=True)
class Cmp:
    field: str
    op: CmpOp
    value: Any


@dataclass(frozen=True)
class Range:
    field: str
    lo: Any
    hi: Any


@dataclass(frozen=True)
class In:
    field: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class And:
    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    part: Filter


Filter = Cmp | Range | In | And | Or | Not


def fields_of(f: Filter) -> set[str]:
    if isinstance(f, And | Or):
        return set().union(*(fields_of(p) for p in f.parts))
    if isinstance(f, Not):
        return fields_of(f.part)
    return {f.field}


def parse(spec: Any, where: str = "filter") -> Filter:
    """Build a filter from its dict form; errors name the offending part."""
    if isinstance(spec, Cmp | Range | In | And | Or | Not):
        return spec
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ValueError(f"{where}: expected a mapping with one key, got {spec!r}")
    ((key, arg),) = spec.items()
    if key in ("and", "or"):
        if not isinstance(arg, Sequence) or isinstance(arg, str) or not arg:
            raise ValueError(f"{where}.{key}: expected a non-empty list")
        parts = tuple(parse(p, f"{where}.{key}[{i}]") for i, p in enumerate(arg))
        return And(parts) if key == "and" else Or(parts)
    if key == "not":
        return Not(parse(arg, f"{where}.not"))
    if not isinstance(arg, Mapping):
        return Cmp(key, "eq", arg)
    if len(arg) != 1:
        raise ValueError(f"{where}.{key}: expected one operator, got {list(arg)}")
    ((op, value),) = arg.items()
    if op in CMP_OPS:
        return Cmp(key, op, value)
    if op == "range":
        if not isinstance(value, Sequence) or len(value) != 2:
            raise ValueError(f"{where}.{key}.range: expected [lo, hi]")
        return Range(key, value[0], value[1])
    if op == "in":
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise ValueError(f"{where}.{key}.in: expected a list")
        return In(key, tuple(value))
    raise ValueError(
        f"{where}.{key}: unknown operator {op!r} (use {', '.join(CMP_OPS)}, range, in)"
    )


def evaluate(f: Filter, columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """The numpy reference: a boolean mask over the rows of ``columns``."""
    if isinstance(f, Cmp):
        return _NP_CMP[f.op](columns[f.field], f.value)
    if isinstance(f, Range):
        col = columns[f.field]
        return (col >= f.lo) & (col <= f.hi)
    if isinstance(f, In):
        return np.isin(columns[f.field], np.asarray(f.values))
    if isinstance(f, And):
        mask = evaluate(f.parts[0], columns)
        for p in f.parts[1:]:
            mask = mask & evaluate(p, columns)
        return mask
    if isinstance(f, Or):
        mask = evaluate(f.parts[0], columns)
        for p in f.parts[1:]:
            mask = mask | evaluate(p, columns)
        return mask
    if isinstance(f, Not):
        return ~evaluate(f.part, columns)
    raise TypeError(f"not a filter: {f!r}")


def _plain(value: Any) -> Any:
    """numpy scalars to Python scalars, for database drivers."""
    return value.item() if isinstance(value, np.generic) else value


def boolean_text(f: Filter, leaf: Callable[[Filter], str]) -> str:
    """A filter as query text: ``And`` / ``Or`` / ``Not`` as ``(a AND b)``,
    ``(a OR b)`` and ``NOT (a)`` (SQL, Cypher and AQL spell them alike), each
    comparison by ``leaf``. Compilers to those languages differ only in
    their leaves."""

    def go(node: Filter) -> str:
        if isinstance(node, And | Or):
            glue = " AND " if isinstance(node, And) else " OR "
            return "(" + glue.join(go(p) for p in node.parts) + ")"
        if isinstance(node, Not):
            return f"NOT ({go(node.part)})"
        return leaf(node)

    return go(f)


def to_sql(
    f: Filter, column: Callable[[str], str], placeholder: str = "?"
) -> tuple[str, list[Any]]:
    """Compile to a SQL boolean expression with bound parameters.

    ``column`` maps a field name to its quoted column expression;
    ``placeholder`` is the driver's parameter marker (``?`` or ``%s``)."""
    params: list[Any] = []

    def leaf(node: Filter) -> str:
        if isinstance(node, Cmp):
            params.append(_plain(node.value))
            return f"{column(node.field)} {SQL_CMP[node.op]} {placeholder}"
        if isinstance(node, Range):
            params.extend((_plain(node.lo), _plain(node.hi)))
            return f"{column(node.field)} BETWEEN {placeholder} AND {placeholder}"
        if isinstance(node, In):
            if not node.values:
                return "1=0"
            params.extend(_plain(v) for v in node.values)
            marks = ", ".join([placeholder] * len(node.values))
            return f"{column(node.field)} IN ({marks})"
        raise TypeError(f"not a filter: {node!r}")

    return boolean_text(f, leaf), params
