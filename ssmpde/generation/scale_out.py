"""Dataset generation on a dask.distributed cluster: tasks writing regions of one zarr store.

:func:`ssmpde.generation.generate` comes here with ``scheduler=`` or ``workers=``: each
batch is one dask.distributed task. The driver lays out the whole zarr store first
(:func:`ssmpde.data.create_store`, one sample per chunk), every task computes its batch and
writes its own region of the store (:func:`ssmpde.data.write_store_region`, so writes never
overlap), and the driver, the only writer of the bookkeeping, adds each finished batch to the
store's progress record (:class:`ssmpde.data.StoreProgress`) once its task has returned. A
rerun of the same call computes only the batches missing from that record; the last batch
marks the store complete (:func:`ssmpde.data.finish_store`). The cluster itself (a local one
or a running scheduler, its threads, workers killed for their memory) comes from
:mod:`ssmpde.cluster`. See ``docs/scale-out.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import pickle
import re
import sys
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from .. import __version__
from ..cluster import MemoryKills, dask_cluster, killed_workers
from ..data import (SAMPLE, DatasetFileError, DiskFullError, StoreProgress, check_output,
                    create_store, disk_space, disk_usage, finish_store, open_dataset,
                    output_lock, remove_output, remove_stale_temporaries, store_progress,
                    update_store_progress, write_store_region)
from ..solvers.base import Solver, SolverDivergedError
from ._batches import (_batch_dataset, _can_resume, _estimate, _history, _interrupted, _missing,
                       _Pace)

if TYPE_CHECKING:
    from distributed import Client

__all__: list[str] = []

# How TimeDependentSolver.simulate names the diverged rows of a batch.
_DIVERGED_ROWS = re.compile(r"batch rows \[([\d, ]*)\]")
# How long a run that filled the disk waits for its batches in flight to end.
_SETTLE_SECONDS = 30


def _refuse_store_in_progress(out: Path, overwrite: bool) -> None:
    """The in-process path does not continue a store that a cluster run left unfinished."""
    try:
        progress = store_progress(out)
    except DatasetFileError:
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
    sample = xr.Variable((SAMPLE,), dask.array.arange(num_samples, dtype=np.int64,
                                                      chunks=2 ** 20),
                         attrs=zero[SAMPLE].attrs)
    coordinates = {name: coord.variable for name, coord in zero.coords.items()
                   if name != SAMPLE}
    indexed = xr.Coordinates(coordinates)
    everything = xr.Coordinates({**indexed.variables, SAMPLE: sample},
                                indexes=dict(indexed.xindexes))
    return xr.Dataset(data_vars, coords=everything, attrs=zero.attrs)


def _announce(client: Client, show: bool, batch_size: int) -> None:
    if not show:
        return
    address = client.scheduler.address
    if importlib.util.find_spec("bokeh") is not None:
        dashboard = f"dashboard {client.dashboard_link}"
    else:
        dashboard = "no dashboard (pip install bokeh to get one)"
    tqdm.write(f"dask: scheduler {address}, {len(client.nthreads())} workers, batches of "
               f"{batch_size} sample{'s' if batch_size > 1 else ''}, {dashboard}",
               file=sys.stderr)


@contextlib.contextmanager
def _threads_of_a_task(solver: Solver, threads: int) -> Iterator[None]:
    """This process's numba threads and ``solver``'s own sized as one task's, then restored:
    the driver's duration probe then times what a worker runs."""
    import numba

    before, own = numba.get_num_threads(), getattr(solver, "threads", None)
    try:
        _limit_threads(solver, threads)
        yield
    finally:
        numba.set_num_threads(before)
        if hasattr(solver, "threads"):
            solver.threads = own


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
    full: DiskFullError | None = None  # the store's disk filled up: no retry, one line
    #: The solver failed on the run's own settings (a blow-up, a bad coefficient): the same
    #: command fails the same way again, so the store is removed, not kept to resume.
    own_input: bool = False


