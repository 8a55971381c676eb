"""Batched, seeded, resumable dataset generation.

:func:`generate` runs any registered solver over ``num_samples`` samples in batches. Sample
*i* depends only on ``(seed, i)`` and the config, never on the batch size. With ``out``,
every finished batch is written atomically as a part file in a hidden folder beside the
target (``.NAME.parts/``); an interrupted run (Ctrl-C, a killed job, a crash) loses at most the
batch in flight, and the same call resumes from the parts on disk. When every sample is done,
the parts are merged into the target (again through a temporary name) and removed.

Reliability: the whole run (parts and merge) holds the output's lock, so two runs never
write the same dataset; what a killed merge left is removed first; the planned peak memory
is checked against a limit before anything is allocated; the bookkeeping of finished parts
is a list of sample ranges, so a huge ``num_samples`` costs nothing until it is computed.

Scale-out (``scheduler=`` or ``workers=``): each batch is one dask.distributed task. The
driver lays out the whole zarr store first (:func:`ssmpde.data.create_store`, one sample per
chunk), every task computes its batch and writes its own region of the store
(:func:`ssmpde.data.write_store_region`, so writes never overlap), and the driver, the only
writer of the bookkeeping, adds each finished batch to the store's progress record
(:class:`ssmpde.data.StoreProgress`) once its task has returned. A rerun of the same call
computes only the batches missing from that record; the last batch marks the store complete
(:func:`ssmpde.data.finish_store`). Both paths share the config check of a resume, the per-batch
computation and the bookkeeping of sample ranges, so a store holds the same numbers as the
in-process run. See ``docs/scale-out.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import importlib.util
import json
import os
import pickle
import re
import sys
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from .. import __version__, core, data
from .base import Solver, SolverDivergedError, get_solver
from .spectral import default_threads

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["generate", "parts_directory"]

# Part files are named by their sample range [start, stop); 8 digits at least, more beyond.
_PART = re.compile(r"^part-(\d{8,})-(\d{8,})\.nc$")
# What an interrupted atomic write of a part or of the manifest leaves in the parts folder.
_TEMPORARY = re.compile(r"^\.(part-\d{8,}-\d{8,}|manifest)\.tmp-[0-9a-f]{32}\.(nc|json)$")
_MANIFEST = "manifest.json"
_SUFFIXES = (".nc", ".nc4", ".netcdf", ".zarr")
#: The most samples one call generates (sample indices and part names stay small).
MAX_SAMPLES = 10 ** 9
_RAISE_LIMIT = "raise --max-memory / SSMPDE_MAX_MEMORY"
# A dask scheduler address: protocol://anything (tcp, tls, ucx, inproc) or host:port.
_ADDRESS = re.compile(r"^([a-z][a-z0-9+.-]*://\S+|[\w.-]+:\d+)$")
# How TimeDependentSolver.simulate names the diverged rows of a batch.
_DIVERGED_ROWS = re.compile(r"batch rows \[([\d, ]*)\]")
# The thread pools a worker's environment sizes (numba's own, OpenMP, BLAS).
_THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                     "OPENBLAS_NUM_THREADS")


def parts_directory(out: str | os.PathLike) -> Path:
    """Where :func:`generate` keeps finished batches of an unfinished run for ``out``."""
    out = Path(out)
    return out.parent / f".{out.name}.parts"


def _check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum:_} (one call generates at most "
                         f"10**9 samples), got {int(value):_}: generate several datasets with "
                         "different seeds instead")
    return int(value)


def _check_target(out: Path) -> None:
    """Generate's own checks of ``out``, before any work: suffix and parent directory."""
    if out.suffix not in _SUFFIXES:
        raise ValueError(f"output {str(out)!r} has an unknown suffix: use one of "
                         f"{', '.join(_SUFFIXES)} (netCDF4, or zarr for .zarr)")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output directory '{out.parent}' does not exist; create it "
                                f"first (mkdir -p {out.parent})")


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    raise AssertionError  # pragma: no cover


def _gib(nbytes: float) -> str:
    value = nbytes / 2 ** 30
    return f"{value:,.0f} GiB" if value >= 100 else f"{value:.3g} GiB"


