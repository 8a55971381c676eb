"""Reading dataset files safely: a value read is a value the file holds, or an error that names
the file, the variable and the chunk.

Every reader of :mod:`ssmpde.data` (:func:`~ssmpde.data.open_dataset` and everything built on
it: loading, converting, describing, training, evaluating, rolling out) opens files through the
two xarray backends of this module, which guard the values on their way out of the file:

* **Undecodable chunks.** A chunk that the file's codec cannot decode (a bit-rotted netCDF
  gives ``NetCDF: HDF error``, a damaged zarr chunk ``error during blosc decompression``) raises
  :class:`~ssmpde.data.DatasetFileError` naming the file, the variable, the sample and, for
  zarr, the chunk, whenever and wherever the values are read: lazily, through dask, in a
  training loop.
* **Dimension order.** Data variables are handed out in the schema's order
  (:func:`~ssmpde.data.schema.canonical_dims`: ``sample``, ``time``, others, ``y``, ``x``)
  whatever order the file stores them in: they are transposed by name, lazily, and the stored
  order is kept in the variable's ``encoding`` under :data:`STORED_DIMS` (``ssmpde info`` shows
  it).
* **Missing chunks.** zarr reads a chunk file that does not exist as the array's fill value,
  and ssmpde stores have none (zarr then hands out zeros). :func:`missing_chunks` compares the
  chunk files of a store with the chunk grid of every variable; the readers refuse a store
  that lacks any (a store still being written may lack those of its unfinished samples).
  A variable that declares a fill value (``_FillValue``) reads its missing chunks as missing
  data (NaN), which no reader takes for values, and is not checked.

:func:`ssmpde.data.check.check_file`, built on these readers, reads every chunk of a file and
lists every damaged one: the text of ``ssmpde info --check``.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import os
import pathlib
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, NetCDF4BackendEntrypoint, ZarrBackendEntrypoint
from xarray.core import indexing

from .schema import SAMPLE, DatasetFileError, canonical_dims

__all__ = ["STORED_DIMS", "DamagedChunk", "missing_chunks"]

#: Encoding key of a data variable whose file stores its dimensions in another order than the
#: schema's: the stored order (a tuple of names).
STORED_DIMS = "ssmpde_stored_dims"
# What a codec raises for bytes it cannot decode (HDF5 through netCDF4: RuntimeError or
# OSError; blosc, zstd: RuntimeError; a truncated zarr chunk: ValueError; gzip: zlib.error).
DECODE_ERRORS = (OSError, ValueError, RuntimeError, KeyError, EOFError, zlib.error)
ZARR_STORE = "zarr store"


def _check_hint(source: str) -> str:
    return f"`ssmpde info --check {source}` lists every damaged chunk"


# --------------------------------------------------------------------------------------------
# Naming chunks of zarr stores
# --------------------------------------------------------------------------------------------

def _zarr_arrays(path: pathlib.Path) -> dict[str, Any]:
    """The arrays of a zarr store's root group, as its metadata (consolidated if any) list
    them."""
    import zarr

    return dict(zarr.open_group(path, mode="r").arrays())


def _stored_objects(array) -> tuple[int, ...]:
    """The shape of one stored object (a shard, else a chunk) of a zarr array."""
    return tuple(array.shards or array.chunks)


def _grid(array) -> tuple[int, ...]:
    return tuple(math.ceil(size / step) if step else 0
                 for size, step in zip(array.shape, _stored_objects(array)))


def _dims_of(array) -> tuple[str, ...] | None:
    dims = array.attrs.get("_ARRAY_DIMENSIONS")
    if dims is None:
        dims = getattr(array.metadata, "dimension_names", None)
    return tuple(dims) if dims is not None and len(dims) == array.ndim else None


def _sample_axis(array) -> int | None:
    dims = _dims_of(array)
    return dims.index(SAMPLE) if dims is not None and SAMPLE in dims else None


def _sample_chunk_key(array, sample: int | None) -> str | None:
    """The key of the zarr chunk of ``array`` holding ``sample`` (any, for an array without
    samples), if exactly one chunk does (the array is not split along other dimensions)."""
    axis = _sample_axis(array)
    if any(n != 1 for i, n in enumerate(_grid(array)) if i != axis):
        return None
    coords = [0] * array.ndim
    if axis is not None and sample is not None:
        coords[axis] = sample // _stored_objects(array)[axis]
    return array.metadata.encode_chunk_key(tuple(coords))


def _chunk_of_sample(path: pathlib.Path, name: str, sample: int) -> str | None:
    """The key of the zarr chunk of variable ``name`` holding ``sample``, if one does."""
    try:
        array = _zarr_arrays(path)[name]
    except Exception:  # naming the chunk is a courtesy of an error message already on its way
        return None
    return _sample_chunk_key(array, sample)


def _chunk_files(directory: pathlib.Path) -> set[str]:
    """Every file under an array's directory, as ``/``-separated relative keys."""
    found = set()
    for root, _, names in os.walk(directory):
        prefix = pathlib.PurePath(root).relative_to(directory).as_posix()
        prefix = "" if prefix == "." else prefix + "/"
        found.update(prefix + name for name in names)
    return found


