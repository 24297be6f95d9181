"""No import cycles in the package, lazy imports (inside functions) included:
a lazy import only hides a cycle, it does not remove it.

Read from the source with ``ast``: every ``import`` and ``from ... import``
anywhere in a module (``if TYPE_CHECKING:`` blocks aside: they never run),
plus the parent package a submodule's import runs first (the root
``storebench/__init__.py`` aside: it is run before anything else).
``python tests/unit/test_import_cycles.py`` prints every cycle, edge by
edge with where each import is."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = "storebench"
SRC = Path(__file__).resolve().parents[2] / "src"

# Edges allowed, each with why (none now: the filter language moved below
# data and stores, so datasets read it without an upward arrow).
ALLOWED: set[tuple[str, str]] = set()

Edge = tuple[str, str]


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its __init__)."""
    out = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                skip.update(id(n) for n in ast.walk(stmt))
    return skip


def _imported(name: str, node: ast.AST, known: dict[str, Path]) -> Iterator[str]:
    """The package's modules an import statement in module ``name`` runs.
    A package that holds ``name`` is left out where only its submodules
    are wanted: it is already being imported when ``name`` runs."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
        froms = []
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the module's package
            pkg = name if known[name].name == "__init__.py" else name.rpartition(".")[0]
            for _ in range(node.level - 1):
                pkg = pkg.rpartition(".")[0]
            base = f"{pkg}.{base}" if base else pkg
        # ``from pkg import sub`` runs pkg.sub when sub is a module; a name
        # that is no module is read from pkg itself
        targets = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
        froms = [base] if len(targets) < len(node.names) else []
    else:
        return
    for target in targets + froms:
        parts = target.split(".")
        # the target and the packages above it, up to (not including) the root
        for i in range(len(parts), 1, -1):
            mod = ".".join(parts[:i])
            above = i < len(parts) and name.startswith(f"{mod}.")
            if mod in known and not above:
                yield mod


def import_graph(src: Path = SRC) -> dict[Edge, list[str]]:
    """Edges (importer, imported) with where each is (``path:line``)."""
    known = modules(src)
    edges: dict[Edge, list[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            for target in _imported(name, node, known):
                if target != name:
                    where = f"{path.relative_to(src.parent)}:{node.lineno}"
                    seen = edges.setdefault((name, target), [])
                    if where not in seen:
                        seen.append(where)
    return edges


def cycles(edges: set[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan),
    each sorted; every such component holds at least one cycle."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(out)


def describe(comp: list[str], edges: dict[Edge, list[str]]) -> str:
    members = set(comp)
    lines = [f"cycle among {', '.join(comp)}:"]
    for (a, b), where in sorted(edges.items()):
        if a in members and b in members:
            lines.append(f"  {a} -> {b}  ({', '.join(where)})")
    return "\n".join(lines)


def test_the_package_has_no_import_cycle():
    edges = import_graph()
    assert set(edges) >= ALLOWED, "an allowed edge is gone: remove it from ALLOWED"
    found = cycles(set(edges) - ALLOWED)
    assert not found, "\n".join(describe(c, edges) for c in found)


# what the stores must never import (module level or inside a function):
# the layers above them, which run and report them
ABOVE_STORES = ("driver", "workloads", "plan", "run", "report", "cli")


def upward_from_stores(edges: dict[Edge, list[str]]) -> list[Edge]:
    """The imports from a module under stores/ of a layer above it."""
    above = tuple(f"{ROOT}.{layer}" for layer in ABOVE_STORES)
    return [
        (a, b)
        for a, b in sorted(edges)
        if a.startswith(f"{ROOT}.stores.") and b.split(".")[:2] in [x.split(".") for x in above]
    ]


def test_no_store_imports_a_layer_above_the_stores():
    edges = import_graph()
    found = upward_from_stores(edges)
    assert not found, "\n".join(f"{a} -> {b}  ({', '.join(edges[a, b])})" for a, b in found)


def test_the_upward_check_sees_a_lazy_import_from_a_store(tmp_path):
    pkg = tmp_path / ROOT
    for sub in ("stores", "driver", "data"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "driver" / "native.py").write_text("")
    (pkg / "data" / "batch.py").write_text("")
    (pkg / "stores" / "a.py").write_text(
        "from storebench.data import batch\ndef f():\n    from storebench.driver.native import x\n"
    )
    assert upward_from_stores(import_graph(tmp_path)) == [
        ("storebench.stores.a", "storebench.driver"),
        ("storebench.stores.a", "storebench.driver.native"),
    ]


def test_the_check_sees_lazy_imports(tmp_path):
    """A cycle closed by an import inside a function is found; one closed
    only under TYPE_CHECKING is not a cycle."""
    pkg = tmp_path / ROOT
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from storebench.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from storebench import a\n")
    (pkg / "c.py").write_text("from storebench import d\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from storebench.c import x\n"
    )
    assert cycles(set(import_graph(tmp_path))) == [["storebench.a", "storebench.b"]]


def test_a_module_over_500_lines_says_why_it_is_one():
    """A long module's docstring gives the reason it is not split: a
    paragraph opening "One module" or "One piece"."""
    unexplained = []
    for path in sorted((SRC / ROOT).rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 500:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "One module" not in doc and "One piece" not in doc:
                unexplained.append(str(path.relative_to(SRC)))
    assert not unexplained


if __name__ == "__main__":
    edges = import_graph()
    everything = cycles(set(edges))
    for comp in everything:
        print(describe(comp, edges))
    print(f"{len(everything)} cycle(s) in {len(modules())} modules ({len(edges)} import edges)")
