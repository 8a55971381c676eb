"""The package's import graph has no circle, and no package reaches into another's privates.

The graph is read from the source, not from ``sys.modules``: every module under ``ssmpde/`` is
parsed with :mod:`ast` and every ``import`` and ``from ... import`` statement counts, wherever it
stands (module level, inside a function, under ``if TYPE_CHECKING:``), because a function-level
import that closes a circle only hides it until the function runs. Relative imports are resolved
against the importing module's package. ``from X import name`` is an edge to the module
``X.name`` where that is a module, and to ``X`` otherwise. Importing ``a.b.c`` also runs
``a/__init__`` and ``a/b/__init__``; those implicit parent imports are not edges (a package's
``__init__`` that re-exports its modules would otherwise make every module a circle with it).

The rules:

* **No circle.** The graph of ``ssmpde`` modules is acyclic; the test names one circle in each
  tangle of modules that import one another, with the lines that make it.
* **No private name across packages.** The *packages* are the top-level units of ``ssmpde``: each
  subpackage (``ssmpde.data``, ``ssmpde.solvers``, ``ssmpde.generation``, ...) with everything
  below it, and each top-level module (``ssmpde.core``, ``ssmpde.cluster``, ``ssmpde.cli``, ...)
  on its own; the root ``ssmpde/__init__`` is one too. An import from one package into another
  may not name a private thing: neither an imported name ``_x`` nor a module path with a
  ``_x`` component (``ssmpde.solvers._batches``). Dunder names (``__version__``) are public.
  Inside one package private helper modules and names are fine: that is what they are for.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ssmpde"


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package under ``root``."""
    modules = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(name: str, path: Path, modules: dict[str, Path]):
    """``(target module, imported name or None, line)`` for each package-internal import."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    # The package a relative import is relative to: the module itself for an __init__.
    here = name.split(".") if _is_package(path) else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source not in modules:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    yield submodule, None, node.lineno
                else:
                    yield source, alias.name, node.lineno


def _unit(module: str) -> str:
    """The package a module belongs to for the privacy rule: ``ssmpde.X``, or ``ssmpde``."""
    return ".".join(module.split(".")[:2])


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def import_graph(root: Path = ROOT) -> dict[str, dict[str, list[str]]]:
    """``{module: {imported module: [where, ...]}}`` over the modules of ``ssmpde``."""
    modules = _modules(root)
    graph: dict[str, dict[str, list[str]]] = {name: {} for name in modules}
    for name, path in modules.items():
        for target, _, line in _imports(name, path, modules):
            if target != name:
                where = graph[name].setdefault(target, [])
                if f"{path.relative_to(root)}:{line}" not in where:
                    where.append(f"{path.relative_to(root)}:{line}")
    return graph


def find_cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """One circle ``[a, b, ..., a]`` through each strongly connected part of the graph that
    has more than one module (Tarjan's algorithm, iterative), or ``[]`` for an acyclic graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.add(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        parts.append(part)
    return [_circle_in(graph, part) for part in parts]


def _circle_in(graph: dict[str, dict[str, list[str]]], part: set[str]) -> list[str]:
    """A shortest circle through the alphabetically first module of a strongly connected part."""
    start = min(part)
    previous = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == start:
                    circle = [node]
                    while previous[circle[-1]] is not None:
                        circle.append(previous[circle[-1]])
                    return circle[::-1] + [start]
                if child in part and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError("not strongly connected")  # pragma: no cover


def private_imports(root: Path = ROOT) -> list[str]:
    """Each import of a private module or name from one package of ssmpde into another."""
    modules = _modules(root)
    found = []
    for name, path in modules.items():
        for target, imported, line in _imports(name, path, modules):
            if _unit(target) == _unit(name):
                continue
            parts = target.split(".")[1:] + ([imported] if imported else [])
            if any(_private(part) for part in parts):
                shown = f"{target}.{imported}" if imported else target
                found.append(f"{path.relative_to(root)}:{line} imports {shown}")
    return found


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    circles = find_cycles(graph)
    if circles:
        lines = []
        for circle in circles:
            lines.append("import circle:")
            lines += [f"  {a} -> {b}  ({', '.join(graph[a][b])})"
                      for a, b in zip(circle, circle[1:])]
        pytest.fail("\n".join(lines))


def test_no_private_name_is_imported_across_packages():
    found = private_imports()
    assert not found, "private names imported across packages:\n" + "\n".join(found)


def test_the_cluster_tools_stand_on_neither_solvers_nor_generation():
    """``ssmpde.cluster`` is generic dask plumbing: parareal and the command line use it
    without pulling in the solvers or dataset generation."""
    graph = import_graph()
    reached, todo = set(), ["ssmpde.cluster"]
    while todo:
        for target in graph[todo.pop()]:
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert not {m for m in reached if _unit(m) in ("ssmpde.solvers", "ssmpde.generation")}, \
        sorted(reached)


def test_the_checks_see_what_they_should(tmp_path):
    """The checks fail where they should: a circle through a function-level relative import,
    and a private name imported from another package (but not from the same one)."""
    pkg = tmp_path / PACKAGE
    for folder in (pkg, pkg / "a", pkg / "b"):
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("from .two import thing\n")
    (pkg / "a" / "two.py").write_text("def f():\n    from . import one\n"
                                      "from ._helpers import _fine\n")
    (pkg / "a" / "_helpers.py").write_text("_fine = 1\n")
    (pkg / "b" / "three.py").write_text("from ssmpde.a._helpers import _fine\n"
                                        "from ..a.one import _hidden\nfrom .. import __version__\n")
    assert find_cycles(import_graph(tmp_path)) == [["ssmpde.a.one", "ssmpde.a.two", "ssmpde.a.one"]]
    assert private_imports(tmp_path) == [
        "ssmpde/b/three.py:1 imports ssmpde.a._helpers._fine",
        "ssmpde/b/three.py:2 imports ssmpde.a.one._hidden"]
    assert find_cycles({"x": {"y": []}, "y": {}}) == []
    assert find_cycles({"p": {"q": []}, "q": {"r": [], "p": []}, "r": {"q": []}}) == [
        ["p", "q", "p"]]
