"""Tests for ssmpde.data.files: exact round trips, save errors and atomicity, reading errors."""

from __future__ import annotations

import os
import pathlib
import tempfile

import hypothesis.extra.numpy as hnp
import netCDF4
import numpy as np
import psutil
import pytest
import xarray as xr
import zarr
from hypothesis import given
from hypothesis import strategies as st

from ssmpde.data import (
    REQUIRED_GLOBAL_ATTRS,
    SAMPLE,
    SPATIAL_DIMS,
    TIME,
    X,
    Y,
    DatasetFileError,
    SchemaError,
    build_dataset,
    describe,
    grid_coordinates,
    load_dataset,
    open_dataset,
    sample_coordinate,
    save,
    time_coordinate,
)

from .helpers import FORMATS, assert_same_dtypes, listing, make_dataset, snapshot


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------

DTYPES = (np.float32, np.float64, np.int32, np.int64)
# Units a reader could mistake for durations or dates: ssmpde time must stay a plain number.
TIME_UNITS = ("1", "s", "days", "seconds since 2000-01-01 00:00:00")
attr_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                    max_size=12)


def _values(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return st.floats(width=dtype.itemsize * 8, allow_nan=False, allow_infinity=False)
    info = np.iinfo(dtype)
    return st.integers(int(info.min), int(info.max))


@st.composite
def datasets(draw):
    ndim = draw(st.sampled_from((1, 2)))
    nsample, ntime = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    sizes = {SAMPLE: nsample, TIME: ntime, X: draw(st.integers(1, 6))}
    if ndim == 2:
        sizes[Y] = draw(st.integers(1, 6))
    spatial = SPATIAL_DIMS[ndim]
    field_dims = (SAMPLE, TIME, *spatial)
    field_dtype, param_dtype = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES))
    field = draw(hnp.arrays(field_dtype, tuple(sizes[d] for d in field_dims),
                            elements=_values(field_dtype)))
    param = draw(hnp.arrays(param_dtype, (nsample,), elements=_values(param_dtype)))
    field_attrs = {"long_name": draw(attr_text.filter(str.strip)), "units": "m s-1",
                   "comment": draw(attr_text),
                   "scale": draw(st.floats(allow_nan=False, allow_infinity=False)),
                   "valid_range": draw(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=3))}
    time_dtype = draw(st.sampled_from((np.int64, np.float64)))
    coords = {SAMPLE: sample_coordinate(nsample),
              TIME: time_coordinate(np.arange(ntime, dtype=time_dtype) * 2,
                                    units=draw(st.sampled_from(TIME_UNITS))),
              **{dim: grid_coordinates(sizes[dim], ndim=ndim)[dim] for dim in spatial}}
    ds = build_dataset(
        {"u": xr.DataArray(field, dims=field_dims, attrs=field_attrs),
         "k": xr.DataArray(param, dims=(SAMPLE,), attrs={"long_name": "parameter",
                                                        "units": "1", "count": 3})},
        coords=coords, equation="burgers", title=draw(attr_text), references=draw(attr_text),
        solver="spectral",
        config={"seed": draw(st.integers(0, 2**32)), "ndim": ndim,
                "nu": draw(st.floats(allow_nan=False, allow_infinity=False))})
    ds.attrs["ssmpde_extra_number"] = draw(st.integers(-2**31, 2**31 - 1))
    return ds


@pytest.mark.parametrize("suffix", FORMATS)
@given(ds=datasets())
def test_save_open_round_trip_is_exact(suffix, ds):
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"data.{suffix}"
        assert save(ds, path) == path
        assert not [name for name in listing(tmp) if ".tmp-" in name]
        loaded = load_dataset(path)
        xr.testing.assert_identical(loaded, ds)
        assert_same_dtypes(loaded, ds)
        assert loaded[TIME].attrs["units"] == ds[TIME].attrs["units"]
        assert loaded.ssmpde.config == ds.ssmpde.config
        with open_dataset(path) as lazy:
            xr.testing.assert_identical(lazy.load(), ds)
            assert_same_dtypes(lazy, ds)


