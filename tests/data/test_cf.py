"""The CF attributes of the files every PDE writes, read back from disk as a CF checker reads them.

The checkers themselves (``compliance-checker``, ``cfchecks``) stay out of the default install;
these tests assert what they check on our files (docs/data_format.md lists their results and
false positives). What each PDE's boundary conditions and grid are is written out here from the
equations (the table below), not read from the solvers.
"""

from __future__ import annotations

import re

import netCDF4
import numpy as np
import pytest
import xarray as xr

from ssmpde.data import (BOUNDS_DIM, CONVENTIONS, GRID_PLACEMENT, boundary_conditions_of,
                         convert, load_dataset, parse_boundary_conditions, roles_of, save,
                         vectors_of)
from ssmpde.solvers import list_solvers
from ssmpde.solvers.base import get_solver_class

PERIODIC, DIRICHLET, OUTFLOW = ("periodic",) * 2, ("dirichlet",) * 2, ("outflow",) * 2

#: label -> (solver, config beyond TINY, boundary kinds, placement, cell averages, domain).
#: The domain is (lower, upper) of every axis: where the nodes or the cell edges must lie.
CASES = {
    "allen-cahn": ("allen-cahn", {}, PERIODIC, "nodes", False, None),
    "burgers": ("burgers", {}, PERIODIC, "nodes", False, None),
    "kdv": ("kdv", {}, PERIODIC, "nodes", False, None),
    "kuramoto-sivashinsky": ("kuramoto-sivashinsky", {}, PERIODIC, "nodes", False, None),
    "navier-stokes": ("navier-stokes", {}, PERIODIC, "nodes", False, None),
    # Darcy's node grid holds both boundaries, where u = 0
    "darcy": ("darcy", {}, DIRICHLET, "nodes", False, (0.0, 1.0)),
    "darcy-cells": ("darcy", dict(grid="cells", coefficient="bumps", resolution=8,
                                  simulation_resolution=8, coefficient_high=1.0,
                                  coefficient_low=0.1), DIRICHLET, "cell_centres", False,
                    (0.0, 1.0)),
    # TINY Euler is GCE-RT on [-1/2, 1/2]^2, periodic
    "euler": ("euler", {}, PERIODIC, "cell_centres", True, (-0.5, 0.5)),
    "euler-outflow": ("euler", dict(problem="sod-x", gamma=1.4, boundary="outflow",
                                    final_time=0.02, record_interval=0.01), OUTFLOW,
                      "cell_centres", True, (0.0, 1.0)),
}
GRID_KINDS = ("periodic", "dirichlet", "neumann", "outflow", "reflective")
_GRAMMAR = re.compile(rf"^(\w+: ({'|'.join(GRID_KINDS)})( ({'|'.join(GRID_KINDS)}))?)"
                      rf"( \w+: ({'|'.join(GRID_KINDS)})( ({'|'.join(GRID_KINDS)}))?)*$")


def test_every_registered_solver_has_a_case():
    assert {solver for solver, *_ in CASES.values()} == set(list_solvers())


@pytest.fixture(scope="module", params=list(CASES))
def written(request, tmp_path_factory):
    """(label, path of a tiny netCDF file of that case, the dataset as ssmpde reads it)."""
    label = request.param
    name, extra = CASES[label][:2]
    cls = get_solver_class(name)
    solver = cls(**{**cls.TINY, **extra})
    outputs = solver.solve_batch(solver.sample_inputs(0, [0]))
    path = tmp_path_factory.mktemp("cf") / f"{label}.nc"
    save(solver.to_dataset(outputs, [0], config=solver.config_dict()), path)
    ds = load_dataset(path)
    yield label, path, ds
    ds.close()


def _spatial(var):
    return [dim for dim in var.dims if dim in ("y", "x")]


def test_conventions_units_and_axes_on_disk(written):
    label, path, _ = written
    with netCDF4.Dataset(path) as nc:
        assert nc.Conventions == CONVENTIONS == "CF-1.10"
        bounds = {nc[name].bounds for name in nc.dimensions if name in nc.variables
                  and "bounds" in nc[name].ncattrs()}
        for name in nc.dimensions:
            if name not in nc.variables:
                assert name == BOUNDS_DIM, (label, name)  # the one dimension without values
                continue
            coord = nc[name]
            # CF 7.1: a bounds variable takes its coordinate's units; every other has its own.
            assert "units" in coord.ncattrs() and coord.units.strip(), (label, name)
            assert "_FillValue" not in coord.ncattrs(), (label, name)  # CF 2.5.1
        for name in bounds:
            assert "units" not in nc[name].ncattrs() or nc[name].units == "1"
        for name, var in nc.variables.items():
            axis = getattr(var, "axis", None)
            if axis is not None:
                # CF 4: X and Y only on the spatial coordinate variables of the same name
                assert (name, axis) in (("x", "X"), ("y", "Y")), (label, name, axis)
                assert var.dimensions == (name,)
            # CF 4.4: a T axis or the standard name time requires units with a reference time
            if axis == "T" or getattr(var, "standard_name", None) == "time":
                assert re.match(r"^\w+ since \S+", var.units), (label, name, var.units)
        assert nc["x"].axis == "X"
        if "y" in nc.dimensions:
            assert nc["y"].axis == "Y"
        if "time" in nc.variables:
            time = nc["time"]
            assert time.long_name == "time"  # how cf_xarray finds the T axis
            assert "axis" not in time.ncattrs() and "standard_name" not in time.ncattrs()


