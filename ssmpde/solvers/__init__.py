"""Classical PDE solvers that generate datasets and act as time-steppers.

>>> from ssmpde.solvers import generate, list_solvers
>>> "navier-stokes" in list_solvers()
True
"""

from .base import Solver, Stepper, get_solver, get_solver_class, list_solvers, register_solver
from .burgers import Burgers1D
from .darcy import Darcy
from .euler import Euler2D
from .generate import generate
from .kdv import KdV
from .kuramoto_sivashinsky import KuramotoSivashinsky
from .navier_stokes import NavierStokes2D

__all__ = ["Burgers1D", "Darcy", "Euler2D", "KdV", "KuramotoSivashinsky", "NavierStokes2D",
           "Solver", "Stepper", "generate", "get_solver", "get_solver_class", "list_solvers",
           "register_solver"]
