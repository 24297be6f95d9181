"""Property-based: every kind of user input (scenario files, ``--set`` texts,
typed values from Python, filter trees, dataset files) ends in success or a
``UserError`` of one line naming what and where; never another exception,
never a hang (issue 15). Scenarios stop at plan: nothing runs.

Examples per property are bounded and, under the default ``ci`` profile
(tests/conftest.py), derandomized; ``STOREBENCH_FUZZ_SCALE=10
HYPOTHESIS_PROFILE=explore`` searches ten times as far with a random seed.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import storebench
from storebench.errors import UserError
from storebench.scenario import (
    BUILTIN_PACKAGE,
    DriverConfig,
    Scenario,
    ScenarioFile,
    StoreEntry,
    builtin_names,
)
from storebench.stores.base import engine_names
from storebench.workloads.base import workload_class, workload_names

SCALE = float(os.environ.get("STOREBENCH_FUZZ_SCALE", "1"))
CLI = [sys.executable, "-m", "storebench"]


def budget(n: int) -> settings:
    return settings(
        max_examples=max(1, int(n * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --- the property --------------------------------------------------------------


class Hang(BaseException):  # noqa: N818 (not caught by `except Exception` in the code under test)
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_refusal(exc: UserError) -> str:
    text = str(exc)
    assert text.strip(), "an empty message"
    assert len(text.splitlines()) == 1, f"not one line: {text!r}"
    assert exc.where, f"names no place: {text!r}"
    return text


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn``'s value, or the UserError it raised (checked); anything else
    it raises fails the test."""
    with time_limit(30):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            check_refusal(exc)
            return exc


@pytest.fixture(autouse=True, scope="module")
def _sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private data directory and working directory: a fuzzed ``dataset``
    parameter or path must find nothing of the user's."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "cwd").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STOREBENCH_DATA", str(root / "data"))
        mp.chdir(root / "cwd")
        yield root


# --- scenario files ----------------------------------------------------------------

BUILTIN_TEXT = {
    n: (resources.files(BUILTIN_PACKAGE) / f"{n}.yaml").read_text() for n in builtin_names()
}
ENGINES = engine_names()
PARAM_KEYS = sorted({k for w in workload_names() for k in workload_class(w).Params.model_fields})
KNOWN_KEYS = sorted(
    set(ScenarioFile.model_fields)
    | set(StoreEntry.model_fields)
    | set(DriverConfig.model_fields)
    | set(PARAM_KEYS)
    | {"index.m", "index.ef_construct", "search.ef", "params.n", "m", "ef", "nlist"}
)
TRICKY_TEXT = [
    "",
    " ",
    "memory",
    "crud",
    "1e400",
    "nan",
    ".nan",
    ".inf",
    "-.inf",
    "~",
    "null",
    "yes",
    "[1, 2]",
    "{a: 1}",
    "-1",
    "0",
    "a\nb",
    "a\rb",
    "a\u2028b",
    "x\x00y",
    "../../x",
    "/",
    ".",
    "é",
]

huge_ints = st.integers(min_value=60, max_value=400).map(lambda e: 10**e) | st.integers(
    min_value=60, max_value=400
).map(lambda e: -(10**e))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=300),
    st.integers(),
    huge_ints,
    st.floats(),  # NaN and inf included
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 0.5]),
    st.text(max_size=12),
    st.sampled_from(TRICKY_TEXT),
    st.sampled_from(KNOWN_KEYS),
)
keys = st.one_of(
    st.sampled_from(KNOWN_KEYS),
    st.text(max_size=10),
    st.sampled_from(TRICKY_TEXT),
    st.integers(-3, 3),
    st.none(),
    st.booleans(),
)
yaml_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=16,
)


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        node = node[p]
    return node


@st.composite
def mutated_builtin(draw: st.DrawFn) -> Any:
    """A built-in scenario with one to three keys deleted, replaced, added
    to, or wrapped."""
    doc = yaml.safe_load(BUILTIN_TEXT[draw(st.sampled_from(sorted(BUILTIN_TEXT)))])
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["delete", "replace", "add", "wrap_list", "wrap_dict", "type"]))
        if not path:
            if op in ("replace", "wrap_list", "wrap_dict"):
                doc = draw(yaml_values)
            elif isinstance(doc, dict):
                doc[draw(keys)] = draw(yaml_values)
            continue
        parent, last = _get(doc, path[:-1]), path[-1]
        value = parent[last]
        if op == "delete":
            del parent[last]
        elif op == "replace":
            parent[last] = draw(yaml_values)
        elif op == "add" and isinstance(value, dict):
            value[draw(keys)] = draw(yaml_values)
        elif op == "add" and isinstance(value, list):
            value.append(draw(yaml_values))
        elif op == "wrap_list":
            parent[last] = [value]
        elif op == "wrap_dict":
            parent[last] = {draw(keys): value}
        else:  # the same value as text, or a string as a number
            parent[last] = str(value) if not isinstance(value, str) else draw(scalars)
    return doc


