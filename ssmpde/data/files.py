"""Dataset files: :func:`save` netCDF4 or zarr atomically, :func:`open_dataset` and
:func:`load_dataset` read them back and validate, :func:`convert` copies one between formats.

netCDF4 and zarr hold the same layout (one sample per chunk, no fill value), so every dataset
round-trips exactly through either and moves between them unchanged. :func:`check_output` is
the output policy of every command: no input replaced, no existing target without
``overwrite``, never a directory ssmpde did not write.

Notes
-----
Time is a plain number with plain units (``"1"``, ``"s"``, ...), never a calendar date, so files
are always opened with ``decode_times=False`` and ``decode_timedelta=False``: the ``time``
coordinate comes back with the dtype, values and ``units`` attribute it was written with.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import inspect
import math
import numbers
import os
import pathlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ssmpde.core import JSONFileError, decode_json

from . import formats
from .integrity import (GuardedNetCDF4Backend, GuardedZarrBackend, guard, missing_chunks,
                        missing_chunks_error)
from .outputs import atomic_path, block_size, output_lock, remove_stale_temporaries
from .progress import PROGRESS_ATTR, _root_attributes, store_progress
from .schema import SAMPLE, DatasetFileError
from .validation import _raise_if_invalid

__all__ = [
    "FIGURE_FORMATS",
    "NETCDF_COMPRESSION",
    "Conversion",
    "NETCDF_SUFFIXES",
    "ZARR_FORMAT",
    "ZARR_SUFFIXES",
    "check_output",
    "convert",
    "figure_metadata",
    "format_of_suffix",
    "is_ssmpde_output",
    "load_dataset",
    "open_dataset",
    "save",
    "size_bound",
    "size_bound_of",
    "write_dataset",
]

NETCDF_SUFFIXES = (".nc", ".nc4", ".netcdf")
ZARR_SUFFIXES = (".zarr",)
NETCDF_COMPRESSION = {"zlib": True, "complevel": 4, "shuffle": True}
# Zarr format 2 keeps stores readable by other zarr readers (zarr-python 3 reads and writes it), and
# consolidated metadata is part of the format 2 spec but not (yet) of format 3.
ZARR_FORMAT = 2
# Never decode numbers into dates or durations: ssmpde time is a plain number with plain units.
_DECODE_KWARGS = {"decode_times": False, "decode_timedelta": False}
# What a backend raises for a file it cannot parse; wrapped into DatasetFileError.
_READ_ERRORS = (OSError, ValueError, RuntimeError, KeyError)


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

def format_of_suffix(path: pathlib.Path) -> str:
    """The format of a dataset written to ``path``, from its suffix: ``"zarr"`` for
    :data:`ZARR_SUFFIXES`, ``"netcdf"`` for :data:`NETCDF_SUFFIXES` (any case); a ValueError
    listing them for any other."""
    suffix = path.suffix.lower()
    if suffix in ZARR_SUFFIXES:
        return "zarr"
    if suffix in NETCDF_SUFFIXES:
        return "netcdf"
    accepted = ", ".join(ZARR_SUFFIXES + NETCDF_SUFFIXES)
    raise ValueError(f"cannot tell the format of '{path}' from its suffix "
                     f"{suffix or '(none)'!r}: use one of {accepted} "
                     "(.zarr for a zarr store, the others for netCDF4)")


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
        # Dask chunks that straddle zarr chunks would make parallel writes unsafe.
        ds = ds.chunk({dim: 1 if dim == SAMPLE else -1 for dim in ds.dims})
    ds.to_zarr(path, mode="w-", zarr_format=ZARR_FORMAT, consolidated=True,
               encoding=_zarr_encoding(ds), write_empty_chunks=True)


#: Formats of the figures ssmpde draws: those whose files carry :func:`figure_metadata`.
FIGURE_FORMATS = ("png", "pdf", "svg")
_FIGURE_CREATOR = "ssmpde"
# Where each format keeps the creator: a PNG tEXt chunk before the image data, the PDF
# document information dictionary near the end of the file, the SVG Dublin Core metadata
# at the start. Figures are recognised by their first and last _FIGURE_WINDOW bytes.
_FIGURE_MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-"}
_FIGURE_MARK = {
    "png": re.compile(rb"tEXtSoftware\x00" + _FIGURE_CREATOR.encode() + rb" "),
    "pdf": re.compile(rb"/Creator \(" + _FIGURE_CREATOR.encode() + rb" "),
    "svg": re.compile(rb"<dc:creator>\s*<cc:Agent>\s*<dc:title>" + _FIGURE_CREATOR.encode()
                      + rb" "),
}
_FIGURE_WINDOW = 1 << 20


def figure_metadata(fmt: str) -> dict[str, str]:
    """The metadata every figure ssmpde writes carries (``savefig(..., metadata=...)``):
    ``ssmpde <version>`` as the PNG ``Software``, the PDF or SVG ``Creator``. It is how
    ``--overwrite`` tells a figure ssmpde drew from any other file (:func:`is_ssmpde_output`).
    """
    from ssmpde import __version__

    if fmt not in FIGURE_FORMATS:
        raise ValueError(_figure_format_message(fmt))
    key = "Software" if fmt == "png" else "Creator"
    return {key: f"{_FIGURE_CREATOR} {__version__}"}


def _figure_format_message(fmt: str, path: Any = None, flag: str = "") -> str:
    where = f"{flag} '{path}': " if path is not None else ""
    shown = f"'.{fmt}'" if fmt else "a file without a suffix"
    return (f"{where}cannot write a figure as {shown}: use one of "
            f"{', '.join('.' + f for f in FIGURE_FORMATS)}")


def _is_ssmpde_figure(path: pathlib.Path) -> bool:
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(_FIGURE_WINDOW)
            handle.seek(max(0, size - _FIGURE_WINDOW))
            tail = handle.read(_FIGURE_WINDOW)
    except OSError:
        return False
    if head.startswith(_FIGURE_MAGIC["png"]):
        return bool(_FIGURE_MARK["png"].search(head))
    if head.startswith(_FIGURE_MAGIC["pdf"]):
        return bool(_FIGURE_MARK["pdf"].search(tail))
    return b"<svg" in head and bool(_FIGURE_MARK["svg"].search(head))


def _output_kind(path: pathlib.Path) -> str | None:
    """What ssmpde output ``path`` is: ``"run"``, ``"dataset"``, ``"figure"``, or None for
    anything ssmpde did not write (a symbolic link is judged by what it points to)."""
    if path.is_dir():
        config = path / "config.json"
        if config.is_file():
            try:
                record = decode_json(config)
            except (OSError, JSONFileError):
                return None
            return "run" if "model" in record else None
        if not _is_zarr_store(path):
            # Another tool's directory (The Well, ...) is ours only if we exported it.
            foreign = formats.sniff(path)
            return "dataset" if foreign is not None and formats.is_export(foreign, path) \
                else None
        if PROGRESS_ATTR in (_root_attributes(path) or {}):
            return "dataset"  # a store that `generate` is still writing
    elif not path.is_file():
        return None
    elif _is_ssmpde_figure(path):
        return "figure"
    else:
        # A foreign format's file (a PDEBench download) is ours only if we exported it.
        foreign = formats.sniff(path)
        if foreign is not None:
            return "dataset" if formats.is_export(foreign, path) else None
    try:
        with _open(path, None) as ds:
            return "dataset" if "ssmpde_equation" in ds.attrs else None
    except (OSError, DatasetFileError, ValueError):
        return None


def is_ssmpde_output(path: str | os.PathLike) -> bool:
    """Whether ``path`` is something ssmpde writes, which ``--overwrite`` may replace.

    Recognised by a marker each kind of output carries: a dataset (netCDF file or zarr store)
    by its global attribute ``ssmpde_equation`` (a zarr store still being written by its
    progress record), a run directory by its ``config.json`` naming a ``model``, a figure
    (PNG, PDF or SVG) by the creator in its metadata (:func:`figure_metadata`). Anything else,
    a user's text file or a file ssmpde cannot read, is not.
    """
    return _output_kind(pathlib.Path(os.fspath(path)).expanduser()) is not None


def _inputs_with_recorded_data(inputs: Iterable[str | os.PathLike]
                               ) -> list[tuple[pathlib.Path, str]]:
    """``inputs``, and for each run directory among them the dataset its checkpoint was
    trained on (recorded in its ``config.json``): an output must not replace it either.
    Each with the words a message names it by."""
    found = []
    for source in inputs:
        source = pathlib.Path(os.fspath(source)).expanduser()
        found.append((source, "one of the inputs"))
        try:
            recorded = decode_json(source / "config.json")["dataset"]["path"]
        except (OSError, JSONFileError, TypeError, KeyError):
            continue
        if isinstance(recorded, str) and recorded:
            found.append((pathlib.Path(recorded),
                          f"the dataset the run '{source}' was trained on"))
    return found


def _same_or_inside(source: pathlib.Path, target: pathlib.Path) -> bool:
    """Whether writing ``target`` would replace ``source`` (the same path, another name of
    the same file, or a path inside a directory ``target`` would replace)."""
    resolved = source.resolve()
    if resolved == target.resolve() or resolved.is_relative_to(target.resolve()):
        return True
    try:
        return target.exists() and source.exists() and os.path.samefile(target, source)
    except OSError:
        return False


def check_output(target: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (),
                 overwrite: bool = False, flag: str = "--out",
                 kind: str | None = None, named_format: bool = False) -> pathlib.Path:
    """The output policy of every command, checked before any work.

    Parameters
    ----------
    target : str or os.PathLike
        The output about to be written.
    inputs : iterable of paths
        What the command reads: datasets and run directories. A run directory's training
        dataset (the path recorded in its ``config.json``) counts as an input too.
    overwrite : bool
        Whether an existing ``target`` may be replaced (``--overwrite``).
    flag : str
        The option that named ``target``, for messages.
    kind : {None, "dataset", "figure"}
        What will be written. A dataset needs a netCDF or zarr suffix, a figure one of
        :data:`FIGURE_FORMATS`; both are checked here, before any work. An existing target
        is then replaced only by an output of its own kind.
    named_format : bool
        The dataset's format is settled already, so the suffix is not checked here: the
        caller chose it by name (``convert --to``: the suffix need not be netCDF's or
        zarr's), or read it from the suffix before (:func:`format_of_suffix`, as
        :func:`save` and generate do).

    Returns
    -------
    pathlib.Path
        ``target``, with ``~`` expanded.

    Raises
    ------
    ValueError
        For a target that would replace one of the ``inputs``; for a suffix that does not fit
        ``kind``; and, even with ``overwrite``, for an existing target that is not an output
        of ssmpde (:func:`is_ssmpde_output`) or is one of another kind (a run directory is
        never replaced by a dataset, a dataset never by a figure). So ``--overwrite`` can
        lose only what an earlier ssmpde command wrote.
    FileExistsError
        For an existing target without ``overwrite``.
    """
    target = pathlib.Path(os.fspath(target)).expanduser()
    if kind == "dataset":
        if not named_format:
            format_of_suffix(target)
    elif kind == "figure":
        fmt = target.suffix[1:].lower()
        if fmt not in FIGURE_FORMATS:
            raise ValueError(_figure_format_message(fmt, target, flag))
    elif kind is not None:
        raise ValueError(f"kind must be None, 'dataset' or 'figure', got {kind!r}")
    for source, role in _inputs_with_recorded_data(inputs):
        if _same_or_inside(source, target):
            inside = source.resolve() != target.resolve() and source.resolve().is_relative_to(
                target.resolve())
            what = f"holds '{source}', {role}" if inside else f"is {role}"
            raise ValueError(f"{flag} '{target}' {what}: choose another path (outputs never "
                             "replace their inputs)")
    if target.exists() or target.is_symlink():
        if not overwrite:
            raise FileExistsError(f"'{target}' already exists: pass --overwrite "
                                  "(overwrite=True) to replace it, or choose another path")
        found = _output_kind(target)
        if found is None:
            what = "directory" if target.is_dir() else "file"
            raise ValueError(f"'{target}' is a {what} that ssmpde did not write: refusing to "
                             "replace it, even with --overwrite; remove it yourself or choose "
                             "another path")
        if kind is not None and found != kind:
            raise ValueError(f"'{target}' is {_ARTICLE[found]} ssmpde wrote, not "
                             f"{_ARTICLE[kind]}: refusing to replace it with one, even with "
                             "--overwrite; choose another path")
    return target


_ARTICLE = {"run": "a run directory", "dataset": "a dataset", "figure": "a figure"}


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
# Reading
# --------------------------------------------------------------------------------------------

def _is_zarr_store(path: pathlib.Path) -> bool:
    return any((path / marker).is_file() for marker in (".zgroup", ".zmetadata", "zarr.json"))


def _open_foreign(foreign, path: pathlib.Path, chunks: Any) -> xr.Dataset:
    """A foreign format's file, its reads guarded like ours (before dask wraps them)."""
    ds = guard(foreign.open(path, None), str(path), kind=f"{foreign.NAME} file")
    if chunks is None:
        return ds
    return ds.chunk({SAMPLE: 1} if chunks == {} and SAMPLE in ds.dims else chunks)


