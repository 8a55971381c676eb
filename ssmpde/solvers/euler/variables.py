r"""The map between the Euler solver's primitive and conserved variables, written once.

.. math:: (\rho, u, v, p, c) \;\leftrightarrow\; (\rho, \rho u, \rho v, E, \rho c),\qquad
          E = \frac{p}{\gamma - 1} + \tfrac12 \rho (u^2 + v^2).

Arithmetic only, one value per argument: the same code on NumPy arrays, PyTorch tensors and
the scalars of the compiled kernels (which compile it), so the reference step, the kernels,
the conserved totals, the physical checks and the flux-form correction
(:meth:`~ssmpde.solvers.euler.Euler2D.conservative_form`) all convert alike, to the bit.
"""

from __future__ import annotations

__all__ = ["conserved_variables", "primitive_variables"]


def conserved_variables(rho, u, v, p, c, gamma):
    """(ρ, u, v, p, c) → (ρ, ρu, ρv, E, ρc) with E = p/(γ − 1) + ½ρ(u² + v²).

    Example
    -------
    >>> conserved_variables(2.0, 1.0, 0.0, 0.4, 0.5, 1.4)
    (2.0, 2.0, 0.0, 2.0, 1.0)
    """
    return rho, rho * u, rho * v, p / (gamma - 1.0) + 0.5 * rho * (u * u + v * v), rho * c


def primitive_variables(rho, mx, my, energy, mc, gamma):
    """(ρ, ρu, ρv, E, ρc) → (ρ, u, v, p, c): the inverse of :func:`conserved_variables`,
    p = (γ − 1)(E − ½(ρu u + ρv v))."""
    u = mx / rho
    v = my / rho
    return rho, u, v, (gamma - 1.0) * (energy - 0.5 * (mx * u + my * v)), mc / rho
