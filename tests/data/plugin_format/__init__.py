"""A tiny third-party package that ships a format, installed for the tests as pip would.

:func:`install` lays a *site* directory out as ``pip install`` leaves one: the package's module
(:mod:`.toy_format`, copied as the top-level module ``ssmpde_toy_format``) beside a
``ssmpde_toy_format-1.0.dist-info`` whose ``entry_points.txt`` names it in ssmpde's group, and
puts the site on ``sys.path``. ssmpde then finds the format by its entry point alone.
:func:`write_distribution` writes the metadata of any such package (broken ones too).
"""

from __future__ import annotations

import importlib
import pathlib
import shutil
import sys
from collections.abc import Mapping

from ssmpde.data import formats

#: The module name and the distribution name of the toy package.
MODULE = "ssmpde_toy_format"
DISTRIBUTION = "ssmpde-toy-format"
SOURCE = pathlib.Path(__file__).with_name("toy_format.py")


def write_distribution(site: pathlib.Path, name: str, entry_points: Mapping[str, str], *,
                       version: str = "1.0",
                       modules: Mapping[str, str] | None = None) -> pathlib.Path:
    """Write an installed distribution ``name`` into ``site``: its ``.dist-info`` (``METADATA``
    and ``entry_points.txt`` with ``entry_points`` in :data:`formats.ENTRY_POINT_GROUP`) and the
    ``modules`` given as source text; return the ``.dist-info`` directory."""
    site.mkdir(parents=True, exist_ok=True)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{formats.ENTRY_POINT_GROUP}]", *(f"{key} = {value}"
                                                 for key, value in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, text in (modules or {}).items():
        (site / f"{module}.py").write_text(text)
    return info


def install(site: pathlib.Path, monkeypatch) -> pathlib.Path:
    """Install the toy package into ``site`` and put the site on ``sys.path`` (undone with
    ``monkeypatch``); return its ``.dist-info``. The registry is read again at its next use."""
    info = write_distribution(site, DISTRIBUTION, {"toy": MODULE},
                              modules={MODULE: SOURCE.read_text()})
    activate(site, monkeypatch)
    return info


def activate(site: pathlib.Path, monkeypatch) -> None:
    """Put ``site`` on ``sys.path`` (undone with ``monkeypatch``) and forget the formats found."""
    monkeypatch.syspath_prepend(str(site))
    formats.clear_cache()


def forget(*modules: str) -> None:
    """After a test: the registry read again, the packages' modules unloaded."""
    for module in (MODULE, *modules):
        sys.modules.pop(module, None)
    importlib.invalidate_caches()
    formats.clear_cache()


def uninstall(info: pathlib.Path) -> None:
    """Remove an installed distribution's metadata, as ``pip uninstall`` does."""
    shutil.rmtree(info)
    importlib.invalidate_caches()
    formats.clear_cache()