def load_text(text: str | bytes, **kw: Any) -> Any:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.yaml"
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text, encoding="utf-8")
        got = outcome(Scenario.load, str(p), **kw)
        if isinstance(got, Scenario):
            got.plan()  # planned again: the same answer
        return got


@budget(250)
@given(doc=mutated_builtin())
@example(doc={"name": "x", "workload": "crud", "stores": ["memory"], "repeats": 10**12})
@example(doc={"name": "x", "workload": "crud", "stores": [{"engine": "memory"}], "a\nb": 1})
@example(
    doc={
        "name": "x",
        "workload": "search",
        "stores": ["memory"],
        "params": {"duration_s": math.inf},
    }
)
def test_mutated_builtin_scenarios(doc):
    load_text(dump(doc))


@budget(250)
@given(doc=yaml_values)
def test_random_yaml_documents(doc):
    load_text(dump(doc))


@st.composite
def edited_text(draw: st.DrawFn) -> bytes:
    """A built-in scenario's bytes with a few characters or bytes cut,
    inserted or replaced, or the file truncated."""
    data = bytearray(BUILTIN_TEXT[draw(st.sampled_from(sorted(BUILTIN_TEXT)))].encode())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["cut", "insert", "bytes", "truncate"]))
        if op == "cut":
            del data[at : at + draw(st.integers(1, 20))]
        elif op == "insert":
            data[at:at] = draw(
                st.sampled_from(
                    ["[", "{", ": ", "- ", "\n", "\t", "&a ", "*a", "!!", "? ", "#", "'", '"']
                )
                | st.text(max_size=6)
            ).encode()
        elif op == "bytes":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[at:]
    return bytes(data)


@budget(250)
@given(text=edited_text())
def test_edited_scenario_text(text):
    load_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000 + "]" * 5000,
        "a: " + "[" * 5000 + "]" * 5000,
        "".join(" " * i + "- \n" for i in range(0, 2000, 2)),
        "a: &x [1]\nb: *x\n",
        "? [a, b]\n: 1\n",
        "--- a\n--- b\n",
        "",
        "\ufeffname: x\n",
        "repeats: " + "9" * 5000,
    ],
    ids=[
        "flow-list",
        "flow-value",
        "block",
        "anchor",
        "complex-key",
        "two-docs",
        "empty",
        "bom",
        "digits",
    ],
)
def test_deeply_nested_and_odd_yaml(text):
    load_text(text)


# --- --set texts and typed values ------------------------------------------------------

set_keys = st.one_of(
    st.sampled_from(KNOWN_KEYS),
    st.builds(
        lambda a, b: f"{a}.{b}",
        st.sampled_from(
            ["params", "grid", "driver", "stores", "grid.index", "grid.search", "name"]
        ),
        st.sampled_from(KNOWN_KEYS) | st.text(max_size=6),
    ),
    st.text(max_size=10),
    st.sampled_from(["", ".", "..", "params", "grid", "params.", "grid.", " n ", "n.x"]),
)
set_values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(TRICKY_TEXT),
    yaml_values.map(lambda v: yaml.safe_dump(v, default_flow_style=True, width=10**6).strip()),
    st.sampled_from(["[" * 600, "[" * 600 + "]" * 600, "{a: [1, {b: ]", "!!python/name:os.system"]),
    st.just("9" * 5000),  # past Python's 4300 digits for int()
)


@budget(300)
@given(
    base=st.sampled_from(sorted(BUILTIN_TEXT)),
    sets=st.lists(
        st.builds(lambda k, v: f"{k}={v}", set_keys, set_values) | st.text(max_size=10), max_size=4
    ),
    stores=st.lists(st.sampled_from(ENGINES) | st.text(max_size=8), max_size=2),
)
@example(base="crud", sets=["params=5"], stores=[])
@example(base="crud", sets=["n=" + "[" * 5000], stores=[])
def test_set_texts(base, sets, stores):
    # (store URLs have their own tests: engine names only here)
    stores = [s.replace("=", "") for s in stores]
    outcome(Scenario.load, base, sets, stores)


