"""The documentation site builds strictly: a broken link, a missing page or an API reference to
a module that no longer exists fails the suite, not only `make docs`; and it needs no network
(every script, stylesheet and font is in the site)."""

import html.parser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

for _module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
    pytest.importorskip(_module, reason="the docs extra is not installed: pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once for this module's tests."""
    site = tmp_path_factory.mktemp("docs") / "site"
    # A subprocess, as `make docs` runs it: mkdocs configures logging and plugins globally.
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    return site


@pytest.mark.e2e
def test_site_builds_strictly(site):
    for page in ("numerics/darcy", "models/geomano", "kernels/selective_scan", "api/solvers",
                 "examples"):
        assert (site / page / "index.html").is_file(), page
    # The generated API page holds every solver module found on disk.
    api = (site / "api" / "solvers" / "index.html").read_text(encoding="utf-8")
    for module in sorted((ROOT / "ssmpde" / "solvers").glob("[!_]*.py")):
        assert f'id="ssmpde.solvers.{module.stem}"' in api, module.stem


@pytest.mark.e2e
def test_benchmarks_page_is_generated_from_the_results(site):
    # One section per results file, each with its rows as the results table has them: the
    # page and benchmarks/results/table.md cannot disagree, and no marker is left unexpanded.
    from benchmarks.__main__ import SECTIONS, rows_of

    page = (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert "<!-- benchmark:" not in page
    for section in SECTIONS:
        assert f'id="{section.name}"' in page, section.name
        for row in rows_of(section.name)[:1]:
            first_cell = row.split(" | ")[0].removeprefix("| ")
            assert html.escape(first_cell, quote=False) in page, (section.name, first_cell)


_CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""")
_REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


class _Assets(html.parser.HTMLParser):
    """What a page loads: script sources, every <link> (stylesheets, fonts, preconnects,
    icons), images and inline styles' url(...); not the links a reader follows (<a>)."""

    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.urls.append(attrs["src"])
        elif tag == "link" and attrs.get("href"):
            self.urls.append(attrs["href"])
        elif tag in ("img", "source", "iframe", "embed") and attrs.get("src"):
            self.urls.append(attrs["src"])
        self.urls += _CSS_URL.findall(attrs.get("style") or "")


@pytest.mark.e2e
def test_site_loads_nothing_from_the_network(site):
    """Offline, or opened from disk, the site looks as it does online: MathJax typesets the
    equations (docs/check_offline.sh checks that in a browser) and the theme's fonts are the
    system's.  A CDN script or Google Fonts here would leave raw TeX and fallback fonts."""
    remote = {}
    for page in site.rglob("*.html"):
        parser = _Assets()
        parser.feed(page.read_text(encoding="utf-8"))
        for url in parser.urls:
            if _REMOTE.match(url):
                remote.setdefault(url, page.relative_to(site).as_posix())
    for sheet in site.rglob("*.css"):
        for url in _CSS_URL.findall(sheet.read_text(encoding="utf-8", errors="replace")):
            if _REMOTE.match(url):
                remote.setdefault(url, sheet.relative_to(site).as_posix())
    assert not remote, f"assets from the network (url: first page using it): {remote}"
    # The vendored MathJax is the one the pages load, with its licence beside it.
    mathjax = site / "javascripts" / "mathjax"
    assert (mathjax / "LICENSE").is_file()
    page = (site / "numerics" / "navier_stokes" / "index.html").read_text(encoding="utf-8")
    assert 'src="../../javascripts/mathjax/tex-svg-full.js"' in page
    assert (mathjax / "tex-svg-full.js").stat().st_size > 1_000_000  # the build, not a stub


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
    # Lines that align (&) or break (\\) are set in an environment, as Sphinx sets them in
    # split; one already in an environment is left alone.
    aligned = ".. math::\n   y &= a,\\\\\n   z &= b.\n\nAfter.\n"
    assert module.markdown_docstring(aligned).splitlines() == [
        "$$", "\\begin{aligned}", "y &= a,\\\\", "z &= b.", "\\end{aligned}", "$$", "",
        "After."]
    cases = ".. math::\n   f = \\begin{cases} 1 & x > 0 \\end{cases}\n"
    assert module.markdown_docstring(cases).splitlines() == [
        "$$", "f = \\begin{cases} 1 & x > 0 \\end{cases}", "$$"]