@pytest.mark.parametrize("suffix", FORMATS)
def test_non_finite_values_round_trip(suffix, tmp_path):
    ds = make_dataset(dtype=np.float32)
    ds["vorticity"][0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    loaded = load_dataset(save(ds, tmp_path / f"d.{suffix}"))
    xr.testing.assert_identical(loaded, ds)
    assert loaded["vorticity"].dtype == np.float32
    assert np.isnan(loaded["vorticity"].values).sum() == 1


def test_netcdf_is_compressed_one_sample_per_chunk(tmp_path):
    ds = make_dataset(nsample=3, ntime=2, resolution=8)
    path = save(ds, tmp_path / "d.nc")
    with netCDF4.Dataset(path) as nc:
        assert nc.data_model == "NETCDF4"
        for name in ds.data_vars:
            var = nc.variables[name]
            filters = var.filters()
            assert filters["zlib"] and filters["shuffle"] and filters["complevel"] == 4, name
            assert var.chunking() == [1, *ds[name].shape[1:]], name
            assert "_FillValue" not in var.ncattrs(), name


def test_zarr_is_chunked_one_sample_per_chunk_with_consolidated_metadata(tmp_path):
    ds = make_dataset(nsample=3, ntime=2, resolution=8).chunk({SAMPLE: 2, X: 3})
    path = save(ds, tmp_path / "d.zarr")
    assert (path / ".zmetadata").is_file()
    group = zarr.open_group(path, mode="r")
    for name in ("vorticity", "viscosity", "forcing"):
        assert group[name].chunks == (1, *ds[name].shape[1:]), name
    xr.testing.assert_identical(load_dataset(path), ds.compute())


def test_resave_of_opened_dataset(tmp_path):
    ds = make_dataset()
    first = save(ds, tmp_path / "a.nc")
    with open_dataset(first) as opened:
        second = opened.ssmpde.save(tmp_path / "b.zarr")
    with open_dataset(second, chunks={}) as reopened:
        assert reopened["vorticity"].chunks is not None
        xr.testing.assert_identical(reopened.compute(), ds)


# --------------------------------------------------------------------------------------------
# save errors and atomicity
# --------------------------------------------------------------------------------------------

def test_save_rejects_unknown_suffix(tmp_path):
    with pytest.raises(ValueError) as info:
        save(make_dataset(), tmp_path / "d.h5")
    for word in (".zarr", ".nc", ".nc4", ".netcdf", "'.h5'"):
        assert word in str(info.value)
    assert listing(tmp_path) == []


def test_save_requires_existing_directory(tmp_path):
    missing = tmp_path / "no" / "such"
    with pytest.raises(FileNotFoundError) as info:
        save(make_dataset(), missing / "d.nc")
    assert str(missing) in str(info.value) and "mkdir -p" in str(info.value)


@pytest.mark.parametrize("suffix", FORMATS)
def test_save_refuses_existing_target(suffix, tmp_path):
    path = save(make_dataset(seed=1), tmp_path / f"d.{suffix}")
    before = snapshot(path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save(make_dataset(seed=2), path)
    assert snapshot(path) == before


@pytest.mark.parametrize("suffix", FORMATS)
def test_save_overwrite_replaces_target(suffix, tmp_path):
    path = save(make_dataset(seed=1), tmp_path / f"d.{suffix}")
    new = make_dataset(seed=2)
    save(new, path, overwrite=True)
    xr.testing.assert_identical(load_dataset(path), new)
    assert listing(tmp_path) == [path.name]


def test_save_overwrite_never_replaces_a_file_ssmpde_did_not_write(tmp_path):
    # overwrite replaces an earlier ssmpde output, never a user's file that has the name
    path = tmp_path / "d.zarr"
    path.write_text("not a store")
    with pytest.raises(ValueError, match="file that ssmpde did not write"):
        save(make_dataset(), path, overwrite=True)
    assert path.read_text() == "not a store" and listing(tmp_path) == ["d.zarr"]


def test_atomic_path_replaces_a_file_by_a_directory(tmp_path):
    from ssmpde.data import atomic_path

    path = tmp_path / "d.zarr"
    path.write_text("old")
    with atomic_path(path) as tmp:
        tmp.mkdir()
        (tmp / "inside").write_text("new")
    assert (path / "inside").read_text() == "new" and listing(tmp_path) == ["d.zarr"]


@pytest.mark.parametrize("value, error, words", [
    ({"a": 1}, TypeError, "dict"),
    (None, TypeError, "NoneType"),
    (True, TypeError, "bool"),
    ([[1, 2], [3, 4]], TypeError, "nested"),
    ([1.0], TypeError, "length 1"),
    (np.zeros((2, 2)), TypeError, "2-dimensional"),
    ("a\x00b", ValueError, "NUL"),
], ids=["dict", "none", "bool", "nested-list", "one-element-list", "2d-array", "nul"])
@pytest.mark.parametrize("where", ["global", "variable"])
@pytest.mark.parametrize("suffix", FORMATS)
def test_save_rejects_attributes_netcdf_cannot_store(value, error, words, where, suffix,
                                                      tmp_path):
    ds = make_dataset()
    (ds.attrs if where == "global" else ds["vorticity"].attrs)["bad_attr"] = value
    with pytest.raises(error) as info:
        save(ds, tmp_path / f"d.{suffix}", validate=False)
    message = str(info.value)
    assert "'bad_attr'" in message and "JSON-encode" in message and words in message
    if where == "variable":
        assert "'vorticity'" in message
    assert listing(tmp_path) == []


def test_save_validates_unless_told_not_to(tmp_path):
    ds = make_dataset()
    del ds["vorticity"].attrs["units"]
    with pytest.raises(SchemaError, match="'vorticity' has no 'units'"):
        save(ds, tmp_path / "d.nc")
    assert listing(tmp_path) == []
    save(ds, tmp_path / "d.nc", validate=False)
    with pytest.raises(SchemaError, match=r"dataset '.*d\.nc' does not follow"):
        open_dataset(tmp_path / "d.nc")


def _fail_after_writing(monkeypatch, method, exception):
    """Make xarray's writer finish a temporary file or store, then raise ``exception``."""
    original = getattr(xr.Dataset, method)
    calls = []

    def broken(self, path, *args, **kwargs):
        calls.append(pathlib.Path(path))
        original(self, path, *args, **kwargs)
        assert pathlib.Path(path).exists()
        raise exception

    monkeypatch.setattr(xr.Dataset, method, broken)
    return calls


def _fail_midway(monkeypatch, method, exception):
    """Make xarray's writer leave a half-written temporary behind, then raise ``exception``."""
    calls = []

    def broken(self, path, *args, **kwargs):
        path = pathlib.Path(path)
        calls.append(path)
        if method == "to_zarr":
            path.mkdir()
            (path / ".zgroup").write_text("{")
        else:
            path.write_bytes(b"\x89HDF\r\n\x1a\n partial")
        raise exception

    monkeypatch.setattr(xr.Dataset, method, broken)
    return calls


@pytest.mark.parametrize("failure", [_fail_after_writing, _fail_midway],
                         ids=["after-write", "midway"])
@pytest.mark.parametrize("exception", [KeyboardInterrupt(), OSError("disk full")],
                         ids=["interrupt", "oserror"])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "overwrite"])