def _open(path: pathlib.Path, chunks: Any, *, in_progress: bool = False) -> xr.Dataset:
    """Open without validation; a store still being written only with ``in_progress``.

    Values are read through :mod:`ssmpde.data.integrity`'s backends: read errors name the
    variable and sample, data variables come in the schema's dimension order.
    """
    if not (path.exists() or path.is_symlink()):
        raise FileNotFoundError(f"no dataset at '{path}': no such file or zarr store "
                                "(check the path)")
    if path.exists() and not (path.is_dir() or path.is_file()):
        # Opening a FIFO waits for a writer forever; a device or socket is no dataset either.
        raise DatasetFileError(f"'{path}' is not a regular file (a FIFO, socket or device): "
                               "ssmpde reads datasets from files and zarr directories; give "
                               "the path of the dataset itself")
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
        What the target format could not carry (empty for netCDF and zarr, which carry
        everything), one human-readable sentence each.
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


def _takes_dtype(fmt: str) -> bool:
    """Whether the format's writer chooses the precision of the values (``dtype=``)."""
    if fmt in formats.OWN_FORMATS:
        return False
    return "dtype" in inspect.signature(formats.format_named(fmt).export).parameters


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
        The precision of the floating values, for a format whose export takes one
        (``"the-well"``: float32 for The Well's own models); None: the format's default.

    Returns
    -------
    Conversion
        The target, its format, the dataset's sizes and the notes of what the target format
        could not carry; ``os.fspath(result)`` is the target's path.

    Raises
    ------
    ValueError
        For an unknown format (the message lists the known ones), a suffix that does not say
        the format, a ``dtype`` the format does not take, or a dataset the target format
        cannot hold (the message says why).

    Notes
    -----
    To netCDF4 or zarr, values, dtypes, coordinates and every attribute (``history``
    included) are copied unchanged, so a round trip gives the same dataset; the data stream
    through one sample at a time (dask chunks), so the dataset need not fit in memory. A
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
    if dtype is not None and not _takes_dtype(fmt):
        taking = [name for name in formats.known_formats() if _takes_dtype(name)]
        raise ValueError(f"the {fmt} format does not take a dtype: it writes the values as "
                         f"they are or in its own precision (PDEBench: float32); --dtype "
                         f"(dtype=) applies to --to {', '.join(taking)}")
    export_options = {} if dtype is None else {"dtype": dtype}
    notes: list[str] = []
    with output_lock(target):
        remove_stale_temporaries(target)
        check_output(target, inputs=[source], overwrite=overwrite, flag="target",
                     kind="dataset", named_format=True)
        with open_dataset(source, chunks={}) as ds:
            sizes = dict(ds.sizes)
            if fmt in formats.OWN_FORMATS:
                _check_storable_attrs(ds)
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
