"""Writing ssmpde datasets in The Well's layout: the splits, the files, ``stats.yaml``."""

from __future__ import annotations

import json
import math
import numbers
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from .. import check_range
from ...outputs import atomic_path
from ...streaming import sample_blocks
from ...schema import SAMPLE, TIME, X, Y, validate
from .layout import (_GROUPS, _WELL_DIMS, _WELL_SUFFIXES, METADATA, SAMPLE_INDICES, SPLIT_FRACTIONS,
                     SPLITS, STATS_FILE, _files, _h5py)
from .plan import _Field, _float_dtype, _Plan, _plan
from .statistics import _Statistics


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------

def split_sizes(num_samples: int,
                fractions: Sequence[float] = SPLIT_FRACTIONS) -> tuple[int, int, int]:
    """How many samples :func:`export` puts in ``train``, ``valid`` and ``test``.

    The validation and test shares are rounded half up, and each split with a positive share
    gets at least one sample; the training split gets the rest. The samples go in their order:
    the first ones to ``train``, then ``valid``, then ``test``. With fewer samples than splits
    with a positive share, every sample goes to ``train``.

    Parameters
    ----------
    num_samples : int
        Number of samples in the dataset.
    fractions : sequence of three float
        Shares of ``train``, ``valid`` and ``test``: non-negative, finite, with a positive sum
        (they are divided by it).

    Returns
    -------
    tuple of int
        ``(train, valid, test)``, summing to ``num_samples``.

    Examples
    --------
    >>> split_sizes(10)
    (8, 1, 1)
    >>> split_sizes(3)
    (1, 1, 1)
    >>> split_sizes(20, (0.5, 0.5, 0.0))
    (10, 10, 0)
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) \
            or num_samples < 0:
        raise ValueError(f"num_samples must be a non-negative integer, got {num_samples!r}")
    shares = tuple(fractions)
    if len(shares) != len(SPLITS) or not all(
            isinstance(f, numbers.Real) and math.isfinite(f) and f >= 0 for f in shares) \
            or sum(shares) <= 0:
        raise ValueError(f"split fractions must be three non-negative numbers (train, valid, "
                         f"test) with a positive sum, e.g. {SPLIT_FRACTIONS}; got {fractions!r}")
    total = float(sum(shares))
    n = int(num_samples)
    if n < sum(1 for f in shares if f > 0):
        return n, 0, 0
    sizes = [0] + [0 if f == 0 else max(1, math.floor(n * f / total + 0.5)) for f in shares[1:]]
    if shares[0] > 0:
        sizes[0] = n - sizes[1] - sizes[2]
        while sizes[0] < 1:
            # valid and test rounded up past the total: give back from the larger one
            sizes[1 if sizes[1] >= sizes[2] else 2] -= 1
            sizes[0] += 1
    elif shares[1] > 0 and shares[2] > 0:
        sizes[2] = min(sizes[2], n - 1)
        sizes[1] = n - sizes[2]
    else:
        sizes[1 if shares[1] > 0 else 2] = n
    return sizes[0], sizes[1], sizes[2]


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------
def _strings(h5py, values: Sequence[str]) -> np.ndarray:
    return np.array(list(values), dtype=h5py.string_dtype())


def _field_block(ds: xr.Dataset, field: _Field, positions: range | None) -> np.ndarray:
    """The field's values for consecutive sample positions (or all, if it has no sample
    axis), in The Well's axis order: [sample?, time?, *space, component?]."""
    dims = [d for d in field.file_dims() if d != SAMPLE]
    lead = [] if positions is None else [SAMPLE]
    parts = []
    for name in field.variables:
        var = ds[name] if positions is None else ds[name].isel(
            {SAMPLE: slice(positions.start, positions.stop)})
        parts.append(np.asarray(var.transpose(*lead, *dims).values))
    return parts[0] if field.order == 0 else np.stack(parts, axis=-1)