def test_boundary_conditions_are_the_pdes(written):
    label, path, ds = written
    kinds = CASES[label][2]
    on_grid = [name for name, var in ds.data_vars.items() if _spatial(var)]
    assert on_grid
    found = boundary_conditions_of(ds)
    assert sorted(found) == sorted(on_grid)  # every variable on the grid, no other
    for name in on_grid:
        text = ds[name].attrs["boundary_conditions"]
        assert _GRAMMAR.match(text), text
        assert found[name] == {dim: kinds for dim in _spatial(ds[name])}
        assert list(found[name]) == _spatial(ds[name])  # in the variable's dimension order
        assert parse_boundary_conditions(text) == found[name]
    with netCDF4.Dataset(path) as nc:  # the text as stored, the same
        for name in on_grid:
            assert nc[name].boundary_conditions == ds[name].attrs["boundary_conditions"]


def test_vectors_link_the_velocity_components(written):
    label, _, ds = written
    if CASES[label][0] == "euler":
        assert vectors_of(ds) == {"velocity": {"y": "velocity_y", "x": "velocity_x"}}
        assert ds.velocity_x.attrs["vector_component"] == "x"
        assert ds.velocity_y.attrs["vector"] == "velocity"
    else:
        assert vectors_of(ds) == {}


def test_grid_placement_cell_methods_and_bounds(written):
    label, _, ds = written
    _, _, _, placement, averages, domain = CASES[label]
    for dim in ("y", "x"):
        if dim not in ds.coords:
            continue
        coord = ds[dim]
        assert coord.attrs[GRID_PLACEMENT] == placement
        values = coord.values
        assert np.all(np.diff(values) > 0)
        if domain is not None and placement == "nodes":
            assert values[0] == domain[0] and values[-1] == domain[1]
        if domain is not None and placement == "cell_centres":
            assert domain[0] < values[0] and values[-1] < domain[1]
        if averages:
            edges = ds[coord.attrs["bounds"]]
            assert edges.dims == (dim, BOUNDS_DIM)
            lower, upper = edges.values[:, 0], edges.values[:, 1]
            assert np.all(lower < values) and np.all(values < upper)
            np.testing.assert_array_equal(upper[:-1], lower[1:])  # contiguous cells
            assert (lower[0], upper[-1]) == domain  # that tile the domain
            np.testing.assert_allclose(0.5 * (lower + upper), values, rtol=0, atol=1e-15)
        else:
            assert "bounds" not in coord.attrs
    for name, var in ds.data_vars.items():
        if not _spatial(var):
            assert "cell_methods" not in var.attrs
        elif averages and var.attrs["role"] == "state":
            assert var.attrs["cell_methods"] == "y: x: mean"  # finite volumes: cell averages
        elif averages:
            assert var.attrs["cell_methods"] in ("y: x: point", "y: x: mean")
        else:
            assert "cell_methods" not in var.attrs  # point values


def test_cf_xarray_recognises_the_axes(written):
    cf_xarray = pytest.importorskip("cf_xarray")
    assert cf_xarray  # registers the ds.cf accessor
    label, path, _ = written
    with xr.open_dataset(path, decode_times=False) as raw:
        axes = raw.cf.axes
        assert axes["X"] == ["x"]
        assert axes.get("Y") == (["y"] if "y" in raw.dims else None)
        assert axes.get("T") == (["time"] if "time" in raw.dims else None)
        if CASES[label][4]:
            assert raw.cf.bounds["x"] == ["x_bounds"] and raw.cf.bounds["y"] == ["y_bounds"]
        # the bounds are coordinates for any xarray reader, never data variables
        assert not any(BOUNDS_DIM in var.dims for var in raw.data_vars.values())


def test_roles_and_grid_metadata_survive_netcdf_zarr_round_trips(written, tmp_path):
    label, path, ds = written
    there = convert(path, tmp_path / f"{label}.zarr")
    back = convert(there, tmp_path / f"{label}.nc")
    with load_dataset(there) as zarr_ds, load_dataset(back) as again:
        for copy in (zarr_ds, again):
            xr.testing.assert_identical(copy, ds)  # values and every attribute
            assert roles_of(copy) == roles_of(ds)
            assert boundary_conditions_of(copy) == boundary_conditions_of(ds)
            assert vectors_of(copy) == vectors_of(ds)
            assert set(copy.coords) == set(ds.coords)  # bounds stay coordinates
