"""The documentation site builds strictly: a broken link, a missing page or an API reference to
a module that no longer exists fails the suite, not only `make docs`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

for _module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
    pytest.importorskip(_module, reason="the docs extra is not installed: pip install -e '.[docs]'")


def test_site_builds_strictly(tmp_path):
    # A subprocess, as `make docs` runs it: mkdocs configures logging and plugins globally.
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    site = tmp_path / "site"
    for page in ("numerics/darcy", "models/geomano", "kernels/selective_scan", "api/solvers",
                 "examples"):
        assert (site / page / "index.html").is_file(), page
    # The generated API page holds every solver module found on disk.
    api = (site / "api" / "solvers" / "index.html").read_text(encoding="utf-8")
    for module in sorted((ROOT / "ssmpde" / "solvers").glob("[!_]*.py")):
        assert f'id="ssmpde.solvers.{module.stem}"' in api, module.stem


def _nav_pages(entry):
    """Every page path of an mkdocs ``nav`` entry (a path, a ``{title: entry}`` or a list)."""
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, dict):
        return [page for value in entry.values() for page in _nav_pages(value)]
    return [page for item in entry for page in _nav_pages(item)]


def test_every_page_is_in_the_navigation():
    # mkdocs only logs a page missing from `nav` (even with --strict): it would be built but
    # unreachable from the menu.
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = set(_nav_pages(config["nav"]))
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    missing = [page for page in pages if page not in listed]
    assert not missing, f"add these pages to the nav of mkdocs.yml: {missing}"


def test_docstring_markup_becomes_markdown():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rst_docstrings",
                                                  DOCS / "hooks" / "rst_docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = ("See :class:`~ssmpde.solvers.Darcy` and :func:`ssmpde.kernels.selective_scan`.\n\n"
            ".. math:: a_k = s^d\n"
            "          \\sqrt{2}\n\n"
            "With :math:`\\tau > 0`.\n\n"
            ">>> 1 + 1\n2\n\n"
            "Examples\n--------\n>>> 2 + 2\n4\n")
    assert module.markdown_docstring(text).splitlines() == [
        "See `Darcy` and `ssmpde.kernels.selective_scan`.", "",
        "$$", "a_k = s^d", "\\sqrt{2}", "$$", "",
        "With $\\tau > 0$.", "",
        "```python", ">>> 1 + 1", "2", "```", "",
        "Examples", "--------", ">>> 2 + 2", "4"]
