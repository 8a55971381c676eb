"""Tests for ssmpde.data: schema, config, validation, atomic writes, reading, describe."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
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

import ssmpde
from ssmpde import data
from ssmpde.data import (
    CONVENTIONS,
    REQUIRED_GLOBAL_ATTRS,
    SAMPLE,
    TIME,
    X,
    Y,
    DatasetFileError,
    SchemaError,
)

FORMATS = ("nc", "zarr")


def make_dataset(*, nsample=2, ntime=3, resolution=4, ndim=2, dtype=np.float64, config=None,
                 seed=0):
    """A small valid dataset: a field, a per-sample parameter, and a forcing with an extra dim."""
    rng = np.random.default_rng(seed)
    spatial = data.SPATIAL_DIMS[ndim]
    shape = (nsample, ntime) + (resolution,) * ndim
    field = xr.DataArray(rng.standard_normal(shape).astype(dtype), dims=(SAMPLE, TIME, *spatial),
                         attrs={"long_name": "vorticity", "units": "s-1"})
    viscosity = xr.DataArray(rng.uniform(1e-4, 1e-2, nsample), dims=(SAMPLE,),
                             attrs={"long_name": "kinematic viscosity", "units": "m2 s-1"})
    forcing = xr.DataArray(rng.standard_normal((nsample, 2)), dims=(SAMPLE, "forcing_mode"),
                           attrs={"long_name": "forcing amplitudes", "units": "s-2"})
    if config is None:
        config = {"seed": seed, "resolution": resolution, "solver": {"dt": 1e-3, "order": 4}}
    return data.build_dataset(
        {"vorticity": field, "viscosity": viscosity, "forcing": forcing},
        coords={SAMPLE: data.sample_coordinate(nsample),
                TIME: data.time_coordinate(np.arange(ntime) * 0.5, units="s"),
                **data.grid_coordinates(resolution, ndim=ndim)},
        equation="navier_stokes", config=config, title="test dataset", references="none",
        solver="pseudospectral")


def listing(directory):
    return sorted(p.name for p in pathlib.Path(directory).iterdir())


def snapshot(path):
    """Bytes of every file under ``path`` (a file or a directory), to prove it is untouched."""
    path = pathlib.Path(path)
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def assert_same_dtypes(actual, expected):
    for name, var in expected.variables.items():
        assert actual[name].dtype == var.dtype, (name, actual[name].dtype, var.dtype)


# --------------------------------------------------------------------------------------------
# Coordinates
# --------------------------------------------------------------------------------------------

def test_periodic_grid_excludes_right_boundary():
    coords = data.grid_coordinates(8, ndim=2, length=2.0, units="m")
    assert list(coords) == [Y, X]
    np.testing.assert_array_equal(coords[X].values, np.arange(8) * 0.25)
    assert coords[X].values[-1] < 2.0
    assert coords[X].attrs["units"] == "m"
    assert coords[X].attrs["axis"] == "X" and coords[Y].attrs["axis"] == "Y"
    assert coords[X].attrs["long_name"]


def test_endpoint_grid_includes_both_boundaries():
    coords = data.grid_coordinates(5, ndim=1, endpoint=True)
    assert list(coords) == [X]
    np.testing.assert_array_equal(coords[X].values, np.linspace(0, 1, 5))
    assert coords[X].dtype == np.float64


@pytest.mark.parametrize("kwargs, error", [
    ({"resolution": 0}, ValueError),
    ({"resolution": 4.0}, TypeError),
    ({"resolution": 4, "ndim": 3}, ValueError),
    ({"resolution": 4, "length": -1.0}, ValueError),
    ({"resolution": 4, "units": ""}, ValueError),
], ids=["zero", "float", "ndim3", "negative-length", "empty-units"])
def test_grid_coordinates_rejects_bad_arguments(kwargs, error):
    resolution = kwargs.pop("resolution")
    with pytest.raises(error):
        data.grid_coordinates(resolution, **kwargs)


def test_time_coordinate_keeps_dtype_and_units():
    time = data.time_coordinate(np.array([0, 2, 4], dtype=np.int64), units="s")
    assert time.dtype == np.int64
    assert time.dims == (TIME,)
    assert time.attrs == {"units": "s", "long_name": "time", "axis": "T"}


@pytest.mark.parametrize("times, error", [
    ([0.0, 0.0, 1.0], ValueError),
    ([1.0, 0.0], ValueError),
    ([0.0, np.nan], ValueError),
    ([[0.0, 1.0]], ValueError),
    (np.array(["2000-01-01", "2000-01-02"], dtype="datetime64[D]"), TypeError),
], ids=["repeated", "decreasing", "nan", "2d", "datetime"])
def test_time_coordinate_rejects_bad_times(times, error):
    with pytest.raises(error):
        data.time_coordinate(times)


def test_sample_coordinate():
    assert data.sample_coordinate(3).values.tolist() == [0, 1, 2]
    resumed = data.sample_coordinate(np.arange(10, 13, dtype=np.int32))
    assert resumed.dtype == np.int64 and resumed.values.tolist() == [10, 11, 12]
    assert resumed.attrs["units"] == "1" and resumed.attrs["long_name"]
    for bad, error in [([0, 0], ValueError), ([-1], ValueError), ([0.5], TypeError)]:
        with pytest.raises(error):
            data.sample_coordinate(bad)


# --------------------------------------------------------------------------------------------
# build_dataset and config
# --------------------------------------------------------------------------------------------

def test_build_dataset_sets_global_attributes():
    ds = make_dataset()
    assert set(REQUIRED_GLOBAL_ATTRS) <= set(ds.attrs)
    assert ds.attrs["Conventions"] == CONVENTIONS
    assert ds.attrs["source"] == f"ssmpde {ssmpde.__version__}, solver pseudospectral"
    assert ds.attrs["history"].endswith(f"created by ssmpde {ssmpde.__version__}")
    assert ds.attrs["ssmpde_equation"] == "navier_stokes"
    assert ds.attrs["ssmpde_config"] == json.dumps(
        {"seed": 0, "resolution": 4, "solver": {"dt": 1e-3, "order": 4}}, sort_keys=True)


def test_build_dataset_converts_numpy_config():
    ds = make_dataset(config={"seed": np.int64(7), "dt": np.float32(0.5), "flag": np.bool_(True),
                              "modes": np.arange(3), "shape": (4, 4)})
    assert data.config_of(ds) == {"seed": 7, "dt": 0.5, "flag": True, "modes": [0, 1, 2],
                                  "shape": [4, 4]}
    assert type(data.config_of(ds)["seed"]) is int


@pytest.mark.parametrize("config, error, words", [
    ({"solver": {"out": pathlib.Path("x")}}, TypeError, ["config['solver']['out']", "PosixPath"]),
    ({"values": [1, object()]}, TypeError, ["config['values'][1]", "object"]),
    ({"dt": float("nan")}, ValueError, ["config['dt']", "NaN"]),
    ({1: "one"}, TypeError, ["config[1]", "keys must be strings"]),
], ids=["path", "object-in-list", "nan", "int-key"])
def test_build_dataset_rejects_unserialisable_config(config, error, words):
    with pytest.raises(error) as info:
        make_dataset(config=config)
    for word in words:
        assert word in str(info.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**62, 2**62)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10)


@given(config=st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_config_round_trips_through_build_dataset(config):
    ds = make_dataset(nsample=1, ntime=1, resolution=2, config=config)
    assert data.config_of(ds) == config
    assert ds.ssmpde.config == config


@pytest.mark.parametrize("text, words", [
    (None, "missing"), ("{not json", "not valid JSON"), ("[1, 2]", "JSON object"),
], ids=["missing", "invalid", "list"])
def test_config_of_rejects_bad_config(text, words):
    ds = make_dataset()
    if text is None:
        del ds.attrs["ssmpde_config"]
    else:
        ds.attrs["ssmpde_config"] = text
    with pytest.raises(SchemaError, match=words):
        data.config_of(ds)


# --------------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------------

def _drop_attr(name, key):
    def mutate(ds):
        del ds[name].attrs[key]
        return ds
    return mutate


def _set_global(key, value):
    def mutate(ds):
        ds.attrs[key] = value
        return ds
    return mutate


def _del_global(key):
    def mutate(ds):
        del ds.attrs[key]
        return ds
    return mutate


SCHEMA_VIOLATIONS = {
    "no-sample-dim": (lambda ds: ds.isel({SAMPLE: 0}, drop=True),
                      ["no 'sample' dimension", "expand_dims"]),
    "dim-without-coordinate": (lambda ds: ds.drop_vars(X),
                               ["dimension 'x' has no coordinate variable", "assign_coords"]),
    "coordinate-without-units": (_drop_attr(TIME, "units"),
                                 ["coordinate 'time' has no 'units' attribute",
                                  "ds['time'].attrs['units']"]),
    "y-without-x": (lambda ds: ds.isel({X: 0}, drop=True),
                    ["dimension 'y' is present without 'x'"]),
    "var-without-units": (_drop_attr("vorticity", "units"),
                          ["data variable 'vorticity' has no 'units' attribute",
                           "ds['vorticity'].attrs['units']"]),
    "var-without-long-name": (_drop_attr("viscosity", "long_name"),
                              ["data variable 'viscosity' has no 'long_name' attribute"]),
    "no-data-variables": (lambda ds: ds.drop_vars(list(ds.data_vars)),
                          ["no data variables"]),
    "wrong-conventions": (_set_global("Conventions", "CF-1.8"),
                          ["'Conventions' is 'CF-1.8'", "expected 'CF-1.10'"]),
    "config-not-json": (_set_global("ssmpde_config", "{seed: 1"),
                        ["'ssmpde_config' is not valid JSON"]),
    "config-not-object": (_set_global("ssmpde_config", "3"), ["must hold a JSON object"]),
    "empty-equation": (_set_global("ssmpde_equation", "  "), ["'ssmpde_equation' is empty"]),
    "non-string-title": (_set_global("title", 3), ["'title' must be a string"]),
}
SCHEMA_VIOLATIONS.update({
    f"missing-{key}": (_del_global(key), [f"global attribute '{key}' is missing",
                                          f"ds.attrs['{key}']"])
    for key in REQUIRED_GLOBAL_ATTRS
})


@pytest.mark.parametrize("name", sorted(SCHEMA_VIOLATIONS))
def test_validate_names_each_problem(name):
    mutate, words = SCHEMA_VIOLATIONS[name]
    ds = mutate(make_dataset())
    with pytest.raises(SchemaError) as info:
        data.validate(ds)
    message = str(info.value)
    assert message.startswith("dataset does not follow the ssmpde schema:\n  - ")
    for word in words:
        assert word in message


def test_validate_reports_every_problem_at_once():
    ds = make_dataset()
    del ds["vorticity"].attrs["units"]
    del ds[X].attrs["units"]
    del ds.attrs["title"]
    ds.attrs["Conventions"] = "CF-1.6"
    with pytest.raises(SchemaError) as info:
        data.validate(ds)
    assert len(info.value.problems) == 4
    message = str(info.value)
    for word in ["'vorticity' has no 'units'", "coordinate 'x' has no 'units'",
                 "'title' is missing", "'Conventions' is 'CF-1.6'"]:
        assert word in message
    assert message.count("\n  - ") == 4


def test_validate_returns_dataset_and_allows_extra_dims():
    ds = make_dataset()
    assert "forcing_mode" in ds.dims and "forcing_mode" not in ds.coords
    assert data.validate(ds) is ds
    assert ds.ssmpde.validate() is ds


def test_validate_check_finite_counts_bad_values():
    ds = make_dataset()
    ds["vorticity"][0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    data.validate(ds)
    with pytest.raises(SchemaError, match=r"'vorticity' has 3 non-finite values"):
        data.validate(ds, check_finite=True)
    with pytest.raises(SchemaError, match="non-finite"):
        ds.ssmpde.validate(check_finite=True)


def test_validate_rejects_non_datasets():
    with pytest.raises(TypeError, match="xarray.Dataset"):
        data.validate(make_dataset()["vorticity"])


def test_schema_error_survives_pickling():
    ds = make_dataset()
    del ds.attrs["title"]
    with pytest.raises(SchemaError) as info:
        data.validate(ds)
    clone = pickle.loads(pickle.dumps(info.value))
    assert str(clone) == str(info.value) and clone.problems == info.value.problems


def test_accessor_equation():
    ds = make_dataset()
    assert ds.ssmpde.equation == "navier_stokes"
    del ds.attrs["ssmpde_equation"]
    with pytest.raises(SchemaError, match="ssmpde_equation"):
        ds.ssmpde.equation


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
    spatial = data.SPATIAL_DIMS[ndim]
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
    coords = {SAMPLE: data.sample_coordinate(nsample),
              TIME: data.time_coordinate(np.arange(ntime, dtype=time_dtype) * 2,
                                         units=draw(st.sampled_from(TIME_UNITS))),
              **{dim: data.grid_coordinates(sizes[dim], ndim=ndim)[dim] for dim in spatial}}
    ds = data.build_dataset(
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
        assert data.save(ds, path) == path
        assert not [name for name in listing(tmp) if ".tmp-" in name]
        loaded = data.load_dataset(path)
        xr.testing.assert_identical(loaded, ds)
        assert_same_dtypes(loaded, ds)
        assert loaded[TIME].attrs["units"] == ds[TIME].attrs["units"]
        assert loaded.ssmpde.config == ds.ssmpde.config
        with data.open_dataset(path) as lazy:
            xr.testing.assert_identical(lazy.load(), ds)
            assert_same_dtypes(lazy, ds)


@pytest.mark.parametrize("suffix", FORMATS)
def test_non_finite_values_round_trip(suffix, tmp_path):
    ds = make_dataset(dtype=np.float32)
    ds["vorticity"][0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    loaded = data.load_dataset(data.save(ds, tmp_path / f"d.{suffix}"))
    xr.testing.assert_identical(loaded, ds)
    assert loaded["vorticity"].dtype == np.float32
    assert np.isnan(loaded["vorticity"].values).sum() == 1


def test_netcdf_is_compressed_one_sample_per_chunk(tmp_path):
    ds = make_dataset(nsample=3, ntime=2, resolution=8)
    path = data.save(ds, tmp_path / "d.nc")
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
    path = data.save(ds, tmp_path / "d.zarr")
    assert (path / ".zmetadata").is_file()
    group = zarr.open_group(path, mode="r")
    for name in ("vorticity", "viscosity", "forcing"):
        assert group[name].chunks == (1, *ds[name].shape[1:]), name
    xr.testing.assert_identical(data.load_dataset(path), ds.compute())


def test_resave_of_opened_dataset(tmp_path):
    ds = make_dataset()
    first = data.save(ds, tmp_path / "a.nc")
    with data.open_dataset(first) as opened:
        second = opened.ssmpde.save(tmp_path / "b.zarr")
    with data.open_dataset(second, chunks={}) as reopened:
        assert reopened["vorticity"].chunks is not None
        xr.testing.assert_identical(reopened.compute(), ds)


# --------------------------------------------------------------------------------------------
# save errors and atomicity
# --------------------------------------------------------------------------------------------

def test_save_rejects_unknown_suffix(tmp_path):
    with pytest.raises(ValueError) as info:
        data.save(make_dataset(), tmp_path / "d.h5")
    for word in (".zarr", ".nc", ".nc4", ".netcdf", "'.h5'"):
        assert word in str(info.value)
    assert listing(tmp_path) == []


def test_save_requires_existing_directory(tmp_path):
    missing = tmp_path / "no" / "such"
    with pytest.raises(FileNotFoundError) as info:
        data.save(make_dataset(), missing / "d.nc")
    assert str(missing) in str(info.value) and "mkdir -p" in str(info.value)


@pytest.mark.parametrize("suffix", FORMATS)
def test_save_refuses_existing_target(suffix, tmp_path):
    path = data.save(make_dataset(seed=1), tmp_path / f"d.{suffix}")
    before = snapshot(path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        data.save(make_dataset(seed=2), path)
    assert snapshot(path) == before


@pytest.mark.parametrize("suffix", FORMATS)
def test_save_overwrite_replaces_target(suffix, tmp_path):
    path = data.save(make_dataset(seed=1), tmp_path / f"d.{suffix}")
    new = make_dataset(seed=2)
    data.save(new, path, overwrite=True)
    xr.testing.assert_identical(data.load_dataset(path), new)
    assert listing(tmp_path) == [path.name]


def test_save_overwrite_replaces_file_by_zarr_store(tmp_path):
    path = tmp_path / "d.zarr"
    path.write_text("not a store")
    data.save(make_dataset(), path, overwrite=True)
    assert path.is_dir() and listing(tmp_path) == ["d.zarr"]


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
        data.save(ds, tmp_path / f"d.{suffix}", validate=False)
    message = str(info.value)
    assert "'bad_attr'" in message and "JSON-encode" in message and words in message
    if where == "variable":
        assert "'vorticity'" in message
    assert listing(tmp_path) == []


def test_save_validates_unless_told_not_to(tmp_path):
    ds = make_dataset()
    del ds["vorticity"].attrs["units"]
    with pytest.raises(SchemaError, match="'vorticity' has no 'units'"):
        data.save(ds, tmp_path / "d.nc")
    assert listing(tmp_path) == []
    data.save(ds, tmp_path / "d.nc", validate=False)
    with pytest.raises(SchemaError, match=r"dataset '.*d\.nc' does not follow"):
        data.open_dataset(tmp_path / "d.nc")


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
        data.save(original, path)
        before = snapshot(path)
    calls = failure(monkeypatch, "to_zarr" if suffix == "zarr" else "to_netcdf", exception)
    with pytest.raises(type(exception)):
        data.save(make_dataset(seed=2), path, overwrite=True)
    assert len(calls) == 1 and calls[0].parent == tmp_path and ".tmp-" in calls[0].name
    assert not calls[0].exists()
    if existing:
        assert listing(tmp_path) == [path.name]
        assert snapshot(path) == before
        monkeypatch.undo()
        xr.testing.assert_identical(data.load_dataset(path), original)
    else:
        assert listing(tmp_path) == []


def test_failed_commit_restores_existing_store(monkeypatch, tmp_path):
    path = data.save(make_dataset(seed=1), tmp_path / "d.zarr")
    before = snapshot(path)
    real_replace = os.replace

    def replace(src, dst):
        # Only the final rename of the finished store: zarr itself renames files inside it.
        if pathlib.Path(dst) == path and ".tmp-" in pathlib.Path(src).name:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        data.save(make_dataset(seed=2), path, overwrite=True)
    assert listing(tmp_path) == [path.name]
    assert snapshot(path) == before


# --------------------------------------------------------------------------------------------
# Reading errors
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reader", [data.open_dataset, data.load_dataset])
def test_open_missing_path(reader, tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        reader(tmp_path / "absent.nc")
    assert "absent.nc" in str(info.value)


def _truncated(tmp_path):
    path = data.save(make_dataset(nsample=3, resolution=16), tmp_path / "t.nc")
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
@pytest.mark.parametrize("reader", [data.open_dataset, data.load_dataset, data.describe])
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
        data.open_dataset(store)


def test_corrupt_zarr_metadata_and_chunks(tmp_path):
    store = data.save(make_dataset(), tmp_path / "d.zarr")
    chunk = next(p for p in (store / "vorticity").iterdir() if not p.name.startswith("."))
    chunk.write_bytes(b"garbage" * 8)
    with data.open_dataset(store):
        pass
    with pytest.raises(DatasetFileError, match="corrupt") as info:
        data.load_dataset(store)
    assert info.value.__cause__ is not None
    (store / ".zmetadata").write_text("{ not json")
    with pytest.raises(DatasetFileError, match=r"as a zarr store: .*Regenerate"):
        data.open_dataset(store)


@pytest.mark.parametrize("suffix", FORMATS)
def test_foreign_dataset_raises_schema_error(suffix, tmp_path):
    foreign = xr.Dataset({"temperature": (("lat", "lon"), np.zeros((2, 3)))})
    path = tmp_path / f"foreign.{suffix}"
    if suffix == "zarr":
        foreign.to_zarr(path, zarr_format=2, consolidated=True)
    else:
        foreign.to_netcdf(path)
    for reader in (data.open_dataset, data.load_dataset):
        with pytest.raises(SchemaError) as info:
            reader(path)
        message = str(info.value)
        assert f"'{path}'" in message and "no 'sample' dimension" in message
        assert "'temperature' has no 'units'" in message
        for key in REQUIRED_GLOBAL_ATTRS:
            assert f"global attribute '{key}' is missing" in message
    with data.open_dataset(path, validate=False) as opened:
        xr.testing.assert_identical(opened.load(), foreign)


def _open_files():
    return {pathlib.Path(f.path).resolve() for f in psutil.Process().open_files()}


def test_load_dataset_closes_the_file(tmp_path):
    path = data.save(make_dataset(), tmp_path / "d.nc").resolve()
    opened = data.open_dataset(path)
    try:
        assert path in _open_files()
    finally:
        opened.close()
    assert path not in _open_files()
    loaded = data.load_dataset(path)
    assert path not in _open_files()
    path.unlink()
    assert np.isfinite(loaded["vorticity"].values).all()


# --------------------------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", FORMATS)
def test_describe_file(suffix, tmp_path):
    path = data.save(make_dataset(nsample=2, ntime=3, resolution=4), tmp_path / f"d.{suffix}")
    text = data.describe(path)
    for word in [str(path), "zarr" if suffix == "zarr" else "netCDF", "KiB",
                 "equation: navier_stokes", "sample=2", "time=3", "y=4", "x=4",
                 "vorticity (sample, time, y, x) float64", "units=s-1", "'vorticity'",
                 "viscosity (sample)", "units=m2 s-1", "forcing (sample, forcing_mode)",
                 "time (time) float64 [0, 1] units=s", "Conventions: CF-1.10",
                 '"seed": 0', '"resolution": 4', '"dt": 0.001', "schema: ok"]:
        assert word in text, word
    assert "min/max=[" in text


def test_describe_in_memory_and_broken_dataset():
    ds = make_dataset()
    ds["vorticity"][0, 0, 0, 0] = np.nan
    text = ds.ssmpde.describe()
    assert "(in memory)" in text and "non-finite=1" in text and "schema: ok" in text
    del ds["viscosity"].attrs["units"]
    text = data.describe(ds)
    assert "schema: problems" in text and "'viscosity' has no 'units'" in text


def test_describe_foreign_file(tmp_path):
    path = tmp_path / "foreign.nc"
    xr.Dataset({"t": ("lat", np.arange(3.0))}).to_netcdf(path)
    text = data.describe(path)
    assert "equation: (missing)" in text and "no 'sample' dimension" in text


def test_rectangular_and_1d_grids():
    coords = data.grid_coordinates((2, 4), length=(1.0, 2.0), units="m")
    np.testing.assert_array_equal(coords[Y].values, [0.0, 0.5])
    np.testing.assert_array_equal(coords[X].values, [0.0, 0.5, 1.0, 1.5])
    one = data.grid_coordinates((5,), length=(2.0,), endpoint=True)
    assert list(one) == [X] and one[X].values[-1] == 2.0
    with pytest.raises(ValueError, match="one value per spatial dimension"):
        data.grid_coordinates((2, 4), ndim=1)


def test_roles_are_validated_and_read():
    ds = xr.Dataset({"u": (("sample", "x"), np.zeros((1, 4)),
                           {"long_name": "u", "units": "1", "role": "state"}),
                     "nu": (("sample",), np.ones(1),
                            {"long_name": "viscosity", "units": "1", "role": "parameter"})},
                    coords={"sample": data.sample_coordinate(1),
                            **data.grid_coordinates(4, ndim=1)},
                    attrs={"Conventions": data.CONVENTIONS, "title": "t", "source": "s",
                           "history": "h", "ssmpde_equation": "e", "ssmpde_config": "{}",
                           "references": "r"})
    assert data.roles_of(ds) == {"u": "state", "nu": "parameter"}
    ds["u"].attrs["role"] = "solution"
    with pytest.raises(data.SchemaError, match="role 'solution'.*state, parameter"):
        data.validate(ds)
    del ds["u"].attrs["role"]
    data.validate(ds)  # a file without roles is still a dataset ...
    with pytest.raises(data.SchemaError, match="'u' has no 'role' attribute"):
        data.roles_of(ds)  # ... but not one a task can be read from
