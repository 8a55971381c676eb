"""Tests for ssmpde.data.summary: describe, the text of ``ssmpde info``."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ssmpde.data import describe, save

from .helpers import FORMATS, make_dataset


# --------------------------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", FORMATS)
def test_describe_file(suffix, tmp_path):
    path = save(make_dataset(nsample=2, ntime=3, resolution=4), tmp_path / f"d.{suffix}")
    text = describe(path)
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
    text = describe(ds)
    assert "schema: problems" in text and "'viscosity' has no 'units'" in text


def test_describe_foreign_file(tmp_path):
    path = tmp_path / "foreign.nc"
    xr.Dataset({"t": ("lat", np.arange(3.0))}).to_netcdf(path)
    text = describe(path)
    assert "equation: (missing)" in text and "no 'sample' dimension" in text
