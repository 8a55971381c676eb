"""Dataset generation on a dask.distributed cluster: tasks writing regions of one zarr store.

:func:`ssmpde.solvers.generate.generate` comes here with ``scheduler=`` or ``workers=``: each
batch is one dask.distributed task. The driver lays out the whole zarr store first
(:func:`ssmpde.data.create_store`, one sample per chunk), every task computes its batch and
writes its own region of the store (:func:`ssmpde.data.write_store_region`, so writes never
overlap), and the driver, the only writer of the bookkeeping, adds each finished batch to the
store's progress record (:class:`ssmpde.data.StoreProgress`) once its task has returned. A
rerun of the same call computes only the batches missing from that record; the last batch
marks the store complete (:func:`ssmpde.data.finish_store`). :func:`dask_cluster` gives a
client of a local cluster or of a running scheduler, with the threads one task may use
(``ssmpde rollout --workers`` runs the fine slices of parareal on it too). See
``docs/scale-out.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import math
import os
import pickle
import re
import signal
import sys
import threading
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
from ..core import gib
from ..data import (SAMPLE, ZARR_SUFFIXES, DatasetFileError, DiskFullError, StoreProgress,
                    check_output, create_store, disk_space, disk_usage, finish_store,
                    open_dataset, output_lock, remove_output, remove_stale_temporaries,
                    store_progress, update_store_progress, write_store_region)
from ._batches import (_batch_dataset, _can_resume, _check_int, _estimate, _history,
                       _interrupted, _missing, _Pace)
from .base import Solver, SolverDivergedError
from .spectral import default_threads
from ..threads import cores

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["dask_cluster"]

#: Seconds to wait for a dask scheduler to answer (``SSMPDE_SCHEDULER_TIMEOUT`` overrides).
SCHEDULER_TIMEOUT = 10.0
#: Memory a local worker process holds besides its batch: Python, numpy, numba, FFTW, xarray
#: and the solver's module, measured at about 250 MiB after a first Navier-Stokes task.
WORKER_BYTES = 384 * 2 ** 20
# Schemes that name a host and a port (inproc:// names a scheduler in this same process).
_NETWORK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
_ADDRESS_FORM = ("tcp://HOST:PORT as `dask scheduler` prints it, e.g. tcp://10.0.0.5:8786; "
                 "'local' with --workers N is a cluster on this machine")

# How TimeDependentSolver.simulate names the diverged rows of a batch.
_DIVERGED_ROWS = re.compile(r"batch rows \[([\d, ]*)\]")
# How long a run that filled the disk waits for its batches in flight to end.
_SETTLE_SECONDS = 30
# The thread pools a worker's environment sizes (numba's own, OpenMP, BLAS).
_THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                     "OPENBLAS_NUM_THREADS")


def check_cluster(scheduler: Any, workers: Any) -> tuple[str | Client | None, int | None]:
    """``(scheduler, workers)`` normalised: ``(None, None)`` in process, ``("local", n)``,
    ``(address, None)`` or ``(client, None)``; clear errors for anything else.

    An address is checked for its form here (:func:`check_address`), before any dask object
    exists; ``workers`` must fit this machine (:func:`max_local_workers`); without it a local
    cluster gets as many as fit.
    """
    if scheduler is None and workers is None:
        return None, None
    if workers is not None:
        workers = _check_int("workers", workers, 1)
    if scheduler is None:
        scheduler = "local"
    if isinstance(scheduler, str):
        if scheduler != "local":
            scheduler = check_address(scheduler)
    elif not _is_client(scheduler):
        raise TypeError(f"scheduler must be None, 'local', an address or a distributed.Client, "
                        f"got {type(scheduler).__name__}")
    if scheduler != "local" and workers is not None:
        raise ValueError("workers sizes the local cluster only (scheduler='local'); an "
                         "existing scheduler has the workers it has: start more with `dask "
                         "worker` or dask-jobqueue (see docs/scale-out.md)")
    if scheduler == "local":
        most, why = max_local_workers()
        if most == 0:
            raise MemoryError(
                f"a local dask cluster needs about {gib(WORKER_BYTES)} a worker process and "
                f"this machine has less ({why}): run without --workers (in this process), "
                "or free memory")
        if workers is None:
            workers = most
        elif workers > most:
            raise ValueError(
                f"workers={workers:_} (--workers) is more than this machine can run: at most "
                f"{most} ({why}): ask for at most {most}, or start workers on other machines "
                "and pass their scheduler's address (see docs/scale-out.md)")
    return scheduler, workers


def _check_cluster(scheduler: Any, workers: Any,
                   out: Path | None) -> tuple[str | Client | None, int | None]:
    """:func:`check_cluster`, and a cluster run must write a zarr store."""
    scheduler, workers = check_cluster(scheduler, workers)
    if scheduler is None:
        return None, None
    if out is None or out.suffix not in ZARR_SUFFIXES:
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


def check_address(address: str) -> str:
    """``address`` (stripped) if it has the form of a dask scheduler address, else a
    ValueError that says what is wrong with it and what to give instead.

    ``SCHEME://HOST:PORT`` for the network schemes dask knows (tcp, tls, ws, wss, ucx; tls and
    wss need dask's TLS configuration), ``HOST:PORT`` (tcp), or ``inproc://...`` naming a
    scheduler of this process. Checked before any dask object exists: a client built from a
    malformed address fails half-way, and the half-built client then blocks the interpreter's
    exit for minutes.
    """
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    text = address.strip() if isinstance(address, str) else ""

    def refuse(problem: str) -> ValueError:
        return ValueError(f"scheduler must be 'local', the address of a running dask "
                          f"scheduler ({_ADDRESS_FORM}) or a distributed.Client; {problem}")

    if not text:
        raise refuse("got an empty address")
    scheme, location = parse_address(text)
    try:
        get_backend(scheme)
    except (ValueError, ImportError) as error:
        unknown = isinstance(error, ValueError) and "unknown" in str(error)
        raise refuse(
            f"{address!r} has the unknown scheme {scheme}:// (dask knows "
            f"{', '.join(s + '://' for s in (*_NETWORK_SCHEMES, 'inproc'))})" if unknown
            else f"{address!r} needs the {scheme}:// transport, not installed ({error})"
        ) from None
    if scheme == "inproc":
        host, _, rest = location.partition("/")
        pid, _, number = rest.partition("/")
        if not (host and pid.isdigit() and number.isdigit()):
            raise refuse(f"{address!r} is not of the form inproc://HOST/PID/N")
        if int(pid) != os.getpid():
            raise refuse(f"{address!r} names a scheduler in another process (inproc:// "
                         "reaches this process only)")
        return text
    if scheme not in _NETWORK_SCHEMES:  # a transport a plugin added: dask checks the rest
        return text
    try:
        host, port = parse_host_port(location)
    except ValueError as error:
        if ":" not in location.rsplit("]", 1)[-1]:
            raise refuse(f"{address!r} has no port (dask's scheduler listens on 8786 by "
                         "default)") from None
        problem = "a port that is not a number" if "invalid literal" in str(error) else \
            f"a malformed host or port ({error})"
        raise refuse(f"{address!r} has {problem}") from None
    if not host:
        raise refuse(f"{address!r} names no host")
    if not 0 < port < 2 ** 16:
        raise refuse(f"{address!r} has port {port}, not in 1..65535")
    if scheme in ("tls", "wss") and _tls_context() is None:
        raise refuse(f"{address!r} needs a TLS configuration and dask has none: set "
                     "distributed.comm.tls.ca-file, .client.cert and .client.key in dask's "
                     "configuration (or DASK_DISTRIBUTED__COMM__TLS__CA_FILE and so on)")
    return text


def _tls_context() -> Any:
    from distributed.security import Security

    return Security().get_connection_args("client").get("ssl_context")


def scheduler_timeout() -> float:
    """Seconds to wait for a scheduler: ``SSMPDE_SCHEDULER_TIMEOUT``, else
    :data:`SCHEDULER_TIMEOUT` or dask's ``distributed.comm.timeouts.connect`` if lower."""
    text = os.environ.get("SSMPDE_SCHEDULER_TIMEOUT", "").strip()
    if not text:
        import dask
        from dask.utils import parse_timedelta

        try:
            dask_seconds = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"))
        except (KeyError, TypeError, ValueError):
            dask_seconds = None
        return min(SCHEDULER_TIMEOUT, dask_seconds or SCHEDULER_TIMEOUT)
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < 1e6:  # nan included
        raise ValueError(f"SSMPDE_SCHEDULER_TIMEOUT must be a number of seconds in (0, 1e6), "
                         f"got {text!r}")
    return seconds


