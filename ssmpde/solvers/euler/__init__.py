r"""2D compressible Euler equations: MUSCL-Hancock finite volumes with HLLC fluxes (numba).

The Poseidon CE-RM (Richtmyer–Meshkov) and GCE-RT (gravitational Rayleigh–Taylor) data, and
the classic checks (Sod along x and y, Lax, Toro's 123 problem, Kelvin–Helmholtz). See
``docs/numerics/euler.md``.

.. math::

    \partial_t U + \partial_x F(U) + \partial_y G(U) = S(U),\qquad
    U = (\rho,\ \rho u,\ \rho v,\ E,\ \rho c),\qquad
    E = \tfrac12 \rho (u^2 + v^2) + \frac{p}{\gamma - 1},

    F = (\rho u,\ \rho u^2 + p,\ \rho u v,\ u (E + p),\ \rho u c),\quad
    G = (\rho v,\ \rho u v,\ \rho v^2 + p,\ v (E + p),\ \rho v c),\quad
    S = (0,\ -\rho \partial_x \phi,\ -\rho \partial_y \phi,\ -\rho\, u \cdot \nabla \phi,\ 0),

with a static potential φ(x, y) (optional) and a passive tracer c.

Layout: primitive states are ``[batch, 5, ny, nx]`` float64 with fields (ρ, u, v, p, c) on the
cell centres ``x_i = (i + ½) Δx``, ``y_j = (j + ½) Δy`` (the arrays are ``[..., y, x]``).
:func:`integrate` is the low-level entry point (the benchmark's); :class:`Euler2D` is the
registered solver (datasets, the Stepper protocol); :func:`reference_step` is one step in plain
NumPy, the test oracle of the numba kernel.

Modules: :mod:`~ssmpde.solvers.euler.kernels` (the compiled kernels),
:mod:`~ssmpde.solvers.euler.engine` (buffers, the CFL-limited loop, :func:`integrate`,
:func:`fast_step`), :mod:`~ssmpde.solvers.euler.reference` (the NumPy step),
:mod:`~ssmpde.solvers.euler.initial` (initial states),
:mod:`~ssmpde.solvers.euler.variables` (the primitive ↔ conserved map all of them use) and
:mod:`~ssmpde.solvers.euler.solver` (:class:`EulerConfig`, :class:`Euler2D`).
"""

from .engine import LIMITERS, conserved_totals, fast_step, integrate
from .initial import RIEMANN_PROBLEMS, ce_rm_state, gce_rt_state, kelvin_helmholtz_state
from .kernels import BOUNDARIES
from .reference import reference_step
from .solver import PROBLEMS, Euler2D, EulerConfig

__all__ = [
    "BOUNDARIES",
    "LIMITERS",
    "PROBLEMS",
    "RIEMANN_PROBLEMS",
    "Euler2D",
    "EulerConfig",
    "ce_rm_state",
    "conserved_totals",
    "fast_step",
    "gce_rt_state",
    "integrate",
    "kelvin_helmholtz_state",
    "reference_step",
]
