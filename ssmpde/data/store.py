"""Zarr stores written in parallel (the dask workers of ``ssmpde generate --workers``).

:func:`create_store` lays the store out with every sample still missing and a
:class:`~ssmpde.data.StoreProgress` record; each worker fills its own samples with
:func:`write_store_region`; the one driver records finished sample ranges with
:func:`update_store_progress`; :func:`finish_store` marks the store complete, after which it
reads like one :func:`ssmpde.data.save` wrote. Readers refuse a store that still has a progress
record. See ``docs/scale-out.md``.
"""

from __future__ import annotations

import os
import pathlib
import re

import numpy as np
import xarray as xr

from .files import (
    ZARR_FORMAT,
    ZARR_SUFFIXES,
    _check_storable_attrs,
    _zarr_encoding,
    format_of_suffix,
)
from .outputs import atomic_path
from .progress import PROGRESS_ATTR, StoreProgress, store_progress
from .schema import SAMPLE, DatasetFileError
from .validation import _raise_if_invalid

__all__ = ["create_store", "finish_store", "update_store_progress", "write_store_region"]

# Temporaries zarr's LocalStore writes before renaming a chunk or metadata file into place: a
# worker killed during a write leaves one (the chunk itself is rewritten on resume).
_ZARR_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")
# Sample coordinates are written in blocks of this many values, so a layout never holds all.
_COORDINATE_BLOCK = 2 ** 20


def _zarr_group(path: pathlib.Path, mode: str):
    import zarr  # imported here: only the parallel-store functions talk to zarr directly

    return zarr.open_group(path, mode=mode, zarr_format=ZARR_FORMAT)


def _array(group, name: str):
    """An array of ``group`` that writes every chunk, zeros included: readers take a missing
    chunk for damage (see :func:`ssmpde.data.files._zarr_encoding`)."""
    return group[name].with_config({"write_empty_chunks": True})


def create_store(template: xr.Dataset, path: str | os.PathLike,
                 progress: StoreProgress) -> pathlib.Path:
    """Lay out a zarr store for parallel writers, every sample still missing.

    Parameters
    ----------
    template : xarray.Dataset
        The finished dataset's structure: coordinates (``sample`` included, ``0 .. n-1``),
        attributes, and data variables of the final shape and dtype whose values are never
        read (lazy placeholders such as ``dask.array.empty`` with one chunk). The ``sample``
        coordinate may be a dask array without an index, so a huge layout holds no sample
        list in memory.
    path : str or os.PathLike
        The ``.zarr`` target. Whatever is there is replaced (the caller checks the output
        policy, :func:`check_output`, under :func:`output_lock`).
    progress : StoreProgress
        The record to start with, stored in the :data:`PROGRESS_ATTR` attribute.

    Returns
    -------
    pathlib.Path
        The store.

    Notes
    -----
    Same layout as :func:`save` (zarr format 2, one sample per chunk, no fill value), so a
    finished store reads exactly like one :func:`save` wrote. Nothing but metadata and
    coordinates is written: the chunks of unwritten samples are absent until their samples
    are written (readers of the unfinished store, ``ssmpde info``, look at the finished
    samples only), and readers refuse the store while :data:`PROGRESS_ATTR` is present.
    Every chunk is written, zeros included, so that an absent chunk of a finished sample is
    damage (:func:`ssmpde.data.integrity.missing_chunks`). The layout is made under
    a temporary name and renamed into place, so ``path`` is either absent or fully laid out.
    """
    target = pathlib.Path(os.fspath(path)).expanduser()
    if format_of_suffix(target) != "zarr":
        raise ValueError(f"'{target}': parallel writes go to a zarr store; use a "
                         f"{ZARR_SUFFIXES[0]} path")
    _check_storable_attrs(template)
    _raise_if_invalid(template)
    if template.sizes.get(SAMPLE) != progress.num_samples:
        raise ValueError(f"the template has {template.sizes.get(SAMPLE)} samples, the progress "
                         f"record {progress.num_samples}")
    layout = template.drop_encoding().assign_attrs({PROGRESS_ATTR: progress.to_json()})
    with atomic_path(target) as tmp:
        # compute=False: metadata and in-memory coordinates only; the placeholders' values and
        # dask-backed coordinates are never computed by xarray.
        layout.to_zarr(tmp, mode="w-", zarr_format=ZARR_FORMAT, consolidated=False,
                       encoding=_zarr_encoding(layout), compute=False, write_empty_chunks=True)
        group = _zarr_group(tmp, "r+")
        for name, coord in layout.coords.items():
            if coord.chunks is None:
                continue
            array = _array(group, name)
            for start in range(0, coord.shape[0], _COORDINATE_BLOCK):
                block = coord.data[start:start + _COORDINATE_BLOCK]
                # here, never on a dask cluster that happens to be the default scheduler
                array[start:start + block.shape[0]] = block.compute(scheduler="synchronous")
    return target


