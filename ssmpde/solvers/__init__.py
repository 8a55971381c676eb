"""Classical PDE solvers that generate datasets and act as time-steppers.

Numerics only: dataset generation over these solvers is :mod:`ssmpde.generation`
(``from ssmpde.generation import generate``). Its first address,
``from ssmpde.solvers import generate``, still works but is deprecated: it warns
(DeprecationWarning) and is loaded on first use, so this package imports nothing of
:mod:`ssmpde.generation` (which imports it).

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
           "Solver", "Stepper", "get_solver", "get_solver_class", "list_solvers",
           "register_solver"]


def __getattr__(name: str):
    # PEP 562: `generate` moved to ssmpde.generation; the old name is a deprecated alias,
    # imported when first asked for here.
    if name == "generate":
        import warnings

        warnings.warn("ssmpde.solvers.generate is deprecated: use "
                      "`from ssmpde.generation import generate`", DeprecationWarning,
                      stacklevel=2)
        from ssmpde.generation import generate

        return generate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
