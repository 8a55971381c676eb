"""Dataset files: :func:`save` writes netCDF4 or zarr atomically, :func:`convert` copies one
between formats.

netCDF4 and zarr hold the same layout (one sample per chunk, no fill value), so every dataset
round-trips exactly through either and moves between them unchanged. The readers
(:func:`open_dataset`, :func:`load_dataset`) live in :mod:`ssmpde.data.reading`, the output
policy of every command (:func:`check_output`: no input replaced, no existing target without
``overwrite``, never a directory ssmpde did not write) in :mod:`ssmpde.data.output_policy`;
both are importable from here too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import numbers
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from . import formats
from .output_policy import (FIGURE_FORMATS, NETCDF_SUFFIXES, ZARR_SUFFIXES, check_output,
                            figure_metadata, format_of_suffix, is_ssmpde_output)
from .outputs import atomic_path, block_size, output_lock, remove_stale_temporaries
from .reading import check_path, load_dataset, open_dataset
from .schema import SAMPLE
from .streaming import STREAM_SAMPLES, stream_chunks
from .validation import _raise_if_invalid

# The readers and the output policy stay importable from here (``from ssmpde.data.files import
# open_dataset``); each is documented once, in the module that defines it.
__all__ = ["NETCDF_COMPRESSION", "ZARR_FORMAT", "Conversion", "convert", "save", "size_bound",
           "size_bound_of", "write_dataset"]

NETCDF_COMPRESSION = {"zlib": True, "complevel": 4, "shuffle": True}
# Zarr format 2 keeps stores readable by other zarr readers (zarr-python 3 reads and writes it), and
# consolidated metadata is part of the format 2 spec but not (yet) of format 3.
ZARR_FORMAT = 2


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

def _attr_problem(value: Any) -> tuple[type[Exception], str] | None:
    """Why netCDF cannot store ``value`` as an attribute exactly, or None if it can."""
    if isinstance(value, str):
        if "\x00" in value:
            return ValueError, "contains a NUL character, which netCDF silently drops"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return ValueError, "is not encodable as UTF-8"
        return None
    if isinstance(value, (bool, np.bool_)):
        return TypeError, "is a bool, which netCDF cannot store"
    if isinstance(value, (numbers.Integral, np.integer, float, np.floating)):
        return None
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf":
            return TypeError, f"is an array of dtype {value.dtype}, which netCDF cannot store"
        if value.ndim == 0:
            return None
        if value.ndim > 1:
            return TypeError, f"is a {value.ndim}-dimensional array; netCDF stores only 1D ones"
        items: Sequence = list(value)
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return TypeError, f"has type {type(value).__name__}, which netCDF cannot store"
    if len(items) < 2:
        # netCDF hands back a one-element list as a scalar and cannot hold an empty one.
        return TypeError, (f"is a sequence of length {len(items)}; netCDF would not give it "
                           "back as written (store a scalar instead)")
    if all(isinstance(item, str) for item in items):
        problems = (_attr_problem(item) for item in items)
        return next((problem for problem in problems if problem is not None), None)
    if all(isinstance(item, (numbers.Real, np.integer, np.floating))
           and not isinstance(item, (bool, np.bool_)) for item in items):
        return None
    return TypeError, "is a nested or mixed sequence, which netCDF cannot store"


def _check_storable_attrs(ds: xr.Dataset) -> None:
    owners = [("global attribute", "", ds.attrs)]
    owners += [("attribute", f" of '{name}'", var.attrs) for name, var in ds.variables.items()]
    for kind, owner, attrs in owners:
        for key, value in attrs.items():
            problem = _attr_problem(value)
            if problem is not None:
                error, reason = problem
                raise error(f"{kind} {key!r}{owner} {reason}: JSON-encode it "
                            f"(json.dumps) or store it as a string or number")


def _chunk_plan(ds: xr.Dataset) -> dict[str, tuple[int, ...]]:
    """One sample per chunk, full extent along every other dimension."""
    return {
        name: tuple(1 if dim == SAMPLE else max(1, size) for dim, size in var.sizes.items())
        for name, var in ds.data_vars.items()
    }


def _netcdf_encoding(ds: xr.Dataset) -> dict[str, dict]:
    # _FillValue None: no fill attribute is invented, so ints never decode to masked floats.
    encoding: dict[str, dict] = {name: {"_FillValue": None} for name in ds.variables}
    for name, chunks in _chunk_plan(ds).items():
        if ds[name].dtype.kind in "biuf" and ds[name].ndim > 0:
            encoding[name].update(NETCDF_COMPRESSION, chunksizes=chunks)
    return encoding


# What the layout adds to the values, at most (see size_bound): per chunk, an HDF5 chunk-index
# entry and deflate's framing, or zarr's chunk header; per variable, its metadata and headers.
_PER_CHUNK = 320
_PER_VARIABLE = 4096
_FIXED = 64 * 2 ** 10


def size_bound(*, fmt: str, data_bytes: int, chunks: int, variables: int,
               coordinate_bytes: int, attribute_bytes: int, block: int = 4096) -> int:
    """An upper bound of the bytes a dataset in ssmpde's layout occupies on disk.

    The values uncompressed (compression can only shrink them, apart from deflate's and
    blosc's framing of incompressible data, at most 0.1 %), plus per chunk (one sample of one
    variable) an index entry and framing, for zarr the file system's ``block`` too (each
    chunk is a file, rounded up to whole blocks), plus per variable its metadata, plus the
    coordinates and attributes twice over (headers and copies) and a fixed allowance for the
    file's own structures.

    Parameters
    ----------
    fmt : {"netcdf", "zarr"}
    data_bytes : int
        Bytes of the data variables' values.
    chunks : int
        Chunks of the data variables: samples times per-sample variables.
    variables : int
        Variables, coordinates included.
    coordinate_bytes, attribute_bytes : int
        Bytes of the coordinates' values and of every attribute's text.
    block : int
        The file system's allocation unit (``os.statvfs(...).f_frsize``).
    """
    per_chunk = _PER_CHUNK + (block if fmt == "zarr" else 0)
    per_variable = _PER_VARIABLE + 4 * block
    return int(data_bytes + data_bytes // 1000 + chunks * per_chunk + variables * per_variable
               + 2 * (coordinate_bytes + attribute_bytes) + _FIXED + block)


def _attribute_bytes(ds: xr.Dataset) -> int:
    return sum(len(str(value)) + len(str(key)) for owner in (ds, *ds.variables.values())
               for key, value in owner.attrs.items())


def size_bound_of(ds: xr.Dataset, fmt: str, block: int) -> int:
    """:func:`size_bound` of ``ds`` written as ``fmt`` to a file system whose allocation unit
    is ``block`` (from its metadata: no value is read)."""
    chunks = sum(math.prod(var.shape[:1]) if var.dims[:1] == (SAMPLE,) else 1
                 for var in ds.data_vars.values())
    return size_bound(fmt=fmt, data_bytes=sum(var.nbytes for var in ds.data_vars.values()),
                      chunks=chunks, variables=len(ds.variables),
                      coordinate_bytes=sum(coord.nbytes for coord in ds.coords.values()),
                      attribute_bytes=_attribute_bytes(ds), block=block)


def _write_netcdf(ds: xr.Dataset, path: pathlib.Path) -> None:
    kwargs = dict(mode="w", engine="netcdf4", format="NETCDF4", encoding=_netcdf_encoding(ds))
    if all(var.chunks is None for var in ds.variables.values()):
        ds.to_netcdf(path, **kwargs)
        return
    import dask

    # Values streamed from another file (convert, merging parts) are read by dask threads.
    # When one read fails, dask raises at once while the other threads finish their chunks,
    # and a late one reopens the file in append mode, which creates it anew after the
    # caller removed it: a private pool, waited for, ends every write before the error
    # leaves here.
    delayed = ds.to_netcdf(path, compute=False, **kwargs)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        try:
            dask.compute(delayed, scheduler=pool)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _zarr_encoding(ds: xr.Dataset) -> dict[str, dict]:
    """No fill value (values round-trip exactly), data variables one sample per chunk.

    Without a fill value a missing chunk is damage, never data: every writer passes
    ``write_empty_chunks=True`` so that zarr stores a chunk of zeros too (by default it
    leaves out chunks equal to its default fill, 0), and readers refuse a store that lacks a
    chunk (:func:`ssmpde.data.integrity.missing_chunks`).

    Every chunk carries a CRC-32 of its values (numcodecs' ``crc32`` filter, which every zarr
    reader knows): blosc decodes a truncated chunk of incompressible data (stored as a plain
    copy) into whatever memory follows it, without an error, and the checksum turns that into
    one.
    """
    import numcodecs  # zarr's own codec library (a dependency of zarr 3)

    encoding: dict[str, dict] = {name: {"_FillValue": None, "filters": [numcodecs.CRC32()]}
                                 for name in ds.variables}
    for name, chunks in _chunk_plan(ds).items():
        if ds[name].ndim > 0:
            encoding[name]["chunks"] = chunks
    return encoding


def _write_zarr(ds: xr.Dataset, path: pathlib.Path) -> None:
    if any(var.chunks is not None for var in ds.variables.values()):
        # Dask chunks that straddle zarr chunks would make parallel writes unsafe: whole along
        # every other dimension, a dask chunk of several samples covers whole zarr chunks (one
        # sample each), and one task a sample would make millions of tasks of a large file.
        ds = ds.chunk({dim: -1 for dim in ds.dims if dim != SAMPLE})
    ds.to_zarr(path, mode="w-", zarr_format=ZARR_FORMAT, consolidated=True,
               encoding=_zarr_encoding(ds), write_empty_chunks=True)


def save(ds: xr.Dataset, path: str | os.PathLike, *, overwrite: bool = False,
         validate: bool = True) -> pathlib.Path:
    """Write ``ds`` to netCDF4 or zarr, atomically.

    Parameters
    ----------
    ds : xarray.Dataset
        The dataset; its ``encoding`` is ignored (the layout below always applies).
    path : str or os.PathLike
        Target; the suffix picks the format: ``.zarr`` for a zarr store (a directory),
        ``.nc``, ``.nc4`` or ``.netcdf`` for a netCDF4 file.  Its directory must exist.
    overwrite : bool
        Replace an existing target.  Without it an existing target is an error.
    validate : bool
        Check the schema (:func:`validate`) before writing.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    ValueError
        For an unknown suffix (the message lists the accepted ones).
    FileNotFoundError
        If the target's directory does not exist.
    FileExistsError
        If the target exists and ``overwrite`` is false.
    ValueError
        If the target exists and is not a dataset ssmpde wrote, even with ``overwrite``
        (the output policy, :func:`check_output`).
    TypeError
        If an attribute cannot be stored in netCDF (dict, None, bool, nested list, ...); the
        message names it.  Checked for zarr as well, so every dataset can move between formats.
    SchemaError
        If ``validate`` and ``ds`` breaks the schema.

    Notes
    -----
    Layout: netCDF4 variables are zlib-compressed (level 4, with shuffle) and chunked one
    sample per chunk, full extent along other dimensions; zarr (format 2, consolidated
    metadata) uses the same chunks.  No ``_FillValue`` is added, so values and dtypes
    (float32, float64, int32, int64) round-trip exactly.

    The data go to a hidden temporary ``.<name>.tmp-<hex>`` beside the target, renamed into
    place once complete.  On any exception, ``KeyboardInterrupt`` included, the temporary is
    removed and an existing target is left as it was.  A disk that fills up raises
    :class:`~ssmpde.data.DiskFullError` naming the target and the space it needs at most
    (:func:`size_bound`).

    Examples
    --------
    >>> save(ds, "navier_stokes.nc")  # doctest: +SKIP
    PosixPath('navier_stokes.nc')
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"expected an xarray.Dataset, got {type(ds).__name__}")
    target = pathlib.Path(os.fspath(path)).expanduser()
    fmt = format_of_suffix(target)
    parent = target.parent
    if not parent.exists():
        raise FileNotFoundError(f"output directory '{parent}' does not exist; create it first "
                                f"(mkdir -p {parent})")
    if not parent.is_dir():
        raise NotADirectoryError(f"cannot write '{target}': '{parent}' is not a directory")
    check_output(target, overwrite=overwrite, kind="dataset", named_format=True)
    write_dataset(ds, target, fmt, validate=validate)
    return target


