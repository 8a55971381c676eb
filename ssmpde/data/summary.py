"""Describing a dataset for people: :func:`describe`, the text of ``ssmpde info``."""

from __future__ import annotations

import json
import os
import pathlib
import warnings
from typing import Any

import netCDF4
import numpy as np
import xarray as xr

from ssmpde.core import format_bytes

from . import formats
from .reading import _open_dataset
from .integrity import STORED_DIMS
from .progress import PROGRESS_ATTR, store_progress
from .streaming import stream_chunks
from .schema import (
    BOUNDARY_CONDITIONS,
    GRID_PLACEMENT,
    SAMPLE,
    X,
    Y,
    SchemaError,
    config_of,
    vectors_of,
)
from .validation import _count_nonfinite, _raise_if_invalid

__all__ = ["describe"]


def _disk_size(path: pathlib.Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum((pathlib.Path(root) / name).lstat().st_size  # a link counts as itself
               for root, _, names in os.walk(path) for name in names)


def _file_format(path: pathlib.Path) -> str:
    foreign = formats.sniff(path)
    if foreign is not None:
        return f"{foreign.NAME} ({foreign.DESCRIPTION})"
    if path.is_dir():
        return "zarr (format 3)" if (path / "zarr.json").is_file() else "zarr (format 2)"
    with netCDF4.Dataset(path) as nc:
        return f"netCDF ({nc.data_model})"


def _number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (float, np.floating)) else str(value)


def _value_range(var: xr.DataArray) -> str:
    if var.size == 0:
        return "(empty)"
    if var.dtype.kind not in "iuf":
        return ""
    with warnings.catch_warnings():
        # All-NaN variables are worth describing, not warning about.
        warnings.simplefilter("ignore", RuntimeWarning)
        values = xr.Dataset({"min": var.min(skipna=True), "max": var.max(skipna=True)})
        values = values.compute()
    return f"[{_number(values['min'].item())}, {_number(values['max'].item())}]"


def _summary(ds: xr.Dataset) -> list[str]:
    lines = [f"equation: {ds.attrs.get('ssmpde_equation', '(missing)')}",
             "dimensions: " + (", ".join(f"{dim}={size}" for dim, size in ds.sizes.items())
                               or "(none)"),
             "coordinates:"]
    for name, coord in ds.coords.items():
        placement = (f" {GRID_PLACEMENT}={coord.attrs.get(GRID_PLACEMENT, '(missing)')}"
                     if name in (Y, X) else "")
        lines.append(f"  {name} ({', '.join(map(str, coord.dims))}) {coord.dtype} "
                     f"{_value_range(coord)} units={coord.attrs.get('units', '(missing)')}"
                     f"{placement}")
    lines.append("data variables:")
    for name, var in ds.data_vars.items():
        stats = _value_range(var)
        if var.dtype.kind in "fc" and var.size:
            bad = _count_nonfinite(var)
            stats += f" non-finite={bad}" if bad else ""
        stored = var.encoding.get(STORED_DIMS)
        order = f" (stored as ({', '.join(map(str, stored))}), read by name)" if stored else ""
        lines.append(f"  {name} ({', '.join(map(str, var.dims))}) {var.dtype} "
                     f"units={var.attrs.get('units', '(missing)')} "
                     f"long_name={var.attrs.get('long_name', '(missing)')!r} min/max={stats}"
                     f"{order}")
    lines.extend(_grid_metadata(ds))
    lines.append("global attributes:")
    for key, value in ds.attrs.items():
        if key not in ("ssmpde_config", PROGRESS_ATTR):
            lines.append(f"  {key}: {value}")
    lines.append("config:")
    try:
        config = json.dumps(config_of(ds), indent=2, sort_keys=True)
    except SchemaError as exc:
        config = f"(unavailable: {exc.problems[0]})"
    lines.extend("  " + line for line in config.splitlines())
    try:
        _raise_if_invalid(ds)
        lines.append("schema: ok")
    except SchemaError as exc:
        lines.append("schema: problems")
        lines.extend(f"  - {problem}" for problem in exc.problems)
    return lines


