"""Reading dataset files: :func:`open_dataset` and :func:`load_dataset`, which validate.

A directory is read as a zarr store (one still being written is refused), anything else as
netCDF4, and a file or directory in a foreign format (:mod:`ssmpde.data.formats`) through that
format's reader. Values are read through :mod:`ssmpde.data.integrity`'s guarded backends, so a
damaged chunk is an error that names the file, the variable and the sample.

Notes
-----
Time is a plain number with plain units (``"1"``, ``"s"``, ...), never a calendar date, so files
are always opened with ``decode_times=False`` and ``decode_timedelta=False``: the ``time``
coordinate comes back with the dtype, values and ``units`` attribute it was written with.
"""

from __future__ import annotations

import errno
import os
import pathlib
import stat
from typing import Any

import xarray as xr

from . import formats
from .integrity import (GuardedNetCDF4Backend, GuardedZarrBackend, guard, missing_chunks,
                        missing_chunks_error)
from .progress import store_progress
from .schema import SAMPLE, DatasetFileError
from .validation import _raise_if_invalid

__all__ = ["check_path", "load_dataset", "open_dataset"]

# Never decode numbers into dates or durations: ssmpde time is a plain number with plain units.
_DECODE_KWARGS = {"decode_times": False, "decode_timedelta": False}
# What a backend raises for a file it cannot parse; wrapped into DatasetFileError.
_READ_ERRORS = (OSError, ValueError, RuntimeError, KeyError)


def _is_zarr_store(path: pathlib.Path) -> bool:
    return any((path / marker).is_file() for marker in (".zgroup", ".zmetadata", "zarr.json"))


def _open_foreign(foreign, path: pathlib.Path, chunks: Any) -> xr.Dataset:
    """A foreign format's file, its reads guarded like ours (before dask wraps them)."""
    ds = guard(foreign.open(path, None), str(path), kind=f"{foreign.NAME} file")
    if chunks is None:
        return ds
    return ds.chunk({SAMPLE: 1} if chunks == {} and SAMPLE in ds.dims else chunks)


