"""Batched, seeded, resumable dataset generation.

:func:`generate` runs any registered solver over ``num_samples`` samples in batches. Sample
*i* depends only on ``(seed, i)`` and the config, never on the batch size. With ``out``,
every finished batch is written atomically as a part file in a hidden folder beside the
target (``.NAME.parts/``); an interrupted run (Ctrl-C, a killed job, a crash) loses at most the
batch in flight, and the same call resumes from the parts on disk. When every sample is done,
the parts are merged into the target (again through a temporary name) and removed. A run that
fails on its own input (a ``ValueError`` such as non-finite coefficients, or a
:class:`~ssmpde.solvers.base.SolverDivergedError`) removes its parts too: the same settings
would fail the same way, and the corrected command starts afresh without ``--overwrite``.

Reliability: the whole run (parts and merge) holds the output's lock, so two runs never
write the same dataset; what a killed merge left is removed first; the planned peak memory
is checked against a limit before anything is allocated; the bookkeeping of finished parts
is a list of sample ranges, so a huge ``num_samples`` costs nothing until it is computed.

Scale-out (``scheduler=`` or ``workers=``) runs each batch as a dask.distributed task that
writes its own region of one zarr store: see :mod:`ssmpde.generation.scale_out`. Both paths
share the config check of a resume, the per-batch computation and the bookkeeping of sample
ranges (:mod:`ssmpde.generation._batches`), so a store holds the same numbers as the
in-process run. See ``docs/scale-out.md``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from .. import __version__, core
from ..cluster import check_cluster
from ..core import format_bytes
from ..data import (SAMPLE, DiskFullError, atomic_path, block_size, check_output, disk_space,
                    disk_usage, free_space, open_dataset, output_lock, remove_stale_temporaries)
from ..data.files import format_of_suffix, size_bound_of, write_dataset
from ..solvers.base import Solver, SolverDivergedError, get_solver
from ..threads import entry_point, limit_solver
from ._batches import (
    _batch_dataset,
    _Pace,
    _can_resume,
    _check_int,
    _count,
    _estimate,
    _history,
    _interrupted,
    _missing,
    _progress_unit,
    _run_config,
)
from .scale_out import _generate_on_cluster, _layout, _refuse_store_in_progress

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["generate", "parts_directory"]

# Part files are named by their sample range [start, stop); 8 digits at least, more beyond.
_PART = re.compile(r"^part-(\d{8,})-(\d{8,})\.nc$")
# What an interrupted atomic write of a part or of the manifest leaves in the parts folder.
_TEMPORARY = re.compile(r"^\.(part-\d{8,}-\d{8,}|manifest)\.tmp-[0-9a-f]{32}\.(nc|json)$")
_MANIFEST = "manifest.json"
#: The most samples one call generates (sample indices and part names stay small).
MAX_SAMPLES = 10 ** 9
_RAISE_LIMIT = "raise --max-memory / SSMPDE_MAX_MEMORY"
#: A part file is written once it holds this many bytes of samples (uncompressed), or once it
#: holds twice the batches of the part before it (1, 2, 4, ... in one process), whichever
#: comes first: few parts for many small samples, an early first part for slow ones.
PART_BYTES = 8 * 2 ** 20

#: Failures of a run on its own input (a bad setting found only while solving: non-finite
#: coefficients, a blow-up, an invalid dataset): its parts are removed, not kept to resume.
#: An interrupt (Ctrl-C, SIGTERM, a kill) or another failure (a full disk) keeps the parts
#: complete so far.
_INPUT_ERRORS = (ValueError, SolverDivergedError)


def parts_directory(out: str | os.PathLike) -> Path:
    """Where :func:`generate` keeps finished batches of an unfinished run for ``out``."""
    out = Path(out)
    return out.parent / f".{out.name}.parts"



def _check_target(out: Path | None, *, cluster: bool) -> str | None:
    """Generate's own checks of ``out``, before any work: its format, read from its suffix
    (the one check of the suffix in a run), a zarr store for a run on a cluster, and its
    parent directory. The format, or None without ``out``."""
    fmt = None if out is None else format_of_suffix(out)
    if cluster and fmt != "zarr":
        where = "no out" if out is None else f"out={str(out)!r}"
        raise ValueError(f"a run on a dask cluster writes a zarr store, got {where}: pass "
                         "out='NAME.zarr' (--out NAME.zarr), then `ssmpde convert NAME.zarr "
                         "NAME.nc` if you want one netCDF file")
    if out is not None and not out.parent.is_dir():
        raise FileNotFoundError(f"output directory '{out.parent}' does not exist; create it "
                                f"first (mkdir -p {out.parent})")
    return fmt


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
            f"one sample of this configuration needs about {format_bytes(per_sample)} at once "
            f"({solver.name}: {format_bytes(solver.stored_bytes_per_sample())} stored, the rest "
            f"solver working memory), more than the limit of {format_bytes(limit)}: lower the "
            f"resolution, or {_RAISE_LIMIT}")
    batch = min(batch_size, num_samples)
    concurrent = max(1, min(concurrent, -(-num_samples // batch)))
    needed = concurrent * batch * per_sample
    parts = [f"batch of {batch} x {format_bytes(per_sample)} a sample"]
    if concurrent > 1:
        parts[0] = f"{concurrent} batches at once (one a worker), each a {parts[0]}"
    if in_memory:
        held = 2 * num_samples * int(solver.stored_bytes_per_sample())
        needed += held
        parts.append(f"the in-memory result: {num_samples:_} samples x "
                     f"{format_bytes(held // (2 * num_samples))}, twice while they are joined")
    if needed > limit:
        advice = "lower --batch-size" + (", --workers" if concurrent > 1 else "") + \
            " or the resolution"
        if in_memory:
            advice += ", write to a file (out=...) instead of memory"
        raise ValueError(f"this run needs about {format_bytes(needed)} at once "
                         f"({'; '.join(parts)}), more than the limit of {format_bytes(limit)}: "
                         f"{advice}, or {_RAISE_LIMIT}")



@dataclasses.dataclass(frozen=True)
class _DiskPlan:
    """Upper bounds of the disk space a run to ``out`` takes, from its layout.

    ``fixed`` and ``per_sample`` bound a netCDF part file (:func:`ssmpde.data.size_bound`,
    which is affine in the samples), ``output`` the finished dataset in its format. A run in
    process writes its missing samples into part files and then merges every part into
    ``out`` while the parts still exist; a run on a cluster writes the samples into the store
    itself (``in_place``).
    """

    out: Path
    num_samples: int
    batch_size: int
    stored: int  # bytes a sample, uncompressed
    fixed: int
    per_sample: int
    output: int
    output_per_sample: int
    in_place: bool

    @classmethod
    def of(cls, solver: Solver, out: Path, fmt: str, num_samples: int, batch_size: int,
           run_config: dict[str, Any], *, in_place: bool) -> _DiskPlan:
        """The plan of a run writing ``num_samples`` to ``out``, a dataset of format ``fmt``."""
        block = block_size(out.parent)
        history = _history(solver.name)

        def bound(samples: int, fmt: str) -> int:
            return size_bound_of(_layout(solver, samples, run_config, history), fmt, block)

        empty, one = bound(0, "netcdf"), bound(1, "netcdf")
        output = bound(num_samples, fmt)
        return cls(out=out, num_samples=num_samples, batch_size=batch_size,
                   stored=int(solver.stored_bytes_per_sample()), fixed=empty,
                   per_sample=one - empty + 1, output=output,
                   output_per_sample=-(-(output - bound(0, fmt)) // num_samples),
                   in_place=in_place)

    def parts(self, missing: int, gaps: int) -> int:
        """The part files one process writes for ``missing`` samples in ``gaps`` runs: one
        per doubling of the batches a part holds, one per :data:`PART_BYTES`, one per run."""
        batches = -(-missing // self.batch_size)
        return (math.ceil(math.log2(batches + 1)) + -(-missing * self.stored // PART_BYTES)
                + gaps)

    def needed(self, done: list[tuple[int, int]]) -> int:
        """Bytes the run still writes at its peak, given the finished sample ranges ``done``
        (already on disk)."""
        missing = self.num_samples - _count(done)
        if self.in_place:
            return missing * self.output_per_sample if done else self.output
        if missing == 0:
            return self.output
        gaps = sum(1 for _ in _gaps(done, self.num_samples))
        return (self.parts(missing, gaps) * self.fixed + missing * self.per_sample
                + self.output)

    def explain(self, done: list[tuple[int, int]]) -> str:
        missing = self.num_samples - _count(done)
        per = format_bytes(self.output_per_sample if self.in_place else self.per_sample)
        if self.in_place:
            return f"{missing:_} samples x up to {per} each, written into '{self.out}'"
        return (f"{missing:_} samples x up to {per} each in part files, then the merged "
                f"'{self.out.name}' of up to {format_bytes(self.output)} while the parts still "
                "exist")

    def check(self, done: list[tuple[int, int]], used: int,
              max_disk: int | str | None) -> None:
        """Refuse the run, before it writes anything more, if the disk cannot hold it.

        ``used``: bytes the unfinished run already has on disk (its parts or its store).
        With a limit (``max_disk``, else ``SSMPDE_MAX_DISK``) the run's whole footprint must
        stay within it, and the free space is not consulted; without one, what the run still
        writes must fit in the free space.
        """
        needed = self.needed(done)
        limit = disk_limit(max_disk)
        advice = ("generate fewer samples or lower the resolution, write to a larger disk, "
                  "or set --max-disk / SSMPDE_MAX_DISK (the most disk space the run may use, "
                  "checked instead of the free space)")
        if limit is not None:
            if used + needed > limit:
                already = f", {format_bytes(used)} of it already written" if used else ""
                raise ValueError(f"this run needs up to {format_bytes(used + needed)} of disk "
                                 f"space ({self.explain(done)}{already}), more than the limit of "
                                 f"{format_bytes(limit)} (--max-disk / SSMPDE_MAX_DISK): {advice}")
            return
        free = free_space(self.out.parent)
        if needed > free:
            raise ValueError(f"this run needs up to {format_bytes(needed)} more disk space "
                             f"({self.explain(done)}), more than the {format_bytes(free)} free on "
                             f"the file system of '{self.out.parent}': {advice}")

    def full(self, error: DiskFullError, done: list[tuple[int, int]],
             where: Path) -> DiskFullError:
        """``error`` restated for the whole run: what it still needs, and that it resumes."""
        saved = _count(done)
        return DiskFullError(
            error.path, needed=self.needed(done), free=error.free,
            hint=f"{saved} of {self.num_samples} samples are saved in '{where}'; free some "
                 "space (or start again with an --out on a larger disk), then run the same "
                 "command again to resume")


def disk_limit(max_disk: int | str | None = None) -> int | None:
    """The most disk space a generation may use, in bytes, or None to check the free space.

    ``max_disk`` if given; else the environment variable ``SSMPDE_MAX_DISK`` (e.g. ``500G``);
    else None.
    """
    if max_disk is None and os.environ.get("SSMPDE_MAX_DISK"):
        max_disk = os.environ["SSMPDE_MAX_DISK"]
    return None if max_disk is None else core.parse_bytes(max_disk, "disk")


def _gaps(done: list[tuple[int, int]], num_samples: int):
    """The runs of missing samples between the sorted finished ranges ``done``."""
    position = 0
    for start, stop in [*done, (num_samples, num_samples)]:
        if start > position:
            yield position, start
        position = max(position, stop)


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
                manifest = core.decode_json(entry, expect=object)
            except (OSError, core.JSONFileError):
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



class _Parts:
    """The part files of one unfinished run, with a manifest that pins its config.

    Call under the output's lock. A folder left by a run with another configuration (or
    without a readable manifest) is an error, or with ``overwrite`` is discarded, provided it
    holds only what ssmpde writes there.
    """

    def __init__(self, out: Path, run_config: dict[str, Any], *, overwrite: bool,
                 check: Callable[[list[tuple[int, int]], int], None]) -> None:
        """``check(done, used)`` runs before anything is written: with the finished ranges
        and the bytes on disk of a run it resumes, else ``([], 0)``."""
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
                check(self.ranges(), disk_usage(self.directory))
                return
            _discard(self.directory)
        check([], 0)
        self.history = _history(run_config["equation"])
        with disk_space(self.directory):
            self.directory.mkdir()
        try:
            with atomic_path(self.manifest) as tmp:
                tmp.write_text(json.dumps({"config": run_config, "history": self.history},
                                          indent=1))
        except BaseException:
            self.directory.rmdir()  # nothing of this run was written yet
            raise

    def _read(self) -> tuple[str | None, dict[str, Any]]:
        """(None, manifest) or (what is wrong, {})."""
        if self.directory.is_symlink() or not self.directory.is_dir():
            return f"'{self.directory}' is not a directory", {}
        try:
            manifest = core.decode_json(self.manifest, expect=object)
        except OSError as error:
            return f"'{self.manifest}' is missing or unreadable ({error})", {}
        except core.JSONFileError as error:
            return str(error), {}
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

    def remove(self, *, warn: bool = True) -> None:
        """Delete the folder after the merge, or after a run that failed on its own input
        (anything ssmpde did not write stays, with a warning if ``warn``)."""
        foreign = _foreign_entries(self.directory)
        for entry in self.directory.iterdir():
            if entry.name not in foreign:
                entry.unlink()
        if foreign and warn:
            warnings.warn(f"left '{self.directory}' in place: it holds files ssmpde did not "
                          f"write ({', '.join(foreign[:5])})", stacklevel=3)
        elif not foreign:
            self.directory.rmdir()


@entry_point("generate")
def generate(name: str | Solver, *, num_samples: int, seed: int = 0,
             out: str | os.PathLike | None = None, batch_size: int = 8,
             preset: str | None = None, overwrite: bool = False, progress: bool = True,
             max_memory: int | str | None = None, max_disk: int | str | None = None,
             scheduler: str | Client | None = None, workers: int | None = None,
             retries: int = 2, threads: int | None = None, **config: Any) -> xr.Dataset:
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
        :func:`parts_directory` until the run completes, so a rerun resumes (see Notes for
        their size and the disk space a run needs). The whole run
        holds the output's lock (:func:`ssmpde.data.output_lock`): a second run to the same
        ``out`` fails at once with :class:`ssmpde.data.OutputLockedError`. With a
        ``scheduler``, a ``.zarr`` store that is written in place (see Notes).
    batch_size : int
        Samples integrated together (one FFT plan for the batch). Does not change results.
        On a cluster, lowered to ``ceil(samples to compute / worker threads)`` where it is
        larger, so that every worker gets a batch.
    preset : str, optional
        Named configuration of the solver (e.g. ``"torus-vis"``); ``config`` overrides it.
    overwrite : bool
        Replace an existing ``out`` written by ssmpde (never a directory ssmpde did not
        write), and discard an unfinished run for ``out`` stored with another configuration.
    progress : bool
        Before the first batch, print the run's projected duration (timed on a few solver
        steps of that batch: see Notes), then show a tqdm progress bar with an ETA. It counts
        whole frames (record intervals of one sample) for a time-dependent solver, whole
        samples otherwise and on a cluster (after a line naming the scheduler, its dashboard
        and the batch size).
    max_memory : int or str, optional
        The most memory the run may plan to use at once: bytes, or a size such as ``"8G"``.
        Default: the environment variable ``SSMPDE_MAX_MEMORY``, else 80 % of the memory
        available now. A run estimated above it (``batch_size`` times
        :meth:`Solver.bytes_per_sample`, times the workers of a local cluster, plus the whole
        dataset without ``out``) is refused before anything is allocated.
    max_disk : int or str, optional
        The most disk space the run may use: bytes, or a size such as ``"500G"``. Default:
        the environment variable ``SSMPDE_MAX_DISK``; without either, the free space of
        ``out``'s file system is the limit for what the run still writes. A run whose upper
        bound (uncompressed values, part files and the merged file at once) exceeds it is
        refused before anything is written. The limit replaces the free-space check, so it
        also lets a run start that the bound says will not fit.
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
    threads : int, optional
        numba and FFTW threads (and torch's) of a run in this process (default
        ``SSMPDE_THREADS``, else every core: :mod:`ssmpde.threads`). Does not change results.
        The workers of a cluster size their own (see ``workers``).
    **config
        Solver options, e.g. ``viscosity=1e-4, resolution=64``.

    Returns
    -------
    xarray.Dataset
        The dataset; opened lazily from ``out`` when given, else in memory.

    Raises
    ------
    SolverDivergedError, ValueError, OSError, RuntimeError
        In this process, a ``SolverDivergedError`` or ``ValueError`` removes the parts of
        the run (it failed on its settings); any other error keeps the complete ones for a
        resume, and an interrupt keeps them all.
        On a cluster, the first batch that fails ends the run with the failing samples
        named (for a divergence, the very sample); the batches already recorded stay valid
        and the same call resumes after the cause is fixed.

    Notes
    -----
    Disk: before anything is written, the run's peak footprint is bounded from above (values
    uncompressed, plus the file format's overhead; in process, the part files and the merged
    ``out``, which exist together while the parts are merged) and checked against the free
    space or ``max_disk``. A part file holds up to :data:`PART_BYTES` of samples (the first
    ones in a process fewer: 1, 2, 4, ... batches), so the parts stay few and large; a
    kill loses at most the part being assembled, Ctrl-C nothing but the batch in flight. A
    write that fills the disk anyway ends the run with
    :class:`ssmpde.data.DiskFullError` naming the path and the space the run still needs;
    no temporary is left, and the same call resumes once space is freed.

    Duration: with ``progress``, a probe runs the first batch's samples through the
    per-batch path for one time step (twice: compilation and plans first, which the run
    then reuses) and advances them by a few time steps (about 0.3 s, the fastest repeat
    counting), and prints the run's projected duration before that batch starts
    (:func:`ssmpde.generation._batches._estimate`). Its time a step is within 2 % of a long
    run's (CPU time, Navier-Stokes at 256²); the projection assumes the machine's load at
    the probe lasts: on 2 cores shared with other jobs it gave 0.64-1.47 times the measured
    time of fixed-step Navier-Stokes runs of 1-3 minutes and 0.85 times a CFL-stepped one;
    runs of a few seconds take longer than it says (per-run costs such as joining the
    batches are not timed). Steady solvers (Darcy) get
    no probe. A run whose projected time, from the probe or from its first batches,
    exceeds :data:`ssmpde.generation._batches.LONG_RUN_SECONDS` (one hour) gets one
    :class:`~ssmpde.generation._batches.LongRunWarning` instead of the line.

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
    limit_solver(solver)
    out_path = Path(out).expanduser() if out is not None else None
    scheduler, workers = check_cluster(scheduler, workers)
    fmt = _check_target(out_path, cluster=scheduler is not None)
    _check_memory(solver, num_samples, batch_size, out_path is None, max_memory,
                  concurrent=workers if scheduler == "local" else 1)
    run_config = _run_config(solver, num_samples, seed)
    if out_path is None:
        history = (f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}: "
                   f"generated by ssmpde {__version__}")
        pieces = _run(solver, seed, num_samples, batch_size, run_config, history, None, [],
                      progress)
        return xr.concat(pieces, dim=SAMPLE, data_vars="all", coords="minimal",
                         compat="identical", combine_attrs="override")
    disk_limit(max_disk)  # a malformed limit fails before any work
    plan = _DiskPlan.of(solver, out_path.absolute(), fmt, num_samples, batch_size, run_config,
                        in_place=scheduler is not None)
    if scheduler is not None:
        return _generate_on_cluster(solver, seed, num_samples, batch_size, run_config,
                                    out_path.absolute(), overwrite=overwrite, progress=progress,
                                    scheduler=scheduler, workers=workers, retries=retries,
                                    disk=plan, max_disk=max_disk)
    with output_lock(out_path):
        remove_stale_temporaries(out_path)
        _refuse_store_in_progress(out_path, overwrite)
        check_output(out_path, overwrite=overwrite, kind="dataset", named_format=True)
        parts = _Parts(out_path, run_config, overwrite=overwrite,
                       check=lambda done, used: plan.check(done, used, max_disk))
        try:
            try:
                _run(solver, seed, num_samples, batch_size, run_config, parts.history, parts,
                     parts.ranges(), progress)
            except DiskFullError:
                raise  # keeps what is complete: the same command resumes once space is freed
            except Exception as error:  # an interrupt (Ctrl-C) keeps all, as a kill does
                # On its own input the same settings fail the same way again (sample i is a
                # pure function of the seed and the config), and other settings cannot resume
                # these parts: they would only block the corrected command. Other failures
                # (memory) keep what is complete; with nothing complete there is nothing to
                # resume.
                if (isinstance(error, _INPUT_ERRORS) and not isinstance(error, OSError)) \
                        or not parts.ranges():
                    parts.remove(warn=False)
                raise
            _merge(parts, out_path, fmt, num_samples)
        except DiskFullError as error:
            raise plan.full(error, parts.ranges(), parts.directory) from error.__cause__
        return open_dataset(out_path)


def _run(solver: Solver, seed: int, num_samples: int, batch_size: int,
         run_config: dict[str, Any], history: str, parts: _Parts | None,
         done: list[tuple[int, int]], progress: bool) -> list[xr.Dataset]:
    """Compute the batches missing from ``done``: written as parts, or returned.

    Consecutive batches are held until they make a part (:data:`PART_BYTES`, or twice the
    batches of the previous part); what is held is written before an error or Ctrl-C ends
    the run, so only the batch in flight is lost.
    """
    in_memory: list[xr.Dataset] = []
    held: list[xr.Dataset] = []
    part_batches = 1
    missing = num_samples - _count(done)
    pace = _Pace(missing)
    if progress:  # a line before the first batch, which may take many minutes
        first = next(_missing(done, num_samples, batch_size), None)
        estimate = None if first is None else _estimate(solver, seed, first, missing)
        if estimate is not None and not pace.expect(estimate):  # a warning says the same
            tqdm.write(estimate.line(solver.name), file=sys.stderr)
    unit, per_sample = _progress_unit(solver)
    bar = tqdm(total=num_samples * per_sample, initial=_count(done) * per_sample, unit=unit,
               desc=solver.name if per_sample == 1 else
               f"{solver.name} ({per_sample} {unit}s a sample)",
               disable=not progress, dynamic_ncols=True)

    def write_held() -> None:
        nonlocal part_batches
        if not held:
            return
        batches = held.copy()
        held.clear()  # written once: a failed write is not retried by the cleanup below
        first, last = int(batches[0][SAMPLE][0]), int(batches[-1][SAMPLE][-1]) + 1
        part = batches[0] if len(batches) == 1 else xr.concat(
            batches, dim=SAMPLE, data_vars="all", coords="minimal", compat="identical",
            combine_attrs="override")
        write_dataset(part, parts.path(first, last), "netcdf", validate=False)
        part_batches *= 2

    try:
        try:
            for start, stop in _missing(done, num_samples, batch_size):
                shown, units = bar.n, (stop - start) * per_sample
                finished = 0.0  # the fraction of the batch done

                def advance(fraction: float) -> None:
                    nonlocal finished
                    finished += fraction  # whole units only: the bar shows integers
                    whole = shown + min(units, math.floor(finished * units + 1e-9))
                    if whole > bar.n:
                        bar.update(whole - bar.n)

                began = time.perf_counter()
                ds = _batch_dataset(solver, seed, start, stop, run_config, history, advance)
                pace.batch_done(stop - start, time.perf_counter() - began)
                if parts is None:
                    in_memory.append(ds)
                else:
                    if held and int(held[-1][SAMPLE][-1]) + 1 != start:
                        write_held()  # a part is one run of consecutive samples
                    held.append(ds)
                    if len(held) >= part_batches or sum(
                            var.nbytes for batch in held
                            for var in batch.data_vars.values()) >= PART_BYTES:
                        write_held()
                bar.update(shown + units - bar.n)  # land exactly on the batch boundary
        finally:
            if parts is not None:
                write_held()  # the end of the run, or what an error or Ctrl-C left held
    except KeyboardInterrupt:
        bar.close()
        if parts is not None:
            raise _interrupted(_count(parts.ranges()), num_samples, parts.directory) from None
        raise
    bar.close()
    return in_memory


def _merge(parts: _Parts, out: Path, fmt: str, num_samples: int) -> None:
    """Concatenate the part files into ``out`` (atomically, as ``fmt``) and remove the parts
    folder. The caller checked ``out`` against the output policy under its lock."""
    ranges = parts.ranges()
    position = 0
    for start, stop in ranges:
        if start != position:  # a gap or an overlap
            break
        position = stop
    if position != num_samples:
        raise RuntimeError(f"parts in '{parts.directory}' do not cover samples "
                           f"0..{num_samples - 1} exactly; delete the folder and rerun")
    pieces = [open_dataset(parts.path(start, stop), chunks={}) for start, stop in ranges]
    try:
        merged = xr.concat(pieces, dim=SAMPLE, data_vars="all", coords="minimal",
                           compat="identical", combine_attrs="override")
        if not np.array_equal(merged[SAMPLE].values, np.arange(num_samples)):
            raise RuntimeError(f"parts in '{parts.directory}' do not cover samples "
                               f"0..{num_samples - 1} exactly; delete the folder and rerun")
        write_dataset(merged, out, fmt)
    finally:
        for piece in pieces:
            piece.close()
    parts.remove()
