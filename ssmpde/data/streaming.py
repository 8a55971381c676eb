"""Reading a whole dataset through in blocks of samples sized by bytes, not one sample at a time.

A command that reads every value (``ssmpde info``'s minima and maxima, ``info --check``,
``convert``, an export) goes through the samples in blocks of about :data:`STREAM_BYTES`
(16 MiB; at most :data:`STREAM_SAMPLES` samples where they are written): memory stays
bounded, and the work per block (a dask task, a file read, a Python iteration) is paid once
per block instead of once per sample. A file of ten million tiny samples (a damaged or
hand-made header, or a real one) is then read in a few dozen blocks; one task per sample made
ten million dask tasks, gigabytes of bookkeeping and minutes before the first value was read.
"""

from __future__ import annotations

from collections.abc import Iterator

import xarray as xr

from .schema import SAMPLE

__all__ = ["STREAM_BYTES", "STREAM_SAMPLES", "sample_blocks", "samples_per_block", "stream_chunks"]

#: The bytes of one block of samples (all variables together) when a dataset is read through.
STREAM_BYTES = 16 * 2 ** 20
#: The most samples in one block: HDF5 keeps about 6 KB of bookkeeping for every chunk one
#: write touches (ssmpde's files hold a sample a chunk), 6 GB for a block of a million.
STREAM_SAMPLES = 4096


def samples_per_block(ds: xr.Dataset | xr.DataArray, budget: int = STREAM_BYTES, *,
                      most: int | None = None) -> int:
    """How many samples hold about ``budget`` bytes of ``ds``'s variables (at least one, at most
    ``most``).

    Parameters
    ----------
    ds : xarray.Dataset or xarray.DataArray
        Only the sizes and dtypes are used: nothing is read.
    budget : int
        Bytes of one block, every variable with a ``sample`` dimension counted.
    most : int, optional
        The most samples in a block: :data:`STREAM_SAMPLES` for blocks that are written.
    """
    variables = [ds.variable] if isinstance(ds, xr.DataArray) else ds.variables.values()
    per_sample = sum(var.dtype.itemsize * (var.size // var.sizes[SAMPLE])
                     for var in variables if SAMPLE in var.dims and var.sizes[SAMPLE])
    count = max(1, budget // max(1, per_sample))
    return count if most is None else min(count, most)


def stream_chunks(ds: xr.Dataset, *, most: int | None = None) -> dict[str, int]:
    """The dask chunks (``ds.chunk(...)``) of blocks of :func:`samples_per_block` samples."""
    return {SAMPLE: samples_per_block(ds, most=most)} if SAMPLE in ds.dims else {}


def sample_blocks(ds: xr.Dataset | xr.DataArray, start: int = 0, stop: int | None = None,
                  budget: int = STREAM_BYTES) -> Iterator[range]:
    """The sample positions ``start..stop - 1`` of ``ds`` (default: all) in blocks of about
    ``budget`` bytes, to read one block at a time.

    A dataset chunked by dask along ``sample`` is cut at its chunks' edges only, so that a block
    computes whole chunks (several at once where they are small) and no chunk twice.

    Yields
    ------
    range
        Consecutive positions along ``sample``, together ``range(start, stop)``.
    """
    size = ds.sizes.get(SAMPLE, 0)
    stop = size if stop is None else min(stop, size)
    step = samples_per_block(ds, budget)
    chunks = ds.chunksizes.get(SAMPLE) if ds.chunks else None
    if chunks:
        edges, edge = [], 0
        for length in chunks:
            edge += length
            edges.append(edge)
    else:
        edges = list(range(step, size, step)) + [size]
    first = start
    for edge in edges:
        if first >= stop:
            return
        if edge - first < step and edge < stop:
            continue  # a small chunk: the block takes the next one too
        end = min(edge, stop)
        if end > first:
            yield range(first, end)
            first = end
