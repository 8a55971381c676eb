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

import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from . import formats
from .reading import _is_zarr_store, _open_dataset
from .integrity import DamagedChunk, _sample_chunk_key, _zarr_arrays, missing_chunks
from .progress import store_progress
from .schema import SAMPLE, DatasetFileError

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


def _blocks(var: xr.DataArray, ranges: list[tuple[int, int]] | None, *, coordinate: bool
            ) -> list[tuple[int, int] | None]:
    """The sample blocks of a variable to read one at a time (its chunks along ``sample``;
    one sample at a time where the file does not chunk it; coordinates whole)."""
    if SAMPLE not in var.dims or coordinate:
        return [None]
    size = var.sizes[SAMPLE]
    step = var.encoding.get("preferred_chunks", {}).get(SAMPLE) or 1
    blocks = [(start, min(start + step, size)) for start in range(0, size, step)]
    if ranges is not None:
        blocks = [(a, b) for a, b in blocks if any(s < b and a < e for s, e in ranges)]
    return blocks


def _read_problem(var: xr.DataArray, block: tuple[int, int] | None) -> str | None:
    part = var if block is None else var.isel({SAMPLE: slice(*block)})
    try:
        values = np.asarray(part.values)
    except DatasetFileError as error:
        cause = error.__cause__ if error.__cause__ is not None else error
        return f"undecodable ({type(cause).__name__}: {cause})"
    if values.dtype.kind in "fc":
        bad = int(np.count_nonzero(~np.isfinite(values)))
        if bad:
            return f"{bad} non-finite value{'s' if bad > 1 else ''}"
    return None


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
        plan = [(name, block) for name in ds.variables
                for block in _blocks(ds[name], ranges, coordinate=name in ds.coords)]
        bar = tqdm(total=len(plan), unit="chunk", desc=f"checking {source.name}",
                   disable=not progress, leave=False)
        try:
            for name, block in plan:
                array = arrays.get(str(name))
                key = None if array is None else _sample_chunk_key(
                    array, None if block is None else block[0])
                absent = _absent(missing.get(str(name), {}), block)
                if absent:  # read, they would give zeros: nothing to decode
                    damaged.extend(absent)
                else:
                    problem = _read_problem(ds[name], block)
                    if key is not None and (problem is None or "undecodable" not in problem):
                        problem = (_blosc_frame_problem(array, source / str(name) / key)
                                   or problem)
                    if problem is not None:
                        damaged.append(DamagedChunk(str(name), key, block, problem))
                bar.update()
        finally:
            bar.close()
    return IntegrityReport(source, len(plan), len(ds.variables), damaged, note)


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