def _write_file(h5py, path: pathlib.Path, ds: xr.Dataset, plan: _Plan, positions: np.ndarray,
                name: str, ndim: int, statistics: _Statistics | None) -> None:
    well_dims = _WELL_DIMS[ndim]
    n = len(positions)
    with h5py.File(path, "w") as f:
        f.attrs["dataset_name"] = name
        f.attrs["grid_type"] = "cartesian"
        f.attrs["n_spatial_dims"] = np.int64(ndim)
        f.attrs["n_trajectories"] = np.int64(n)
        f.attrs["simulation_parameters"] = _strings(h5py, plan.constants)
        for key, value in plan.constants.items():
            f.attrs[key] = value
        f.attrs[SAMPLE_INDICES] = np.asarray(ds[SAMPLE].values[positions], dtype=np.int64)
        f.create_dataset(METADATA, data=json.dumps(plan.metadata, sort_keys=True),
                         dtype=h5py.string_dtype())

        dimensions = f.create_group("dimensions")
        dimensions.attrs["spatial_dims"] = _strings(h5py, well_dims)
        time = dimensions.create_dataset("time", data=ds[TIME].values)
        time.attrs["sample_varying"] = np.bool_(False)
        time.attrs["time_varying"] = np.bool_(True)
        for dim in well_dims:
            coord = dimensions.create_dataset(dim, data=ds[dim].values)
            coord.attrs["sample_varying"] = np.bool_(False)
            coord.attrs["time_varying"] = np.bool_(False)

        boundaries = f.create_group("boundary_conditions")
        for group_name, entry in plan.boundaries.items():
            group = boundaries.create_group(group_name)
            group.attrs["bc_type"] = entry["bc_type"]
            group.attrs["associated_dims"] = _strings(h5py, [entry["dim"]])
            group.attrs["associated_fields"] = _strings(h5py, entry["fields"])
            group.attrs["sample_varying"] = np.bool_(False)
            group.attrs["time_varying"] = np.bool_(False)
            mask = np.zeros(ds.sizes[entry["dim"]], dtype=bool)
            for side in entry["sides"]:
                mask[0 if side == 0 else -1] = True
            group.create_dataset("mask", data=mask)

        scalars = f.create_group("scalars")
        scalars.attrs["field_names"] = _strings(h5py, [s.name for s in plan.scalars])
        for scalar in plan.scalars:
            var = ds[scalar.variable]
            lead = [d for d in (SAMPLE, TIME) if d in var.dims]
            extra = [d for d in var.dims if d not in (SAMPLE, TIME)]
            values = np.asarray(var.transpose(*lead, *extra).values)
            values = values[(slice(None),) * len(lead) + scalar.element]
            if scalar.sample_varying:
                values = values[positions]
            values = values.astype(plan.stored(var.dtype), copy=False)
            data = scalars.create_dataset(scalar.name, data=values)
            data.attrs["sample_varying"] = np.bool_(scalar.sample_varying)
            data.attrs["time_varying"] = np.bool_(scalar.time_varying)

        for order, group_name in enumerate(_GROUPS):
            group = f.create_group(group_name)
            members = [field for field in plan.fields if field.order == order]
            group.attrs["field_names"] = _strings(h5py, [field.name for field in members])
            for field in members:
                _write_field(group, ds, field, positions, well_dims, statistics,
                             plan.stored(ds[field.variables[0]].dtype))


def _write_field(group, ds: xr.Dataset, field: _Field, positions: np.ndarray,
                 well_dims: tuple[str, ...], statistics: _Statistics | None,
                 dtype: np.dtype) -> None:
    inner = tuple(ds.sizes[d] for d in field.file_dims() if d != SAMPLE)
    inner += (len(field.variables),) if field.order else ()
    options = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
    if field.sample_varying:
        shape = (len(positions),) + inner
        layout = {"chunks": (1,) + inner, **options} if all(shape) else {}
        data = group.create_dataset(field.name, shape=shape, dtype=dtype, **layout)
        first = int(positions[0]) if len(positions) else 0
        for block in sample_blocks(ds[field.variables[0]], first, first + len(positions)):
            values = _field_block(ds, field, block).astype(dtype, copy=False)
            data[block.start - first:block.stop - first] = values
            if statistics is not None:
                statistics.add(field, values, samples=True)
    else:
        block = _field_block(ds, field, None).astype(dtype, copy=False)
        data = group.create_dataset(field.name, data=block)
        if statistics is not None:
            statistics.add(field, block)
    data.attrs["dim_varying"] = np.array([d in field.well_dims for d in well_dims], dtype=bool)
    data.attrs["sample_varying"] = np.bool_(field.sample_varying)
    data.attrs["time_varying"] = np.bool_(field.time_varying)


def dataset_name(ds: xr.Dataset) -> str:
    """The ``dataset_name`` :func:`export` gives ``ds``: its equation in The Well's style
    (``navier-stokes`` → ``navier_stokes``); The Well's loaders only require it to be the same in
    every file of a dataset."""
    equation = str(ds.attrs.get("ssmpde_equation", "")).strip() or "ssmpde"
    return "".join(c if c.isalnum() else "_" for c in equation)


def is_export(path: str | os.PathLike) -> bool:
    """Whether the Well file or directory at ``path`` was written by :func:`export` (it
    carries the ``ssmpde_metadata`` dataset), so that ``overwrite`` may replace it."""
    try:
        first = _files(pathlib.Path(os.fspath(path)).expanduser())[0]
        h5py = _h5py()
        with h5py.File(first, "r") as f:
            return METADATA in f and "n_trajectories" in f.attrs
    except (OSError, ValueError, ImportError):
        return False


