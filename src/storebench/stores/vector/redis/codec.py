"""Redis's forms: RediSearch's query language (a storebench filter compiled
to it, DIALECT 2), a command's arguments as RESP sends them, replies read."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from storebench.data.filters import And, Cmp, Filter, In, Not, Or, Range
from storebench.errors import UserError

METRIC = {"l2": "L2", "ip": "IP", "cosine": "COSINE"}
SEP = "\x1f"  # TAG separator: a control character no label contains
ID = "_id"  # the hash field holding the id (NUMERIC attribute "_id")
_TAG_SPECIAL = re.compile(r"([^A-Za-z0-9_])")


def _num(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "1" if value else "0"
    if isinstance(value, int | np.integer):
        return str(int(value))
    f = float(value)
    if math.isinf(f):
        return "+inf" if f > 0 else "-inf"
    return repr(f)


def _tag(value: Any) -> str:
    return _TAG_SPECIAL.sub(r"\\\1", str(value))


def to_query(f: Filter, attr: Mapping[str, str], kinds: Mapping[str, str]) -> str:
    """Compile a storebench filter to a RediSearch query (DIALECT 2).

    ``attr`` maps field names to index attributes, ``kinds`` to field kinds
    (str fields are TAG: eq, ne and in only)."""

    def cmp(field: str, op: str, value: Any) -> str:
        a = attr[field]
        if kinds[field] == "str":
            if op == "eq":
                return f"@{a}:{{{_tag(value)}}}"
            if op == "ne":
                return f"-@{a}:{{{_tag(value)}}}"
            raise UserError(
                f"redis: string field {field!r} supports eq, ne and in, not {op}",
                where="filter",
            )
        v = _num(value)
        return {
            "eq": f"@{a}:[{v} {v}]",
            "ne": f"-@{a}:[{v} {v}]",
            "lt": f"@{a}:[-inf ({v}]",
            "le": f"@{a}:[-inf {v}]",
            "gt": f"@{a}:[({v} +inf]",
            "ge": f"@{a}:[{v} +inf]",
        }[op]

    def go(node: Filter) -> str:
        if isinstance(node, Cmp):
            return cmp(node.field, node.op, node.value)
        if isinstance(node, Range):
            return f"@{attr[node.field]}:[{_num(node.lo)} {_num(node.hi)}]"
        if isinstance(node, In):
            if not node.values:
                return f"@{ID}:[+inf -inf]"  # matches nothing
            if kinds[node.field] == "str":
                return f"@{attr[node.field]}:{{{' | '.join(_tag(v) for v in node.values)}}}"
            return "(" + " | ".join(cmp(node.field, "eq", v) for v in node.values) + ")"
        if isinstance(node, And):
            return "(" + " ".join(go(p) for p in node.parts) + ")"
        if isinstance(node, Or):
            return "(" + " | ".join(go(p) for p in node.parts) + ")"
        if isinstance(node, Not):
            return f"-({go(node.part)})"
        raise TypeError(f"not a filter: {node!r}")

    return go(f)


def resp_args(args: Sequence[Any]) -> list[bytes]:
    """A command's arguments as redis-py sends them: str as UTF-8, numbers
    as their decimal text (floats by repr), bytes as they are."""
    return [
        a if isinstance(a, bytes) else (repr(a) if isinstance(a, float) else str(a)).encode()
        for a in args
    ]


def pairs(flat: list[Any]) -> dict[str, Any]:
    return {
        (k.decode() if isinstance(k, bytes) else k): v
        for k, v in zip(flat[::2], flat[1::2], strict=True)
    }
