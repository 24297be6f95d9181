"""Stores, workloads and executors are found by one loader
(``storebench.common.plugins``): a name not installed lists the known ones, a
plug-in whose library is missing names the extra that brings it. The
plug-ins here are real entry points of a distribution put on sys.path."""

import pytest

from storebench.driver.choice import executor_class, executor_names
from storebench.driver.executors import ThreadExecutor
from storebench.errors import UserError
from storebench.stores.base import engine_names, store_class
from storebench.workloads.base import workload_class, workload_names


@pytest.fixture
def broken_plugins(tmp_path, monkeypatch):
    """A distribution declaring one plug-in of each kind, named ``broken``,
    whose module cannot be imported."""
    dist = tmp_path / "storebench_broken-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: storebench-broken\nVersion: 0\nProvides-Extra: broken\n"
    )
    (dist / "entry_points.txt").write_text(
        "".join(
            f"[storebench.{group}]\nbroken = storebench_broken_missing:Plugin\n"
            + ("broken-lite = storebench_broken_missing:Lite\norphan = missing:Orphan\n")
            for group in ("stores", "workloads", "executors")
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_plugin_without_its_library_names_the_extra(broken_plugins):
    assert "broken" in engine_names()
    assert "broken" in workload_names()
    assert "broken" in executor_names()
    with pytest.raises(UserError) as exc:
        store_class("broken")
    assert exc.value.where == "store"
    assert (
        "store 'broken' needs its client library: pip install 'storebench-broken[broken]' ("
        in str(exc.value)
    )
    with pytest.raises(UserError, match=r"workload 'broken' needs its library: pip install"):
        workload_class("broken")
    with pytest.raises(UserError) as exc:
        executor_class("broken")
    assert exc.value.where == "driver.executor"
    assert "executor 'broken' needs its library: pip install 'storebench-broken[broken]'" in str(
        exc.value
    )


def test_the_hint_names_only_an_extra_the_package_declares(broken_plugins):
    with pytest.raises(
        UserError, match=r"needs its client library: pip install 'storebench-broken\[broken\]'"
    ):
        store_class("broken-lite")  # no extra of its own: its family's
    with pytest.raises(UserError) as exc:
        store_class("orphan")  # none: no command that would install nothing
    assert "pip install" not in str(exc.value) and "needs its client library (" in str(exc.value)


@pytest.mark.parametrize(
    "lookup, names, noun, where",
    [
        (store_class, engine_names, "store", "store"),
        (workload_class, workload_names, "workload", "workload"),
        (executor_class, executor_names, "executor", "driver.executor"),
    ],
)
def test_an_unknown_name_lists_the_known_ones(lookup, names, noun, where):
    with pytest.raises(UserError) as exc:
        lookup("nosuch")
    assert exc.value.where == where
    assert f"unknown {noun} 'nosuch' (known: {', '.join(names())})" in str(exc.value)


def test_builtin_executors_need_no_entry_point():
    assert {"threads", "processes"} <= set(executor_names())
    assert executor_class("threads") is ThreadExecutor
    assert store_class("sqlite").engine == "sqlite"
    assert workload_class("crud").name == "crud"