def _samples_text(samples: tuple[int, int]) -> str:
    start, stop = samples
    return f"sample {start}" if stop == start + 1 else f"samples {start}..{stop - 1}"


@dataclasses.dataclass(frozen=True)
class DamagedChunk:
    """One chunk of a variable that does not read as data.

    Attributes
    ----------
    variable : str
    chunk : str or None
        The zarr chunk key (``"1.0.0.0"``); None for netCDF, whose chunks have no names.
    samples : tuple of (int, int) or None
        The samples ``[start, stop)`` the chunk holds; None for a variable without samples.
    problem : str
        ``"missing"``, ``"undecodable (ERROR)"`` or ``"N non-finite values"``.
    """

    variable: str
    chunk: str | None
    samples: tuple[int, int] | None
    problem: str

    def where(self) -> str:
        """E.g. ``vorticity chunk '1.0.0.0' (sample 1)``."""
        parts = [self.variable]
        if self.chunk is not None:
            parts.append(f"chunk '{self.chunk}'")
        if self.samples is not None:
            parts.append(f"({_samples_text(self.samples)})")
        return " ".join(parts)


def missing_chunks(path: str | os.PathLike, ds: xr.Dataset | None = None, *,
                   complete: Iterable[tuple[int, int]] | None = None
                   ) -> tuple[list[DamagedChunk], dict[str, int]]:
    """The chunks a zarr store's metadata promise and its files lack.

    Parameters
    ----------
    path : str or os.PathLike
        A zarr store (format 2 or 3, any chunk key encoding, sharded or not).
    ds : xarray.Dataset, optional
        The store opened by xarray: its variables that declare a fill value (``_FillValue``
        in their encoding) are skipped, since they read missing chunks as missing data.
    complete : iterable of (int, int), optional
        For a store still being written: the sample ranges ``[start, stop)`` written so far;
        only the chunks holding those samples must exist (and every chunk of a variable
        without samples).

    Returns
    -------
    (list of DamagedChunk, dict of str to int)
        The missing chunks (problem ``"missing"``), and the number of chunks checked per
        variable.
    """
    store = pathlib.Path(os.fspath(path))
    ranges = None if complete is None else sorted(complete)
    missing: list[DamagedChunk] = []
    totals: dict[str, int] = {}
    for name, array in sorted(_zarr_arrays(store).items()):
        if ds is not None and name in ds.variables \
                and ds[name].encoding.get("_FillValue") is not None:
            continue
        grid, step, shape = _grid(array), _stored_objects(array), array.shape
        axis = _sample_axis(array)
        present = _chunk_files(store / name)
        encode = array.metadata.encode_chunk_key
        count = 0
        for coords in itertools.product(*(range(n) for n in grid)):
            samples = None
            if axis is not None:
                start = coords[axis] * step[axis]
                samples = (start, min(start + step[axis], shape[axis]))
                if ranges is not None and not any(a < samples[1] and samples[0] < b
                                                  for a, b in ranges):
                    continue  # not written yet: nothing is missing
            count += 1
            key = encode(coords)
            if key not in present:
                missing.append(DamagedChunk(name, key, samples, "missing"))
        totals[name] = count
    return missing, totals


