import json
import textwrap

import pytest

from storebench.errors import UserError
from storebench.plan.scenario import Scenario
from storebench.results import files as results


def write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(text))
    return p


GOOD = """\
name: t
workload: crud
stores: [memory]
params:
  n: 100
  ops: 10
"""


def test_errors_name_the_key_and_its_line(tmp_path):
    p = write(tmp_path, GOOD.replace("  ops: 10", "  opz: 10"))
    with pytest.raises(UserError, match=rf"{p}:6: params.opz: unknown key"):
        Scenario.load(str(p))
    p = write(tmp_path, GOOD.replace("n: 100", "n: lots"))
    with pytest.raises(UserError, match=rf"{p}:5: params.n: .*valid integer"):
        Scenario.load(str(p))
    p = write(tmp_path, GOOD.replace("stores: [memory]", "stores: [memory, nosuch]"))
    with pytest.raises(UserError, match=rf"{p}:3: stores.1.engine: unknown store 'nosuch'"):
        Scenario.load(str(p))
    p = write(tmp_path, GOOD + "colour: blue\n")
    with pytest.raises(UserError, match=rf"{p}:7: colour: unknown key"):
        Scenario.load(str(p))
    p = write(tmp_path, GOOD + "  bad: [\n")
    with pytest.raises(UserError, match="not valid YAML"):
        Scenario.load(str(p))


def test_overrides_and_grid_expand_into_runs(tmp_path):
    p = write(tmp_path, GOOD + "grid:\n  n: [100, 200]\n  index.m: [4, 8]\n")
    # in a file, a grid key no store has collapses (exact stores in an HNSW grid)
    (run,) = [r for r in Scenario.load(str(p)).plan() if r.params.n == 100]
    assert run.not_applicable == ("index.m",)
    # typed on the command line, it is a typo until some store has it
    with pytest.raises(
        UserError, match=r"--set grid.index.mm: no store in this scenario has index parameter 'mm'"
    ):
        Scenario.load(str(p), sets=["grid.index.mm=[1]"])
    # a parameter some store has collapses for the others, and they say so
    runs = Scenario.load(str(p), stores=["memory,null"]).plan()
    assert [(r.spec.engine, r.grid_point.get("index.m")) for r in runs if r.params.n == 100] == [
        ("memory", None),
        ("null", 4),
        ("null", 8),
    ]
    assert runs[0].not_applicable == ("index.m",) and runs[1].not_applicable == ()
    p = write(tmp_path, GOOD + "grid:\n  n: [100, 200]\n  ops: [1, 2, 3]\n")
    sc = Scenario.load(str(p), sets=["k=5", "repeats=2"], stores=["memory", "sqlite"])
    runs = sc.plan()
    assert len(runs) == 2 * 3 * 2 * 2
    assert {r.params.k for r in runs} == {5}
    assert len({r.key for r in runs}) == len(runs)
    with pytest.raises(
        UserError, match=r"--set params.k: Input should be greater than or equal to 1"
    ):
        Scenario.load(str(p), sets=["k=0"])


HNSW = """\
name: t
workload: search
stores:
  - engine: hnswlib
    index: {m: 12}
    search: {ef: 40}
params: {n: 100, dim: 8, queries: 5, clients: [1]}
grid:
  index.ef_construct: [32, 64]
  search.ef: [16, 64]
"""


@pytest.mark.parametrize("bad", ['"abc"', "true", "0", "1.5"])
def test_bad_engine_parameters_are_refused_by_the_plan_with_their_key(tmp_path, bad):
    # a grid value: named by its grid key and line, before any store opens
    p = write(tmp_path, HNSW.replace("search.ef: [16, 64]", f"search.ef: [16, {bad}]"))
    with pytest.raises(UserError, match=rf"{p}:10: grid.search.ef: "):
        Scenario.load(str(p))
    with pytest.raises(UserError, match=r"^--set grid.search.ef: .*got"):
        Scenario.load(str(write(tmp_path, HNSW)), sets=[f"grid.search.ef=[{bad}]"])
    p = write(tmp_path, HNSW.replace("ef_construct: [32, 64]", f"ef_construct: [{bad}]"))
    with pytest.raises(UserError, match=rf"{p}:9: grid.index.ef_construct: "):
        Scenario.load(str(p))
    # a store entry's own value: named by the entry's key
    p = write(tmp_path, HNSW.replace("index: {m: 12}", f"index: {{m: {bad}}}"))
    with pytest.raises(UserError, match=rf"{p}:5: stores.0.index.m: "):
        Scenario.load(str(p))
    p = write(tmp_path, HNSW.replace("search: {ef: 40}", "search: {nprobe: 4}"))
    with pytest.raises(UserError, match=r"stores.0.search.nprobe: unknown search parameter"):
        Scenario.load(str(p))


