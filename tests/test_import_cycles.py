"""No import cycles among the project's modules (``runtime``, ``app``).

Why a test: a cycle makes a module's behaviour depend on which module some caller happened to import
first (a name is missing from a half-initialised module), and it ties layers together that should stand
apart (the Qt-free app core, the runtime, the views).

What counts as an edge: every import that can run — at module level and inside functions alike.
A module-level cycle is the dangerous kind (a half-initialised module at start-up), but the cycles
this test was written against (app.main <-> app.main_window <-> ..., hub.errors <-> hub.tokens,
formats.codecs <-> formats.model_data) were all hidden inside functions: deferring an import hides a
cycle from the interpreter, not the tangle from a reader, and the layers (Qt-free app core, runtime,
views) must form a DAG for one to be used without the other. So a deferred import is fine for cost
(torch, PySide6, an optional package) but not as a way around a cycle. Only imports under
``if TYPE_CHECKING:`` are not edges: they never run.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "app")


def module_files() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name (``pkg/__init__.py`` is ``pkg``)."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``body``, nested ones included, except under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                walk(child)
        else:
            for child in ast.iter_child_nodes(node):
                walk(child)

    for stmt in body:
        walk(stmt)
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` denotes: itself, or its longest prefix that is a module."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports (anywhere in it but under ``TYPE_CHECKING``)."""
    modules = module_files()
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        edges: set[str] = set()
        for node in _imports(tree.body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                dep = _resolve(target, modules)
                if dep is not None and dep != mod:
                    edges.add(dep)
        graph[mod] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_path(graph, comp) for comp in components]


def _cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest closed path through the component's first module (breadth-first)."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # a component of size > 1 always has one


def test_finder_reports_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_are_edges_type_checking_ones_are_not() -> None:
    tree = ast.parse(
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import app.main\n"
        "try:\n    import json\nexcept ImportError:\n    import pickle\n"
        "def f():\n    import app.main_window\n"
    )
    names = [a.name for n in _imports(tree.body) for a in n.names]
    assert names == ["os", "TYPE_CHECKING", "json", "pickle", "app.main_window"]


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(
        " -> ".join(c) for c in cycles)