def write_dataset(ds: xr.Dataset, target: pathlib.Path, fmt: str, *,
                  validate: bool = True) -> None:
    """:func:`save` after its checks of ``target``: write ``ds`` as ``fmt`` atomically.

    For a caller that has applied the output policy (:func:`check_output`) to ``target``
    itself, under :func:`~ssmpde.data.output_lock`, before its work began, and knows the
    format (:func:`format_of_suffix`): generate's merge of its parts. The attributes are
    checked (every dataset can move between formats) and, with ``validate``, the schema.
    """
    _check_storable_attrs(ds)
    if validate:
        _raise_if_invalid(ds)
    _write_own(ds, target, fmt)


def _write_own(ds: xr.Dataset, target: pathlib.Path, fmt: str) -> None:
    """Write ``ds`` atomically as ``fmt`` (``"zarr"`` or ``"netcdf"``), whatever the suffix."""
    out = ds.drop_encoding()
    with atomic_path(target, needed=size_bound_of(out, fmt, block_size(target.parent))) as tmp:
        if fmt == "zarr":
            _write_zarr(out, tmp)
        else:
            _write_netcdf(out, tmp)


# --------------------------------------------------------------------------------------------
# Converting
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Conversion:
    """What :func:`convert` wrote: usable as the target's path (``os.fspath(result)``).

    Attributes
    ----------
    target : pathlib.Path
        The file or directory written.
    format : str
        Its format: ``"netcdf"``, ``"zarr"`` or a foreign format's name (``"pdebench"``, ...).
    sizes : dict of str to int
        The dimension sizes of the dataset converted.
    notes : tuple of str
        What the target format could not carry (for netCDF and zarr, which carry everything,
        only what ``dtype`` cast), one human-readable sentence each.
    """

    target: pathlib.Path
    format: str
    sizes: dict[str, int]
    notes: tuple[str, ...] = ()

    def __fspath__(self) -> str:
        return os.fspath(self.target)