python_values = st.recursive(
    scalars
    | st.binary(max_size=4)
    | st.sampled_from([np.int64(5), np.float32(math.nan), np.bool_(True), object(), 1j, b"x"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.frozensets(scalars.filter(lambda v: v == v), max_size=3)
        | st.dictionaries(keys, inner, max_size=3)
    ),
    max_leaves=12,
)


@budget(300)
@given(
    base=st.sampled_from(sorted(BUILTIN_TEXT)),
    values=st.dictionaries(
        set_keys | keys | st.tuples(st.text(max_size=2)), python_values, max_size=4
    ),
)
@example(base="crud", values={1: 2})
@example(base="crud", values={"params": 5})
def test_typed_values(base, values):
    outcome(Scenario.load, base, values=values)


# --- at the command line: exit status 2 and one line ------------------------------


def refused_at_cli(*args: str) -> str:
    # the working directory is the sandbox's: the code under test by absolute path
    src = str(Path(storebench.__file__).parents[1])
    env = os.environ | {"PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storebench: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


@pytest.mark.parametrize(
    "text, expect",
    [
        ("a: " + "[" * 5000, "nested too deeply"),
        ("name: crud\x00\n", ":1: not valid YAML: character #x0000 not allowed"),
        ("name: x\nworkload: crud\nstores: [memory]\n'a\\nb': 1\n", ":4: a\\nb: unknown key"),
        (
            "name: x\nworkload: crud\nstores: [memory]\nrepeats: 1000000000000\n",
            "more than 100,000 runs",
        ),
    ],
    ids=["deep", "nul", "key-with-newline", "repeats"],
)
def test_cli_refuses_bad_scenario_files(tmp_path, text, expect):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    line = refused_at_cli("run", str(f), "--results", str(tmp_path / "out"))
    assert f"storebench: error: {f}" in line and expect in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "sets, expect",
    [
        (["params=5"], "--set params: Input should be a valid dictionary"),
        (["n=" + "[" * 5000], "--set n: cannot read value"),
        (["n=" + "9" * 5000], "--set n: cannot read value"),
    ],
    ids=["params", "deep", "digits"],
)
def test_cli_refuses_bad_set_values(tmp_path, sets, expect):
    args = [a for s in sets for a in ("--set", s)]
    line = refused_at_cli("run", "crud", *args, "--results", str(tmp_path / "out"))
    assert expect in line


def _float_params() -> list[tuple[str, str]]:
    out = []
    for w in workload_names():
        for k, f in workload_class(w).Params.model_fields.items():
            if "float" in str(f.annotation):
                out.append((w, k))
    return [*out, ("crud", "driver.ray_timeout_s")]


@pytest.mark.parametrize("workload, key", _float_params())
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, ".inf", ".nan"])
def test_no_number_is_nan_or_inf(workload, key, value):
    """``duration_s: .inf`` would run for ever; NaN compares false with every bound."""
    scenario = workload if workload in BUILTIN_TEXT else "crud"
    if isinstance(value, str):
        got = outcome(Scenario.load, scenario, [f"{key}={value}"])
    else:
        got = outcome(Scenario.load, scenario, values={key: value})
    assert isinstance(got, UserError), f"{key}={value} accepted"
    assert f"--set {key if '.' in key else 'params.' + key}" in str(got)


# --- filter trees ------------------------------------------------------------------

FIELD_NAMES = ["tag", "score", "flag", "label"]


