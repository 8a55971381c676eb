"""Chunks of a PDEBench file that its writer never wrote: found with h5py, for ``open``'s refusal
and ``ssmpde info --check``."""

from __future__ import annotations

import math
import pathlib
from typing import Any

from ...integrity import DamagedChunk
from ...schema import DatasetFileError

# The name netCDF gives the HDF5 datasets it makes for dimensions without a variable.
_NETCDF_DIMENSION = b"This is a netCDF dimension but not a netCDF variable"
# `ssmpde info --check` lists unwritten samples one row of chunks a line up to this many
# rows, and in runs beyond it (a header that promises 10⁹ samples).
_LISTED_ROWS = 10_000


def _unwritten(path: pathlib.Path) -> tuple[list[tuple[DamagedChunk, int, int]], int, int] | None:
    """The never-written parts of a file's datasets, each with its number of chunks and its
    chunk length along ``sample`` (0 where it has none); the number of parts checked (a row
    of chunks along ``sample`` of a stacked dataset, else a whole dataset) and of datasets.
    None without h5py (netCDF reads an unwritten chunk as it reads a written one).

    HDF5 allocates storage for a chunk (or a contiguous dataset) when it is first written and
    reads one without storage as the fill value (zeros): a file whose writer stopped early
    reads as data. The sample of a chunk is known for the stacked datasets at the root (their
    first axis) and for the per-sample groups.
    """
    try:
        import h5py
    except ImportError:
        return None
    found: list[tuple[DamagedChunk, int, int]] = []
    total = datasets = 0
    with h5py.File(path, "r") as f:
        items: list[tuple[str, Any]] = []
        f.visititems(lambda name, obj: items.append((name, obj))
                     if isinstance(obj, h5py.Dataset) else None)
        for name, dataset in items:
            if dataset.size == 0 or dataset.is_virtual or dataset.external:
                continue  # nothing to hold, or held elsewhere
            label = dataset.attrs.get("NAME") if "NAME" in dataset.attrs else None
            if isinstance(label, bytes) and label.startswith(_NETCDF_DIMENSION):
                continue  # netCDF's stand-in for a dimension: never holds data
            datasets += 1
            top = name.split("/", 1)[0]
            group_sample = int(top) if "/" in name and top.isdigit() else None
            stacked = "/" not in name and dataset.ndim >= 2
            found.extend(_unwritten_parts(dataset, name, group_sample, stacked))
            chunks = dataset.chunks
            total += math.ceil(dataset.shape[0] / chunks[0]) if stacked and chunks else 1
    return found, total, datasets


def _unwritten_parts(dataset, name: str, group_sample: int | None,
                     stacked: bool) -> list[tuple[DamagedChunk, int, int]]:
    """The unwritten runs of one dataset: a run of samples each, else the whole dataset."""
    chunks = dataset.chunks
    allocated = dataset.id.get_storage_size() > 0
    samples = None if group_sample is None else (group_sample, group_sample + 1)
    if chunks is None:
        return [] if allocated else [(DamagedChunk(name, None, samples, _never(1)), 1, 0)]
    grid = [math.ceil(n / c) for n, c in zip(dataset.shape, chunks)]
    expected = math.prod(grid)
    present = dataset.id.get_num_chunks() if allocated else 0
    if present >= expected:
        return []
    if not stacked:
        missing = expected - present
        return [(DamagedChunk(name, None, samples, _never(missing)), missing, 0)]
    # Count the chunks present per row of chunks along the sample axis (bounded by what the
    # file holds); the rows not complete are unwritten, reported as runs of samples.
    per_row = expected // grid[0]
    rows: dict[int, int] = {}

    def count(info) -> None:
        row = info.chunk_offset[0] // chunks[0]
        rows[row] = rows.get(row, 0) + 1

    if present:
        if hasattr(dataset.id, "chunk_iter"):
            dataset.id.chunk_iter(count)
        else:  # pragma: no cover (h5py < 3.8)
            for index in range(present):
                count(dataset.id.get_chunk_info(index))
    complete = sorted(row for row, n in rows.items() if n == per_row)
    runs, start = [], 0
    for row in [*complete, grid[0]]:
        if row > start:
            runs.append((start, row))
        start = row + 1
    parts = []
    for first, stop in runs:
        missing = (stop - first) * per_row - sum(n for row, n in rows.items()
                                                 if first <= row < stop)
        span = (first * chunks[0], min(stop * chunks[0], dataset.shape[0]))
        parts.append((DamagedChunk(name, None, span, _never(missing)), missing, chunks[0]))
    return parts


def _never(count: int) -> str:
    chunks = "1 chunk" if count == 1 else f"{count} chunks"
    return f"never written ({chunks} without storage: HDF5 reads them as zeros)"


def unwritten_chunks(path: pathlib.Path) -> tuple[list[DamagedChunk], int, int] | None:
    """The never-written chunks of a PDEBench file, for ``ssmpde info --check``.

    Returns
    -------
    (list of DamagedChunk, int, int) or None
        The unwritten parts (problem ``"never written (...)"``: a run of samples of a stacked
        dataset, one sample group's dataset, or a whole dataset), the number of chunks and of
        datasets checked; None without h5py, which tells an unwritten chunk from a written
        one (netCDF reads both alike).
    """
    found = _unwritten(path)
    if found is None:
        return None
    parts, total, datasets = found
    listed: list[DamagedChunk] = []
    rows = sum(-(-(c.samples[1] - c.samples[0]) // step) for c, _, step in parts if step)
    for chunk, count, step in parts:
        if not step or rows > _LISTED_ROWS or count == 1:
            listed.append(chunk)
            continue
        # One line per row of chunks along `sample`, as zarr stores are listed.
        start, stop = chunk.samples
        for first in range(start, stop, step):
            span = (first, min(first + step, stop))
            listed.append(DamagedChunk(chunk.variable, None, span,
                                       "never written (no storage: HDF5 reads it as zeros)"))
    return listed, total, datasets


def _refuse_unwritten(path: pathlib.Path) -> None:
    found = _unwritten(path)
    if not found or not found[0]:
        return
    parts = found[0]
    first, count, _ = parts[0]
    where = "" if first.samples is None else f" ({_samples(first.samples)})"
    more = sum(n for _, n, _ in parts[1:])
    also = f", and {more} more chunk{'s' if more > 1 else ''} elsewhere" if more else ""
    raise DatasetFileError(
        f"'{path}': the dataset '{first.variable}'{where} was never written ({count} "
        f"chunk{'s' if count > 1 else ''} without storage{also}): HDF5 reads them as zeros, "
        "which are not data. The file is incomplete (its writer stopped early, or a copy was "
        f"cut short): regenerate or re-download it; `ssmpde info --check {path}` lists every "
        "unwritten chunk")


def _samples(span: tuple[int, int]) -> str:
    start, stop = span
    return f"sample {start}" if stop == start + 1 else f"samples {start}..{stop - 1}"
