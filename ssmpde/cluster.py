"""Generic dask.distributed plumbing: addresses, handshakes, local clusters, memory kills.

What any part of ssmpde that runs tasks on a dask cluster needs, and nothing about what the
tasks compute: dataset generation (:mod:`ssmpde.generation.scale_out`) and the fine slices of
parareal (``ssmpde rollout --workers``, :mod:`ssmpde.coupling.parareal`) both stand on it.
:func:`dask_cluster` gives a client of a local cluster or of a running scheduler, with the
threads one task may use; :func:`check_cluster` and :func:`check_address` refuse a bad
``scheduler``/``workers`` pair or address before any dask object exists; :func:`connect` reaches
a scheduler with a deadline (a handshake first); :class:`MemoryKills` and
:func:`killed_workers` turn workers restarted for their memory into one line. This module
depends on neither :mod:`ssmpde.solvers` nor :mod:`ssmpde.generation`. See
``docs/scale-out.md``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .core import check_int, format_bytes
from .threads import cores

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["MemoryKills", "check_address", "check_cluster", "connect", "dask_cluster",
           "killed_workers", "max_local_workers", "scheduler_timeout"]


#: Seconds to wait for a dask scheduler to answer (``SSMPDE_SCHEDULER_TIMEOUT`` overrides).
SCHEDULER_TIMEOUT = 10.0
#: Memory a local worker process holds besides its batch: Python, numpy, numba, FFTW, xarray
#: and the solver's module, measured at about 250 MiB after a first Navier-Stokes task.
WORKER_BYTES = 384 * 2 ** 20
# Schemes that name a host and a port (inproc:// names a scheduler in this same process).
_NETWORK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
_ADDRESS_FORM = ("tcp://HOST:PORT as `dask scheduler` prints it, e.g. tcp://10.0.0.5:8786; "
                 "'local' with --workers N is a cluster on this machine")
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
        workers = check_int("workers", workers, 1)
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
                f"a local dask cluster needs about {format_bytes(WORKER_BYTES)} a worker "
                f"process and this machine has less ({why}): run without --workers (in this "
                "process), or free memory")
        if workers is None:
            workers = most
        elif workers > most:
            raise ValueError(
                f"workers={workers:_} (--workers) is more than this machine can run: at most "
                f"{most} ({why}): ask for at most {most}, or start workers on other machines "
                "and pass their scheduler's address (see docs/scale-out.md)")
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
    why = (f"{count} core{'s' if count > 1 else ''}, {format_bytes(memory)} of memory "
           f"available at about {format_bytes(WORKER_BYTES)} a worker")
    return most, why


@contextlib.contextmanager
def dask_cluster(scheduler: str | Client | None,
                 workers: int | None) -> Iterator[tuple[Client, int]]:
    """A client of ``scheduler`` and the numba/FFTW threads one task may use.

    ``scheduler`` and ``workers`` as :func:`ssmpde.generation.generate` takes them
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
        threads = max(1, cores() // workers)
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

    deaths = int(dask.config.get("distributed.scheduler.allowed-failures", 3)) + 1
    times = f"{deaths} time{'s' if deaths > 1 else ''}"
    limit = _memory_limit(client)
    limit = f" of {format_bytes(limit)}" if limit else ""
    need = (f"; it was estimated to need about {format_bytes(wanted)} besides the worker's own "
            f"~{format_bytes(WORKER_BYTES)}" if wanted > 0 else "")
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
