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
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import storebench
from storebench.errors import UserError
from storebench.plan.loading import BUILTIN_PACKAGE, builtin_names
from storebench.plan.scenario import DriverConfig, Scenario, ScenarioFile, StoreEntry
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

    # pytest-timeout may have its own alarm running: it is put back after
    old = signal.signal(signal.SIGALRM, alarm)
    start = time.monotonic()
    outer, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    if outer:
        signal.setitimer(signal.ITIMER_REAL, min(seconds, outer))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer:
            left = outer - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), interval)


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
            got = fn(*args, **kwargs)
        except UserError as exc:
            text = check_refusal(exc)
            _event("refused: " + re.sub(r"[\d,]+|/tmp\S+|'.*?'", "#", text)[:50])
            return exc
    _event("accepted")
    return got


def _event(text: str) -> None:
    """Counted in --hypothesis-show-statistics (outside a property: nothing)."""
    with contextlib.suppress(InvalidArgument):
        event(text)


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
    "x" * 300,  # longer than a file name may be
    "a/" + "b" * 300,
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
@example(base="crud", sets=["dataset=" + "x" * 300], stores=[])
@example(base="crud", sets=["n=" + "[" * 5000], stores=[])
def test_set_texts(base, sets, stores):
    # (store URLs have their own tests: engine names only here)
    stores = [s.replace("=", "") for s in stores]
    outcome(Scenario.load, base, sets, stores)


def _python_containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.frozensets(scalars.filter(lambda v: v == v), max_size=3)
        | st.dictionaries(keys, inner, max_size=3)
    )