@pytest.fixture(scope="module")
def filter_ds(_sandbox: Path) -> Any:
    """A dataset with a field of each kind, imported as a user would."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from storebench.data import datasets

    d = _sandbox / "vdb"
    d.mkdir()
    rng = np.random.default_rng(0)
    n, dim = 60, 4

    def emb(k: int) -> Any:
        return pa.array(rng.random((k, dim)).tolist(), type=pa.list_(pa.float32()))

    ids = pa.array(range(n), pa.int64())
    pq.write_table(pa.table({"id": ids, "emb": emb(n)}), d / "train.parquet")
    pq.write_table(
        pa.table({"id": pa.array(range(3), pa.int64()), "emb": emb(3)}), d / "test.parquet"
    )
    labels = {
        "id": ids,
        "tag": pa.array(rng.integers(0, 10, n), pa.int64()),
        "score": pa.array(rng.random(n)),
        "flag": pa.array(rng.random(n) < 0.5),
        "label": pa.array([f"l{i % 4}" for i in range(n)]),
    }
    pq.write_table(pa.table(labels), d / "scalar_labels.parquet")
    ds = datasets.import_path(d, "filters", metric="l2")
    assert set(ds.meta.fields) == set(FIELD_NAMES)
    return ds


field_names = st.one_of(
    st.sampled_from(FIELD_NAMES),
    st.sampled_from(FIELD_NAMES),
    st.sampled_from(["nosuch", "", "a\nb"]),
    keys,
)
op_names = st.sampled_from(["eq", "ne", "lt", "le", "gt", "ge", "range", "in"]) | keys
filter_values = st.one_of(
    scalars,
    st.sampled_from([np.int64(3), np.float64(0.5), np.str_("l1"), np.bool_(True), b"l1"]),
    st.lists(scalars, max_size=3),
    st.tuples(scalars, scalars),
    st.dictionaries(keys, scalars, max_size=2),
)
filter_leaves = st.one_of(
    st.builds(lambda f, v: {f: v}, field_names, filter_values),
    st.builds(lambda f, op, v: {f: {op: v}}, field_names, op_names, filter_values),
    st.dictionaries(field_names, filter_values, max_size=2),
    st.dictionaries(field_names, st.dictionaries(op_names, filter_values, max_size=2), max_size=2),
    scalars,
)
filter_trees = st.recursive(
    filter_leaves,
    lambda inner: st.one_of(
        st.builds(
            lambda op, parts: {op: parts},
            st.sampled_from(["and", "or"]),
            st.lists(inner, max_size=3),
        ),
        st.builds(lambda part: {"not": part}, inner),
        st.builds(
            lambda op, part: {op: part}, st.sampled_from(["and", "or", "not"]), filter_values
        ),
        st.lists(inner, max_size=2),
    ),
    max_leaves=8,
)


def _deep_not(depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"tag": 1}
    for _ in range(depth):
        spec = {"not": spec}
    return spec


@budget(300)
@given(spec=filter_trees)
@example(spec={None: None})
def test_filter_trees(filter_ds, spec):
    got = outcome(filter_ds.mask, spec)
    if not isinstance(got, UserError):
        assert got is None or (got.dtype == np.bool_ and got.shape == (filter_ds.n,))


@pytest.mark.parametrize(
    "spec, expect",
    [
        ({None: None}, "a field name is a non-empty string, got None"),
        ({1: 2}, "a field name is a non-empty string, got 1"),
        ({"label": {"lt": 5}}, "field 'label' holds str values, not 5"),
        ({"tag": {"lt": "a"}}, "field 'tag' holds int values, not 'a'"),
        ({"tag": {"eq": [1, 2]}}, "filter.tag.eq: expected a number, string or boolean"),
        ({"tag": {"range": "ab"}}, "filter.tag.range: expected [lo, hi]"),
        ({"tag": {"in": [1, "a"]}}, "field 'tag' holds int values, not 'a'"),
        ({"flag": 1}, "field 'flag' holds bool values, not 1"),
        ({"score": True}, "field 'score' holds float values, not True"),
        ({"tag": None}, "filter.tag: expected a number, string or boolean, got None"),
        (_deep_not(3000), "nested deeper than 64 levels"),
    ],
)
def test_filters_that_numpy_could_not_evaluate_are_refused(filter_ds, spec, expect):
    got = outcome(filter_ds.mask, spec)
    assert isinstance(got, UserError) and expect in str(got), got
    assert str(got).startswith("filters: ")


def test_filters_of_every_kind_still_select(filter_ds):
    f = filter_ds.fields
    cases = {
        "tag": ({"tag": {"in": [np.int64(3), 4.0]}}, np.isin(f["tag"], [3, 4])),
        "score": ({"score": {"range": [0.25, 0.75]}}, (f["score"] >= 0.25) & (f["score"] <= 0.75)),
        "flag": ({"not": {"flag": np.bool_(True)}}, ~f["flag"]),
        "label": ({"or": [{"label": "l1"}, {"label": {"ge": "l3"}}]}, f["label"] != "l2"),
    }
    for name, (spec, want) in cases.items():
        want = want & (f["label"] != "l0") if name == "label" else want
        assert (filter_ds.mask(spec) == want).all(), name


@pytest.mark.parametrize(
    "where, expect",
    [
        ("[" * 5000, "--where: not a filter: nested too deeply"),
        ("{tag: {lt: x}}", "filters: filter: field 'tag' holds int values, not 'x'"),
        ("{1: 2}", "a field name is a non-empty string, got 1"),
        ("{tag: [1, 2]}", "filter.tag: expected a number, string or boolean"),
    ],
    ids=["deep", "kind", "field", "list"],
)
def test_cli_refuses_bad_filters(filter_ds, where, expect):
    line = refused_at_cli("dataset", "truth", "filters", "-k", "1", "--where", where)
    assert expect in line
