"""mkdocs hook: page content generated from the repository at build time.

Two markers, each alone on its line:

* ``<!-- api-modules: PACKAGE -->`` becomes the package's docstring and the names its
  ``__init__`` defines, followed by one mkdocstrings block per public module and subpackage
  found on disk, in alphabetical order. The
  API pages list no module by hand: a module that is added, split or moved appears in the
  reference at the next build, and one that vanishes cannot leave a dangling ``:::`` behind.
* ``<!-- examples -->`` becomes one section per script in ``examples/``: its docstring's first
  line as the heading and the whole script as a code block (included by pymdownx.snippets, so
  the page always shows the code the test suite runs).
* ``<!-- benchmark: NAME -->`` becomes the section of ``benchmarks/results/NAME.json``: what
  the benchmark compares and how (its module's docstring), its rows of the results table and
  its fuller table, formatted by the benchmark's own module
  (:func:`benchmarks.__main__.section`), so no figure on the page is copied by hand.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API_MARKER = re.compile(r"^<!-- api-modules: ([A-Za-z_][\w.]*) -->$", re.MULTILINE)
EXAMPLES_MARKER = re.compile(r"^<!-- examples -->$", re.MULTILINE)
BENCHMARK_MARKER = re.compile(r"^<!-- benchmark: ([\w-]+) -->$", re.MULTILINE)


def _public_children(package: str) -> list[tuple[str, bool]]:
    """``(dotted name, is_package)`` of the public modules directly inside ``package``."""
    children = []
    for path in sorted(ROOT.joinpath(*package.split(".")).iterdir()):
        if path.name.startswith("_"):
            continue
        if path.is_dir() and (path / "__init__.py").is_file():
            children.append((f"{package}.{path.name}", True))
        elif path.suffix == ".py":
            children.append((f"{package}.{path.stem}", False))
    return children


def _defined_in(init: Path) -> list[str]:
    """Public functions, classes and variables defined (not imported) in ``init``."""
    names = []
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return [n for n in dict.fromkeys(names) if not n.startswith("_")]


def _api_blocks(match: re.Match) -> str:
    name = match.group(1)
    folder = ROOT.joinpath(*name.split("."))
    if not folder.is_dir():  # a plain module: the whole of it
        return f"::: {name}\n"
    # The package shows its docstring and what its __init__ defines itself; the names it
    # re-exports are documented once, in the modules below that define them.
    own = _defined_in(folder / "__init__.py")
    members = "[" + ", ".join(own) + "]" if own else "false"
    blocks = [f"::: {name}\n    options:\n      members: {members}\n"
              f"      show_root_heading: false\n"]
    for child, is_package in _public_children(name):
        options = "\n    options:\n      show_submodules: true" if is_package else ""
        blocks.append(f"::: {child}{options}\n")
    return "\n".join(blocks)


def _examples(_: re.Match) -> str:
    sections = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        if path.name.startswith("_"):
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        title = docstring.splitlines()[0].rstrip(".") if docstring else path.stem
        relative = path.relative_to(ROOT).as_posix()
        sections.append(f"## `{relative}`\n\n{title}.\n\n```python\n--8<-- \"{relative}\"\n```\n")
    return "\n".join(sections)


@functools.cache
def _docstring_markup():
    """``rst_docstrings.markdown_docstring``: the docstrings' Sphinx roles and math as the API
    pages show them."""
    spec = importlib.util.spec_from_file_location("rst_docstrings",
                                                  Path(__file__).with_name("rst_docstrings.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.markdown_docstring


def _benchmark(match: re.Match) -> str:
    if str(ROOT) not in sys.path:  # mkdocs' own script does not put the repository first
        sys.path.insert(0, str(ROOT))
    from benchmarks.__main__ import SECTIONS, section

    name = match.group(1)
    if name not in {s.name for s in SECTIONS}:
        raise ValueError(f"<!-- benchmark: {name} -->: no such results file in "
                         "benchmarks.__main__.SECTIONS")
    return section(name, markup=_docstring_markup())


def on_page_markdown(markdown: str, **kwargs) -> str:
    """Replace the markers of a page by their generated Markdown."""
    markdown = API_MARKER.sub(_api_blocks, markdown)
    markdown = BENCHMARK_MARKER.sub(_benchmark, markdown)
    return EXAMPLES_MARKER.sub(_examples, markdown)