@pytest.mark.parametrize("suffix", FORMATS)
def test_failed_save_leaves_nothing_behind(suffix, existing, exception, failure, monkeypatch,
                                           tmp_path):
    path = tmp_path / f"d.{suffix}"
    original = make_dataset(seed=1)
    if existing:
        save(original, path)
        before = snapshot(path)
    calls = failure(monkeypatch, "to_zarr" if suffix == "zarr" else "to_netcdf", exception)
    with pytest.raises(type(exception)):
        save(make_dataset(seed=2), path, overwrite=True)
    assert len(calls) == 1 and calls[0].parent == tmp_path and ".tmp-" in calls[0].name
    assert not calls[0].exists()
    if existing:
        assert listing(tmp_path) == [path.name]
        assert snapshot(path) == before
        monkeypatch.undo()
        xr.testing.assert_identical(load_dataset(path), original)
    else:
        assert listing(tmp_path) == []


def test_failed_commit_restores_existing_store(monkeypatch, tmp_path):
    path = save(make_dataset(seed=1), tmp_path / "d.zarr")
    before = snapshot(path)
    real_replace = os.replace

    def replace(src, dst):
        # Only the final rename of the finished store: zarr itself renames files inside it.
        if pathlib.Path(dst) == path and ".tmp-" in pathlib.Path(src).name:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        save(make_dataset(seed=2), path, overwrite=True)
    assert listing(tmp_path) == [path.name]
    assert snapshot(path) == before