def export(ds: xr.Dataset, path: str | os.PathLike, *,
           splits: Sequence[float] = SPLIT_FRACTIONS, dtype: Any = None) -> list[str]:
    """Write ``ds`` in The Well's format, for The Well's ``WellDataset`` and ``WellDataModule``.

    Parameters
    ----------
    ds : xarray.Dataset
        An ssmpde dataset with a ``time`` dimension (1D or 2D grid).
    path : str or os.PathLike
        A directory (the dataset's directory: ``data/train``, ``data/valid``, ``data/test`` and
        ``stats.yaml`` go under it), or a file ending in ``.hdf5`` or ``.h5`` (all samples in
        that one file, no statistics). Whatever is at
        ``path`` must not exist yet; it appears whole or not at all (written under a temporary
        name). :func:`ssmpde.data.convert` adds the output policy (``overwrite``, locks).
    splits : sequence of three float
        Shares of the samples for ``train``, ``valid`` and ``test`` (see :func:`split_sizes`:
        contiguous blocks in sample order). The default ``(0.8, 0.1, 0.1)`` gives every split
        at least one sample once there are three, which ``WellDataModule`` needs.
    dtype : {None, "float32", "float64"}
        The dtype of the floating data variables (fields and scalars) in the files; None keeps
        the dataset's (float64 from the solvers). The Well's own files are float32, and its
        models (``the_well.benchmark.models``, float32 weights) refuse float64 input:
        ``"float32"`` for them. Coordinates keep their dtype.

    Returns
    -------
    list of str
        Notes on what The Well's schema cannot carry and where it went instead.

    Raises
    ------
    ValueError
        For a dataset without a ``time`` dimension (The Well holds time series: steady problems
        such as Darcy do not fit), a grid variable with extra dimensions, clashing names, bad
        ``splits``, or values ``dtype`` cannot hold (checked before anything is written).
    FileExistsError
        If ``path`` exists.
    ImportError
        Without h5py.

    Notes
    -----
    The notes say the dtype the values were written in. Each split is one file
    ``data/<split>/<name>.hdf5`` (``<name>``: :func:`dataset_name`, also the files'
    ``dataset_name`` attribute), the fields chunked one sample per chunk and compressed
    (gzip level 4, shuffle). ``stats.yaml`` holds ``mean``, ``std``,
    ``rms`` of every field over the training split (per component for vectors; population
    standard deviation) and ``mean_delta``, ``std_delta``, ``rms_delta`` of its increments
    between consecutive times, the keys The Well's ``ZScoreNormalization`` and
    ``RMSNormalization`` read.

    Examples
    --------
    >>> notes = export(ds, "ks_well")  # doctest: +SKIP
    >>> from the_well.data import WellDataset  # doctest: +SKIP
    >>> WellDataset(path="ks_well", well_split_name="train", n_steps_input=4)  # doctest: +SKIP
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"expected an xarray.Dataset, got {type(ds).__name__}")
    cast = _float_dtype(dtype)
    validate(ds)
    if TIME not in ds.dims:
        equation = ds.attrs.get("ssmpde_equation", "this")
        raise ValueError(f"The Well holds time series (every file has a time axis and its "
                         f"loaders cut input/output windows along it), but the {equation} "
                         "dataset has no 'time' dimension (a steady problem such as Darcy): "
                         "export it to netCDF, zarr or PDEBench instead")
    if X not in ds.dims:
        raise ValueError("The Well export needs a grid: the dataset has no 'x' dimension")
    if ds.sizes[SAMPLE] == 0:
        raise ValueError("the dataset has no samples: The Well's files hold at least one "
                         "trajectory; export a dataset with samples")
    ndim = 2 if Y in ds.dims else 1
    sizes = split_sizes(ds.sizes[SAMPLE], splits)
    target = pathlib.Path(os.fspath(path)).expanduser()
    if target.exists() or target.is_symlink():
        raise FileExistsError(f"'{target}' already exists: export writes a new file or "
                              "directory (ssmpde.data.convert(..., overwrite=True) replaces an "
                              "earlier export)")
    single = target.suffix.lower() in _WELL_SUFFIXES
    name = dataset_name(ds)
    plan = _plan(ds, ndim, cast)
    if cast is not None:
        check_range(ds, cast, advice="Leave out dtype (--dtype) to keep the dataset's "
                                     "precision, or rescale the variable (other units)")
    h5py = _h5py()
    notes = list(plan.notes)
    with atomic_path(target) as tmp:
        if single:
            _write_file(h5py, tmp, ds, plan, np.arange(ds.sizes[SAMPLE]), name, ndim, None)
            notes.append(f"one file with all {ds.sizes[SAMPLE]} samples and no {STATS_FILE}: "
                         "export to a directory for The Well's train/valid/test layout")
            return notes
        tmp.mkdir()
        statistics = _Statistics(plan.fields)
        start = 0
        for split, size in zip(SPLITS, sizes):
            positions = np.arange(start, start + size)
            start += size
            if not size:
                continue
            folder = tmp / "data" / split
            folder.mkdir(parents=True)
            _write_file(h5py, folder / f"{name}.hdf5", ds, plan, positions, name, ndim,
                        statistics if split == "train" else None)
        (tmp / STATS_FILE).write_text(statistics.yaml())
    summary = ", ".join(f"{size} {split}" for split, size in zip(SPLITS, sizes))
    notes.append(f"samples in sample order: {summary}")
    empty = [split for split, size in zip(SPLITS, sizes) if not size]
    if empty:
        notes.append(f"no samples in {', '.join(empty)}: The Well's WellDataModule needs "
                     "files in train, valid and test (at least three samples)")
    if not sizes[0]:
        notes.append(f"no training samples: {STATS_FILE} is empty")
    return notes
