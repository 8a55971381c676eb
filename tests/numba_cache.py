"""Compile ssmpde's numba kernels into their on-disk cache, at tiny sizes.

``tests/conftest.py`` runs this once per test session, before xdist's workers start, so the
workers load the kernels from the cache instead of each compiling the same ones (numba
compiles one kernel at a time per process; on a fresh clone that was most of a cold run).
A kernel left out here still works: the first test that calls it compiles it, as before.

``python tests/numba_cache.py GROUP ...`` compiles the groups named (:data:`GROUPS`), so that
several processes can compile side by side.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import ssmpde  # noqa: F401  (before torch: OMP_WAIT_POLICY=PASSIVE)

#: The groups, the costliest first (seconds of one core to compile, cold: about 21, 21, 19,
#: 18 and 4): the CPU scans by dtype and dimension, and the solvers.
GROUPS = ("scans-float32-2d", "scans-float64-2d", "scans-float32-1d", "scans-float64-1d",
          "solvers")


def solvers() -> None:
    """The solvers' kernels: Navier-Stokes (parallel and serial builds), the 1D spectral
    solvers' ETDRK4 stages, and Euler's step (both builds) and loader."""
    import numpy as np

    from ssmpde.solvers import generate
    from ssmpde.solvers.euler.engine import fast_step
    from ssmpde.solvers.navier_stokes import NavierStokes2D

    ns = NavierStokes2D(resolution=16, simulation_resolution=16, viscosity=1e-3,
                        final_time=0.02, record_interval=0.01, time_step=0.01, forcing="fno")
    w0 = np.random.default_rng(0).standard_normal((2, 1, 16, 16))
    ns.simulate(w0[:1], 1)  # one group on every core: the parallel build
    ns.threads = 1
    ns.simulate(w0, 1)  # one core: the serial build
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("kuramoto-sivashinsky", "kdv", "burgers"):
            generate(name, num_samples=1, out=Path(tmp) / f"{name}.nc", progress=False,
                     resolution=32, simulation_resolution=32, final_time=0.2,
                     record_interval=0.1).close()
    primitive = np.ones((1, 5, 64, 64))
    for parallel in (True, False):
        fast_step(primitive, 1e-4, parallel=parallel)


def scans(dtype: str, dimension: str) -> None:
    """A CPU selective scan (``"1d"`` or ``"2d"``) in ``dtype``, forward and backward, with
    every optional input (D, R, z, delta_bias)."""
    import torch

    from ssmpde.kernels.scan_cpu import selective_scan_2d_cpu, selective_scan_cpu

    grid, scan = {"1d": ((6,), selective_scan_cpu),
                  "2d": ((3, 4), selective_scan_2d_cpu)}[dimension]
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=getattr(torch, dtype),
                           requires_grad=True)

    batch, channels, state = 1, 2, 2
    A = -torch.rand(channels, state, generator=g, dtype=getattr(torch, dtype))
    out = scan(randn(batch, channels, *grid), randn(batch, channels, *grid), A,
               randn(batch, state, *grid), randn(batch, state, *grid), D=randn(channels),
               R=randn(channels, state), z=randn(batch, channels, *grid),
               delta_bias=randn(channels))
    out.sum().backward()


def main(argv: list[str]) -> None:
    for group in argv or GROUPS:
        if group not in GROUPS:
            raise SystemExit(f"unknown group {group!r}: one of {GROUPS}")
        if group == "solvers":
            solvers()
        else:
            scans(*group.split("-")[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