# --------------------------------------------------------------------------------------------
# Reading errors
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reader", [open_dataset, load_dataset])
def test_open_missing_path(reader, tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        reader(tmp_path / "absent.nc")
    assert "absent.nc" in str(info.value)


def _truncated(tmp_path):
    path = save(make_dataset(nsample=3, resolution=16), tmp_path / "t.nc")
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2])
    return path


def _text(tmp_path):
    path = tmp_path / "t.nc"
    path.write_text("sample,time,u\n0,0,1.0\n")
    return path


def _empty(tmp_path):
    path = tmp_path / "t.nc"
    path.touch()
    return path


@pytest.mark.parametrize("make", [_truncated, _text, _empty], ids=["truncated", "text", "empty"])
@pytest.mark.parametrize("reader", [open_dataset, load_dataset, describe])
def test_unreadable_netcdf_raises_dataset_file_error(make, reader, tmp_path):
    path = make(tmp_path)
    with pytest.raises(DatasetFileError) as info:
        reader(path)
    message = str(info.value)
    assert f"'{path}'" in message and "netCDF4" in message
    assert "truncated, corrupt or not netCDF" in message and "Regenerate" in message
    assert isinstance(info.value.__cause__, OSError)


def test_directory_that_is_not_a_zarr_store(tmp_path):
    store = tmp_path / "d.zarr"
    store.mkdir()
    (store / "notes.txt").write_text("hello")
    with pytest.raises(DatasetFileError, match="not a zarr store|without zarr metadata"):
        open_dataset(store)


def test_corrupt_zarr_metadata_and_chunks(tmp_path):
    store = save(make_dataset(), tmp_path / "d.zarr")
    chunk = next(p for p in (store / "vorticity").iterdir() if not p.name.startswith("."))
    chunk.write_bytes(b"garbage" * 8)
    with open_dataset(store):
        pass
    with pytest.raises(DatasetFileError, match="corrupt") as info:
        load_dataset(store)
    assert info.value.__cause__ is not None
    (store / ".zmetadata").write_text("{ not json")
    with pytest.raises(DatasetFileError, match=r"as a zarr store: .*Regenerate"):
        open_dataset(store)


@pytest.mark.parametrize("suffix", FORMATS)
def test_foreign_dataset_raises_schema_error(suffix, tmp_path):
    foreign = xr.Dataset({"temperature": (("lat", "lon"), np.zeros((2, 3)))})
    path = tmp_path / f"foreign.{suffix}"
    if suffix == "zarr":
        foreign.to_zarr(path, zarr_format=2, consolidated=True)
    else:
        foreign.to_netcdf(path)
    for reader in (open_dataset, load_dataset):
        with pytest.raises(SchemaError) as info:
            reader(path)
        message = str(info.value)
        assert f"'{path}'" in message and "no 'sample' dimension" in message
        assert "'temperature' has no 'units'" in message
        for key in REQUIRED_GLOBAL_ATTRS:
            assert f"global attribute '{key}' is missing" in message
    with open_dataset(path, validate=False) as opened:
        xr.testing.assert_identical(opened.load(), foreign)


def _open_files():
    return {pathlib.Path(f.path).resolve() for f in psutil.Process().open_files()}


def test_load_dataset_closes_the_file(tmp_path):
    path = save(make_dataset(), tmp_path / "d.nc").resolve()
    opened = open_dataset(path)
    try:
        assert path in _open_files()
    finally:
        opened.close()
    assert path not in _open_files()
    loaded = load_dataset(path)
    assert path not in _open_files()
    path.unlink()
    assert np.isfinite(loaded["vorticity"].values).all()