def _target_format(target: pathlib.Path, to: str | None) -> str:
    if to is None:
        if target.suffix.lower() in formats.HDF5_SUFFIXES:
            foreign = ", ".join(repr(name) for name in formats.known_formats())
            raise ValueError(f"'{target}' is named as a plain HDF5 file, which several formats "
                             f"use: say which with --to (to=...), one of {foreign}")
        return format_of_suffix(target)
    if to in formats.OWN_FORMATS:
        return to
    return formats.format_named(to).NAME


def _cast_floats(ds: xr.Dataset, dtype: str) -> tuple[xr.Dataset, list[str]]:
    """``ds`` with its floating data variables in ``dtype`` (coordinates keep theirs), after
    :func:`~ssmpde.data.formats.check_range`; and a note of what was cast."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64' (or None: keep the dataset's), "
                         f"got {dtype!r}")
    wanted = np.dtype(dtype)
    formats.check_range(ds, wanted, advice="Leave out --dtype (dtype=) to keep the dataset's "
                                           "precision, or rescale the variable (other units)")
    cast = {name: var.dtype for name, var in ds.data_vars.items()
            if var.dtype.kind == "f" and var.dtype != wanted}
    if not cast:
        return ds, [f"values already {wanted}: nothing cast"]
    ds = ds.assign({name: ds[name].astype(wanted) for name in cast})
    listed = ", ".join(f"{name} (was {old})" for name, old in cast.items())
    return ds, [f"{listed} written as {wanted}"]


def convert(source: str | os.PathLike, target: str | os.PathLike, *,
            overwrite: bool = False, to: str | None = None,
            dtype: str | None = None) -> Conversion:
    """Copy a dataset between netCDF4, zarr and the foreign formats.

    Parameters
    ----------
    source : str or os.PathLike
        A netCDF4 file, a finished zarr store (one still being written is refused) or a file
        in a foreign format :func:`open_dataset` reads (PDEBench HDF5, ...).
    target : str or os.PathLike
        The copy.
    overwrite : bool
        Replace an existing ``target`` written by ssmpde.
    to : {None, "netcdf", "zarr", "pdebench", ...}
        The target's format (:func:`ssmpde.data.formats.known_formats` lists the foreign
        ones). Default: from the target's suffix (``.nc``, ``.nc4``, ``.netcdf`` or
        ``.zarr``).
    dtype : {None, "float32", "float64"}
        The precision of the floating data variables (coordinates keep theirs), for netCDF,
        zarr and a format whose export takes one (``"the-well"``: float32 for The Well's own
        models; PDEBench is always float32); None: the dataset's, or the format's own. A
        value the narrower type cannot hold is refused before anything is written.

    Returns
    -------
    Conversion
        The target, its format, the dataset's sizes and the notes of what the target format
        could not carry; ``os.fspath(result)`` is the target's path.

    Raises
    ------
    ValueError
        For an unknown format (the message lists the known ones), a suffix that does not say
        the format, a ``dtype`` the format does not take, values beyond the range of the
        precision written, or a dataset the target format cannot hold (the message says why).

    Notes
    -----
    To netCDF4 or zarr, values, dtypes (unless ``dtype`` says otherwise), coordinates and
    every attribute (``history`` included) are copied unchanged, so a round trip gives the
    same dataset; the data stream through in blocks of samples of about 16 MiB (dask chunks,
    :func:`ssmpde.data.streaming.stream_chunks`), so the dataset need not fit in memory. A
    foreign format keeps what it can hold and says what it cannot in ``notes``. Every target
    is written atomically under its output lock (:func:`output_lock`).

    Examples
    --------
    >>> convert("ns.zarr", "ns.nc").target  # doctest: +SKIP
    PosixPath('ns.nc')
    >>> convert("burgers.nc", "1D_Burgers_Sols_Nu0.01.hdf5", to="pdebench").notes  # doctest: +SKIP
    """
    source = pathlib.Path(os.fspath(source)).expanduser()
    target = pathlib.Path(os.fspath(target)).expanduser()
    fmt = _target_format(target, to)  # an unknown format fails before the source is read
    if dtype is not None and not formats.takes_dtype(fmt):
        raise ValueError(f"the {fmt} format does not take a dtype: it writes the values in "
                         f"its own precision (PDEBench: float32); --dtype (dtype=) applies to "
                         f"--to {', '.join(formats.taking_dtype())}")
    export_options = {} if dtype is None else {"dtype": dtype}
    notes: list[str] = []
    check_path(source)  # a FIFO or a link that leads nowhere, before the target is checked
    with output_lock(target):
        remove_stale_temporaries(target)
        check_output(target, inputs=[source], overwrite=overwrite, flag="target",
                     kind="dataset", named_format=True)
        with open_dataset(source) as opened:
            ds = opened.chunk(stream_chunks(opened, most=STREAM_SAMPLES))
            sizes = dict(ds.sizes)
            if fmt in formats.OWN_FORMATS:
                _check_storable_attrs(ds)
                if dtype is not None:
                    ds, cast = _cast_floats(ds, dtype)
                    notes.extend(cast)
                _write_own(ds, target, fmt)
            else:
                module = formats.format_named(fmt)
                with atomic_path(target) as tmp:
                    notes.extend(module.export(ds, tmp, **export_options))
                naming = getattr(module, "conventional_name", None)
                conventional = naming(ds) if naming is not None else None
                if conventional is not None and target.name != conventional:
                    notes.append(f"the conventional {module.NAME} name of this dataset is "
                                 f"'{conventional}' (its loaders find files by name)")
    return Conversion(target=target, format=fmt, sizes=sizes, notes=tuple(notes))
