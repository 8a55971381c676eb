"""Reading every chunk of a dataset: :func:`check_file`, the text of ``ssmpde info --check``.

It opens a file through the guarded readers of :mod:`ssmpde.data.reading` and
:mod:`ssmpde.data.integrity` and reads it chunk by chunk, so that one damaged chunk is named
and the others are still read: missing zarr chunks, chunks that do not decode, chunks holding
NaN or infinity, blosc chunks cut short, and the never-written chunks of a foreign format's
file.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import warnings
from collections.abc import Iterator

import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from . import formats
from .reading import _is_zarr_store, _open_dataset
from .integrity import DamagedChunk, _sample_chunk_key, _zarr_arrays, missing_chunks
from .progress import store_progress
from .schema import SAMPLE, DatasetFileError
from .streaming import samples_per_block

__all__ = ["IntegrityReport", "check_file"]

@dataclasses.dataclass
class IntegrityReport:
    """What :func:`check_file` found.

    Attributes
    ----------
    path : pathlib.Path
    chunks, variables : int
        Chunks read (or found missing) and variables checked.
    damaged : list of DamagedChunk
        Every chunk that did not read as data, in the order of the variables.
    note : str
        For a store still being written: which samples were checked.
    """

    path: pathlib.Path
    chunks: int
    variables: int
    damaged: list[DamagedChunk]
    note: str = ""

    def summary(self) -> str:
        """E.g. ``check: all 12 chunks of 6 variables read``."""
        if not self.damaged:
            return f"check: all {self.chunks} chunks of {self.variables} variables read"
        return f"check: {len(self.damaged)} of {self.chunks} chunks damaged"

    def text(self) -> str:
        lines = [f"path: {self.path}"]
        if self.note:
            lines.append(self.note)
        lines.append(self.summary() + (":" if self.damaged else ""))
        lines.extend(f"  {chunk.where()}: {chunk.problem}" for chunk in self.damaged)
        return "\n".join(lines)


def _spans(var: xr.DataArray, ranges: list[tuple[int, int]] | None, *, coordinate: bool
           ) -> tuple[int, list[tuple[int, int]] | None]:
    """The chunk length along ``sample`` of a variable (its chunks are read whole; one sample
    where the file does not chunk it) and the spans of samples to check, of whole chunks
    (those of a store's complete samples: ``ranges``); None: the variable whole (no
    ``sample``, or a coordinate)."""
    if SAMPLE not in var.dims or coordinate:
        return 1, None
    size = var.sizes[SAMPLE]
    step = var.encoding.get("preferred_chunks", {}).get(SAMPLE) or 1
    if ranges is None:
        return step, [(0, size)] if size else []
    spans: list[tuple[int, int]] = []
    for start, stop in sorted(ranges):
        first, last = start // step * step, min(-(-stop // step) * step, size)
        if first >= last:
            continue
        if spans and first <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], last))
        else:
            spans.append((first, last))
    return step, spans


def _chunks_in(step: int, spans: list[tuple[int, int]] | None) -> int:
    return 1 if spans is None else sum(-(-(stop - start) // step) for start, stop in spans)


def _groups(var: xr.DataArray, step: int, spans: list[tuple[int, int]] | None
            ) -> Iterator[tuple[int, int] | None]:
    """The parts of ``spans`` read at once: whole chunks, about
    :data:`~ssmpde.data.streaming.STREAM_BYTES` a read (a file of millions of one-sample
    chunks is a few dozen reads, not millions)."""
    if spans is None:
        yield None
        return
    length = max(step, samples_per_block(var) // step * step)
    for start, stop in spans:
        for first in range(start, stop, length):
            yield first, min(first + length, stop)


def _read_problems(var: xr.DataArray, group: tuple[int, int] | None, step: int
                   ) -> tuple[list[tuple[int, int] | None], list[str]]:
    """The chunks of ``group`` (chunks of ``step`` samples of ``var``, read at once) that do
    not read as data, and what is wrong with each. A group that does not decode is read
    again chunk by chunk, to name each damaged one."""
    part = var if group is None else var.isel({SAMPLE: slice(*group)})
    try:
        values = np.asarray(part.values)
    except DatasetFileError as error:
        if group is not None and group[1] - group[0] > step:
            found: tuple[list, list] = ([], [])
            for first in range(group[0], group[1], step):
                blocks, problems = _read_problems(var, (first, min(first + step, group[1])),
                                                  step)
                found[0].extend(blocks)
                found[1].extend(problems)
            return found
        cause = error.__cause__ if error.__cause__ is not None else error
        return [group], [f"undecodable ({type(cause).__name__}: {cause})"]
    if values.dtype.kind not in "fc":
        return [], []
    if group is None:
        counts, blocks = [int(np.count_nonzero(~np.isfinite(values)))], [None]
    else:
        axis = var.get_axis_num(SAMPLE)
        per_sample = np.count_nonzero(~np.isfinite(np.moveaxis(values, axis, 0)).reshape(
            values.shape[axis], -1), axis=1)
        offsets = np.arange(0, len(per_sample), step)
        counts = np.add.reduceat(per_sample, offsets) if len(per_sample) else []
        blocks = [(group[0] + a, min(group[0] + a + step, group[1])) for a in offsets]
    bad = [(block, int(n)) for block, n in zip(blocks, counts) if n]
    return ([block for block, _ in bad],
            [f"{n} non-finite value{'s' if n > 1 else ''}" for _, n in bad])


def check_file(path: str | os.PathLike, *, progress: bool = True) -> IntegrityReport:
    """Read every chunk of a dataset file or zarr store and report every damaged one.

    Parameters
    ----------
    path : str or os.PathLike
        A netCDF4 file or a zarr store (one still being written: its finished samples).
    progress : bool
        Show a progress bar on stderr.

    Returns
    -------
    IntegrityReport
        Damaged chunks: missing (zarr), undecodable, or holding NaN or infinity. netCDF files
        are read one sample chunk at a time, zarr stores one chunk at a time (their chunks
        along ``sample``). A foreign format's file whose chunks were never written (a
        PDEBench file cut short: its format's ``unwritten_chunks``) lists those, unread.

    Raises
    ------
    FileNotFoundError, DatasetFileError
        If the file cannot be opened at all (then nothing inside it can be checked).
    """
    source = pathlib.Path(os.fspath(path)).expanduser()
    record = store_progress(source)
    ranges = None if record is None else list(record.complete)
    note = "" if record is None else (f"status: being written, {record.summary()}; "
                                      "checked: its complete samples")
    zarr_store = _is_zarr_store(source)
    unwritten = None if zarr_store else _unwritten_chunks(source)
    if unwritten is not None and unwritten[0]:
        # Such a file does not open (it would read zeros); its other values wait for a copy
        # that is whole.
        damaged, chunks, variables = unwritten
        return IntegrityReport(source, chunks, variables, damaged,
                               "checked: chunk storage only (the file has chunks that were "
                               "never written, so its values are not read)")
    missing: dict[str, dict[tuple[int, int] | None, DamagedChunk]] = {}
    with warnings.catch_warnings():
        # A store being written may meet the temporary of a progress update (as describe).
        warnings.filterwarnings("ignore", message=r"Object at .*\.partial is not recognized")
        ds = _open_dataset(source, validate=False, chunks=None, in_progress=True,
                           check_chunks=False)
        try:
            if zarr_store:
                # every absent chunk, also of variables that read it as their fill value
                for chunk in missing_chunks(source, complete=ranges)[0]:
                    missing.setdefault(chunk.variable, {})[chunk.samples] = chunk
            arrays = _zarr_arrays(source) if zarr_store else {}
        except BaseException:
            ds.close()
            raise
    with ds:
        damaged: list[DamagedChunk] = []
        plan = {name: _spans(ds[name], ranges, coordinate=name in ds.coords)
                for name in ds.variables}
        chunks = sum(_chunks_in(*spans) for spans in plan.values())
        bar = tqdm(total=chunks, unit="chunk", desc=f"checking {source.name}",
                   disable=not progress, leave=False)
        try:
            for name, (step, spans) in plan.items():
                for group in _groups(ds[name], step, spans):
                    damaged.extend(_check_group(ds[name], group, step, arrays.get(str(name)),
                                                missing.get(str(name), {}), source))
                    bar.update(_chunks_in(step, None if group is None else [group]))
        finally:
            bar.close()
    return IntegrityReport(source, chunks, len(ds.variables), damaged, note)


def _check_group(var: xr.DataArray, group: tuple[int, int] | None, step: int, array,
                 missing: dict[tuple[int, int] | None, DamagedChunk],
                 source: pathlib.Path) -> list[DamagedChunk]:
    """The damaged chunks of ``group`` of ``var``, in order. A zarr store's chunks (files,
    ``array`` its metadata) one at a time: the missing ones unread, each file's blosc frame
    checked; a file's chunks read at once (:func:`_read_problems`)."""
    if array is None:
        return [DamagedChunk(str(var.name), None, block, problem)
                for block, problem in zip(*_read_problems(var, group, step))]
    damaged: list[DamagedChunk] = []
    blocks = [None] if group is None else [(first, min(first + step, group[1]))
                                           for first in range(group[0], group[1], step)]
    for block in blocks:
        absent = _absent(missing, block)
        if absent:  # read, they would give zeros: nothing to decode
            damaged.extend(absent)
            continue
        key = _sample_chunk_key(array, None if block is None else block[0])
        found = _read_problems(var, block, step)[1]
        problem = found[0] if found else None
        if key is not None and (problem is None or "undecodable" not in problem):
            problem = _blosc_frame_problem(array, source / str(var.name) / key) or problem
        if problem is not None:
            damaged.append(DamagedChunk(str(var.name), key, block, problem))
    return damaged