def _check_memory(solver: Solver, num_samples: int, batch_size: int, in_memory: bool,
                  max_memory: int | str | None, concurrent: int = 1) -> None:
    """Refuse a run whose planned peak memory exceeds the limit, before anything is allocated.

    Peak: ``batch_size`` samples in flight (:meth:`Solver.bytes_per_sample`) in each of the
    ``concurrent`` batches this machine computes at once (the workers of a local cluster),
    plus, without ``out``, the whole dataset held in memory twice (the batches and their
    concatenation).
    """
    limit = core.memory_limit(max_memory)
    per_sample = int(solver.bytes_per_sample())
    if per_sample > limit:
        raise ValueError(
            f"one sample of this configuration needs about {_gib(per_sample)} at once "
            f"({solver.name}: {_size(solver.stored_bytes_per_sample())} stored, the rest "
            f"solver working memory), more than the limit of {_gib(limit)}: lower the "
            f"resolution, or {_RAISE_LIMIT}")
    batch = min(batch_size, num_samples)
    concurrent = max(1, min(concurrent, -(-num_samples // batch)))
    needed = concurrent * batch * per_sample
    parts = [f"batch of {batch} x {_size(per_sample)} a sample"]
    if concurrent > 1:
        parts[0] = f"{concurrent} batches at once (one a worker), each a {parts[0]}"
    if in_memory:
        held = 2 * num_samples * int(solver.stored_bytes_per_sample())
        needed += held
        parts.append(f"the in-memory result: {num_samples:_} samples x "
                     f"{_size(held // (2 * num_samples))}, twice while they are joined")
    if needed > limit:
        advice = "lower --batch-size" + (", --workers" if concurrent > 1 else "") + \
            " or the resolution"
        if in_memory:
            advice += ", write to a file (out=...) instead of memory"
        raise ValueError(f"this run needs about {_gib(needed)} at once "
                         f"({'; '.join(parts)}), more than the limit of {_gib(limit)}: "
                         f"{advice}, or {_RAISE_LIMIT}")


def _missing(ranges: list[tuple[int, int]], num_samples: int,
             batch_size: int) -> Iterator[tuple[int, int]]:
    """The batches ``[start, stop)`` still to compute: the gaps between the finished
    ``ranges`` (sorted), cut into pieces of at most ``batch_size``. Lazy: O(1) memory."""
    position = 0
    for start, stop in [*ranges, (num_samples, num_samples)]:
        for first in range(position, min(start, num_samples), batch_size):
            yield first, min(first + batch_size, start, num_samples)
        position = max(position, stop)


def _count(ranges: list[tuple[int, int]]) -> int:
    return sum(stop - start for start, stop in ranges)


def _is_manifest(value: Any) -> bool:
    return isinstance(value, dict) and "config" in value and "history" in value


def _foreign_entries(directory: Path) -> list[str]:
    """Entries of a parts folder that ssmpde does not write there (empty: all ours).

    Ours: part files, the manifest, and the temporaries an interrupted write of either
    leaves. A ``manifest.json`` that is valid JSON but not an ssmpde manifest is foreign; one
    that cannot be parsed (a crash while it was written) counts as ours.
    """
    foreign = []
    for entry in sorted(directory.iterdir()):
        name = entry.name
        if entry.is_symlink() or not entry.is_file():
            foreign.append(name)
        elif name == _MANIFEST:
            try:
                manifest = json.loads(entry.read_text())
            except (OSError, ValueError):
                continue
            if not _is_manifest(manifest):
                foreign.append(name)
        elif not (_PART.match(name) or _TEMPORARY.match(name)):
            foreign.append(name)
    return foreign


def _discard(directory: Path) -> None:
    """Delete an unfinished run's parts folder, refusing one holding anything else."""
    if directory.is_symlink() or not directory.is_dir():
        raise ValueError(f"'{directory}' is not a parts folder ssmpde wrote (it is not a "
                         "directory): refusing to delete it; remove it yourself or choose "
                         "another output")
    foreign = _foreign_entries(directory)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(f"'{directory}' holds files ssmpde did not write ({shown}): refusing "
                         "to delete it; remove it yourself or choose another output")
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


def _run_config(solver: Solver, num_samples: int, seed: int) -> dict[str, Any]:
    """What pins a dataset: a resume continues only a run with exactly this config."""
    return {"equation": solver.name, "num_samples": num_samples, "seed": seed,
            "solver": solver.config_dict()}


def _history(equation: str) -> str:
    return (f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}"
            f": generated by ssmpde {__version__} "
            f"(ssmpde.solvers.generate, equation {equation})")


def _can_resume(stored: dict[str, Any], run_config: dict[str, Any], where: Path, kind: str,
                *, overwrite: bool) -> bool:
    """Whether an unfinished run stored in ``where`` (a ``kind``: folder or store) continues:
    True for the same config, False where ``overwrite`` discards another config; else an
    error that shows both configs and the ways out."""
    if stored == run_config:
        return True
    if overwrite:
        return False
    raise ValueError(
        f"an unfinished run with a different configuration is stored in '{where}'. Rerun with "
        f"the same settings to resume it, delete that {kind} to start afresh, or pass "
        f"--overwrite (overwrite=True) to discard it.\n  stored: {json.dumps(stored)}"
        f"\n  now:    {json.dumps(run_config)}")


def _batch_dataset(solver: Solver, seed: int, start: int, stop: int,
                   run_config: dict[str, Any], history: str,
                   progress: Callable[[float], None] | None = None) -> xr.Dataset:
    """Samples ``start .. stop - 1`` as a dataset: the computation every path shares."""
    batch = list(range(start, stop))
    outputs = solver.solve_batch(solver.sample_inputs(seed, batch), progress=progress)
    return solver.to_dataset(outputs, batch, config=run_config, history=history)


def _interrupted(saved: int, num_samples: int, where: Path) -> KeyboardInterrupt:
    return KeyboardInterrupt(f"interrupted: {saved} of {num_samples} samples are saved in "
                             f"'{where}'; run the same command again to resume")


class _Parts:
    """The part files of one unfinished run, with a manifest that pins its config.

    Call under the output's lock. A folder left by a run with another configuration (or
    without a readable manifest) is an error, or with ``overwrite`` is discarded, provided it
    holds only what ssmpde writes there.
    """

    def __init__(self, out: Path, run_config: dict[str, Any], *, overwrite: bool) -> None:
        self.directory = parts_directory(out)
        self.manifest = self.directory / _MANIFEST
        if self.directory.exists() or self.directory.is_symlink():
            problem, stored = self._read()
            if problem is not None and not overwrite:
                raise ValueError(f"cannot resume: {problem}. Delete '{self.directory}' to "
                                 "start the run again, or pass --overwrite "
                                 "(overwrite=True) to discard it")
            if problem is None and _can_resume(stored["config"], run_config, self.directory,
                                               "folder", overwrite=overwrite):
                self.history = stored["history"]
                self._remove_temporaries()
                return
            _discard(self.directory)
        self.directory.mkdir()
        self.history = _history(run_config["equation"])
        with data.atomic_path(self.manifest) as tmp:
            tmp.write_text(json.dumps({"config": run_config, "history": self.history},
                                      indent=1))

    def _read(self) -> tuple[str | None, dict[str, Any]]:
        """(None, manifest) or (what is wrong, {})."""
        if self.directory.is_symlink() or not self.directory.is_dir():
            return f"'{self.directory}' is not a directory", {}
        try:
            manifest = json.loads(self.manifest.read_text())
        except (OSError, ValueError) as error:
            return f"'{self.manifest}' is missing or unreadable ({error})", {}
        if not _is_manifest(manifest):
            return f"'{self.manifest}' is not an ssmpde manifest", {}
        return None, manifest

    def _remove_temporaries(self) -> None:
        """What a killed writer of a part left (the parts themselves are complete)."""
        for entry in self.directory.iterdir():
            if _TEMPORARY.match(entry.name) and entry.is_file() and not entry.is_symlink():
                entry.unlink()

    def ranges(self) -> list[tuple[int, int]]:
        """The sample ranges ``(start, stop)`` of the complete parts on disk, sorted."""
        found = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                match = _PART.match(entry.name)
                if match and int(match[2]) > int(match[1]):
                    found.append((int(match[1]), int(match[2])))
        return sorted(found)

    def path(self, start: int, stop: int) -> Path:
        return self.directory / f"part-{start:08d}-{stop:08d}.nc"

    def remove(self) -> None:
        """Delete the folder after the merge (anything ssmpde did not write stays, with a
        warning)."""
        foreign = _foreign_entries(self.directory)
        for entry in self.directory.iterdir():
            if entry.name not in foreign:
                entry.unlink()
        if foreign:
            warnings.warn(f"left '{self.directory}' in place: it holds files ssmpde did not "
                          f"write ({', '.join(foreign[:5])})", stacklevel=3)
        else:
            self.directory.rmdir()


def generate(name: str | Solver, *, num_samples: int, seed: int = 0,
             out: str | os.PathLike | None = None, batch_size: int = 8,
             preset: str | None = None, overwrite: bool = False, progress: bool = True,
             max_memory: int | str | None = None, scheduler: str | Client | None = None,
             workers: int | None = None, retries: int = 2, **config: Any) -> xr.Dataset:
    """Generate a dataset with a registered solver.

    Parameters
    ----------
    name : str or Solver
        Registered equation name (``ssmpde.solvers.list_solvers()``) or a solver instance.
    num_samples : int
        Number of samples (trajectories or input/output pairs), at most 10**9.
    seed : int
        Master seed. Sample ``i`` is a pure function of ``(seed, i)`` and the config.
    out : path, optional
        netCDF4 (``.nc``) or zarr (``.zarr``) file to write. Finished batches are kept in
        :func:`parts_directory` until the run completes, so a rerun resumes. The whole run
        holds the output's lock (:func:`ssmpde.data.output_lock`): a second run to the same
        ``out`` fails at once with :class:`ssmpde.data.OutputLockedError`. With a
        ``scheduler``, a ``.zarr`` store that is written in place (see Notes).
    batch_size : int
        Samples integrated together (one FFT plan for the batch). Does not change results.
    preset : str, optional
        Named configuration of the solver (e.g. ``"torus-vis"``); ``config`` overrides it.
    overwrite : bool
        Replace an existing ``out`` written by ssmpde (never a directory ssmpde did not
        write), and discard an unfinished run for ``out`` stored with another configuration.
    progress : bool
        Show a tqdm progress bar (samples/s; batches on a cluster, after a line naming the
        scheduler and its dashboard).
    max_memory : int or str, optional
        The most memory the run may plan to use at once: bytes, or a size such as ``"8G"``.
        Default: the environment variable ``SSMPDE_MAX_MEMORY``, else 80 % of the memory
        available now. A run estimated above it (``batch_size`` times
        :meth:`Solver.bytes_per_sample`, times the workers of a local cluster, plus the whole
        dataset without ``out``) is refused before anything is allocated.
    scheduler : {None, "local"}, str or distributed.Client
        None (the default, unless ``workers`` is given): compute in this process.
        ``"local"``: start a dask ``LocalCluster`` of ``workers`` processes for this run.
        An address such as ``"tcp://10.0.0.5:8786"``: use a running dask scheduler, whose
        workers must see ``out`` at the same path (a shared file system). A
        ``distributed.Client``: use it (it is left open).
    workers : int, optional
        Worker processes of the local cluster (default: one per core); giving it alone
        implies ``scheduler="local"``. Each worker runs one batch at a time with
        ``cores // workers`` numba and FFTW threads, so the cores are never oversubscribed.
    retries : int
        How often dask reruns a batch whose task raised an error outside the solver (an I/O
        error writing the store). A worker that dies is handled by the scheduler (its task
        runs again elsewhere, ``distributed.scheduler.allowed-failures`` times); a solver error
        is deterministic and fails the run at once.
    **config
        Solver options, e.g. ``viscosity=1e-4, resolution=64``.

    Returns
    -------
    xarray.Dataset
        The dataset; opened lazily from ``out`` when given, else in memory.

    Raises
    ------
    SolverDivergedError, ValueError, OSError, RuntimeError
        On a cluster, the first batch that fails ends the run with the failing samples
        named (for a divergence, the very sample); the batches already recorded stay valid
        and the same call resumes after the cause is fixed.

    Notes
    -----
    On a cluster (``scheduler`` or ``workers``), the store at ``out`` is laid out first, each
    batch is one task that writes its own samples into it, and the store records the
    batches complete (:func:`ssmpde.data.store_progress`; ``ssmpde info`` shows them). The
    same call resumes an interrupted run (only the missing batches are computed); readers
    refuse the store until the last batch marks it complete. The numbers are the same as in
    one process. A second run to the same ``out`` fails at once on the output's lock (the
    driver holds it; workers never need it). ``scheduler="local"`` starts processes with
    ``spawn``: call it from a script under ``if __name__ == "__main__":``.

    Example
    -------
    >>> ds = generate("navier-stokes", num_samples=2, seed=0, resolution=16,
    ...               simulation_resolution=32, viscosity=1e-3, final_time=1.0,
    ...               time_step=1e-2, progress=False)
    >>> ds.vorticity.shape
    (2, 2, 16, 16)
    >>> generate("darcy", num_samples=64, out="darcy.zarr", workers=2)  # doctest: +SKIP
    """
    num_samples = _check_int("num_samples", num_samples, 1, MAX_SAMPLES)
    seed = _check_int("seed", seed, 0)
    batch_size = _check_int("batch_size", batch_size, 1)
    retries = _check_int("retries", retries, 0)
    if isinstance(name, Solver):
        if preset is not None or config:
            raise TypeError("pass either a solver instance or a name with options, not both")
        solver = name
    else:
        solver = get_solver(name, preset=preset, **config)
    out_path = Path(out).expanduser() if out is not None else None
    scheduler, workers = _check_cluster(scheduler, workers, out_path)
    if out_path is not None:
        _check_target(out_path)
    _check_memory(solver, num_samples, batch_size, out_path is None, max_memory,
                  concurrent=workers if scheduler == "local" else 1)
    run_config = _run_config(solver, num_samples, seed)
    if out_path is None:
        history = (f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}: "
                   f"generated by ssmpde {__version__}")
        pieces = _run(solver, seed, num_samples, batch_size, run_config, history, None, [],
                      progress)
        return xr.concat(pieces, dim=data.SAMPLE, data_vars="all", coords="minimal",
                         compat="identical", combine_attrs="override")
    if scheduler is not None:
        return _generate_on_cluster(solver, seed, num_samples, batch_size, run_config,
                                    out_path.absolute(), overwrite=overwrite, progress=progress,
                                    scheduler=scheduler, workers=workers, retries=retries)
    with data.output_lock(out_path):
        data.remove_stale_temporaries(out_path)
        _refuse_store_in_progress(out_path, overwrite)
        data.check_output(out_path, overwrite=overwrite)
        parts = _Parts(out_path, run_config, overwrite=overwrite)
        _run(solver, seed, num_samples, batch_size, run_config, parts.history, parts,
             parts.ranges(), progress)
        _merge(parts, out_path, num_samples, overwrite)
        return data.open_dataset(out_path)


def _run(solver: Solver, seed: int, num_samples: int, batch_size: int,
         run_config: dict[str, Any], history: str, parts: _Parts | None,
         done: list[tuple[int, int]], progress: bool) -> list[xr.Dataset]:
    """Compute the batches missing from ``done``: each written as a part, or returned."""
    in_memory: list[xr.Dataset] = []
    bar = tqdm(total=num_samples, initial=_count(done), unit="sample", desc=solver.name,
               disable=not progress, dynamic_ncols=True,
               bar_format="{l_bar}{bar}| {n:.1f}/{total_fmt} [{elapsed}<{remaining}, "
                          "{rate_fmt}]")
    try:
        for start, stop in _missing(done, num_samples, batch_size):
            shown = bar.n

            def advance(fraction: float, size: int = stop - start) -> None:
                bar.update(fraction * size)

            ds = _batch_dataset(solver, seed, start, stop, run_config, history, advance)
            if parts is not None:
                data.save(ds, parts.path(start, stop), validate=False)
            else:
                in_memory.append(ds)
            bar.update(shown + stop - start - bar.n)  # land exactly on the batch boundary
    except KeyboardInterrupt:
        bar.close()
        if parts is not None:
            raise _interrupted(_count(parts.ranges()), num_samples, parts.directory) from None
        raise
    bar.close()
    return in_memory


def _merge(parts: _Parts, out: Path, num_samples: int, overwrite: bool) -> None:
    """Concatenate the part files into ``out`` (atomically) and remove the parts folder."""
    ranges = parts.ranges()
    position = 0
    for start, stop in ranges:
        if start != position:  # a gap or an overlap
            break
        position = stop
    if position != num_samples:
        raise RuntimeError(f"parts in '{parts.directory}' do not cover samples "
                           f"0..{num_samples - 1} exactly; delete the folder and rerun")
    pieces = [data.open_dataset(parts.path(start, stop), chunks={}) for start, stop in ranges]
    try:
        merged = xr.concat(pieces, dim=data.SAMPLE, data_vars="all", coords="minimal",
                           compat="identical", combine_attrs="override")
        if not np.array_equal(merged[data.SAMPLE].values, np.arange(num_samples)):
            raise RuntimeError(f"parts in '{parts.directory}' do not cover samples "
                               f"0..{num_samples - 1} exactly; delete the folder and rerun")
        data.save(merged, out, overwrite=overwrite)
    finally:
        for piece in pieces:
            piece.close()
    parts.remove()


# --------------------------------------------------------------------------------------------
# Scale-out: dask.distributed tasks writing regions of one zarr store
# --------------------------------------------------------------------------------------------

def _check_cluster(scheduler: Any, workers: Any,
                   out: Path | None) -> tuple[str | Client | None, int | None]:
    """``(scheduler, workers)`` normalised: ``(None, None)`` in process, ``("local", n)``,
    ``(address, None)`` or ``(client, None)``; clear errors for anything else."""
    if scheduler is None and workers is None:
        return None, None
    if workers is not None:
        workers = _check_int("workers", workers, 1)
    if scheduler is None:
        scheduler = "local"
    if isinstance(scheduler, str):
        if scheduler != "local" and not _ADDRESS.match(scheduler):
            raise ValueError(f"scheduler must be 'local', the address of a running dask "
                             f"scheduler such as 'tcp://10.0.0.5:8786', or a "
                             f"distributed.Client; got {scheduler!r}")
    elif not _is_client(scheduler):
        raise TypeError(f"scheduler must be None, 'local', an address or a distributed.Client, "
                        f"got {type(scheduler).__name__}")
    if scheduler != "local" and workers is not None:
        raise ValueError("workers sizes the local cluster only (scheduler='local'); an "
                         "existing scheduler has the workers it has: start more with `dask "
                         "worker` or dask-jobqueue (see docs/scale-out.md)")
    if scheduler == "local" and workers is None:
        workers = default_threads()
    if out is None or out.suffix not in data.ZARR_SUFFIXES:
        where = "no out" if out is None else f"out={str(out)!r}"
        raise ValueError(f"a run on a dask cluster writes a zarr store, got {where}: pass "
                         "out='NAME.zarr' (--out NAME.zarr), then `ssmpde convert NAME.zarr "
                         "NAME.nc` if you want one netCDF file")
    return scheduler, workers


def _is_client(value: Any) -> bool:
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return False
    return isinstance(value, Client)


def _refuse_store_in_progress(out: Path, overwrite: bool) -> None:
    """The in-process path does not continue a store that a cluster run left unfinished."""
    try:
        progress = data.store_progress(out)
    except data.DatasetFileError:
        progress = None  # an unreadable record: check_output decides like for any store
    if progress is not None and not overwrite:
        raise FileExistsError(
            f"'{out}' is a zarr store being written by a run on a dask cluster "
            f"({progress.summary()}): rerun that command (with --workers or --scheduler) to "
            "resume it, or pass --overwrite (overwrite=True) to discard it")


def _layout(solver: Solver, num_samples: int, run_config: dict[str, Any],
            history: str) -> xr.Dataset:
    """The dataset :func:`generate` will have written, with placeholders for the values.

    Built by the solver's own :meth:`Solver.to_dataset` from zero samples (so names,
    dimensions, attributes and coordinates are exactly those of every batch), then widened to
    ``num_samples``: data variables become never-computed ``dask.array.empty`` of one chunk,
    and ``sample`` a lazy ``arange`` without an index (no sample list held in memory). Values
    are float64, as every solver output is; a batch of another dtype is refused when written
    (:func:`ssmpde.data.write_store_region`), never cast.
    """
    import dask.array

    coords = solver.coordinates()
    sizes = {dim: size for coord in coords.values() for dim, size in coord.sizes.items()}
    empty = {}
    for name, spec in solver.variables().items():
        missing = [dim for dim in spec.dims if dim not in sizes]
        if missing:
            raise RuntimeError(f"{solver.name}: variable {name!r} has dimensions {missing} "
                               "without a coordinate, so its store cannot be laid out")
        empty[name] = np.empty((0, *(sizes[dim] for dim in spec.dims)))
    zero = solver.to_dataset(empty, [], config=run_config, history=history)
    data_vars = {
        name: xr.DataArray(dask.array.empty((num_samples, *var.shape[1:]), dtype=var.dtype,
                                            chunks=-1), dims=var.dims, attrs=var.attrs)
        for name, var in zero.data_vars.items()}
    sample = xr.Variable((data.SAMPLE,), dask.array.arange(num_samples, dtype=np.int64,
                                                           chunks=2 ** 20),
                         attrs=zero[data.SAMPLE].attrs)
    coordinates = {name: coord.variable for name, coord in zero.coords.items()
                   if name != data.SAMPLE}
    indexed = xr.Coordinates(coordinates)
    everything = xr.Coordinates({**indexed.variables, data.SAMPLE: sample},
                                indexes=dict(indexed.xindexes))
    return xr.Dataset(data_vars, coords=everything, attrs=zero.attrs)


@contextlib.contextmanager
def dask_cluster(scheduler: str | Client, workers: int | None) -> Iterator[tuple[Client, int]]:
    """A client of ``scheduler`` and the numba/FFTW threads one task may use.

    A local cluster runs ``workers`` processes of one dask thread each (one batch at a time,
    no GIL contention), each batch allowed ``cores // workers`` threads for numba, FFTW and
    BLAS. On an existing scheduler a batch uses one thread: start one worker process of one
    dask thread per core there (``dask worker --nworkers N --nthreads 1``).
    """
    from distributed import Client, LocalCluster

    if not isinstance(scheduler, str):
        yield scheduler, 1
        return
    if scheduler == "local":
        threads = max(1, default_threads() // workers)
        environment = {name: str(threads) for name in _THREAD_VARIABLES}
        # dashboard_address=":0": any free port, so two runs (or another dask user) never clash.
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0", env=environment) as cluster, \
                Client(cluster, set_as_default=False) as client:
            yield client, threads
        return
    try:
        client = Client(scheduler, set_as_default=False)
    except OSError as error:  # TimeoutError included
        raise OSError(f"cannot reach the dask scheduler at {scheduler!r} ({error}): check the "
                      "address, that `dask scheduler` runs there and that this machine reaches "
                      "its port; or run a local cluster with --workers N") from None
    with client:
        yield client, 1


def _announce(client: Client, show: bool) -> None:
    if not show:
        return
    address = client.scheduler.address
    if importlib.util.find_spec("bokeh") is not None:
        dashboard = f"dashboard {client.dashboard_link}"
    else:
        dashboard = "no dashboard (pip install bokeh to get one)"
    tqdm.write(f"dask: scheduler {address}, {len(client.nthreads())} workers, {dashboard}",
               file=sys.stderr)


def _limit_threads(solver: Solver, threads: int) -> None:
    """Size numba's and the solver's thread pools for this task (the results do not depend
    on it: FFTW_ESTIMATE plans and per-sample kernels give the same bits)."""
    import numba

    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    if hasattr(solver, "threads"):  # the solvers with their own FFTW or thread pools
        solver.threads = threads


def _error_kind(error: BaseException) -> type[Exception]:
    """The class a failure is raised as in the driver: the nearest one the command line
    reports as a user error, else RuntimeError."""
    for kind in (SolverDivergedError, MemoryError, OSError, ImportError, TypeError,
                 ValueError):
        if isinstance(error, kind):
            return kind
    return RuntimeError


@dataclasses.dataclass(frozen=True)
class _Failed:
    """A batch whose solver raised: reported as a value, so dask does not retry what would
    fail the same way (same seed, same numbers)."""

    kind: type[Exception]
    message: str
    traceback: str


def _batch_task(payload: bytes, seed: int, start: int, stop: int, run_config: dict[str, Any],
                history: str, store: str, run_id: str, threads: int,
                version: str) -> int | _Failed:
    """One task on a worker: compute samples ``start .. stop - 1``, write them into ``store``.

    ``payload`` is the pickled solver: every task unpickles its own, so tasks sharing a
    process (threads, an in-process cluster) never share a solver's buffers, and the
    driver's solver is never modified. Errors of the solver and of the store's checks come
    back as :class:`_Failed`; an error writing the values is raised, so dask retries it.
    """
    try:
        if version != __version__:
            raise RuntimeError(f"this worker runs ssmpde {__version__}, the driver {version}: "
                               "install the same version everywhere (numbers could differ)")
        solver = pickle.loads(payload)
        _limit_threads(solver, threads)
        ds = _batch_dataset(solver, seed, start, stop, run_config, history)
    except Exception as error:  # noqa: BLE001 - every solver error fails the run, unretried
        return _Failed(_error_kind(error), f"{type(error).__name__}: {error}",
                       traceback.format_exc())
    try:
        data.write_store_region(ds, store, run_id=run_id)
    except data.DatasetFileError as error:
        return _Failed(ValueError, str(error), traceback.format_exc())
    return stop - start


def _failure(error: BaseException | _Failed, start: int, stop: int, out: Path,
             progress: data.StoreProgress) -> Exception:
    """The driver's error for a failed batch: the failing samples named, and how to resume."""
    if isinstance(error, _Failed):
        kind, text, worker_traceback = error.kind, error.message, error.traceback
    else:
        name = type(error).__name__
        kind, text, worker_traceback = _error_kind(error), f"{name}: {error}", ""
        if name == "KilledWorker":  # the scheduler gave up after allowed-failures deaths
            kind, text = RuntimeError, (f"every worker process that ran them died ({error}): "
                                        "out of memory, or a crash in compiled code?")
    rows = _DIVERGED_ROWS.search(text)
    if rows and rows[1].strip():
        samples = [start + int(row) for row in rows[1].split(",")]
        named = f"sample{'s' if len(samples) > 1 else ''} {', '.join(map(str, samples))}"
        text = _DIVERGED_ROWS.sub(named, text)
        head = f"{named} (batch {start}..{stop - 1}) failed"
    else:
        head = (f"sample {start}" if stop - start == 1 else f"samples {start}..{stop - 1}") + \
            " failed"
    failure = kind(f"{head}: {text}. The {progress.samples_complete} samples already complete "
                   f"in '{out}' stay valid: rerun the same command to resume, or change the "
                   "settings and pass --overwrite to start afresh")
    if worker_traceback:
        failure.add_note(f"on the worker:\n{worker_traceback}")
    return failure


def _generate_on_cluster(solver: Solver, seed: int, num_samples: int, batch_size: int,
                         run_config: dict[str, Any], out: Path, *, overwrite: bool,
                         progress: bool, scheduler: str | Client, workers: int | None,
                         retries: int) -> xr.Dataset:
    """:func:`generate` on a dask cluster (see its Notes)."""
    with data.output_lock(out):
        data.remove_stale_temporaries(out)
        try:
            record = data.store_progress(out)
        except data.DatasetFileError:
            if not overwrite:
                raise
            record = None  # an unreadable record: overwrite starts afresh
        if record is not None and not _can_resume(record.config, run_config, out, "store",
                                                  overwrite=overwrite):
            record = None  # another config, discarded by overwrite
        if record is None:
            data.check_output(out, overwrite=overwrite)
        with dask_cluster(scheduler, workers) as (client, threads):
            _announce(client, progress)
            if record is None:
                record = data.StoreProgress(
                    config=run_config, history=_history(solver.name), run_id=uuid.uuid4().hex,
                    num_samples=num_samples, batch_size=batch_size)
                data.create_store(_layout(solver, num_samples, run_config, record.history),
                                  out, record)
            elif record.batch_size != batch_size:
                record = dataclasses.replace(record, batch_size=batch_size)
                data.update_store_progress(out, record)
            _run_on_cluster(client, solver, seed, run_config, out, record, threads=threads,
                            retries=retries, progress=progress)
        data.finish_store(out)
    return data.open_dataset(out)


def _run_on_cluster(client: Client, solver: Solver, seed: int, run_config: dict[str, Any],
                    out: Path, record: data.StoreProgress, *, threads: int, retries: int,
                    progress: bool) -> data.StoreProgress:
    """Submit the batches missing from ``record`` and record each one as it completes.

    A window of batches (twice the cluster's threads, at least 4) is in flight at a time, so
    a run of 10**9 samples never holds more than that many futures; the window follows the
    cluster as workers join or leave.
    """
    import cloudpickle
    from distributed import as_completed

    num_samples = record.num_samples
    todo = _missing(list(record.complete), num_samples, record.batch_size)
    done, total = record.batch_counts()
    bar = tqdm(total=total, initial=done, unit="batch", desc=solver.name,
               disable=not progress, dynamic_ncols=True)
    session = uuid.uuid4().hex[:8]  # task keys of this driver only: never a stale result
    # cloudpickle: a solver class defined in a script or a test travels by value.
    payload = cloudpickle.dumps(solver)
    running: dict[str, tuple[Any, int, int]] = {}
    queue = as_completed(loop=client.loop)

    def submit() -> None:
        window = max(4, 2 * sum(client.nthreads().values()))
        while len(running) < window:
            batch = next(todo, None)
            if batch is None:
                return
            start, stop = batch
            future = client.submit(
                _batch_task, payload, seed, start, stop, run_config, record.history, str(out),
                record.run_id, threads, __version__, key=f"ssmpde-{solver.name}-{start}-{stop}"
                f"-{session}", pure=False, retries=retries)
            running[future.key] = (future, start, stop)
            queue.add(future)

    try:
        submit()
        for future in queue:
            _, start, stop = running.pop(future.key)
            try:
                result = future.result()
            except Exception as error:  # retries used up, or the workers kept dying
                raise _failure(error, start, stop, out, record) from error
            if isinstance(result, _Failed):
                raise _failure(result, start, stop, out, record)
            # Recorded only now that the task has returned: its region is fully written.
            record = record.with_complete(start, stop)
            data.update_store_progress(out, record)
            bar.update(1)
            submit()
    except KeyboardInterrupt:
        raise _interrupted(record.samples_complete, num_samples, out) from None
    finally:
        bar.close()
        if running:  # a failure or an interrupt: nothing more for this run
            client.cancel([future for future, _, _ in running.values()])
    return record
