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

import functools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

CmpOp = Literal["eq", "ne", "lt", "le", "gt", "ge"]
CMP_OPS: tuple[CmpOp, ...] = ("eq", "ne", "lt", "le", "gt", "ge")
SQL_CMP = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


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


def leaves(f: Filter) -> Iterator[Cmp | Range | In]:
    """The comparisons of a filter, below its and/or/not."""
    if isinstance(f, And | Or):
        for p in f.parts:
            yield from leaves(p)
    elif isinstance(f, Not):
        yield from leaves(f.part)
    else:
        yield f


def fields_of(f: Filter) -> set[str]:
    return {leaf.field for leaf in leaves(f)}


MAX_DEPTH = 64  # nested and/or/not: compilers recurse too


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _scalar(value: Any, where: str) -> bool | int | float | str:
    """A value a filter compares with: a number, a string or a boolean."""
    if isinstance(value, np.generic) and value.dtype.kind in "biufU":
        value = value.item()
    if not isinstance(value, bool | int | float | str):
        raise ValueError(f"{where}: expected a number, string or boolean, got {_short(value)}")
    return value


def _list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def parse(spec: Any, where: str = "filter", depth: int = 0) -> Filter:
    """Build a filter from its dict form; errors name the offending part."""
    if isinstance(spec, Cmp | Range | In | And | Or | Not):
        return spec
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ValueError(f"{where}: expected a mapping with one key, got {_short(spec)}")
    ((key, arg),) = spec.items()
    if key in ("and", "or"):
        if not _list(arg) or not arg:
            raise ValueError(f"{where}.{key}: expected a non-empty list")
        parts = tuple(parse(p, f"{where}.{key}[{i}]", depth + 1) for i, p in enumerate(arg))
        return And(parts) if key == "and" else Or(parts)
    if key == "not":
        return Not(parse(arg, f"{where}.not", depth + 1))
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}: a field name is a non-empty string, got {_short(key)}")
    if not isinstance(arg, Mapping):
        return Cmp(key, "eq", _scalar(arg, f"{where}.{key}"))
    if len(arg) != 1:
        raise ValueError(f"{where}.{key}: expected one operator, got {_short(list(arg))}")
    ((op, value),) = arg.items()
    if op in CMP_OPS:
        return Cmp(key, op, _scalar(value, f"{where}.{key}.{op}"))
    if op == "range":
        if not _list(value) or len(value) != 2:
            raise ValueError(f"{where}.{key}.range: expected [lo, hi]")
        lo, hi = (_scalar(v, f"{where}.{key}.range") for v in value)
        return Range(key, lo, hi)
    if op == "in":
        if not _list(value):
            raise ValueError(f"{where}.{key}.in: expected a list")
        return In(key, tuple(_scalar(v, f"{where}.{key}.in") for v in value))
    raise ValueError(
        f"{where}.{key}: unknown operator {_short(op)} (use {', '.join(CMP_OPS)}, range, in)"
    )


def _fits(value: Any, kind: str) -> bool:
    if kind in ("int", "float"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, {"bool": bool, "str": str}.get(kind, object))


def check_kinds(f: Filter, kinds: Mapping[str, str]) -> None:
    """Each value is of its field's kind (numbers for int and float fields):
    numpy would raise, or compare a number with a string as unequal."""
    for leaf in leaves(f):
        kind = kinds[leaf.field]
        for v in (
            (leaf.value,)
            if isinstance(leaf, Cmp)
            else (leaf.lo, leaf.hi)
            if isinstance(leaf, Range)
            else leaf.values
        ):
            if not _fits(v, kind):
                raise ValueError(
                    f"filter: field {leaf.field!r} holds {kind} values, not {_short(v)}"
                )


def evaluate(f: Filter, columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """The numpy reference: a boolean mask over the rows of ``columns``."""
    if isinstance(f, Cmp):
        return getattr(operator, f.op)(columns[f.field], f.value)  # eq: ==, lt: <, ...
    if isinstance(f, Range):
        col = columns[f.field]
        return (col >= f.lo) & (col <= f.hi)
    if isinstance(f, In):
        return np.isin(columns[f.field], np.asarray(f.values))
    if isinstance(f, And | Or):
        glue = operator.and_ if isinstance(f, And) else operator.or_
        return functools.reduce(glue, (evaluate(p, columns) for p in f.parts))
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