def test_runs_carry_the_typed_parameters_resolved(tmp_path):
    runs = Scenario.load(str(write(tmp_path, HNSW))).plan()
    assert [r.index.given() for r in runs] == [
        {"m": 12, "ef_construct": 32},
        {"m": 12, "ef_construct": 64},
    ]
    # the sweep's product over the entry's fixed values, in each run
    assert [s.given() for s in runs[0].searches] == [{"ef": 16}, {"ef": 64}]
    assert runs[0].search.given() == {"ef": 40} and runs[0].sweep == {"ef": [16, 64]}
    assert runs[0].grid_point == {"index.ef_construct": 32}
    # the record's store shows the values given, never a default filled in
    assert runs[0].store_info()["index"] == {"m": 12, "ef_construct": 32}
    assert runs[0].store_info()["search"] == {"ef": 40}


def test_records_append_whole_lines_and_bad_lines_are_reported(tmp_path):
    path = tmp_path / "r.jsonl"
    results.append(path, {"run_id": "a", "x": 1})
    results.append(path, {"run_id": "b", "x": 2})
    assert [r["run_id"] for r in results.read(path)] == ["a", "b"]
    with open(path, "a") as f:
        f.write('{"run_id": "c", "x"\n')
    with pytest.raises(UserError, match=rf"{path}:3: not a JSON record"):
        list(results.read(path))
    with pytest.raises(ValueError):
        results.to_json_line({"run_id": "x", "bad": float("nan")})
    assert json.loads(results.to_json_line({"run_id": "ok"}))["run_id"] == "ok"


def test_a_store_option_is_a_grid_axis_for_the_stores_that_have_it(tmp_path):
    p = write(tmp_path, GOOD)
    sets = ["grid.store.version=[2.2.16, 2.3.5]"]
    runs = Scenario.load(str(p), sets=sets, stores=["memory", "milvus"]).plan()
    # each release a run of its own, in the spec (and so in store.options) and the grid point
    assert [(r.spec.engine, r.spec.options.get("version"), r.grid_point) for r in runs] == [
        ("memory", None, {}),
        ("milvus", "2.2.16", {"store.version": "2.2.16"}),
        ("milvus", "2.3.5", {"store.version": "2.3.5"}),
    ]
    assert [r.spec.checked_options.version for r in runs[1:]] == ["2.2.16", "2.3.5"]
    assert [r.store_info()["options"] for r in runs] == [
        {},
        {"version": "2.2.16"},
        {"version": "2.3.5"},
    ]
    # a store without the option collapses and says so
    assert runs[0].not_applicable == ("store.version",) and runs[1].not_applicable == ()
    assert len({r.key for r in runs}) == len(runs)
    # the grid's value replaces the entry's own
    own = write(
        tmp_path,
        GOOD.replace("stores: [memory]", "stores: [{engine: milvus, options: {version: 2.3.5}}]"),
    )
    (run,) = Scenario.load(str(own), sets=["grid.store.version=[2.2.16]"]).plan()
    assert run.spec.options == {"version": "2.2.16"}
    # each value checked by the store's options at plan time, named by the grid key
    with pytest.raises(
        UserError, match=r"--set grid.store.version: option version of milvus: .*no server binary"
    ):
        Scenario.load(str(p), sets=["grid.store.version=[2.3.5, 2.1.0]"], stores=["milvus"])
    # an option no store here has is an error naming the key, in a file too
    with pytest.raises(
        UserError, match=r"--set grid.store.versoin: no store in this scenario has option 'versoin'"
    ):
        Scenario.load(str(p), sets=["grid.store.versoin=[2.3.5]"], stores=["memory", "milvus"])
    q = write(tmp_path, GOOD + "grid:\n  store.version: [2.3.5]\n")
    with pytest.raises(UserError, match=rf"{q}:\d+: grid.store.version: no store in this scenario"):
        Scenario.load(str(q))


