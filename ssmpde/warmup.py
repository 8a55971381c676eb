"""Compile ssmpde's numba kernels into numba's on-disk cache ahead of their first use.

Every CPU kernel is compiled on its first call, once per argument types, and kept in numba's
cache (``__pycache__`` beside the source, or ``NUMBA_CACHE_DIR``) for later processes. The
first call of a selective scan costs 10–12 s of compiling (forward and backward, one dtype,
a quiet core; twice that on a busy one), a Euler step 9 s; a process that needs several
pays them one after the other, and two processes started together (``pytest -n 2``, two
``torchrun`` ranks) compile the same kernels twice.

``python -m ssmpde.warmup [--processes N]`` runs a tiny instance of every kernel family (the
1D and 2D scans forward and backward, SSD, the semilinear, Navier–Stokes and Euler solvers,
in float32 and float64, on one thread and on several) in ``N`` processes at once, the
longest first, so each kernel is compiled once and the compiling overlaps. Afterwards a
first call loads its kernel from the cache in milliseconds. ``make test`` runs it before the
suite.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import time
from collections.abc import Callable

import numpy as np


def _scan(spatial: int, dtype: str) -> None:
    """A 1D or 2D selective scan through the CPU backend, forward and backward, with every
    optional input a model passes (D, R, z, Δ bias, softplus)."""
    import torch

    from ssmpde.kernels import selective_scan, selective_scan_2d

    torch.manual_seed(0)
    kind = getattr(torch, dtype)
    grid = (6,) if spatial == 1 else (3, 4)
    b, d, n = 2, 4, 3

    def tensor(*shape, scale=1.0):
        return (scale * torch.randn(*shape, dtype=kind)).requires_grad_()

    u, delta, z = (tensor(b, d, *grid) for _ in range(3))
    A = -torch.rand(d, n, dtype=kind).add(0.5).requires_grad_()
    B, C = tensor(b, n, *grid), tensor(b, n, *grid)
    D, bias, R = tensor(d), tensor(d), tensor(d, n, scale=0.1)
    scan = selective_scan if spatial == 1 else selective_scan_2d
    out = scan(u, delta, A, B, C, D=D, R=R, z=z, delta_bias=bias, backend="cpu")
    out.sum().backward()


def _ssd(dtype: str) -> None:
    """Mamba-2's chunked SSD scan on the CPU, forward and backward."""
    import torch

    from ssmpde.kernels import ssd_scan

    torch.manual_seed(0)
    kind = getattr(torch, dtype)
    b, length, heads, p, n = 1, 8, 2, 2, 3
    x = torch.randn(b, length, heads, p, dtype=kind, requires_grad=True)
    dt = torch.randn(b, length, heads, dtype=kind, requires_grad=True)
    A = -torch.rand(heads, dtype=kind).add(0.5).requires_grad_()
    B = torch.randn(b, length, 1, n, dtype=kind, requires_grad=True)
    C = torch.randn(b, length, 1, n, dtype=kind, requires_grad=True)
    ssd_scan(x, dt, A, B, C, chunk_size=4).sum().backward()


def _semilinear(dtype: str) -> None:
    """The fused ETDRK4 steps of the 1D semilinear solvers (Kuramoto–Sivashinsky)."""
    from ssmpde.solvers import get_solver

    solver = get_solver("kuramoto-sivashinsky", resolution=16, simulation_resolution=16,
                        domain_length=22.0, time_step=0.02, final_time=0.04,
                        record_interval=0.04, dtype=dtype)
    solver.solve_batch(solver.sample_inputs(seed=0, indices=[0, 1]))


def _navier_stokes(dtype: str) -> None:
    """The Navier–Stokes engine's ETDRK4 and Crank–Nicolson stages, serial (two groups of
    samples on two threads) and parallel (one sample on two threads)."""
    from ssmpde.solvers.navier_stokes import NavierStokes2D

    for scheme in ("etdrk4", "rk3-cn"):
        solver = NavierStokes2D(resolution=16, simulation_resolution=16, forcing="fno",
                                viscosity=1e-3, scheme=scheme, time_step=0.01,
                                final_time=0.02, record_interval=0.02, dtype=dtype, threads=2)
        start = solver.sample_inputs(seed=0, indices=[0, 1])["initial"]
        solver.simulate(start, 1)
        solver.simulate(start[:1], 1)


