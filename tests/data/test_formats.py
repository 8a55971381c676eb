"""The foreign-format registry and its plumbing: reading through sniffers, `convert --to`.

A toy format (:mod:`tests.data.plugin_format`: a directory holding our netCDF file under another
name and a marker file), installed as a third-party package is, exercises the plumbing
independently of any real foreign format.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import xarray as xr

from ssmpde.cli import main
from ssmpde.data import Conversion, convert, formats, load_dataset, open_dataset, save

from . import plugin_format
from .helpers import make_dataset, snapshot
from .plugin_format.toy_format import MARKER


@pytest.fixture
def toy(tmp_path_factory, monkeypatch):
    """The toy format, installed (its site outside ``tmp_path``, which the tests list)."""
    plugin_format.install(tmp_path_factory.mktemp("site"), monkeypatch)
    yield formats.format_named("toy")
    plugin_format.forget()


def _same(a: xr.Dataset, b: xr.Dataset) -> None:
    xr.testing.assert_identical(a, b)


def test_registry_lists_the_formats_and_rejects_unknown_names(toy):
    assert formats.known_formats()["toy"] is toy is sys.modules[plugin_format.MODULE]
    assert formats.format_named("toy") is toy
    with pytest.raises(ValueError, match=r"unknown format 'nope'.*netcdf, zarr.*toy"):
        formats.format_named("nope")


def test_a_registered_module_must_define_the_whole_contract(tmp_path_factory, monkeypatch):
    site = tmp_path_factory.mktemp("site")
    plugin_format.write_distribution(site, "ssmpde-broken", {"broken": "ssmpde_broken_format"},
                                     modules={"ssmpde_broken_format": 'NAME = "broken"\n'})
    plugin_format.activate(site, monkeypatch)
    try:
        with pytest.warns(formats.FormatPluginWarning, match="lacks DESCRIPTION"):
            assert "broken" not in formats.known_formats()
        with pytest.raises(ValueError, match="'broken' cannot be used.*lacks DESCRIPTION"):
            formats.format_named("broken")
    finally:
        plugin_format.forget("ssmpde_broken_format")


def test_convert_to_a_foreign_format_and_read_it_back(tmp_path, toy):
    ds = make_dataset(ndim=1)
    source = save(ds, tmp_path / "a.nc")
    target = tmp_path / "export"
    result = convert(source, target, to="toy")
    assert isinstance(result, Conversion) and result.target == target
    assert result.format == "toy" and result.sizes == dict(ds.sizes)
    assert result.notes[0] == "toy keeps everything but says so"
    assert "conventional toy name of this dataset is 'toy-dataset'" in result.notes[1]
    # every reader goes through the sniffer: a directory without zarr metadata
    _same(load_dataset(result), ds)
    # and the export converts back to our own formats
    back = convert(target, tmp_path / "back.zarr")
    assert back.format == "zarr" and back.notes == ()
    _same(load_dataset(back.target), ds)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_convert_refuses_what_the_format_cannot_hold_and_leaves_nothing(tmp_path, toy):
    source = save(make_dataset(ndim=2), tmp_path / "a.nc")
    with pytest.raises(ValueError, match="1D PDEs only"):
        convert(source, tmp_path / "export", to="toy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.nc"]


def test_convert_output_policy_applies_to_foreign_targets(tmp_path, toy):
    source = save(make_dataset(ndim=1), tmp_path / "a.nc")
    target = tmp_path / "export"
    convert(source, target, to="toy")
    before = snapshot(target)
    with pytest.raises(FileExistsError, match="--overwrite"):
        convert(source, target, to="toy")
    assert snapshot(target) == before
    convert(source, target, to="toy", overwrite=True)  # ours (it reads as ssmpde): replaced
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("mine")
    (stranger / MARKER).write_text("")  # in the toy format, but not an export of ours
    with pytest.raises(ValueError, match="did not write"):
        convert(source, stranger, to="toy", overwrite=True)
    assert (stranger / "keep.txt").read_text() == "mine"


def test_target_format_by_suffix_and_explicit(tmp_path):
    source = save(make_dataset(), tmp_path / "a.nc")
    with pytest.raises(ValueError, match=r"plain HDF5 file.*--to"):
        convert(source, tmp_path / "b.h5")
    with pytest.raises(ValueError, match="unknown format 'hdf9'"):
        convert(source, tmp_path / "b.nc", to="hdf9")
    # an explicit own format overrides the suffix
    result = convert(source, tmp_path / "b.store", to="zarr")
    assert (tmp_path / "b.store" / ".zmetadata").is_file()
    _same(load_dataset(result), load_dataset(source))


def test_directory_that_no_format_claims_names_the_known_formats(tmp_path, toy):
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match=r"without zarr metadata.*toy"):
        open_dataset(tmp_path / "d")


def test_cli_convert_prints_the_notes_and_one_line_errors(tmp_path, toy, capsys):
    source = save(make_dataset(ndim=1), tmp_path / "a.nc")
    assert main(["convert", str(source), str(tmp_path / "out"), "--to", "toy"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"wrote {tmp_path / 'out'} as toy (sample=2")
    assert lines[1] == "note: toy keeps everything but says so"
    assert lines[2].startswith("note: the conventional toy name of this dataset")
    assert main(["info", str(tmp_path / "out")]) == 0
    assert "schema: ok" in capsys.readouterr().out
    assert main(["convert", str(source), str(tmp_path / "x"), "--to", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ssmpde: error: unknown format 'nope'")
    assert "toy" in err and not (tmp_path / "x").exists()


def test_plain_netcdf_convert_is_unchanged(tmp_path):
    ds = make_dataset()
    source = save(ds, tmp_path / "a.nc")
    result = convert(source, tmp_path / "a.zarr")
    assert result.notes == () and result.format == "zarr"
    _same(load_dataset(result), ds)
    assert np.array_equal(load_dataset(result)["vorticity"].values, ds["vorticity"].values)
