"""Boundary conditions, vector components and grid placement in the schema (:mod:`ssmpde.data`)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

from ssmpde.data import (BOUNDARY_KINDS, SAMPLE, TIME, X, Y, SchemaError, boundary_conditions_of,
                         build_dataset, describe, format_boundary_conditions, grid_coordinates,
                         parse_boundary_conditions, sample_coordinate, spatial_coordinate,
                         time_coordinate, validate, vectors_of)

from .helpers import make_dataset

NON_PERIODIC = [k for k in BOUNDARY_KINDS if k != "periodic"]


def _euler_like(**build):
    """Two velocity components and a density on a 4 x 4 cell-centred grid with bounds."""
    shape = (1, 2, 4, 4)
    fields = {name: xr.DataArray(np.full(shape, value), dims=(SAMPLE, TIME, Y, X),
                                 attrs={"long_name": name, "units": "1", "role": "state",
                                        "cell_methods": "y: x: mean"})
              for value, name in enumerate(("density", "velocity_x", "velocity_y"))}
    coords = {SAMPLE: sample_coordinate(1), TIME: time_coordinate([0.0, 0.1]),
              **grid_coordinates(4, placement="cell_centres", bounds=True)}
    return build_dataset(fields, coords=coords, equation="euler", config={"seed": 0},
                         title="t", references="none", solver="fv", **build)


# -- the grammar ---------------------------------------------------------------------------

@given(st.dictionaries(st.sampled_from(["y", "x", "z_1"]),
                       st.one_of(st.just("periodic"),
                                 st.tuples(st.sampled_from(NON_PERIODIC),
                                           st.sampled_from(NON_PERIODIC))),
                       min_size=1))
def test_format_then_parse_round_trips(conditions):
    text = format_boundary_conditions(conditions)
    expected = {dim: (kinds, kinds) if isinstance(kinds, str) else kinds
                for dim, kinds in conditions.items()}
    assert parse_boundary_conditions(text) == expected
    assert list(parse_boundary_conditions(text)) == list(conditions)  # order kept
    assert format_boundary_conditions(parse_boundary_conditions(text)) == text


def test_parse_reads_one_kind_as_both_ends_and_two_as_lower_upper():
    assert parse_boundary_conditions("y: reflective x: dirichlet neumann") == {
        "y": ("reflective", "reflective"), "x": ("dirichlet", "neumann")}
    assert parse_boundary_conditions("  x:   outflow ") == {"x": ("outflow", "outflow")}
    assert format_boundary_conditions({"x": ("outflow", "outflow")}) == "x: outflow"


@pytest.mark.parametrize("text, words", [
    ("", "non-empty"),
    ("periodic", "start with 'periodic'"),
    ("x: wall", "unknown boundary kind 'wall'"),
    ("x:", "0 kinds"),
    ("x: dirichlet neumann outflow", "3 kinds"),
    ("x: periodic y: periodic x: periodic", "twice"),
    ("x: periodic dirichlet", "periodic dimension is periodic at both ends"),
    ("x: Dirichlet", "unknown boundary kind"),
], ids=["empty", "no-dim", "unknown", "no-kind", "three", "twice", "half-periodic", "case"])
def test_parse_refuses_bad_text_and_says_how_it_should_look(text, words):
    with pytest.raises(ValueError, match=words) as info:
        parse_boundary_conditions(text)
    assert "y: periodic x: dirichlet neumann" in str(info.value)


# -- written by build_dataset, read back -----------------------------------------------------

def test_build_dataset_writes_conditions_on_grid_variables_only():
    ds = make_dataset()  # no conditions given: none written (as in old files)
    assert boundary_conditions_of(ds) == {}
    coords = {name: ds[name] for name in ds.coords}
    variables = {name: ds[name] for name in ds.data_vars}
    new = build_dataset(variables, coords=coords, equation="x", config={}, title="t",
                        references="r", solver="s",
                        boundary_conditions={"y": "periodic", "x": ("outflow", "reflective")})
    assert boundary_conditions_of(new) == {
        "vorticity": {"y": ("periodic", "periodic"), "x": ("outflow", "reflective")}}
    assert new.vorticity.attrs["boundary_conditions"] == "y: periodic x: outflow reflective"
    assert "boundary_conditions" not in new.viscosity.attrs
    assert "boundary_conditions" not in variables["vorticity"].attrs  # inputs untouched


def test_a_variable_keeps_its_own_conditions():
    ds = make_dataset()
    variables = {name: ds[name] for name in ds.data_vars}
    variables["vorticity"] = variables["vorticity"].assign_attrs(
        boundary_conditions="y: neumann x: neumann")
    new = build_dataset(variables, coords={n: ds[n] for n in ds.coords}, equation="x",
                        config={}, title="t", references="r", solver="s",
                        boundary_conditions="periodic")
    assert new.vorticity.attrs["boundary_conditions"] == "y: neumann x: neumann"


def test_build_dataset_names_a_missing_dimension_or_component():
    ds = make_dataset()
    kwargs = dict(coords={n: ds[n] for n in ds.coords}, equation="x", config={}, title="t",
                  references="r", solver="s")
    variables = {name: ds[name] for name in ds.data_vars}
    with pytest.raises(ValueError, match=r"no kind for \['y'\] of variable 'vorticity'"):
        build_dataset(variables, boundary_conditions={"x": "periodic"}, **kwargs)
    with pytest.raises(ValueError, match="'velocity_x', which is not among"):
        build_dataset(variables, vectors={"velocity": {"x": "velocity_x"}}, **kwargs)


def test_vectors_of_groups_components_in_dimension_order():
    ds = _euler_like(boundary_conditions="outflow",
                     vectors={"velocity": {"x": "velocity_x", "y": "velocity_y"}})
    assert vectors_of(ds) == {"velocity": {"y": "velocity_y", "x": "velocity_x"}}
    assert boundary_conditions_of(ds)["density"] == {"y": ("outflow",) * 2, "x": ("outflow",) * 2}


@pytest.mark.parametrize("change, words", [
    (lambda ds: ds.velocity_y.attrs.pop("vector"), "needs both"),
    (lambda ds: ds.velocity_y.attrs.update(vector_component="x"),
     "more than one component along"),
    (lambda ds: ds.velocity_y.attrs.update(vector="momentum"), "no component along \\['y'\\]"),
    (lambda ds: ds.velocity_y.attrs.update(vector_component="z"), "its spatial dimensions"),
], ids=["half-tagged", "twice", "missing", "no-such-dim"])
def test_inconsistent_vectors_are_schema_errors(change, words):
    ds = _euler_like(vectors={"velocity": {"x": "velocity_x", "y": "velocity_y"}})
    change(ds)
    with pytest.raises(SchemaError, match=words):
        validate(ds)
    with pytest.raises(SchemaError, match=words):
        vectors_of(ds)


@pytest.mark.parametrize("text, words", [
    ("y: periodic", r"gives boundary conditions for \['y'\] but its spatial dimensions"),
    ("y: periodic x: wall", "unknown boundary kind 'wall'"),
    ("y: periodic x: periodic t: periodic", "spatial dimensions are"),
], ids=["missing-dim", "bad-kind", "extra-dim"])
def test_bad_conditions_are_schema_errors_with_a_fix(text, words):
    ds = make_dataset()
    ds.vorticity.attrs["boundary_conditions"] = text
    with pytest.raises(SchemaError, match=words) as info:
        validate(ds)
    assert "set ds['vorticity'].attrs['boundary_conditions']" in str(info.value)
    with pytest.raises(SchemaError):
        boundary_conditions_of(ds)


def test_old_files_without_the_metadata_still_validate_and_info_says_so():
    ds = make_dataset()
    for dim in (Y, X):
        del ds[dim].attrs["grid_placement"]
    assert validate(ds) is ds
    text = describe(ds)
    assert "missing on vorticity" in text and "regenerate it" in text
    assert "grid_placement=(missing)" in text
    assert "schema: ok" in text


def test_describe_lists_conditions_and_vectors():
    text = describe(_euler_like(boundary_conditions="periodic",
                                vectors={"velocity": {"x": "velocity_x", "y": "velocity_y"}}))
    assert "  velocity_x: y: periodic x: periodic" in text
    assert "vectors: velocity (y: velocity_y, x: velocity_x)" in text
    assert "x (x) float64 [0.125, 0.875] units=1 grid_placement=cell_centres" in text


# -- grid placement, cell methods and bounds -----------------------------------------------

def test_cell_centres_and_bounds_of_a_shifted_grid():
    coords = grid_coordinates((2, 4), length=(1.0, 2.0), placement="cell_centres",
                              origin=(-0.5, 1.0), bounds=True)
    np.testing.assert_array_equal(coords["x"].values, [1.25, 1.75, 2.25, 2.75])
    np.testing.assert_array_equal(coords["y"].values, [-0.25, 0.25])
    np.testing.assert_array_equal(coords["x_bounds"].values,
                                  [[1.0, 1.5], [1.5, 2.0], [2.0, 2.5], [2.5, 3.0]])
    assert coords["x"].attrs["bounds"] == "x_bounds"
    assert coords["x_bounds"].dims == ("x", "bounds")
    assert coords["y"].attrs["grid_placement"] == "cell_centres"
    nodes = grid_coordinates(3, ndim=1, endpoint=True)
    assert nodes["x"].attrs["grid_placement"] == "nodes" and list(nodes) == ["x"]


@pytest.mark.parametrize("kwargs, words", [
    (dict(placement="faces"), "placement must be one of nodes, cell_centres"),
    (dict(placement="cell_centres", endpoint=True), "endpoint=True"),
    (dict(bounds=True), "bounds=True with placement='cell_centres'"),
    (dict(origin=float("nan")), "origin must be a finite number"),
], ids=["placement", "endpoint", "bounds-of-nodes", "origin"])
def test_grid_coordinates_refuses_bad_placement(kwargs, words):
    with pytest.raises(ValueError, match=words):
        grid_coordinates(4, ndim=1, **kwargs)


def test_spatial_coordinate_refuses_bad_points():
    with pytest.raises(ValueError, match="strictly increasing"):
        spatial_coordinate("x", [0.0, 0.0])
    with pytest.raises(ValueError, match="spatial dimensions are 'y' and 'x'"):
        spatial_coordinate("t", [0.0])


@pytest.mark.parametrize("change, words", [
    (lambda ds: ds.x.attrs.update(grid_placement="faces"), "'grid_placement' = 'faces'"),
    (lambda ds: ds.x.attrs.update(bounds="x_edges"), "names bounds 'x_edges'"),
    (lambda ds: ds["x_bounds"].values.__setitem__((0, 1), 0.1), "do not contain the points"),
    (lambda ds: ds["x_bounds"].values.__setitem__((1, 0), 0.2), "overlap"),
    (lambda ds: ds.density.attrs.update(cell_methods="area: z: mean"), "names \\['z'\\]"),
    (lambda ds: ds.density.attrs.update(cell_methods="y: x:"), "is not '<dim>: "),
], ids=["placement", "dangling-bounds", "outside", "overlap", "cell-methods-dim",
        "cell-methods-grammar"])
def test_bad_grid_metadata_are_schema_errors(change, words):
    ds = _euler_like().copy(deep=True)
    change(ds)
    with pytest.raises(SchemaError, match=words):
        validate(ds)


def test_bounds_without_units_take_the_coordinates():
    ds = _euler_like()
    del ds["x_bounds"].attrs["units"]  # as xarray writes them (CF 7.1)
    assert validate(ds) is ds
    del ds["x"].attrs["units"]
    with pytest.raises(SchemaError, match="coordinate 'x' has no 'units'"):
        validate(ds)