def _grid_metadata(ds: xr.Dataset) -> list[str]:
    """Boundary conditions and vectors, and which variables on a grid lack them."""
    on_grid = [name for name, var in ds.data_vars.items() if {Y, X} & set(var.dims)]
    if not on_grid:
        return []
    lines = ["boundary conditions:"]
    missing = []
    for name in on_grid:
        text = ds[name].attrs.get(BOUNDARY_CONDITIONS)
        if text is None:
            missing.append(name)
        else:
            lines.append(f"  {name}: {text}")
    if missing:
        lines.append(f"  (missing on {', '.join(missing)}: the file was written before ssmpde "
                     "recorded boundary conditions; regenerate it, or set the "
                     f"'{BOUNDARY_CONDITIONS}' attribute, e.g. 'y: periodic x: periodic')")
    try:
        vectors = vectors_of(ds)
    except SchemaError as exc:
        lines.append(f"vectors: (inconsistent: {exc.problems[0]})")
    else:
        if vectors:
            lines.append("vectors: " + "; ".join(
                f"{vector} ({', '.join(f'{dim}: {var}' for dim, var in parts.items())})"
                for vector, parts in vectors.items()))
    return lines


def describe(path_or_ds: str | os.PathLike | xr.Dataset) -> str:
    """Return a human-readable summary of a dataset file, store or in-memory dataset.

    Parameters
    ----------
    path_or_ds : str, os.PathLike or xarray.Dataset
        A netCDF file, a zarr store, or a dataset.  Files are described even if they break the
        schema; the problems are listed at the end.

    Returns
    -------
    str
        Several lines: path, format, size, equation, dimensions with sizes, coordinates (range
        and units), data variables (dims, dtype, units, long_name, min/max), global attributes,
        the pretty-printed config and the schema verdict. A zarr store still being written
        gets a ``status:`` line (how many batches and samples are complete), and the rest
        describes its complete samples only.

    Notes
    -----
    Minima and maxima read every value; files are read through in dask chunks of many samples
    (:func:`ssmpde.data.streaming.stream_chunks`, about 16 MiB each), so memory stays bounded
    on large datasets and a file of millions of tiny samples is a few dozen reads.

    Examples
    --------
    >>> print(describe("navier_stokes.nc"))  # doctest: +SKIP
    """
    if isinstance(path_or_ds, xr.Dataset):
        ds = path_or_ds
        source = ds.encoding.get("source")
        header = [f"path: {source if source else '(in memory)'}", "format: xarray.Dataset",
                  f"size uncompressed: {format_bytes(ds.nbytes)}"]
        return "\n".join(header + _summary(ds))
    path = pathlib.Path(os.fspath(path_or_ds)).expanduser()
    progress = store_progress(path)
    with warnings.catch_warnings():
        # Listing a store while its driver updates the progress record can meet the
        # temporary of that update, which zarr warns about; it is gone a moment later.
        warnings.filterwarnings("ignore", message=r"Object at .*\.partial is not recognized")
        opened = _open_dataset(path, validate=False, chunks=None, in_progress=True)
    with opened:
        ds = opened.chunk(stream_chunks(opened))
        header = [f"path: {path}", f"format: {_file_format(path)}",
                  f"size on disk: {format_bytes(_disk_size(path))}"]
        if progress is None:
            return "\n".join(header + _summary(ds))
        header.append(f"status: being written, {progress.summary()}; rerun its `ssmpde "
                      "generate` command to resume it. Below: the complete samples only.")
        written = [np.arange(start, stop) for start, stop in progress.complete]
        indices = np.concatenate(written) if written else np.arange(0)
        return "\n".join(header + _summary(ds.isel({SAMPLE: indices})))