def check_path(path: pathlib.Path) -> None:
    """Refuse a path that holds no dataset before anything opens it: nothing there, a
    symbolic link that leads nowhere (dangling, or a loop), a FIFO (opening one waits for a
    writer forever), a socket or a device. Every reader calls it, the xarray engines of the
    foreign formats too.

    Raises
    ------
    FileNotFoundError
        If nothing exists at ``path``.
    DatasetFileError
        For a link that leads nowhere, or anything but a file or a directory.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        if not path.is_symlink():
            raise FileNotFoundError(f"no dataset at '{path}': no such file or zarr store "
                                    "(check the path)") from None
        raise DatasetFileError(f"'{path}' is a symbolic link to '{os.readlink(path)}', which "
                               "does not exist: fix or remove the link, or give the path of "
                               "the dataset itself") from None
    except OSError as error:
        if error.errno == errno.ELOOP:  # the link resolves through itself
            raise DatasetFileError(f"'{path}' is a symbolic link that leads back to itself (a "
                                   "loop): fix or remove the link, or give the path of the "
                                   "dataset itself") from None
        raise DatasetFileError(f"cannot read '{path}': {error.strerror}") from None
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        # Opening a FIFO waits for a writer forever; a device or socket is no dataset either.
        raise DatasetFileError(f"'{path}' is not a regular file (a FIFO, socket or device): "
                               "ssmpde reads datasets from files and zarr directories; give "
                               "the path of the dataset itself")


def _open(path: pathlib.Path, chunks: Any, *, in_progress: bool = False) -> xr.Dataset:
    """Open without validation; a store still being written only with ``in_progress``.

    Values are read through :mod:`ssmpde.data.integrity`'s backends: read errors name the
    variable and sample, data variables come in the schema's dimension order.
    """
    check_path(path)
    if path.is_dir():
        if not _is_zarr_store(path):
            foreign = formats.sniff(path)
            if foreign is not None:
                return _open_foreign(foreign, path, chunks)
            known = ", ".join(formats.known_formats())
            raise DatasetFileError(f"cannot read '{path}' as a zarr store: it is a directory "
                                   "without zarr metadata (.zgroup or zarr.json), nor one of "
                                   f"the foreign formats ssmpde reads ({known}). Regenerate "
                                   "it or check the path.")
        progress = store_progress(path)
        if progress is not None and not in_progress:
            raise DatasetFileError(
                f"'{path}' is a zarr store still being written ({progress.summary()}), not a "
                "finished dataset: wait for its run to finish, or rerun the same `ssmpde "
                f"generate` command to resume it (`ssmpde info {path}` shows its state)")
        # Ask for consolidated metadata only where it is known to exist (format 2) or may exist
        # (format 3 keeps it inside zarr.json), so xarray does not warn about a fallback.
        if (path / ".zmetadata").is_file():
            consolidated: bool | None = True
        elif (path / "zarr.json").is_file():
            consolidated = None
        else:
            consolidated = False
        try:
            return xr.open_dataset(path, engine=GuardedZarrBackend, chunks=chunks,
                                   consolidated=consolidated, **_DECODE_KWARGS)
        except _READ_ERRORS as exc:
            raise DatasetFileError(f"cannot read '{path}' as a zarr store: it is incomplete, "
                                   f"corrupt or not zarr (underlying error: {exc}). Regenerate "
                                   "it or check the path.") from exc
    sniffed = False
    if path.suffix.lower() in formats.HDF5_SUFFIXES:
        # Named as plain HDF5: most likely another tool's layout, so its sniffer looks first.
        foreign = formats.sniff(path)
        if foreign is not None:
            return _open_foreign(foreign, path, chunks)
        sniffed = True
    try:
        ds = xr.open_dataset(path, engine=GuardedNetCDF4Backend, chunks=chunks,
                             **_DECODE_KWARGS)
    except _READ_ERRORS as exc:
        foreign = None if sniffed else formats.sniff(path)
        if foreign is not None:
            return _open_foreign(foreign, path, chunks)
        raise DatasetFileError(f"cannot read '{path}' as a netCDF4 file: it is truncated, "
                               f"corrupt or not netCDF (underlying error: {exc}). Regenerate "
                               "it or check the path.") from exc
    if "ssmpde_equation" in ds.attrs or sniffed:
        return ds
    # Readable as netCDF (every HDF5 file is) but not ours: another tool's layout?
    foreign = formats.sniff(path)
    if foreign is None:
        return ds
    ds.close()
    return _open_foreign(foreign, path, chunks)


def open_dataset(path: str | os.PathLike, *, validate: bool = True,
                 chunks: Any = None) -> xr.Dataset:
    """Open a dataset lazily: values are read from disk only when used.

    Parameters
    ----------
    path : str or os.PathLike
        A directory is read as a zarr store, anything else as netCDF.
    validate : bool
        Check the schema and raise :class:`SchemaError` naming what is missing.
    chunks : optional
        Passed to :func:`xarray.open_dataset`: None for lazily indexed NumPy-backed
        variables, ``{}`` for dask arrays with the file's own chunks (one sample each).

    Returns
    -------
    xarray.Dataset
        Keeps the file open; close it with ``ds.close()`` or a ``with`` block.

    Raises
    ------
    FileNotFoundError
        If nothing exists at ``path``.
    DatasetFileError
        If the file or store cannot be read (truncated, corrupt, not netCDF/zarr).
    SchemaError
        If ``validate`` and the contents break the schema.

    Notes
    -----
    Times are never decoded into dates or durations (``decode_times=False``,
    ``decode_timedelta=False``), so ``time`` keeps its dtype and its ``units`` attribute.
    A zarr store must hold every chunk its metadata promise: a missing one is a
    :class:`DatasetFileError` here (zarr would read it as zeros). Corruption inside chunks
    shows when the values are read, lazily or not: a :class:`DatasetFileError` that names the
    file, the variable and the sample (and the zarr chunk). Data variables come in the
    schema's dimension order (``sample``, ``time``, others, ``y``, ``x``) whatever order the
    file stores them in, transposed by name; ``encoding["ssmpde_stored_dims"]`` keeps the
    stored order. :func:`ssmpde.data.check_file` reads every chunk.
    """
    return _open_dataset(pathlib.Path(os.fspath(path)).expanduser(), validate=validate,
                         chunks=chunks)


def _open_dataset(source: pathlib.Path, *, validate: bool, chunks: Any,
                  in_progress: bool = False, check_chunks: bool = True) -> xr.Dataset:
    """Open, refuse object arrays, check that a zarr store has every chunk its metadata
    promise (``check_chunks``; a store being written: those of its finished samples), and
    validate."""
    ds = _open(source, chunks, in_progress=in_progress)
    try:
        objects = [name for name, var in ds.variables.items() if var.dtype == object]
        if objects:
            raise DatasetFileError(f"'{source}' holds object-dtype arrays {objects}: ssmpde "
                                   "datasets hold numbers only, and object arrays can run code "
                                   "when read. Regenerate the dataset.")
        if check_chunks and _is_zarr_store(source):
            progress = store_progress(source)
            missing, totals = missing_chunks(
                source, ds, complete=None if progress is None else progress.complete)
            if missing:
                raise missing_chunks_error(source, missing, totals)
        if validate:
            _raise_if_invalid(ds, subject=f"dataset '{source}'")
    except BaseException:
        ds.close()
        raise
    return ds


def load_dataset(path: str | os.PathLike, *, validate: bool = True) -> xr.Dataset:
    """Read a dataset fully into memory and close the file.

    Parameters
    ----------
    path : str or os.PathLike
        A directory is read as a zarr store, anything else as netCDF.
    validate : bool
        Check the schema (before reading the values) and raise :class:`SchemaError`.

    Returns
    -------
    xarray.Dataset
        NumPy-backed; the file is closed, so it may be overwritten or deleted.

    Raises
    ------
    FileNotFoundError, DatasetFileError, SchemaError
        As :func:`open_dataset`; unreadable data chunks also raise :class:`DatasetFileError`.
    """
    source = pathlib.Path(os.fspath(path)).expanduser()
    ds = open_dataset(source, validate=validate)
    kind = "a zarr store" if source.is_dir() else "a netCDF4 file"
    try:
        ds.load()
    except DatasetFileError:
        raise
    except _READ_ERRORS as exc:
        raise DatasetFileError(f"cannot read the values in '{source}' as {kind}: it is "
                               f"truncated or corrupt (underlying error: {exc}). Regenerate it "
                               "or check the path.") from exc
    finally:
        ds.close()
    return ds