def missing_chunks_error(source: pathlib.Path, missing: Sequence[DamagedChunk],
                         totals: dict[str, int]) -> DatasetFileError:
    """The error of a store with missing chunks: the first one, and how many in all."""
    first = missing[0]
    count = sum(1 for chunk in missing if chunk.variable == first.variable)
    if count > 1 and count == totals.get(first.variable):
        what = (f"variable '{first.variable}' of zarr store '{source}': all {count} chunks are "
                f"missing (its directory '{source / first.variable}' is gone or empty)")
    else:
        samples = "" if first.samples is None else f" ({_samples_text(first.samples)})"
        what = (f"variable '{first.variable}' of zarr store '{source}' is missing chunk "
                f"'{first.chunk}'{samples}")
    if len(missing) > count:
        what += f", and {len(missing) - count} more chunks of other variables"
    elif count > 1 and count != totals.get(first.variable):
        what += f", and {count - 1} more of its chunks"
    them = "it" if len(missing) == 1 else "them"
    return DatasetFileError(f"{what}: zarr would read {them} as zeros, which are not data. The "
                            "store is incomplete (a file lost in a copy, or deleted): regenerate"
                            f" or re-copy it; {_check_hint(str(source))}")


# --------------------------------------------------------------------------------------------
# The guarded arrays and the backends that hand them out
# --------------------------------------------------------------------------------------------

def _describe_samples(key: Any, axis: int | None, size: int) -> list[int] | None:
    """The samples an explicit indexer (in stored order) selects, if it says."""
    if axis is None or isinstance(key, indexing.VectorizedIndexer):
        return None
    item = key.tuple[axis]
    if isinstance(item, slice):
        return list(range(*item.indices(size)))
    return [int(i) for i in np.atleast_1d(np.asarray(item))]


class GuardedArray(BackendArray):
    """A backend array whose read errors name the file, the variable and the sample, handed
    out in the schema's dimension order (``dims``) whatever its stored order."""

    def __init__(self, array: BackendArray, *, source: str, name: str,
                 stored_dims: Sequence[str], dims: Sequence[str], kind: str):
        self.array = array
        self.source = source
        self.name = name
        self.stored_dims = tuple(stored_dims)
        self.dims = tuple(dims)
        self.order = tuple(self.stored_dims.index(d) for d in self.dims)
        self.shape = tuple(array.shape[axis] for axis in self.order)
        self.dtype = array.dtype
        self.kind = kind  # "zarr store", "netCDF4 file", "pdebench file", ...

    @property
    def transposed(self) -> bool:
        return self.order != tuple(range(len(self.order)))

    def __getitem__(self, key):
        if not self.transposed:
            return self._read(key)
        return indexing.explicit_indexing_adapter(key, self.shape,
                                                  indexing.IndexingSupport.OUTER,
                                                  self._read_transposed)

    async def async_getitem(self, key):
        if self.transposed:
            return self[key]
        try:
            return await self.array.async_getitem(key)
        except DatasetFileError:
            raise
        except DECODE_ERRORS as error:
            raise self._error(key, error) from error

    def _read_transposed(self, key: tuple) -> np.ndarray:
        stored: list[Any] = [slice(None)] * len(self.order)
        for axis, item in zip(self.order, key):
            stored[axis] = item
        arrays = any(isinstance(item, np.ndarray) for item in stored)
        indexer = (indexing.OuterIndexer if arrays else indexing.BasicIndexer)(tuple(stored))
        values = np.asarray(self._read(indexer))
        kept = [axis for axis, item in enumerate(stored)
                if not isinstance(item, (int, np.integer))]
        return np.transpose(values, [kept.index(axis) for axis in self.order if axis in kept])

    def _read(self, key):
        try:
            return self.array[key]
        except DatasetFileError:
            raise
        except DECODE_ERRORS as error:
            raise self._error(key, error) from error

    def _first_damaged(self, key, samples: list[int]) -> int | None:
        """Which of the samples a failed read spans is damaged: read them one by one."""
        axis = self.stored_dims.index(SAMPLE)
        for sample in samples:
            items = list(key.tuple)
            items[axis] = slice(sample, sample + 1)
            try:
                self.array[type(key)(tuple(items))]
            except DECODE_ERRORS:
                return sample
        return None

    def _error(self, key, error: BaseException) -> DatasetFileError:
        axis = self.stored_dims.index(SAMPLE) if SAMPLE in self.stored_dims else None
        size = self.array.shape[axis] if axis is not None else 0
        samples = _describe_samples(key, axis, size)
        where = ""
        if samples:
            sample = samples[0] if len(samples) == 1 else self._first_damaged(key, samples)
            if sample is None:
                where = f" at samples {samples[0]}..{samples[-1]}"
            else:
                where = f" at sample {sample}"
                chunk = (_chunk_of_sample(pathlib.Path(self.source), self.name, sample)
                         if self.kind == ZARR_STORE else None)
                if chunk is not None:
                    where += f" (chunk '{chunk}')"
        kind = self.kind
        if isinstance(error, (PermissionError, FileNotFoundError)):
            # not damage: the file is there no longer, or not for this user
            return DatasetFileError(
                f"cannot read variable '{self.name}' of {kind} '{self.source}'{where} "
                f"({type(error).__name__}: {error}): check that it still exists and that you "
                "may read it")
        return DatasetFileError(
            f"cannot decode variable '{self.name}' of {kind} '{self.source}'{where}: the file "
            f"is corrupt (underlying error: {type(error).__name__}: {error}). Regenerate or "
            f"re-copy it; {_check_hint(self.source)}")