def test_a_repeated_key_is_refused_at_its_second_line(tmp_path):
    p = write(tmp_path, GOOD + "params:\n  n: 200\n")
    with pytest.raises(UserError, match=rf"{p}:7: params: given twice"):
        Scenario.load(str(p))


@pytest.mark.parametrize(
    "tail",
    [
        "x: &x [1, *x]\n",
        "".join(
            f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n"
            for a, b in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ],
)
def test_an_alias_bomb_is_refused_before_it_expands(tmp_path, tail):
    p = write(tmp_path, GOOD + "a: &a [x, x, x, x, x, x, x, x, x]\n" + tail)
    with pytest.raises(UserError, match=rf"{p}: expands to more than 100,000 values"):
        Scenario.load(str(p))


@pytest.mark.parametrize(
    ("sets", "where"),
    [
        (["name=" + "n" * 220], "--set name: at most 219 characters"),
        (["repeats=1000000000000"], "--set repeats: repeats x stores x grid"),
        (["grid.clients=[0]"], "--set grid.clients: .*greater than or equal to 1"),
        (["ops=100000000000000000000"], "--set params.ops: at most 1,000,000,000,000"),
        (["clients=1000000000"], "--set params.clients: at most 100,000 clients"),
        (["seed=-1"], "--set params.seed: .*greater than or equal to 0"),
        (["grid={}", "grid.frob=[1]"], "--set grid.frob: grid keys are"),  # the later, narrower
    ],
)
def test_limits_are_checked_by_the_plan_and_blamed_on_the_flag(tmp_path, sets, where):
    with pytest.raises(UserError, match=where):
        Scenario.load(str(write(tmp_path, GOOD)), sets=sets)
    Scenario.load(str(write(tmp_path, GOOD)), sets=["name=" + "n" * 219])


def test_a_duration_is_bounded_and_the_estimate_follows_it():
    from storebench.plan.dryrun import estimate

    with pytest.raises(UserError, match="--set params.duration_s: at most 604,800 seconds"):
        Scenario.load("search", stores=["memory"], sets=["duration_s=1e300"])
    estimates = [
        estimate(
            Scenario.load("search", stores=["memory"], sets=[f"duration_s={d}"]).plan()
        ).total()
        for d in (2, 1000)
    ]
    assert estimates[1] - estimates[0] > 998


def test_together_steps_grid_axes_as_one_and_refuses_what_cannot_step(tmp_path):
    pytest.importorskip("opensearchpy")
    body = GOOD.replace("stores: [memory]", "stores: [opensearch]")
    grid = "grid:\n  n: [100, 200, 400]\n  store.nodes: [1, 2, 4]\n  store.shards: [1, 2, 4]\n"
    p = write(tmp_path, body + grid + "together:\n  - [n, store.nodes, store.shards]\n")
    runs = Scenario.load(str(p)).plan()
    assert [(r.params.n, r.spec.options["nodes"], r.spec.options["shards"]) for r in runs] == [
        (100, 1, 1),
        (200, 2, 2),
        (400, 4, 4),
    ]
    # each a cluster of its own size, replicas spread a node each
    assert [r.spec.checked_options.topology()["nodes"] for r in runs] == [1, 2, 4]
    for together, problem in [
        ("[n]", "a group steps two or more grid axes"),
        ("[n, store.heap]", "'store.heap' is not a grid axis here"),
    ]:
        q = write(tmp_path, body + grid + f"together:\n  - {together}\n")
        with pytest.raises(UserError, match=rf"{q}:\d+: together.0: {problem}"):
            Scenario.load(str(q))
    q = write(
        tmp_path,
        body
        + grid.replace("[1, 2, 4]\n  store.sh", "[1, 2]\n  store.sh")
        + "together:\n  - [n, store.nodes]\n",
    )
    with pytest.raises(UserError, match="axes stepped together need as many values each"):
        Scenario.load(str(q))
    # replicas beyond the nodes: refused at plan time, naming the grid key
    q = write(tmp_path, body + "grid:\n  store.replicas: [1, 4]\n  store.nodes: [2]\n")
    with pytest.raises(UserError, match=r"replicas=4 puts each copy on a node of its own"):
        Scenario.load(str(q))
