"""One thread policy for torch, numba and FFTW.

ssmpde runs three thread pools in one process: torch's (OpenMP, for the surrogates), numba's
(OpenMP, for the solvers' kernels and the CPU scans) and FFTW's (the spectral solvers'
transforms). They take turns, never run at once, and each may use every core. Every entry
point (``ssmpde train | evaluate | generate | rollout`` and
:func:`ssmpde.surrogates.train.train`, :func:`~ssmpde.surrogates.train.evaluate`,
:func:`ssmpde.generation.generate`, :func:`ssmpde.coupling.run.run_rollout`) runs its
work under :func:`limited`, with the count from, first to last:

1. the ``threads`` argument (``--threads N`` on the command line);
2. the environment variable ``SSMPDE_THREADS``;
3. the default of the workload (:data:`DEFAULTS`).

``N`` threads means: torch's intra-op pool ``N``, numba's ``min(N, NUMBA_NUM_THREADS)``, and
at most ``N`` for FFTW (a solver that would use fewer, such as the 1D solvers' single-threaded
transforms, keeps its own count). torch's inter-op pool (``torch.jit.fork``, ``at::launch``;
the models here never use it) can be sized only once per process, before its first use: it is
set to ``N`` at the first explicit request that torch still allows, and left alone otherwise.

Defaults, from ``benchmarks/bench_threads.py`` (figures in ``benchmarks/results/threads.json``):
a hybrid rollout (``rollout``) gives torch **one** thread and leaves numba and FFTW at every
core. There the surrogate's operations are small (one batch of trajectories, one step at a
time): on 2 cores a second torch thread made the surrogate's part of a KS rollout with a small
FNO 1.3-1.9x slower, quiet or under a competing process (every OpenMP barrier waits for
whichever thread the kernel descheduled), and the whole rollout 1.01-1.5x slower, in every
one of five runs. Training, evaluation and generation keep the libraries' own counts (every core, or
``OMP_NUM_THREADS``, which ``torchrun`` sets to 1 per process), where the work per call is
large enough to share; on a machine shared with other jobs, ``SSMPDE_THREADS=1`` is the safe
choice.

Waiting threads. Between two parallel regions, libgomp (the OpenMP runtime of torch's CPU
wheels and of numba's ``omp`` layer) lets idle threads spin for a while before they sleep,
stealing the core a solver thread needs next. ``import ssmpde`` sets ``OMP_WAIT_POLICY=PASSIVE``
(unless the user set it), so idle threads sleep at once. libgomp reads it **once, when it is
loaded** (``import torch``, or numba's first parallel kernel), so it only takes effect if
``ssmpde`` is imported before ``torch``; otherwise export ``OMP_WAIT_POLICY=PASSIVE`` before
starting Python. Nothing can change it afterwards: there is no runtime call for it.
:func:`spin_seconds` measures it: about 0.002 CPU seconds per idle second with ``ssmpde``
imported first, 0.09-0.18 with ``torch`` first (``benchmarks/bench_threads.py``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["DEFAULTS", "ENVIRONMENT", "WORKLOADS", "Settings", "apply", "cores", "current",
           "entry_point", "fftw_limit", "limit_solver", "limited", "parse", "requested",
           "restore", "spin_seconds"]

#: The environment variable that sets the thread count when no ``threads`` argument does.
ENVIRONMENT = "SSMPDE_THREADS"
#: The workloads the entry points name.
WORKLOADS = ("train", "evaluate", "generate", "rollout")
#: Torch threads per workload when neither an argument nor the environment names a count:
#: ``None`` keeps the count the process started with (see the module docstring for why).
DEFAULTS: dict[str, int | None] = {"train": None, "evaluate": None, "generate": None,
                                   "rollout": 1}
#: The most threads a count may name (a typo such as 10000 fails instead of oversubscribing).
MAX_THREADS = 1024

# The N of the innermost limited()/apply() in effect: an upper bound for FFTW's threads.
_limit: int | None = None
# Whether torch's inter-op pool has been sized (by us or by torch: it can happen once).
_interop_done = False


@dataclass(frozen=True)
class Settings:
    """The thread counts in effect, as :func:`current` reads them.

    Attributes
    ----------
    torch : int or None
        torch's intra-op threads (None: torch is not imported).
    numba : int
        numba's threads in this thread (numba's count is thread-local).
    fftw : int or None
        The upper bound on FFTW's threads (None: each solver chooses, up to every core).
    """

    torch: int | None
    numba: int
    fftw: int | None


def cores() -> int:
    """The cores this process may use (its CPU affinity; the CPU count off Linux)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def parse(value, *, source: str = "threads") -> int:
    """``value`` as a thread count: an integer in 1..1024 (a string of one is accepted).

    Raises
    ------
    ValueError
        Naming ``source`` (the argument, flag or variable it came from).
    """
    text = value.strip() if isinstance(value, str) else value
    try:
        if isinstance(text, (bool, float)):
            raise ValueError
        count = int(text)
    except (TypeError, ValueError):
        count = 0
    if not 1 <= count <= MAX_THREADS:
        raise ValueError(f"{source} must be a whole number of threads in 1..{MAX_THREADS}, "
                         f"got {value!r}")
    return count