def _permute(value: Any, order: tuple[int, ...]) -> Any:
    if isinstance(value, tuple) and len(value) == len(order):
        return tuple(value[axis] for axis in order)
    return value


def guard(ds: xr.Dataset, source: str, *, kind: str) -> xr.Dataset:
    """``ds`` (as a backend opened it, values not yet read) with every lazily read variable
    guarded, and its data variables in the schema's dimension order.

    ``kind`` names the file in messages (:data:`ZARR_STORE` gets its chunks named too).
    Variables already in memory (index coordinates) or already wrapped for dask pass as
    they are: guard a dataset before chunking it.
    """
    coords, data_vars = {}, {}
    for name, var in ds.variables.items():
        lazy = var._data  # what a backend hands xarray: LazilyIndexedArray(BackendArray)
        if not (isinstance(lazy, indexing.LazilyIndexedArray)
                and isinstance(lazy.array, BackendArray)
                and lazy.shape == lazy.array.shape):
            continue  # index coordinates: read while the backend opened the file
        dims = canonical_dims(var.dims) if name in ds.data_vars else tuple(var.dims)
        guarded = GuardedArray(lazy.array, source=source, name=str(name),
                               stored_dims=var.dims, dims=dims, kind=kind)
        encoding = dict(var.encoding)
        if guarded.transposed:
            encoding = {key: _permute(value, guarded.order) for key, value in encoding.items()}
            encoding[STORED_DIMS] = tuple(var.dims)
        variable = xr.Variable(dims, indexing.LazilyIndexedArray(guarded), var.attrs, encoding)
        (data_vars if name in ds.data_vars else coords)[name] = variable
    result = ds.assign_coords(coords).assign(data_vars)
    result.set_close(ds.close)  # closing the guarded dataset closes the file
    return result


def _guarded_backend(base: type, kind: str) -> type:
    class Guarded(base):
        # The parent's parameters: xarray reads them to route its decoding options.
        open_dataset_parameters = tuple(
            name for name in inspect.signature(base.open_dataset).parameters if name != "self")

        def open_dataset(self, filename_or_obj, **kwargs):
            ds = super().open_dataset(filename_or_obj, **kwargs)
            return guard(ds, os.fspath(filename_or_obj), kind=kind)

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


#: The xarray engines every ssmpde reader opens files with.
GuardedNetCDF4Backend = _guarded_backend(NetCDF4BackendEntrypoint, "netCDF4 file")
GuardedZarrBackend = _guarded_backend(ZarrBackendEntrypoint, ZARR_STORE)
