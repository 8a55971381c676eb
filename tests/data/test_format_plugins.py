"""Formats come from entry points: a package that ships one is found, used and gone with it.

ssmpde's own formats are entry points of the group ``ssmpde.formats`` too (``pyproject.toml``);
another package's (:mod:`tests.data.plugin_format`, installed into a site directory as pip
would) needs no edit of ssmpde. An entry point that cannot be used is left out with a warning
naming it and its package, and every command goes on without it.
"""

from __future__ import annotations

import importlib.metadata
import re
import warnings

import pytest
import xarray as xr

from ssmpde.cli import main
from ssmpde.data import ROLE, formats, open_dataset, save
from ssmpde.data.formats import FormatPluginWarning

from . import plugin_format
from .helpers import make_dataset

OWN = ["pdebench", "the-well"]
BROKEN = "ssmpde_broken_format"
# A module with the whole interface (it does nothing): the entry point's name decides.
COMPLETE = "NAME = {name!r}\nDESCRIPTION = 'broken'\nsniff = open = export = print\n"


@pytest.fixture
def site(tmp_path_factory):
    """A site directory outside ``tmp_path``; the registry read again and the plugin modules
    unloaded after the test."""
    yield tmp_path_factory.mktemp("site")
    plugin_format.forget(BROKEN, "ssmpde_aaa_format")


def test_ssmpdes_own_formats_are_entry_points():
    points = importlib.metadata.entry_points(group=formats.ENTRY_POINT_GROUP)
    own = {point.name: point.value for point in points if point.dist.name == "ssmpde"}
    assert own == {"pdebench": "ssmpde.data.formats.pdebench",
                   "the-well": "ssmpde.data.formats.the_well"}
    assert list(formats.known_formats())[:2] == OWN


def test_an_installed_format_is_found_used_and_gone_once_uninstalled(tmp_path, site, monkeypatch,
                                                                      capsys):
    info = plugin_format.install(site, monkeypatch)
    assert list(formats.known_formats()) == [*OWN, "toy"]
    toy = formats.format_named("toy")
    assert toy.__name__ == plugin_format.MODULE and toy.__file__.startswith(str(site))
    ds = make_dataset(ndim=1)
    source = save(ds, tmp_path / "a.nc")
    target = tmp_path / "out"
    assert main(["convert", str(source), str(target), "--to", "toy"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {target} as toy")
    assert formats.sniff(target) is toy
    with open_dataset(target) as back:  # through the sniffer
        xr.testing.assert_identical(back.load(), ds)

    plugin_format.uninstall(info)
    assert list(formats.known_formats()) == OWN
    assert formats.sniff(target) is None
    with pytest.raises(ValueError, match="unknown format 'toy'"):
        formats.format_named("toy")
    assert main(["convert", str(source), str(tmp_path / "again"), "--to", "toy"]) == 2
    assert "unknown format 'toy'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="without zarr metadata"):
        open_dataset(target)


def test_other_packages_formats_come_after_ssmpdes_own_by_name(tmp_path, site, monkeypatch):
    plugin_format.write_distribution(site, "ssmpde-aaa-format", {"aaa": "ssmpde_aaa_format"},
                                     modules={"ssmpde_aaa_format": (
                                         "from ssmpde_toy_format import DESCRIPTION, export, "
                                         "open, sniff\nNAME = 'aaa'\n")})
    plugin_format.install(site, monkeypatch)
    known = formats.known_formats()
    assert list(known) == [*OWN, "aaa", "toy"]
    # Both claim a toy directory: the first in that order is the one it is read as.
    target = tmp_path / "out"
    known["toy"].export(make_dataset(ndim=1), target)
    assert formats.sniff(target) is known["aaa"]


@pytest.mark.parametrize("name, modules, reason", [
    ("broken", {}, rf"importing {BROKEN} failed \(ModuleNotFoundError: No module named "
                   f"'{BROKEN}'"),
    ("broken", {BROKEN: "raise RuntimeError('its import fails')\n"},
     r"importing .* failed \(RuntimeError: its import fails\)"),
    ("broken", {BROKEN: "NAME = 'broken'\nDESCRIPTION = 'half a format'\n"},
     rf"{BROKEN} lacks sniff, open, export: a format module defines NAME, DESCRIPTION"),
    ("broken", {BROKEN: COMPLETE.format(name="other")},
     rf"{BROKEN} has NAME 'other', but its entry point is named 'broken'"),
    ("zarr", {BROKEN: COMPLETE.format(name="zarr")},
     "'zarr' is the name of one of ssmpde's own formats"),
    ("pdebench", {BROKEN: COMPLETE.format(name="pdebench")},
     r"the format 'pdebench' is already registered \(by ssmpde.data.formats.pdebench\)"),
], ids=["missing", "import-error", "incomplete", "misnamed", "own-name", "taken"])
def test_a_broken_entry_point_is_left_out_with_a_warning_naming_it(tmp_path, site, monkeypatch,
                                                                   capsys, name, modules, reason):
    plugin_format.write_distribution(site, "ssmpde-broken", {name: BROKEN}, modules=modules)
    plugin_format.activate(site, monkeypatch)
    with pytest.warns(FormatPluginWarning) as record:
        known = formats.known_formats()
    assert len(record) == 1
    message = str(record[0].message)
    assert message.startswith(f"the format '{name}' is left out: "), message
    assert f"entry point '{name} = {BROKEN}' (group ssmpde.formats) of the package " \
           "ssmpde-broken 1.0: fix or uninstall that package" in message
    assert re.search(reason, message), message
    assert list(known) == OWN and known["pdebench"].__name__ == "ssmpde.data.formats.pdebench"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read once: no second warning
        formats.known_formats()

    # Every command goes on without it; naming it is a one-line error naming the package.
    ds = make_dataset(ndim=1)
    for variable, role in (("vorticity", "state"), ("viscosity", "parameter"),
                           ("forcing", "parameter")):
        ds[variable].attrs[ROLE] = role
    source = save(ds, tmp_path / "a.nc")
    formats.clear_cache()
    with pytest.warns(FormatPluginWarning, match=f"the format '{name}' is left out"):
        assert main(["convert", str(source), str(tmp_path / "b.h5"), "--to", "pdebench"]) == 0
    if name not in ("pdebench", "zarr"):
        assert main(["convert", str(source), str(tmp_path / "c"), "--to", name]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"the format '{name}' cannot be used" in err
        assert "package ssmpde-broken 1.0" in err


def test_metadata_without_ssmpdes_entry_points_says_to_reinstall(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: importlib.metadata.EntryPoints(()))
    formats.clear_cache()
    try:
        with pytest.warns(FormatPluginWarning, match=r"own formats are not registered.*"
                                                     r"Reinstall it: pip install -e \."):
            assert formats.known_formats() == {}
    finally:
        monkeypatch.undo()
        formats.clear_cache()
    assert list(formats.known_formats()) == OWN
