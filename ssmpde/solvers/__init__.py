"""Classical PDE solvers that generate datasets and act as time-steppers.

Numerics only: dataset generation over these solvers is :mod:`ssmpde.generation`. Its
:func:`~ssmpde.generation.generate` stays importable from here under its first address
(``from ssmpde.solvers import generate``), loaded on first use, so this package imports
nothing of :mod:`ssmpde.generation` (which imports it).

>>> from ssmpde.solvers import list_solvers
>>> "navier-stokes" in list_solvers()
True
"""

from .base import Solver, Stepper, get_solver, get_solver_class, list_solvers, register_solver
from .burgers import Burgers1D
from .darcy import Darcy
from .euler import Euler2D
from .kdv import KdV
from .kuramoto_sivashinsky import KuramotoSivashinsky
from .navier_stokes import NavierStokes2D

__all__ = ["Burgers1D", "Darcy", "Euler2D", "KdV", "KuramotoSivashinsky", "NavierStokes2D",
           "Solver", "Stepper", "generate", "get_solver", "get_solver_class", "list_solvers",
           "register_solver"]


def __getattr__(name: str):
    # PEP 562: `generate` moved to ssmpde.generation; imported when first asked for here.
    if name == "generate":
        from ssmpde.generation import generate

        return generate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
