"""Tests for ssmpde.data.schema: coordinates, build_dataset and its config, validate, roles."""

from __future__ import annotations

import json
import pathlib
import pickle

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

import ssmpde
from ssmpde.data import (CONVENTIONS, REQUIRED_GLOBAL_ATTRS, SAMPLE, TIME, X, Y, SchemaError,
                         config_of, grid_coordinates, roles_of, sample_coordinate, time_coordinate,
                         validate)

from .helpers import make_dataset


# --------------------------------------------------------------------------------------------
# Coordinates
# --------------------------------------------------------------------------------------------

def test_periodic_grid_excludes_right_boundary():
    coords = grid_coordinates(8, ndim=2, length=2.0, units="m")
    assert list(coords) == [Y, X]
    np.testing.assert_array_equal(coords[X].values, np.arange(8) * 0.25)
    assert coords[X].values[-1] < 2.0
    assert coords[X].attrs["units"] == "m"
    assert coords[X].attrs["axis"] == "X" and coords[Y].attrs["axis"] == "Y"
    assert coords[X].attrs["long_name"]


def test_endpoint_grid_includes_both_boundaries():
    coords = grid_coordinates(5, ndim=1, endpoint=True)
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
        grid_coordinates(resolution, **kwargs)


def test_time_coordinate_keeps_dtype_and_units():
    time = time_coordinate(np.array([0, 2, 4], dtype=np.int64), units="s")
    assert time.dtype == np.int64
    assert time.dims == (TIME,)
    # No axis="T": CF 4.4 reserves it for units with a reference time (see test_cf.py).
    assert time.attrs == {"units": "s", "long_name": "time"}


@pytest.mark.parametrize("times, error", [
    ([0.0, 0.0, 1.0], ValueError),
    ([1.0, 0.0], ValueError),
    ([0.0, np.nan], ValueError),
    ([[0.0, 1.0]], ValueError),
    (np.array(["2000-01-01", "2000-01-02"], dtype="datetime64[D]"), TypeError),
], ids=["repeated", "decreasing", "nan", "2d", "datetime"])
def test_time_coordinate_rejects_bad_times(times, error):
    with pytest.raises(error):
        time_coordinate(times)


def test_sample_coordinate():
    assert sample_coordinate(3).values.tolist() == [0, 1, 2]
    resumed = sample_coordinate(np.arange(10, 13, dtype=np.int32))
    assert resumed.dtype == np.int64 and resumed.values.tolist() == [10, 11, 12]
    assert resumed.attrs["units"] == "1" and resumed.attrs["long_name"]
    for bad, error in [([0, 0], ValueError), ([-1], ValueError), ([0.5], TypeError)]:
        with pytest.raises(error):
            sample_coordinate(bad)


def test_rectangular_and_1d_grids():
    coords = grid_coordinates((2, 4), length=(1.0, 2.0), units="m")
    np.testing.assert_array_equal(coords[Y].values, [0.0, 0.5])
    np.testing.assert_array_equal(coords[X].values, [0.0, 0.5, 1.0, 1.5])
    one = grid_coordinates((5,), length=(2.0,), endpoint=True)
    assert list(one) == [X] and one[X].values[-1] == 2.0
    with pytest.raises(ValueError, match="one value per spatial dimension"):
        grid_coordinates((2, 4), ndim=1)


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
    assert config_of(ds) == {"seed": 7, "dt": 0.5, "flag": True, "modes": [0, 1, 2],
                                  "shape": [4, 4]}
    assert type(config_of(ds)["seed"]) is int


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
    assert config_of(ds) == config
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
        config_of(ds)


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
        validate(ds)
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
        validate(ds)
    assert len(info.value.problems) == 4
    message = str(info.value)
    for word in ["'vorticity' has no 'units'", "coordinate 'x' has no 'units'",
                 "'title' is missing", "'Conventions' is 'CF-1.6'"]:
        assert word in message
    assert message.count("\n  - ") == 4


def test_validate_returns_dataset_and_allows_extra_dims():
    ds = make_dataset()
    assert "forcing_mode" in ds.dims and "forcing_mode" not in ds.coords
    assert validate(ds) is ds
    assert ds.ssmpde.validate() is ds


def test_validate_check_finite_counts_bad_values():
    ds = make_dataset()
    ds["vorticity"][0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    validate(ds)
    with pytest.raises(SchemaError, match=r"'vorticity' has 3 non-finite values"):
        validate(ds, check_finite=True)
    with pytest.raises(SchemaError, match="non-finite"):
        ds.ssmpde.validate(check_finite=True)


def test_validate_rejects_non_datasets():
    with pytest.raises(TypeError, match="xarray.Dataset"):
        validate(make_dataset()["vorticity"])


def test_schema_error_survives_pickling():
    ds = make_dataset()
    del ds.attrs["title"]
    with pytest.raises(SchemaError) as info:
        validate(ds)
    clone = pickle.loads(pickle.dumps(info.value))
    assert str(clone) == str(info.value) and clone.problems == info.value.problems


def test_roles_are_validated_and_read():
    ds = xr.Dataset({"u": (("sample", "x"), np.zeros((1, 4)),
                           {"long_name": "u", "units": "1", "role": "state"}),
                     "nu": (("sample",), np.ones(1),
                            {"long_name": "viscosity", "units": "1", "role": "parameter"})},
                    coords={"sample": sample_coordinate(1),
                            **grid_coordinates(4, ndim=1)},
                    attrs={"Conventions": CONVENTIONS, "title": "t", "source": "s",
                           "history": "h", "ssmpde_equation": "e", "ssmpde_config": "{}",
                           "references": "r"})
    assert roles_of(ds) == {"u": "state", "nu": "parameter"}
    ds["u"].attrs["role"] = "solution"
    with pytest.raises(SchemaError, match="role 'solution'.*state, parameter"):
        validate(ds)
    del ds["u"].attrs["role"]
    validate(ds)  # a file without roles is still a dataset ...
    with pytest.raises(SchemaError, match="'u' has no 'role' attribute"):
        roles_of(ds)  # ... but not one a task can be read from