python_values = st.recursive(
    scalars
    | st.binary(max_size=4)
    | st.sampled_from([np.int64(5), np.float32(math.nan), np.bool_(True), object(), 1j, b"x"]),
    _python_containers,
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


def _filter_nodes(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
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
    )


filter_trees = st.recursive(filter_leaves, _filter_nodes, max_leaves=8)


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


# --- dataset files ------------------------------------------------------------------

VECS = {".fvecs": "<f4", ".ivecs": "<i4", ".bvecs": "u1"}
BINS = {".fbin": "<f4", ".u8bin": "u1", ".i8bin": "i1", ".ibin": "<i4"}
INT32_EDGES = [0, 1, -1, 2, 3, 7, 65536, 65537, 2**31 - 1, -(2**31)]


def elements(dtype: str) -> st.SearchStrategy[Any]:
    dt = np.dtype(dtype)
    if dt.kind == "f":  # NaN and inf now and then
        finite = st.floats(-1e6, 1e6, width=32)
        return st.one_of(finite, finite, finite, st.sampled_from([0.0, 1.0]), st.floats(width=32))
    info = np.iinfo(dt)
    return st.integers(int(info.min), int(info.max))


@st.composite
def matrices(draw: st.DrawFn, dtype: str, n: int | None = None, d: int | None = None) -> np.ndarray:
    n = draw(st.sampled_from([1, 2, 3, 5, 0])) if n is None else n
    d = draw(st.sampled_from([1, 2, 3, 4, 0])) if d is None else d
    values = draw(st.lists(elements(dtype), min_size=n * d, max_size=n * d))
    return np.array(values, dtype=dtype).reshape(n, d)


@st.composite
def vecs_bytes(draw: st.DrawFn, suffix: str, a: np.ndarray | None = None) -> bytes:
    """TEXMEX rows (int32 dimension, values), one row perhaps of another dimension."""
    dt = VECS[suffix]
    a = draw(matrices(dt)) if a is None else a
    ragged = draw(st.none() | st.integers(0, max(0, len(a) - 1)))
    out = b""
    for i, row in enumerate(a):
        if ragged == i and draw(st.booleans()):
            row = np.append(row, row[:1]) if draw(st.booleans()) else row[:-1]
        out += np.int32(len(row)).tobytes() + row.astype(dt).tobytes()
    return out


@st.composite
def bin_bytes(draw: st.DrawFn, suffix: str, a: np.ndarray | None = None) -> bytes:
    a = draw(matrices(BINS[suffix])) if a is None else a
    header = np.array(a.shape, "<i4")
    if draw(st.integers(0, 4)) == 0:  # a header that lies
        header[draw(st.integers(0, 1))] = draw(st.sampled_from(INT32_EDGES))
    return header.tobytes() + a.tobytes()


NPY_DTYPES = ["<f4", ">f8", "<f2", "<i8", "u1", "?", "<c8", "<U3", "S2", "<M8[s]", "O", "V4"]


def npy_of(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=True)
    return buf.getvalue()


@st.composite
def npy_bytes(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return npy_of(draw(matrices(draw(st.sampled_from(["<f4", "<f8", "<i8", "u1"])))))
    dt = np.dtype(draw(st.sampled_from(NPY_DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    if dt.kind in "fiub":
        a = np.array(
            draw(st.lists(elements("<f4"), min_size=math.prod(shape), max_size=math.prod(shape)))
        )
        a = a.reshape(shape)
        with np.errstate(all="ignore"):
            a = a.astype(dt) if dt.kind == "f" else np.nan_to_num(a).astype(dt)
    elif dt.kind == "O":
        a = np.empty(shape, dt)
        a.fill([1.0])
    else:
        a = np.zeros(shape, dt)
    return npy_of(a)


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """The bytes as they are, or truncated at an offset of each class (in the
    header, at its end, inside a row, a byte short), bytes overwritten,
    cut out or appended, or a header word replaced."""
    if draw(st.booleans()):
        return data
    op = draw(st.sampled_from(["truncate", "overwrite", "cut", "append", "word"]))
    if not data and op != "append":
        return data
    size = len(data)
    at = draw(
        st.sampled_from(sorted({0, 1, 3, 4, 5, 7, 8, 9, size // 2, size - 4, size - 1}))
        | st.integers(0, size)
    )
    at = max(0, min(at, size))
    if op == "truncate":
        return data[:at]
    if op == "overwrite":
        junk = draw(st.binary(min_size=1, max_size=8))
        return data[:at] + junk + data[at + len(junk) :]
    if op == "cut":
        return data[:at] + data[at + draw(st.integers(1, 8)) :]
    if op == "append":
        return data + draw(st.binary(min_size=1, max_size=16))
    word = np.int32(draw(st.sampled_from(INT32_EDGES) | st.integers(-(2**31), 2**31 - 1))).tobytes()
    at = draw(st.sampled_from([0, 4]))
    return data[:at] + word + data[at + 4 :]


def file_bytes(suffix: str) -> st.SearchStrategy[bytes]:
    if suffix in VECS:
        raw = vecs_bytes(suffix)
    elif suffix in BINS:
        raw = bin_bytes(suffix)
    else:
        raw = npy_bytes()
    return st.one_of(raw.flatmap(mutated), raw.flatmap(mutated), st.binary(max_size=64))


def check_dataset(ds: Any) -> None:
    """A dataset that was imported reads back whole and answers a truth query."""
    assert ds.vectors.shape == (ds.n, ds.dim) and ds.n >= 1 and ds.dim >= 1
    assert np.isfinite(ds.vectors).all()
    assert ds.ids.shape == (ds.n,)
    for col in ds.fields.values():
        assert len(col) == ds.n
    if ds.nq:
        assert ds.queries.shape == (ds.nq, ds.dim)
        gt = ds.truth(k=1)
        assert gt.ids.shape == (ds.nq, 1)


def import_(path: Path, **kw: Any) -> Any:
    """``storebench dataset import`` through Python: success (checked) or
    a UserError that names a file of the dataset or the dataset."""
    from storebench.data import datasets

    got = outcome(datasets.import_path, path, "fz", replace=True, **kw)
    if isinstance(got, UserError):
        assert str(path.parent) in got.where or got.where in ("fz", "'fz'"), got
    else:
        with time_limit(30):
            check_dataset(got)
    return got


import_options = st.fixed_dictionaries(
    {},
    optional={
        "metric": st.sampled_from(["l2", "ip", "cosine"]),
        "holdout": st.sampled_from([0, 1, 2, 5]),
        "limit": st.sampled_from([1, 2, 3]),
    },
)


@budget(300)
@given(
    suffix=st.sampled_from([*VECS, *BINS, ".npy"]),
    data=st.data(),
    options=import_options,
)
def test_vector_files(suffix, data, options):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"base{suffix}"
        p.write_bytes(data.draw(file_bytes(suffix), label="bytes"))
        import_(p, **{"metric": "l2", **options})


def encode(draw: st.DrawFn, suffix: str, a: np.ndarray) -> bytes:
    """``a`` in the format of ``suffix`` (``.bin``: big-ann ground truth)."""
    with np.errstate(invalid="ignore"):  # NaN as an integer: what it gives is fine
        if suffix in VECS:
            return draw(vecs_bytes(suffix, a.astype(VECS[suffix])))
        if suffix in BINS:
            return draw(bin_bytes(suffix, a.astype(BINS[suffix])))
        if suffix == ".bin":
            head = np.array(a.shape, "<i4").tobytes()
            return head + a.astype("<u4").tobytes() + np.zeros(a.shape, "<f4").tobytes()
    return npy_of(a)


@st.composite
def base_queries_truth(draw: st.DrawFn, base: str, queries: str, truth: str) -> list[bytes]:
    """Three files that agree (dimension, counts, neighbour positions), each
    then perhaps mutated or its shape changed."""
    n, nq, d, k = (draw(st.integers(lo, 5)) for lo in (1, 0, 1, 1))
    arrays = [
        draw(matrices("<f4", n, d)),
        draw(matrices("<f4", nq, d)),
        np.array(draw(st.lists(st.integers(-1, n - 1), min_size=nq * k, max_size=nq * k))).reshape(
            nq, k
        ),
    ]
    odd = draw(st.sampled_from([0, 1, 2, None]))  # the one file that is off
    out = []
    for i, (suffix, a) in enumerate(zip((base, queries, truth), arrays, strict=True)):
        if i == odd and draw(st.booleans()):  # another shape
            a = draw(matrices(a.dtype.str))
        blob = encode(draw, suffix, a)
        if i == odd and suffix == ".npy" and draw(st.booleans()):
            blob = draw(npy_bytes())  # any shape, any dtype
        out.append(draw(mutated(blob)) if i == odd else blob)
    return out


@budget(250)
@given(
    suffixes=st.tuples(
        st.sampled_from([".fvecs", ".bvecs", ".fbin", ".u8bin", ".npy"]),
        st.sampled_from([*VECS, *BINS, ".npy"]),
        st.sampled_from([".ivecs", ".ibin", ".npy", ".bin"]),
    ),
    data=st.data(),
    options=import_options,
)
def test_base_with_query_and_truth_files(suffixes, data, options):
    blobs = data.draw(base_queries_truth(*suffixes), label="files")
    with tempfile.TemporaryDirectory() as d:
        files = []
        for role, suffix, blob in zip(("base", "queries", "truth"), suffixes, blobs, strict=True):
            files.append(Path(d) / f"{role}{suffix}")
            files[-1].write_bytes(blob)
        options = {"metric": "l2", **options}
        import_(files[0], queries=files[1], truth=files[2], **options)


@budget(200)
@given(
    layout=st.sampled_from(["texmex", "bin"]),
    data=st.data(),
    options=import_options,
)
def test_dataset_directories(layout, data, options):
    """The TEXMEX (*base.fvecs, *query.fvecs, *groundtruth.ivecs) and big-ann
    (base.*bin, query.*bin, gt*) directory layouts."""
    if layout == "texmex":
        suffixes = (data.draw(st.sampled_from([".fvecs", ".bvecs"])),) * 2 + (".ivecs",)
        names = ["sift_base", "sift_query", "sift_groundtruth"]
    else:
        suffixes = (data.draw(st.sampled_from([*BINS])),) * 2 + (".bin",)
        names = ["base.1M", "query.public.10K", "gt.public.10K"]
    blobs = data.draw(base_queries_truth(*suffixes), label="files")
    with tempfile.TemporaryDirectory() as d:
        for name, suffix, blob in zip(names, suffixes, blobs, strict=True):
            if data.draw(st.integers(0, 9), label=f"leave out {name}") > 0:
                (Path(d) / f"{name}{suffix}").write_bytes(blob)
        import_(Path(d), **{"metric": "l2", **options})


@st.composite
def jsonl_lines(draw: st.DrawFn, dim: int, n: int) -> bytes:
    """qdrant's tests.jsonl: one query per line, mostly well made."""
    import json

    lines = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["good", "good", "good", "value", "junk", "bytes", "blank"]))
        row: Any = {
            "query": draw(st.lists(st.floats(-10, 10), min_size=dim, max_size=dim)),
            "closest_ids": draw(st.lists(st.integers(0, n - 1), max_size=3)),
        }
        if kind == "value":
            row[draw(st.sampled_from(["query", "closest_ids"]))] = draw(python_json)
        if kind in ("good", "value"):
            lines.append(json.dumps(row).encode())
        elif kind == "junk":
            lines.append(draw(st.sampled_from([b"{not json", b"[]", b"5", b"null", b'{"x": 1}'])))
        elif kind == "bytes":
            lines.append(draw(st.binary(max_size=8)))
        else:
            lines.append(b"")
    return b"\n".join(lines) + b"\n"


python_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=6,
)


@budget(200)
@given(data=st.data(), options=import_options)
def test_compound_directories(data, options):
    """vector-db-benchmark's layout: vectors.npy and tests.jsonl."""
    n, d = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 4))
    vectors = data.draw(
        st.one_of(
            st.builds(npy_of, matrices("<f4", n, d)),
            st.builds(npy_of, matrices("<f4", n, d)),
            npy_bytes(),
        ),
        label="vectors.npy",
    )
    tests = data.draw(jsonl_lines(d, n) | st.binary(max_size=32), label="tests.jsonl")
    with tempfile.TemporaryDirectory() as t:
        (Path(t) / "vectors.npy").write_bytes(vectors)
        if data.draw(st.booleans(), label="with tests.jsonl"):
            (Path(t) / "tests.jsonl").write_bytes(tests)
        import_(Path(t), **{"metric": "l2", **options})


H5_DTYPES = ["<f4", "<f8", "<i4", "<i8", "u1", "?", "<c8", "S3", "compound"]


@st.composite
def h5_member(
    draw: st.DrawFn, h5: Any, name: str, shape: tuple[int, ...], dtype: str, odd: bool
) -> None:
    """``name`` as ann-benchmarks has it, or (``odd``) missing, a group, of
    another shape or dtype."""
    kind = draw(st.sampled_from(["missing", "group", "shape", "dtype"])) if odd else "right"
    if kind == "missing":
        return
    if kind == "group":
        h5.create_group(name)
        return
    if kind == "shape":
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    dt = draw(st.sampled_from(H5_DTYPES)) if kind == "dtype" else dtype
    if dt == "compound":
        h5.create_dataset(name, data=np.zeros(shape, [("a", "<f4"), ("b", "<i4")]))
    elif dt == "S3":
        h5.create_dataset(name, data=np.full(shape, b"ab", "S3"))
    else:
        with np.errstate(invalid="ignore"):
            values = draw(
                st.lists(elements("<f4"), min_size=math.prod(shape), max_size=math.prod(shape))
            )
            h5.create_dataset(name, data=np.array(values, "<f4").reshape(shape).astype(dt))


@st.composite
def hdf5_bytes(draw: st.DrawFn) -> bytes:
    h5py = pytest.importorskip("h5py")
    n, nq, d, k = (draw(st.sampled_from(v)) for v in ([1, 3, 5, 0], [1, 2, 0], [1, 3, 0], [1, 2]))
    with tempfile.TemporaryDirectory() as t:
        p = Path(t) / "x.hdf5"
        odd = draw(st.sampled_from(["train", "test", "neighbors", "distances", "distance", None]))
        with h5py.File(p, "w") as h5:
            attr = draw(
                st.sampled_from([None, "hamming", b"angular", 3, ""])
                if odd == "distance"
                else st.sampled_from(["euclidean", "angular", "dot"])
            )
            if attr is not None:
                h5.attrs["distance"] = attr
            for name, shape, dt in (
                ("train", (n, d), "<f4"),
                ("test", (nq, d), "<f4"),
                ("neighbors", (nq, k), "<i4"),
                ("distances", (nq, k), "<f4"),
            ):
                draw(h5_member(h5, name, shape, dt, odd == name))
        return p.read_bytes()


@budget(150)
@given(data=st.data(), options=import_options)
def test_hdf5_files(data, options):
    blob = data.draw(
        st.one_of(hdf5_bytes(), hdf5_bytes().flatmap(mutated), st.binary(max_size=64)),
        label="x.hdf5",
    )
    with tempfile.TemporaryDirectory() as t:
        p = Path(t) / "x.hdf5"
        p.write_bytes(blob)
        import_(p, **options)


@st.composite
def parquet_dir(draw: st.DrawFn, root: Path) -> None:
    """A VectorDBBench directory: train (id, emb), test, neighbors,
    scalar_labels; each column most often as it should be."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    n, nq, d = (draw(st.sampled_from(v)) for v in ([3, 5, 1, 0], [2, 1, 0], [2, 3, 1]))

    def right() -> bool:
        return draw(st.integers(0, 3)) > 0

    def emb(rows: int) -> Any:
        vals = [draw(st.lists(elements("<f4"), min_size=d, max_size=d)) for _ in range(rows)]
        if right():
            return pa.array(vals, pa.list_(pa.float32()))
        return draw(
            st.sampled_from(
                [
                    pa.array(vals, pa.list_(pa.float32(), d)),  # fixed size: fine too
                    pa.array([[str(v) for v in r] for r in vals], pa.list_(pa.string())),
                    pa.array([[r] for r in vals], pa.list_(pa.list_(pa.float32()))),
                    pa.array([r[:1] + r for r in vals], pa.list_(pa.float64())),
                    pa.array([None] * rows, pa.list_(pa.float32())),
                    pa.array([[None] * d] * rows, pa.list_(pa.float32())),
                    pa.array(range(rows), pa.int64()),
                    pa.array([str(r) for r in range(rows)]),
                    pa.array([[0.0] * (d + (i % 2)) for i in range(rows)], pa.list_(pa.float32())),
                ]
            )
        )

    def ids(rows: int) -> Any:
        if right():
            return pa.array(range(100, 100 + rows), pa.int64())
        return draw(
            st.sampled_from(
                [
                    pa.array([7] * rows, pa.int64()),
                    pa.array([str(i) for i in range(rows)]),
                    pa.array([i + 0.5 for i in range(rows)]),
                    pa.array([None] * rows, pa.int64()),
                    pa.array(range(rows + 1), pa.int64()),
                ]
            )
        )

    def table(**cols: Any) -> Any:
        rows = {len(c) for c in cols.values()}
        if len(rows) > 1:  # columns of unequal length: shorten to the shortest
            m = min(rows)
            cols = {k: c.slice(0, m) for k, c in cols.items()}
        return pa.table(cols)

    pq.write_table(table(id=ids(n), emb=emb(n)), root / "train.parquet")
    if right():
        pq.write_table(
            table(id=pa.array(range(nq), pa.int64()), emb=emb(nq)), root / "test.parquet"
        )
    if right():
        lists = [draw(st.lists(st.integers(98, 100 + n), max_size=3)) for _ in range(nq)]
        col = pa.array(lists, pa.list_(pa.int64())) if right() else pa.array([1] * nq, pa.int64())
        name = "neighbors_id" if right() else "neighbours"
        pq.write_table(
            pa.table({"id": pa.array(range(nq), pa.int64()), name: col}), root / "neighbors.parquet"
        )
    if right():
        kinds = {
            "int": pa.array(range(n), pa.int64()),
            "float": pa.array([i / 2 for i in range(n)]),
            "str": pa.array([f"l{i}" for i in range(n)]),
            "bool": pa.array([i % 2 == 0 for i in range(n)]),
            "list": pa.array([[i] for i in range(n)], pa.list_(pa.int64())),
            "null": pa.array([None] * n, pa.null()),
            "time": pa.array(range(n), pa.timestamp("s")),
            "short": pa.array(range(max(0, n - 1)), pa.int64()),
        }
        chosen = draw(st.lists(st.sampled_from(sorted(kinds)), max_size=3, unique=True))
        cols = {"id": pa.array(range(100, 100 + n), pa.int64())}
        for c in chosen:
            cols[f"f_{c}"] = kinds[c]
        rows = {len(c) for c in cols.values()}
        if len(rows) == 1:
            pq.write_table(pa.table(cols), root / "scalar_labels.parquet")
        else:  # a label file that does not line up with the base
            pq.write_table(pa.table({"f_short": kinds["short"]}), root / "scalar_labels.parquet")
    victim = draw(st.sampled_from([None, None, *sorted(root.iterdir())]))
    if victim is not None:
        victim.write_bytes(draw(mutated(victim.read_bytes())))


@budget(150)
@given(data=st.data(), options=import_options)
def test_parquet_directories(data, options):
    with tempfile.TemporaryDirectory() as t:
        data.draw(parquet_dir(Path(t)), label="directory")
        import_(Path(t), **{"metric": "l2", **options})


# --- the dataset failures the properties found, minimized ------------------------------


def _npy_header(descr: str, shape: str) -> bytes:
    head = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".ljust(117) + "\n"
    return b"\x93NUMPY\x01\x00v\x00" + head.encode()


def _h5(path: Path, **members: Any) -> Path:
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        f.attrs["distance"] = "euclidean"
        for name, value in members.items():
            if value == "group":
                f.create_group(name)
            else:
                f.create_dataset(name, data=value)
    return path


def _parquet(path: Path, **cols: Any) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table(cols), path)
    return path


def _vdb(d: Path, emb: Any = None, ids: Any = None, labels: Any = None) -> Path:
    pa = pytest.importorskip("pyarrow")
    f32 = pa.list_(pa.float32())
    _parquet(
        d / "train.parquet",
        id=ids if ids is not None else pa.array([1, 2], pa.int64()),
        emb=emb if emb is not None else pa.array([[0.5], [1.5]], f32),
    )
    if labels is not None:
        _parquet(d / "scalar_labels.parquet", id=pa.array([1, 2], pa.int64()), f=labels)
    return d


def _regressions() -> list[Any]:
    pa = pytest.importorskip("pyarrow")
    f32 = pa.list_(pa.float32())
    rows = [
        (
            "npy-empty",
            lambda d: (d / "b.npy", b""),
            "not a readable .npy file (No data left in file)",
        ),
        (
            "npy-bad-header",
            lambda d: (d / "b.npy", _npy_header("<f4'(", "()")),
            "not a readable .npy file (",
        ),
        (
            "npy-strings",
            lambda d: (d / "b.npy", _npy_header("<U3", "(1, 1)") + b"\0" * 12),
            "holds <U3 values, expected numbers",
        ),
        ("npy-dim-0", lambda d: (d / "b.npy", _npy_header("<f4", "(1, 0)")), "dimension 0"),
        (
            "jsonl-not-utf8",
            lambda d: (d / "tests.jsonl", b"\x80\n"),
            "tests.jsonl:1: bad test line (not UTF-8 at byte 0)",
        ),
        (
            "jsonl-query-of-dicts",
            lambda d: (d / "tests.jsonl", b'{"query": [{}]}\n'),
            "tests.jsonl:1: bad test line ('query' is not a list of 1 numbers)",
        ),
        (
            "jsonl-ids-not-a-list",
            lambda d: (d / "tests.jsonl", b'{"query": [0.0], "closest_ids": true}\n'),
            "'closest_ids' is not a list of row numbers below 1",
        ),
        (
            "jsonl-ids-of-text",
            lambda d: (d / "tests.jsonl", b'{"query": [0.0], "closest_ids": [":"]}\n'),
            "'closest_ids' is not a list of row numbers below 1",
        ),
        (
            "hdf5-train-a-group",
            lambda d: (_h5(d / "x.hdf5", train="group"), None),
            "'train' is a group, not a dataset",
        ),
        (
            "hdf5-strings",
            lambda d: (_h5(d / "x.hdf5", train=np.full((1, 1), b"ab", "S3")), None),
            "'train' holds |S3 values, expected numbers",
        ),
        (
            "hdf5-neighbour-outside",
            lambda d: (
                _h5(
                    d / "x.hdf5",
                    train=np.zeros((1, 1), "f4"),
                    test=np.zeros((1, 1), "f4"),
                    neighbors=np.ones((1, 1), "i4"),
                ),
                None,
            ),
            "x.hdf5:neighbors: query 0: neighbour 1 is outside the 1 base rows",
        ),
        (
            "parquet-emb-of-strings",
            lambda d: (_vdb(d, emb=pa.array([["a"], ["b"]], pa.list_(pa.string()))), None),
            "vector column has type list<element: string>, expected a list of numbers",
        ),
        (
            "parquet-emb-of-lists",
            lambda d: (_vdb(d, emb=pa.array([[[1.0]], [[2.0]]], pa.list_(f32))), None),
            "vector column has type list<element: list<element: float>>",
        ),
        (
            "parquet-ids-of-text",
            lambda d: (_vdb(d, ids=pa.array(["a", "b"])), None),
            "column 'id' holds <U1 values, expected integers",
        ),
        (
            "parquet-label-list",
            lambda d: (_vdb(d, labels=pa.array([[1], [2]], pa.list_(pa.int64()))), None),
            "column 'f' has type list<element: int64>, expected numbers, booleans or strings",
        ),
        (
            "parquet-label-time",
            lambda d: (_vdb(d, labels=pa.array([1, 2], pa.timestamp("s"))), None),
            "column 'f' has type timestamp[",
        ),
        (
            "parquet-label-damaged",
            lambda d: (_vdb(d, labels=pa.array([1, 2], pa.int64())), "damage-labels"),
            "scalar_labels.parquet: not a readable Parquet file (",
        ),
    ]
    return [pytest.param(make, expect, id=name) for name, make, expect in rows]


@pytest.mark.parametrize("make, expect", _regressions())
def test_dataset_files_the_properties_broke(tmp_path, make, expect):
    target, blob = make(tmp_path)
    if target.name == "tests.jsonl":  # beside a vectors.npy of one 1-d row
        np.save(tmp_path / "vectors.npy", np.zeros((1, 1), "f4"))
        target.write_bytes(blob)
        target = tmp_path
    elif blob == "damage-labels":
        p = tmp_path / "scalar_labels.parquet"
        p.write_bytes(p.read_bytes()[:4] + b"\xff" * 40 + p.read_bytes()[44:])
    elif blob is not None:
        target.write_bytes(blob)
    got = import_(target, metric="l2")
    assert isinstance(got, UserError) and expect in str(got), got


@pytest.mark.parametrize(
    "truth, expect",
    [
        (np.array([1, 2]), "expected a 2-d array, found shape (2,)"),
        (np.zeros((2, 1, 1), int), "expected a 2-d array, found shape (2, 1, 1)"),
        (np.zeros((2, 1), "f4"), "holds float32 values, expected integers"),
        ("npz", "not a .npy file (an .npz archive?)"),
    ],
    ids=["1-d", "3-d", "floats", "npz"],
)
def test_truth_npy_of_another_shape(tmp_path, truth, expect):
    np.save(tmp_path / "base.npy", np.zeros((5, 3), "f4"))
    np.save(tmp_path / "q.npy", np.zeros((2, 3), "f4"))
    t = tmp_path / "t.npy"
    if isinstance(truth, str):
        np.savez(tmp_path / "z.npz", a=np.zeros(3))
        (tmp_path / "z.npz").rename(t)
    else:
        np.save(t, truth)
    got = import_(tmp_path / "base.npy", queries=tmp_path / "q.npy", truth=t, metric="l2")
    assert isinstance(got, UserError) and expect in str(got), got


# --- datasets in the data directory: meta.json and the arrays beside it ----------------------


@pytest.fixture(scope="module")
def made_ds(_sandbox: Path) -> Path:
    """A small dataset with queries, fields and cached truth, to copy and damage."""
    from storebench.data import datasets

    spec = datasets.SyntheticSpec(n=40, dim=3, nq=4, labels=(0.1,), tag_values=5)
    ds = datasets.make_synthetic(spec, "made", root=_sandbox / "made-root")
    ds.truth(k=2)
    return ds.path


def _dataset_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@st.composite
def damaged_dataset(draw: st.DrawFn, src: Path) -> dict[str, bytes | None]:
    """Files of a dataset directory (relative path -> bytes, None: removed)
    with meta.json's values replaced, keys removed or added, or one array
    file damaged, replaced or removed."""
    import json

    files: dict[str, bytes | None] = {f: (src / f).read_bytes() for f in _dataset_files(src)}
    what = draw(st.sampled_from(["meta", "meta", "array", "text"]))
    if what == "meta":
        meta = json.loads(files["meta.json"])
        for _ in range(draw(st.integers(1, 2))):
            key = draw(st.sampled_from([*sorted(meta), "extra"]))
            if key in meta and draw(st.integers(0, 4)) == 0:
                del meta[key]
            else:
                meta[key] = draw(
                    st.sampled_from([0, -1, 1, 2, 40, 10**20, 2.5, "3", "", None, True, [], {}])
                    | python_json
                    | st.sampled_from(["l2", "hamming", "int", "str"])
                    | st.dictionaries(
                        st.text(max_size=6), st.sampled_from(["int", "str", "x", 1]), max_size=2
                    )
                )
        files["meta.json"] = json.dumps(meta).encode()
    elif what == "text":
        files["meta.json"] = draw(st.sampled_from([b"", b"[]", b"{", b"\xff", b"null", b'"x"']))
    else:
        name = draw(st.sampled_from(sorted(f for f in files if f != "meta.json")))
        how = draw(st.sampled_from(["remove", "bytes", "array"]))
        if how == "remove":
            files[name] = None
        elif how == "bytes":
            files[name] = draw(mutated(files[name] or b""))
        else:
            files[name] = draw(npy_bytes())
    return files


def use_dataset(path: Path) -> None:
    """What a run and ``storebench dataset`` do with a dataset: load it by
    path, describe it, read every array, filter, and answer truth queries."""
    from storebench.data import datasets

    ds = datasets.load(path)
    ds.info()
    check_dataset(ds)
    for name, kind in ds.meta.fields.items():
        ds.mask({name: {"in": [1, 2] if kind in ("int", "float") else ["a"]}})
    ds.cached_truth(1)
    if ds.nq:
        ds.truth(k=3, where={"tags.i": {"ge": 2}} if "tags.i" in ds.meta.fields else None)


@budget(200)
@given(data=st.data())
def test_damaged_datasets(made_ds, data):
    files = data.draw(damaged_dataset(made_ds), label="files")
    with tempfile.TemporaryDirectory() as t:
        root = Path(t) / "made"
        for rel, blob in files.items():
            if blob is not None:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(blob)
        got = outcome(use_dataset, root)
        if isinstance(got, UserError):
            assert str(root) in got.where or got.where == "made", got
        # a scenario's dataset parameter reads the same directory at plan
        got = outcome(Scenario.load, "search", values={"dataset": str(root), "n": 10, "labels": []})
        if isinstance(got, UserError):  # the file at fault, or the parameter: no scenario line
            assert str(root) in got.where or got.where.startswith("--set params."), got
            assert "params./" not in str(got), got


def _meta(**changes: Any) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        import json

        meta = json.loads((root / "meta.json").read_text())
        meta.update(changes)
        (root / "meta.json").write_text(json.dumps(meta))

    return damage


def _file(rel: str, blob: bytes | np.ndarray) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        target = root / rel
        if isinstance(blob, np.ndarray):
            target.write_bytes(npy_of(blob))
        else:
            target.write_bytes(blob)

    return damage


@pytest.mark.parametrize(
    "damage, expect",
    [
        (_meta(dim="3"), "made/meta.json: corrupt meta.json (dim is '3')"),
        (_meta(nq="x"), "corrupt meta.json (nq is 'x')"),
        (_meta(fields=["tags.i"]), "corrupt meta.json (fields is ['tags.i'])"),
        (_meta(fields={"tags.i": "x"}), "corrupt meta.json (field 'tags.i' of kind 'x')"),
        (_meta(metric="hamming"), "corrupt meta.json (metric 'hamming')"),
        (_meta(source=[]), "corrupt meta.json (source is [])"),
        (_meta(provided_truth_k="a"), "corrupt meta.json (provided_truth_k is 'a')"),
        (_meta(n=0), "corrupt meta.json (n 0, dim 3"),
        (_file("queries.npy", np.zeros((), "c8")), "queries.npy holds () complex64"),
        (
            _file("fields/label_10p.npy", np.zeros((0, 1), "f4")),
            "fields/label_10p.npy holds (0, 1)",
        ),
        (_file("fields/tags.i.npy", np.zeros(40, "f8")), "meta.json says (40,) int"),
        (_file("truth/k2-l2-all-q4.npz", b""), "k2-l2-all-q4.npz: corrupt ground truth file ("),
        (
            _file("truth/k2-l2-all-q4.npz", npy_of(np.zeros((4, 2)))),
            "corrupt ground truth file (",
        ),
        (
            _file("truth/k2-l2-all-q4.npz", b""),
            "delete it to compute again",
        ),
    ],
    ids=lambda v: "" if callable(v) else v[:30],
)
def test_stored_datasets_the_properties_broke(made_ds, tmp_path, damage, expect):
    import shutil

    root = tmp_path / "made"
    shutil.copytree(made_ds, root)
    damage(root)
    got = outcome(use_dataset, root)
    assert isinstance(got, UserError) and expect in str(got), got
    # a plan reads meta.json: the file at fault is named, not a scenario line
    got = outcome(Scenario.load, "search", [f"dataset={root}", "labels=[]"])
    if "corrupt meta.json" in expect:
        assert isinstance(got, UserError) and str(got).startswith(f"{root}/meta.json: corrupt")


@pytest.mark.parametrize(
    "name, blob, command, expect",
    [
        ("b.npy", b"", "import", "b.npy: not a readable .npy file (No data left in file)"),
        ("b.npy", _npy_header("<U3", "(1, 1)") + b"\0" * 12, "info", "holds <U3 values"),
        (
            "b.fvecs",
            np.int32(3).tobytes() + b"\0" * 5,
            "import",
            "not a whole number of 16-byte rows",
        ),
        ("x.hdf5", b"\x89HDF\r\n\x1a\n" + b"\0" * 40, "info", "x.hdf5: not a readable HDF5 file"),
    ],
    ids=["npy-empty", "npy-strings", "fvecs-cut", "hdf5-damaged"],
)
def test_cli_refuses_bad_dataset_files(tmp_path, name, blob, command, expect):
    p = tmp_path / name
    p.write_bytes(blob)
    args = ["dataset", command, str(p)] + (["--metric", "l2"] if command == "import" else [])
    line = refused_at_cli(*args)
    assert expect in line and str(tmp_path) in line


def test_paths_the_system_refuses_are_named():
    from storebench.data import datasets, formats

    long = "x" * 300
    for fn, arg in (
        (Scenario.load, long),
        (Scenario.load, long + ".yaml"),
        (datasets.load, long + "/y.npy"),
        (formats.open_source, long + ".npy"),
    ):
        got = outcome(fn, arg)
        assert isinstance(got, UserError) and "not a usable path (File name too long)" in str(got)
    got = outcome(Scenario.load, "crud", [f"dataset={long}"])
    assert "not a usable path (File name too long)" in str(got)


def test_vectors_whose_distances_overflow_are_refused(tmp_path):
    """Found as overflow warnings: float32 distances to them are inf, and
    ground truth among infinities is no truth."""
    a = np.ones((3, 2), "f4")
    a[1] = 3e19  # each component finite, the squared norm past float32
    np.save(tmp_path / "b.npy", a)
    got = import_(tmp_path / "b.npy", metric="l2")
    assert isinstance(got, UserError) and "b.npy: row 1: vector too long" in str(got), got