def requested(threads: int | str | None = None) -> int | None:
    """The thread count asked for: ``threads``, else ``SSMPDE_THREADS``, else None."""
    if threads is not None:
        return parse(threads)
    value = os.environ.get(ENVIRONMENT, "").strip()
    return parse(value, source=ENVIRONMENT) if value else None


def current() -> Settings:
    """The counts in effect now (torch's only when torch is imported: never imports it)."""
    import numba

    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else None
    # The first call starts numba's OpenMP pool, which sets the OpenMP runtime it shares
    # with torch to numba's count: torch's own count is put back.
    numba_threads = numba.get_num_threads()
    if torch is not None and torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)
    return Settings(torch=torch_threads, numba=numba_threads, fftw=_limit)


def fftw_limit() -> int | None:
    """The most FFTW threads a solver may plan with now (None: no limit but the cores)."""
    return _limit


def _set(torch_threads: int | None, numba_threads: int, fftw: int | None) -> None:
    global _limit
    import numba

    numba.set_num_threads(max(1, min(numba_threads, numba.config.NUMBA_NUM_THREADS)))
    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)
    _limit = fftw


def _size_interop(count: int) -> None:
    """Size torch's inter-op pool once, if torch still allows it."""
    global _interop_done
    if _interop_done:
        return
    import torch

    try:
        torch.set_num_interop_threads(count)
    except RuntimeError:  # the pool already started, or someone sized it: leave it
        pass
    _interop_done = True


def apply(threads: int | str | None = None, *, workload: str | None = None) -> Settings:
    """Apply the thread policy; return the settings before, for :func:`restore`.

    Parameters
    ----------
    threads : int, optional
        Threads for torch, numba and (at most) FFTW. Default: ``SSMPDE_THREADS``, else the
        default of ``workload``.
    workload : {"train", "evaluate", "generate", "rollout"}, optional
        Chooses the default (:data:`DEFAULTS`); None: no default (nothing changes unless a
        count is asked for).

    Returns
    -------
    Settings
        The counts in effect before the call.

    Example
    -------
    >>> previous = apply(1)
    >>> current().numba
    1
    >>> restore(previous)
    """
    if workload is not None and workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    previous = current()
    count = requested(threads)
    if count is not None:
        import torch  # sized even if the work has not imported it yet

        _set(count, count, count)
        _size_interop(count)
    elif workload is not None and DEFAULTS[workload] is not None:
        import torch

        torch.set_num_threads(DEFAULTS[workload])
    return previous


def restore(settings: Settings) -> None:
    """Put back the counts :func:`apply` returned."""
    _set(settings.torch, settings.numba, settings.fftw)


@contextlib.contextmanager
def limited(threads: int | str | None = None, *,
            workload: str | None = None) -> Iterator[Settings]:
    """Run the block under the thread policy (see :func:`apply`), then restore the counts.

    Yields the settings in effect inside the block.

    Example
    -------
    >>> with limited(1, workload="rollout") as inside:
    ...     inside.numba, inside.fftw
    (1, 1)
    """
    previous = apply(threads, workload=workload)
    try:
        yield current()
    finally:
        restore(previous)


def entry_point(workload: str) -> Callable[[Callable], Callable]:
    """Decorator: run the function under :func:`limited` with its keyword argument
    ``threads`` (None when not given) and the default of ``workload``.

    The entry points of the package (training, evaluation, generation, rollouts) take
    ``threads=`` this way, so the policy is applied in one place for the command line and
    the Python API alike.
    """
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")

    def decorate(function: Callable) -> Callable:
        # A decorator that lands on the wrong function (one inserted between it and the entry
        # point) would apply no policy at all: refuse a function that takes no ``threads``.
        if "threads" not in inspect.signature(function).parameters:
            raise TypeError(f"@entry_point({workload!r}) decorates {function.__qualname__}, "
                            "which takes no 'threads' argument: put it on the entry point")

        @functools.wraps(function)
        def run(*args, **kwargs):
            with limited(kwargs.get("threads"), workload=workload):
                return function(*args, **kwargs)

        return run

    return decorate


def limit_solver(solver) -> None:
    """Bound the FFTW and worker threads of ``solver`` by the count in effect.

    The solvers with their own FFTW plans or thread pools (Navier–Stokes, Darcy) read a
    ``threads`` attribute when they first plan a batch size; a solver without one uses numba
    only, which :func:`apply` has set already. Call it before the solver's first step.
    """
    if _limit is None or not hasattr(solver, "threads"):
        return
    own = solver.threads
    solver.threads = _limit if own is None else max(1, min(int(own), _limit))


def spin_seconds(*, regions: int = 20, pause: float = 0.05, threads: int = 2) -> float:
    """CPU seconds this process burns per second of idleness right after parallel regions.

    Runs ``regions`` small torch matrix products on ``threads`` threads, each followed by a
    ``pause`` of sleep, and returns the CPU time spent during the pauses over their total
    length: about 0 when OpenMP's idle threads sleep at once (``OMP_WAIT_POLICY=PASSIVE`` read
    when libgomp loaded), more while they spin. Imports torch.
    """
    import resource
    import time

    import torch

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.randn(256, 256)
        burnt = 0.0
        for _ in range(regions):
            for _ in range(5):
                x @ x
            start = cpu()
            time.sleep(pause)
            burnt += cpu() - start
    finally:
        torch.set_num_threads(before)
    return burnt / (regions * pause)