def _euler() -> None:
    """One finite-volume Euler step on a grid the serial kernel takes and on one the
    parallel kernel takes."""
    from ssmpde.solvers.euler import engine
    from ssmpde.threads import limited

    for size in (8, 256):
        primitive = np.ones((1, 5, size, size))  # density, velocity x, y, pressure, tracer
        primitive[:, 1:3] = 0.1
        with limited(2):  # the kernel is chosen by numba's thread count
            engine.fast_step(primitive, 1e-4)


#: name -> (a tiny run of one kernel family, its cold run in seconds, imports included, in
#: one of two processes on the 2-core CI machine, to start the longest first)
JOBS: dict[str, tuple[Callable[[], None], float]] = {
    "scan-1d-float32": (lambda: _scan(1, "float32"), 14.0),
    "scan-1d-float64": (lambda: _scan(1, "float64"), 14.0),
    "scan-2d-float32": (lambda: _scan(2, "float32"), 12.0),
    "scan-2d-float64": (lambda: _scan(2, "float64"), 12.0),
    "euler": (_euler, 9.0),
    "navier-stokes-float64": (lambda: _navier_stokes("float64"), 6.0),
    "navier-stokes-float32": (lambda: _navier_stokes("float32"), 5.0),
    "ssd-float64": (lambda: _ssd("float64"), 2.5),
    "ssd-float32": (lambda: _ssd("float32"), 2.0),
    "semilinear-float64": (lambda: _semilinear("float64"), 1.5),
    "semilinear-float32": (lambda: _semilinear("float32"), 1.5),
}


def compile_log() -> list[tuple[str, str, float, bool]]:
    """A list that, from now on in this process, receives every numba compilation as
    ``(module.qualname, argument types, wall seconds, nested)``; a nested one ran inside
    another's, whose seconds include it. What the warm-up and a cold run spend their time
    on (the tests' ``SSMPDE_NUMBA_COMPILE_LOG`` and the warm-up's own test read it)."""
    from numba.core import event

    compiles: list[tuple[str, str, float, bool]] = []

    class Listener(event.Listener):
        def __init__(self):
            self.open = {}

        def on_start(self, e):
            key = id(e.data["dispatcher"]), str(e.data["args"])
            self.open[key] = (time.perf_counter(), bool(self.open))

        def on_end(self, e):
            function, args = e.data["dispatcher"].py_func, str(e.data["args"])
            opened = self.open.pop((id(e.data["dispatcher"]), args), None)
            if opened is not None:
                compiles.append((f"{function.__module__}.{function.__qualname__}", args,
                                 time.perf_counter() - opened[0], opened[1]))

    event.register("numba:compile", Listener())
    return compiles


def _run(name: str) -> tuple[str, float]:
    started = time.perf_counter()
    JOBS[name][0]()
    return name, time.perf_counter() - started


def warm(processes: int | None = None, jobs=None, *, verbose: bool = False) -> dict:
    """Run ``jobs`` (default every one of :data:`JOBS`) in ``processes`` processes (default
    the CPU count), the longest first; returns each job's wall seconds."""
    names = list(JOBS if jobs is None else jobs)
    unknown = sorted(set(names) - set(JOBS))
    if unknown:
        raise ValueError(f"unknown warm-up jobs {unknown}; known: {sorted(JOBS)}")
    names.sort(key=lambda name: -JOBS[name][1])
    processes = max(1, processes or os.cpu_count() or 1)
    seconds = {}
    with concurrent.futures.ProcessPoolExecutor(processes) as pool:
        for name, elapsed in pool.map(_run, names):
            seconds[name] = elapsed
            if verbose:
                print(f"  {name}: {elapsed:.1f} s", flush=True)
    return seconds


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m ssmpde.warmup``."""
    command = argparse.ArgumentParser(prog="python -m ssmpde.warmup",
                                      description=__doc__.splitlines()[0])
    command.add_argument("--processes", type=int, help="at once (default: the CPU count)")
    command.add_argument("--jobs", nargs="+", choices=sorted(JOBS), help="default: all")
    command.add_argument("--verbose", action="store_true", help="print each job's seconds")
    command.add_argument("--quiet", action="store_true", help="print nothing")
    return command


def main(argv=None) -> dict:
    command = parser()
    args = command.parse_args(argv)
    if args.processes is not None and args.processes < 1:
        command.error(f"--processes must be at least 1, got {args.processes}")
    started = time.perf_counter()
    seconds = warm(args.processes, args.jobs, verbose=args.verbose and not args.quiet)
    if not args.quiet:
        print(f"ssmpde.warmup: {len(seconds)} kernel families in "
              f"{time.perf_counter() - started:.0f} s")
    return seconds


if __name__ == "__main__":
    main()