def max_local_workers() -> tuple[int, str]:
    """The most worker processes a local cluster may start here, and why.

    One per core (each runs one batch at a time; more only share the cores), and no more
    than the memory available holds at :data:`WORKER_BYTES` a worker (what its batches need
    on top is checked against ``--max-memory`` by generate). Memory is what psutil reports
    available, or dask's own limit for this machine (a cgroup or ``RLIMIT_RSS``) where that
    is lower. 0 when not even one fits: a worker given less than its own footprint is
    restarted by its nanny before it runs anything, for ever.
    """
    import psutil
    from distributed.system import MEMORY_LIMIT

    count = cores()
    memory = min(psutil.virtual_memory().available, MEMORY_LIMIT)
    most = min(count, memory // WORKER_BYTES)
    why = (f"{count} core{'s' if count > 1 else ''}, {gib(memory)} of memory available at "
           f"about {gib(WORKER_BYTES)} a worker")
    return most, why


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


@contextlib.contextmanager
def dask_cluster(scheduler: str | Client | None,
                 workers: int | None) -> Iterator[tuple[Client, int]]:
    """A client of ``scheduler`` and the numba/FFTW threads one task may use.

    ``scheduler`` and ``workers`` as :func:`ssmpde.solvers.generate.generate` takes them
    (checked by :func:`check_cluster`: ``None`` with ``workers`` is a local cluster).

    A local cluster runs ``workers`` processes of one dask thread each (one batch at a time,
    no GIL contention), each batch allowed ``cores // workers`` threads for numba, FFTW and
    BLAS, and each worker an equal share of the memory available. Its worker processes ignore
    Ctrl-C (this process stops them) and its log lines are silenced: its failures come back
    as this package's errors. On an existing scheduler a batch uses one thread: start one
    worker process of one dask thread per core there (``dask worker --nworkers N --nthreads
    1``); it must answer within :func:`scheduler_timeout` seconds.
    """
    from distributed import Client

    scheduler, workers = check_cluster(scheduler, workers)
    if scheduler is None:
        raise ValueError("dask_cluster needs a scheduler or a number of workers")
    if not isinstance(scheduler, str):
        yield scheduler, 1
        return
    if scheduler == "local":
        threads = max(1, default_threads() // workers)
        with _local_cluster(workers, threads) as cluster, \
                Client(cluster, set_as_default=False) as client:
            yield client, threads
        return
    with connect(scheduler) as client:
        yield client, 1


@contextlib.contextmanager
def _local_cluster(workers: int, threads: int) -> Iterator[Any]:
    import dask
    import psutil
    from distributed import LocalCluster
    from distributed.system import MEMORY_LIMIT

    environment = {name: str(threads) for name in _THREAD_VARIABLES}
    memory = min(psutil.virtual_memory().available, MEMORY_LIMIT)
    # A task's memory is the solver's, never dask's own data: spilling and pausing would only
    # stall a worker above 80 % for good (pausing is what let a run under a memory limit sit
    # there restarting workers); past 95 % the nanny restarts it and, after dask's
    # allowed-failures, the batch fails with a message (see _failure).
    settings = {"distributed.worker.memory.target": False,
                "distributed.worker.memory.spill": False,
                "distributed.worker.memory.pause": False}
    with dask.config.set(settings), _sigint_blocked():
        # dashboard_address=":0": any free port, so two runs (or another dask user) never
        # clash. silence_logs: the driver, scheduler, nannies and workers log nothing below
        # CRITICAL; what goes wrong comes back as a task's error.
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0", env=environment,
                               memory_limit=max(1, memory // workers),
                               silence_logs=logging.CRITICAL)
    with cluster:
        yield cluster


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while a local cluster starts.

    Its event-loop thread starts now and inherits the mask; so do the threads it starts and
    the worker processes those spawn (a signal mask survives fork and exec), at the start and
    at every restart. A Ctrl-C in a terminal, which goes to every process of the foreground
    group, then reaches this process only: its workers print no KeyboardInterrupt
    tracebacks, and this process stops them. A Ctrl-C while blocked is raised on unblocking.
    """
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    from multiprocessing import resource_tracker

    # Started first: starting it (at a first spawn) unblocks SIGINT in the thread that spawns.
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def connect(address: str, timeout: float | None = None) -> Iterator[Client]:
    """A client of the dask scheduler at ``address``, closed on leaving.

    The scheduler must answer a handshake within ``timeout`` seconds (default
    :func:`scheduler_timeout`), asked by a thread of this module with a deadline: dask's own
    client waits forever on a port where something listens but never answers, and one that
    fails half-way blocks the interpreter's exit. ``OSError`` naming the address otherwise.
    """
    from distributed import Client

    address = check_address(address)
    seconds = scheduler_timeout() if timeout is None else timeout
    _handshake(address, seconds)
    try:
        client = Client(address, set_as_default=False, timeout=seconds)
    except OSError as error:  # TimeoutError included: it went away after the handshake
        raise OSError(f"cannot reach the dask scheduler at {address!r} ({error}): "
                      f"{_REACH_ADVICE}") from None
    with client:
        yield client


_SCHEDULER_ADVICE = "give the address `dask scheduler` prints (tcp://HOST:8786 by default)"
_REACH_ADVICE = ("check the address, that `dask scheduler` runs there and that this machine "
                 "reaches its port; or run a local cluster with --workers N")


def _handshake(address: str, seconds: float) -> None:
    """Ask the scheduler at ``address`` who it is; errors name the address."""
    import asyncio

    from distributed.comm import connect as open_comm
    from distributed.security import Security

    outcome: dict[str, Any] = {}

    async def identity() -> Any:
        comm = await open_comm(address, timeout=seconds,
                               **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await asyncio.wait_for(comm.read(), seconds)
        finally:
            comm.abort()

    # dask's connect has its own deadline (its error says more than ours), the reply ours;
    # the whole handshake a backstop of both.
    backstop = 2 * seconds + 1

    def ask() -> None:
        try:
            outcome["reply"] = asyncio.run(asyncio.wait_for(identity(), backstop))
        except BaseException as error:  # noqa: BLE001 - reported by the caller's thread
            outcome["error"] = error

    # A thread of its own: the caller may run an event loop (a notebook), and a daemon one:
    # a name lookup stuck in the C library must not keep this process alive at exit.
    asker = threading.Thread(target=ask, name="ssmpde scheduler handshake", daemon=True)
    asker.start()
    asker.join(backstop + 1)
    error, reply = outcome.get("error"), outcome.get("reply")
    if asker.is_alive() or isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        raise OSError(f"no dask scheduler answered at {address!r} within {seconds:g} s "
                      f"(SSMPDE_SCHEDULER_TIMEOUT): {_REACH_ADVICE}")
    if isinstance(error, OSError):
        raise OSError(f"cannot reach the dask scheduler at {address!r} ({error}): "
                      f"{_REACH_ADVICE}")
    if error is not None:  # bytes that are no dask message, a transport that cannot load
        raise OSError(f"{address!r} did not answer as a dask scheduler does "
                      f"({type(error).__name__}: {error}): {_SCHEDULER_ADVICE}")
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        what = f"a dask {reply['type']}" if isinstance(reply, dict) and reply.get("type") \
            else "something else"
        raise OSError(f"{address!r} answered, but not as a dask scheduler (it is {what}): "
                      f"{_SCHEDULER_ADVICE}")


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


class MemoryKills(logging.Handler):
    """Counts the worker processes this process's nannies restart for exceeding their memory
    limit (a local cluster's nannies run in the driver; a remote cluster's log elsewhere)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "memory budget" in record.getMessage():
            self.count += 1

    _LOGGER = "distributed.nanny.memory"

    def __enter__(self) -> MemoryKills:
        logging.getLogger(self._LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        logging.getLogger(self._LOGGER).removeHandler(self)


def killed_workers(client: Any, kills: MemoryKills, wanted: float,
                   what: str) -> tuple[type[Exception], str]:
    """The class and one-line text of a task dask gave up on (``KilledWorker``).

    ``wanted``: the bytes the task was estimated to need (0: no estimate); ``what``: the
    option that sizes a task, for the advice (e.g. ``--batch-size``). MemoryError (a user
    error) when this process's nannies restarted workers for memory, else RuntimeError.
    """
    import dask

    from .generate import _size  # the one size formatter (generate imports this module)

    deaths = int(dask.config.get("distributed.scheduler.allowed-failures", 3)) + 1
    times = f"{deaths} time{'s' if deaths > 1 else ''}"
    limit = _memory_limit(client)
    limit = f" of {_size(limit)}" if limit else ""
    need = (f"; it was estimated to need about {_size(wanted)} besides the worker's own "
            f"~{_size(WORKER_BYTES)}" if wanted > 0 else "")
    if kills.count:
        return MemoryError, (
            f"the worker running this task was restarted {times} for using more than its memory "
            f"limit{limit} (dask gives up after distributed.scheduler.allowed-failures + 1)"
            f"{need}: lower {what} or --workers, or give each worker more memory")
    return RuntimeError, (
        f"the worker process running this task died {times} (dask gives up after "
        f"distributed.scheduler.allowed-failures + 1){need}: out of memory (a worker may use "
        f"{limit.removeprefix(' of ') or 'its memory limit'}; lower {what}), or a crash in "
        "compiled code?")


def _memory_limit(client: Any) -> int:
    """A worker's memory limit in bytes as the scheduler knows it, else as the nannies of
    the client's local cluster (alive while their workers restart) do; 0 if unknown."""
    try:
        limits = [info.get("memory_limit") or 0
                  for info in client.scheduler_info()["workers"].values()]
        nannies = getattr(getattr(client, "cluster", None), "workers", {}) or {}
        limits += [getattr(getattr(nanny, "memory_manager", None), "memory_limit", 0) or 0
                   for nanny in nannies.values()]
    except Exception:  # noqa: BLE001 - only the message's detail depends on it
        return 0
    return int(max(limits, default=0))


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
    :class:`ssmpde.solvers.generate._DiskPlan`, checked before the store is laid out."""
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
            check_output(out, overwrite=overwrite, kind="dataset")
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
