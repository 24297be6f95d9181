import sqlite3

import numpy as np
import pytest

from storebench.data import filters as F
from storebench.stores.sql.sqlite import quote


def test_parse_covers_every_node_and_names_bad_parts():
    f = F.parse(
        {
            "and": [
                {"tags.i": {"lt": 5}},
                {"or": [{"label": "a"}, {"not": {"x": {"in": [1, 2]}}}]},
                {"s": {"range": [1, 2]}},
            ]
        }
    )
    assert f == F.And(
        (
            F.Cmp("tags.i", "lt", 5),
            F.Or((F.Cmp("label", "eq", "a"), F.Not(F.In("x", (1, 2))))),
            F.Range("s", 1, 2),
        )
    )
    with pytest.raises(ValueError, match=r"filter\.and\[0\]\.x: unknown operator 'like'"):
        F.parse({"and": [{"x": {"like": 3}}]})
    with pytest.raises(ValueError, match="expected \\[lo, hi\\]"):
        F.parse({"x": {"range": [1]}})
    with pytest.raises(ValueError, match="non-empty list"):
        F.parse({"or": []})
    assert F.fields_of(f) == {"tags.i", "label", "x", "s"}


def test_range_is_inclusive_at_both_ends():
    col = {"v": np.arange(10)}
    assert np.flatnonzero(F.evaluate(F.Range("v", 3, 5), col)).tolist() == [3, 4, 5]


def test_sql_compiler_agrees_with_numpy_on_a_real_database():
    rng = np.random.default_rng(1)
    n = 300
    cols = {
        "a.b": rng.integers(0, 20, n),
        "s": np.array([f"x{v}" for v in rng.integers(0, 4, n)], dtype=object),
    }
    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE t (id INTEGER PRIMARY KEY, "a.b" INTEGER, s TEXT)')
    db.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        zip(range(n), cols["a.b"].tolist(), cols["s"].tolist(), strict=True),
    )
    cases = [
        F.Cmp("a.b", "ge", np.int64(7)),
        F.Not(F.Or((F.Cmp("s", "eq", "x1"), F.Range("a.b", 3, 9)))),
        F.And((F.In("s", ("x0", "x3")), F.Cmp("a.b", "ne", 4))),
        F.In("a.b", ()),
    ]
    for f in cases:
        sql, params = F.to_sql(f, quote)
        got = [r[0] for r in db.execute(f"SELECT id FROM t WHERE {sql} ORDER BY id", params)]
        assert got == np.flatnonzero(F.evaluate(f, cols)).tolist(), f


def test_sql_placeholder_style_is_configurable():
    sql, params = F.to_sql(F.Range("x", 1, 2), lambda c: c, placeholder="%s")
    assert sql == "x BETWEEN %s AND %s" and params == [1, 2]