def _unwritten_chunks(source: pathlib.Path) -> tuple[list[DamagedChunk], int, int] | None:
    """The never-written chunks of a foreign format's file, if its format can tell."""
    if not source.is_file():
        return None
    foreign = formats.sniff(source)
    listing = getattr(foreign, "unwritten_chunks", None)
    return None if listing is None else listing(source)


def _absent(missing: dict[tuple[int, int] | None, DamagedChunk],
            block: tuple[int, int] | None) -> list[DamagedChunk]:
    """The missing chunks of one variable that a block of :func:`check_file` would read."""
    if not missing:
        return []
    if block is None:  # the whole variable in one read
        return list(missing.values())
    if block in missing:  # blocks are the store's chunks along sample: the usual case
        return [missing[block]]
    return [chunk for samples, chunk in missing.items()
            if samples is None or (samples[0] < block[1] and block[0] < samples[1])]


def _blosc_frame_problem(array, chunk: pathlib.Path) -> str | None:
    """Whether a blosc-compressed zarr (format 2) chunk file is as long as its header says.

    blosc keeps an incompressible chunk as a plain copy and, given fewer bytes than its
    header promises, decodes whatever memory follows them without an error: only the length
    tells a truncated chunk (in stores without a checksum) from a whole one.
    """
    compressor = getattr(array.metadata, "compressor", None)
    if getattr(compressor, "codec_id", None) != "blosc":
        return None
    try:
        with open(chunk, "rb") as handle:
            header = handle.read(16)
        size = chunk.stat().st_size
    except OSError as error:
        return f"unreadable ({type(error).__name__}: {error})"
    if len(header) < 16:
        return f"undecodable (truncated: {size} bytes, shorter than a blosc header)"
    promised = int.from_bytes(header[12:16], "little")
    if size != promised:
        return f"undecodable (truncated or padded: {size} bytes, its blosc header says {promised})"
    return None
