"""The format of a third-party package, for the tests: a directory holding one netCDF file and a
marker file.

Installed by :func:`tests.data.plugin_format.install` as the top-level module
``ssmpde_toy_format``, outside ssmpde, and found through its entry point alone.
"""

from __future__ import annotations

import pathlib

import xarray as xr

NAME = "toy"
DESCRIPTION = "a directory holding one netCDF file (test only)"
#: The file that marks a directory as in this format.
MARKER = "toy-format"


def sniff(path: pathlib.Path) -> bool:
    return path.is_dir() and (path / MARKER).is_file()


def open(path: pathlib.Path, chunks) -> xr.Dataset:  # noqa: A001 (the interface's name)
    return xr.open_dataset(path / "inner.nc", engine="netcdf4", chunks=chunks,
                           decode_times=False)


def export(ds: xr.Dataset, path: pathlib.Path) -> list[str]:
    if "y" in ds.dims:
        raise ValueError("the toy format holds 1D PDEs only")
    path.mkdir()
    (path / MARKER).write_text("")
    ds.to_netcdf(path / "inner.nc", engine="netcdf4")
    return ["toy keeps everything but says so"]


def conventional_name(ds: xr.Dataset) -> str:
    return "toy-dataset"


def is_export(path: pathlib.Path) -> bool:
    return (path / "inner.nc").is_file()