def update_store_progress(path: str | os.PathLike, progress: StoreProgress) -> None:
    """Replace the progress record of a store being written (one driver calls this).

    The root attributes are rewritten whole through a temporary file (zarr's local store
    renames it into place), so a reader or a killed driver never sees half a record.
    """
    target = pathlib.Path(os.fspath(path)).expanduser()
    _zarr_group(target, "r+").attrs[PROGRESS_ATTR] = progress.to_json()


def write_store_region(ds: xr.Dataset, path: str | os.PathLike, *, run_id: str) -> None:
    """Write the samples of ``ds`` into their region of a store being written.

    Parameters
    ----------
    ds : xarray.Dataset
        Consecutive samples ``start .. stop-1`` (its ``sample`` coordinate) with every data
        variable of the store, each of the store's per-sample shape and dtype.
    path : str or os.PathLike
        A store made by :func:`create_store`, on a file system this process sees.
    run_id : str
        The :attr:`StoreProgress.run_id` the samples were computed for.

    Raises
    ------
    DatasetFileError
        If there is no store being written at ``path`` (not on a shared file system, already
        finished), it belongs to another run, or ``ds`` does not match its layout. Nothing is
        written then.

    Notes
    -----
    Regions are whole chunks (one sample each), so concurrent writers of different samples
    never touch the same file, and writing the same samples twice writes the same bytes.
    Each chunk file is written to a temporary and renamed, so a killed writer leaves the old
    chunk or the new one, never half of one. Values pass unchanged (no fill value, no scaling):
    the bytes are those :func:`save` writes.
    """
    target = pathlib.Path(os.fspath(path)).expanduser()
    progress = store_progress(target)
    if progress is None:
        raise DatasetFileError(
            f"there is no zarr store being written at '{target}' on this machine: put the "
            "output on a file system that every dask worker shares with the driver, at the "
            "same path")
    if progress.run_id != run_id:
        raise DatasetFileError(f"'{target}' was laid out again by another run (--overwrite) "
                               "after this batch was scheduled: not writing it")
    indices = np.asarray(ds[SAMPLE].values)
    start = int(indices[0]) if indices.size else 0
    stop = start + indices.size
    if not indices.size or not np.array_equal(indices, np.arange(start, stop)) \
            or stop > progress.num_samples:
        raise DatasetFileError(f"samples {indices.tolist()[:8]} are not a run of consecutive "
                               f"indices inside 0..{progress.num_samples - 1}")
    # zarr directly, one array at a time: a reader that lists the store's members (xarray
    # does) would trip over the temporary of a progress update the driver is writing.
    group = _zarr_group(target, "r+")
    arrays, problems = {}, []
    for name, var in ds.data_vars.items():
        try:
            array = _array(group, name)
        except KeyError:
            problems.append(f"the store has no variable '{name}'")
            continue
        dims = tuple(array.attrs.get("_ARRAY_DIMENSIONS", ()))
        if dims != var.dims or array.shape[1:] != var.shape[1:] or array.dtype != var.dtype:
            problems.append(f"'{name}' is {var.dims} {var.shape[1:]} {var.dtype} per batch, "
                            f"the store has {dims} {array.shape[1:]} {array.dtype}")
        arrays[name] = array
    if problems:
        raise DatasetFileError(f"samples {start}..{stop - 1} do not fit the layout of "
                               f"'{target}': {'; '.join(problems)}")
    for name, array in arrays.items():
        array[start:stop] = np.asarray(ds[name].values)


def finish_store(path: str | os.PathLike) -> pathlib.Path:
    """Mark a store whose samples are all written complete.

    Removes what killed writers left (zarr's ``*.partial`` temporaries), deletes the progress
    record, then consolidates the metadata, after which the store reads like one :func:`save`
    wrote. Each step can be repeated, so a driver killed in between finishes on its rerun.

    Raises
    ------
    ValueError
        If the progress record still lists missing samples.
    """
    target = pathlib.Path(os.fspath(path)).expanduser()
    progress = store_progress(target)
    if progress is not None:
        if not progress.is_complete:
            raise ValueError(f"'{target}' is not finished: {progress.summary()}")
        for root, _, names in os.walk(target):
            for name in names:
                if _ZARR_PARTIAL.search(name):
                    (pathlib.Path(root) / name).unlink(missing_ok=True)
        group = _zarr_group(target, "r+")
        del group.attrs[PROGRESS_ATTR]
    import zarr

    zarr.consolidate_metadata(target, zarr_format=ZARR_FORMAT)
    return target