def _batch_task(payload: bytes, seed: int, start: int, stop: int, run_config: dict[str, Any],
                history: str, store: str, run_id: str, threads: int,
                version: str) -> int | _Failed:
    """One task on a worker: compute samples ``start .. stop - 1``, write them into ``store``.

    ``payload`` is the pickled solver: every task unpickles its own, so tasks sharing a
    process (threads, an in-process cluster) never share a solver's buffers, and the
    driver's solver is never modified. Errors of the solver and of the store's checks come
    back as :class:`_Failed`; an error writing the values is raised, so dask retries it.
    """
    # zarr writes through asyncio: when one write of a batch fails (a full disk), the batch's
    # other pending writes are dropped with their event loop, and asyncio logs each one
    # ("Task was destroyed but it is pending!", "Future exception was never retrieved") at
    # ERROR on the worker's stderr, the user's terminal. The failure itself comes back as
    # this task's result and is reported once, in one line, by the driver.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    try:
        if version != __version__:
            raise RuntimeError(f"this worker runs ssmpde {__version__}, the driver {version}: "
                               "install the same version everywhere (numbers could differ)")
        solver = pickle.loads(payload)
        _limit_threads(solver, threads)
        ds = _batch_dataset(solver, seed, start, stop, run_config, history)
    except Exception as error:  # noqa: BLE001 - every solver error fails the run, unretried
        return _Failed(_error_kind(error), f"{type(error).__name__}: {error}",
                       traceback.format_exc(),
                       own_input=isinstance(error, (ValueError, SolverDivergedError)))
    try:
        with disk_space(store):
            write_store_region(ds, store, run_id=run_id)
    except DatasetFileError as error:
        return _Failed(ValueError, str(error), traceback.format_exc())
    except DiskFullError as error:
        # A full disk stays full for a retry: back to the driver, which says it in one line.
        return _Failed(OSError, str(error), "", full=error)
    return stop - start


