"""Small datasets and file checks shared by the tests of :mod:`ssmpde.data`."""

from __future__ import annotations

import pathlib

import numpy as np
import xarray as xr

from ssmpde.data import (SAMPLE, SPATIAL_DIMS, TIME, build_dataset, grid_coordinates,
                         sample_coordinate, time_coordinate)

FORMATS = ("nc", "zarr")


def make_dataset(*, nsample=2, ntime=3, resolution=4, ndim=2, dtype=np.float64, config=None,
                 seed=0):
    """A small valid dataset: a field, a per-sample parameter, and a forcing with an extra dim."""
    rng = np.random.default_rng(seed)
    spatial = SPATIAL_DIMS[ndim]
    shape = (nsample, ntime) + (resolution,) * ndim
    field = xr.DataArray(rng.standard_normal(shape).astype(dtype), dims=(SAMPLE, TIME, *spatial),
                         attrs={"long_name": "vorticity", "units": "s-1"})
    viscosity = xr.DataArray(rng.uniform(1e-4, 1e-2, nsample), dims=(SAMPLE,),
                             attrs={"long_name": "kinematic viscosity", "units": "m2 s-1"})
    forcing = xr.DataArray(rng.standard_normal((nsample, 2)), dims=(SAMPLE, "forcing_mode"),
                           attrs={"long_name": "forcing amplitudes", "units": "s-2"})
    if config is None:
        config = {"seed": seed, "resolution": resolution, "solver": {"dt": 1e-3, "order": 4}}
    return build_dataset(
        {"vorticity": field, "viscosity": viscosity, "forcing": forcing},
        coords={SAMPLE: sample_coordinate(nsample),
                TIME: time_coordinate(np.arange(ntime) * 0.5, units="s"),
                **grid_coordinates(resolution, ndim=ndim)},
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