def _failure(error: BaseException | _Failed, start: int, stop: int, out: Path,
             progress: StoreProgress, *,
             deaths: tuple[type[Exception], str] | None = None) -> Exception:
    """The driver's error for a failed batch: the failing samples named, and how to resume.

    ``deaths``: the class and text for a batch whose workers kept dying
    (:func:`killed_workers`), used when ``error`` is dask's ``KilledWorker``.
    """
    if isinstance(error, _Failed):
        kind, text, worker_traceback = error.kind, error.message, error.traceback
    else:
        name = type(error).__name__
        kind, text, worker_traceback = _error_kind(error), f"{name}: {error}", ""
        if name == "KilledWorker":  # the scheduler gave up after allowed-failures deaths
            kind, text = deaths or (RuntimeError, "every worker process that ran them died: "
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
    if isinstance(error, _Failed) and error.own_input:
        failure = kind(f"{head}: {text}. The same settings fail the same way again, so "
                       f"'{out}' was removed: change the settings and run again")
        failure.removes_output = True  # read by _generate_on_cluster, which removes it
    else:
        failure = kind(f"{head}: {text}. The {progress.samples_complete} samples already "
                       f"complete in '{out}' stay valid: rerun the same command to resume, or "
                       "change the settings and pass --overwrite to start afresh")
    if worker_traceback:
        failure.add_note(f"on the worker:\n{worker_traceback}")
    return failure


def _generate_on_cluster(solver: Solver, seed: int, num_samples: int, batch_size: int,
                         run_config: dict[str, Any], out: Path, *, overwrite: bool,
                         progress: bool, scheduler: str | Client, workers: int | None,
                         retries: int, disk: Any, max_disk: int | str | None) -> xr.Dataset:
    """:func:`generate` on a dask cluster (see its Notes); ``disk`` is the run's
    :class:`ssmpde.generation.generate._DiskPlan`, checked before the store is laid out."""
    with output_lock(out):
        remove_stale_temporaries(out)
        try:
            record = store_progress(out)
        except DatasetFileError:
            if not overwrite:
                raise
            record = None  # an unreadable record: overwrite starts afresh
        if record is not None and not _can_resume(record.config, run_config, out, "store",
                                                  overwrite=overwrite):
            record = None  # another config, discarded by overwrite
        if record is None:
            check_output(out, overwrite=overwrite, kind="dataset", named_format=True)
            disk.check([], 0, max_disk)
        else:
            disk.check(list(record.complete), disk_usage(out), max_disk)
        with dask_cluster(scheduler, workers) as (client, threads):
            # Batches small enough that every worker gets one: 4 samples on 2 workers are 2
            # batches of 2, not one batch of 4 on one worker (a sample's values do not
            # depend on its batch).
            slots = max(1, sum(client.nthreads().values()))
            missing = num_samples - (record.samples_complete if record is not None else 0)
            batch_size = max(1, min(batch_size, -(-missing // slots)))
            _announce(client, progress, batch_size)
            if record is None:
                record = StoreProgress(
                    config=run_config, history=_history(solver.name), run_id=uuid.uuid4().hex,
                    num_samples=num_samples, batch_size=batch_size)
                create_store(_layout(solver, num_samples, run_config, record.history),
                             out, record)
            elif record.batch_size != batch_size:
                record = dataclasses.replace(record, batch_size=batch_size)
                update_store_progress(out, record)
            try:
                _run_on_cluster(client, solver, seed, run_config, out, record, threads=threads,
                                retries=retries, progress=progress)
            except DiskFullError as error:
                done = store_progress(out)
                raise disk.full(error, list(done.complete) if done else [], out) from None
            except Exception as error:
                # As in one process: a run that failed on its own input removes what it wrote
                # (an interrupt, a full disk or a lost worker keeps the store to resume).
                if getattr(error, "removes_output", False):
                    remove_output(out)
                raise
        with disk_space(out):
            finish_store(out)
    return open_dataset(out)


def _run_on_cluster(client: Client, solver: Solver, seed: int, run_config: dict[str, Any],
                    out: Path, record: StoreProgress, *, threads: int, retries: int,
                    progress: bool) -> StoreProgress:
    """Submit the batches missing from ``record`` and record each one as it completes.

    A window of batches (twice the cluster's threads, at least 4) is in flight at a time, so
    a run of 10**9 samples never holds more than that many futures; the window follows the
    cluster as workers join or leave.
    """
    import cloudpickle
    from distributed import as_completed

    num_samples = record.num_samples
    todo = _missing(list(record.complete), num_samples, record.batch_size)
    session = uuid.uuid4().hex[:8]  # task keys of this driver only: never a stale result
    # cloudpickle: a solver class defined in a script or a test travels by value. Pickled
    # before the duration probe below fills the solver's caches.
    payload = cloudpickle.dumps(solver)
    running: dict[str, tuple[Any, int, int]] = {}
    queue = as_completed(loop=client.loop)
    per_sample = float(solver.bytes_per_sample())
    missing, slots = num_samples - record.samples_complete, sum(client.nthreads().values())
    pace = _Pace(missing, concurrency=slots)
    first = next(_missing(list(record.complete), num_samples, record.batch_size), None)
    if progress and first is not None:  # a line before the first batch, timed here
        with _threads_of_a_task(solver, threads):
            estimate = _estimate(solver, seed, first, missing,
                                 concurrency=slots,
                                 where=f", {slots} at once" if slots > 1 else "")
        if estimate is not None and not pace.expect(estimate):  # a warning says the same
            tqdm.write(estimate.line(solver.name), file=sys.stderr)
    # Whole samples: a batch is recorded complete at once.
    bar = tqdm(total=num_samples, initial=record.samples_complete, unit="sample",
               desc=solver.name, disable=not progress, dynamic_ncols=True)
    began = time.perf_counter()

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

    with MemoryKills() as kills:
        try:
            submit()
            for future in queue:
                _, start, stop = running.pop(future.key)
                try:
                    result = future.result()
                except Exception as error:  # retries used up, or the workers kept dying
                    deaths = killed_workers(client, kills, (stop - start) * per_sample,
                                            "--batch-size") \
                        if type(error).__name__ == "KilledWorker" else None
                    raise _failure(error, start, stop, out, record, deaths=deaths) from error
                if isinstance(result, _Failed):
                    if result.full is not None:
                        raise result.full
                    raise _failure(result, start, stop, out, record)
                pace.batch_done(stop - start, time.perf_counter() - began)
                # Recorded only now that the task has returned: its region is fully written.
                record = record.with_complete(start, stop)
                with disk_space(out):
                    update_store_progress(out, record)
                bar.update(stop - start)
                submit()
        except KeyboardInterrupt:
            raise _interrupted(record.samples_complete, num_samples, out) from None
        except DiskFullError:
            # The batches in flight end within moments on the same full disk; cancelling
            # running tasks instead makes each worker log a warning after the one line of the
            # error.
            deadline = time.monotonic() + _SETTLE_SECONDS
            for future, _, _ in running.values():
                with contextlib.suppress(Exception):  # TimeoutError, or the batch's own error
                    future.result(timeout=max(0.0, deadline - time.monotonic()))
            raise
        finally:
            bar.close()
            if running:  # a failure or an interrupt: nothing more for this run
                client.cancel([future for future, _, _ in running.values()])
    return record
