"""The solver interface in one place: the registry, :func:`solver_of`, and the bases.

Every PDE lives in its own module, subclasses :class:`~ssmpde.solvers.solver.Solver` (steady
problems) or :class:`~ssmpde.solvers.solver.TimeDependentSolver` (evolution problems), declares
a frozen config dataclass and its dataset variables with their roles, and registers itself
with :func:`register_solver`; the module's name goes in :data:`BUILTIN_SOLVERS`. The dataset
generator (:mod:`ssmpde.generation`) and the coupling loops only talk to the interface here:
the registry is defined here, the bases come from :mod:`ssmpde.solvers.solver` and the
Stepper protocol and a solver's declarations (:class:`~ssmpde.solvers.protocol.Stepper`,
``VariableSpec``, ``Checks``, ``ConservativeForm``, ``SolverDivergedError``) from
:mod:`ssmpde.solvers.protocol`; every one of them is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import xarray as xr

from ..core import Registry
from ..data import config_of
from .protocol import Checks, ConservativeForm, SolverDivergedError, Stepper, VariableSpec
from .solver import (Solver, TimeDependentSolver, block_average, check_ranged,
                     check_strided_grid, parse_coarsening, positive_finite, whole_multiple)

__all__ = [
    "BUILTIN_SOLVERS",
    "Checks",
    "ConservativeForm",
    "Solver",
    "SolverDivergedError",
    "Stepper",
    "TimeDependentSolver",
    "VariableSpec",
    "block_average",
    "check_ranged",
    "check_strided_grid",
    "get_solver",
    "get_solver_class",
    "list_solvers",
    "parse_coarsening",
    "positive_finite",
    "register_solver",
    "solver_of",
    "whole_multiple",
]

#: Modules of the built-in solvers (importing one registers it): a new PDE adds a line here.
BUILTIN_SOLVERS = (
    "allen_cahn",
    "burgers",
    "darcy",
    "euler",
    "kdv",
    "kuramoto_sivashinsky",
    "navier_stokes",
)

_SOLVERS: Registry[Solver] = Registry("equation", __package__, BUILTIN_SOLVERS)


def _check_solver_class(cls: type) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Solver)):
        raise TypeError(f"@register_solver decorates Solver subclasses, got {cls!r}")


def register_solver(name: str) -> Callable[[type[Solver]], type[Solver]]:
    """Class decorator: make a :class:`Solver` subclass available as ``get_solver(name)``."""
    return _SOLVERS.register(name, _check_solver_class)


def get_solver_class(name: str) -> type[Solver]:
    """The registered solver class called ``name`` (ValueError with suggestions otherwise)."""
    return _SOLVERS.get(name)


def get_solver(name: str, *, preset: str | None = None, **config: Any) -> Solver:
    """Build a registered solver, e.g. ``get_solver("navier-stokes", viscosity=1e-4)``.

    Parameters
    ----------
    name : str
        Registered name (see :func:`list_solvers`).
    preset : str, optional
        A named configuration of the solver class (its ``PRESETS``); ``config`` overrides it.
    **config
        Fields of the solver's config dataclass.
    """
    cls = get_solver_class(name)
    return cls.from_preset(preset, **config) if preset is not None else cls(**config)


def list_solvers() -> list[str]:
    """Names of all registered solvers, sorted."""
    return _SOLVERS.names()


def solver_of(source: xr.Dataset | Mapping[str, Any], *, origin: str | None = None) -> Solver:
    """The solver that generated a dataset, rebuilt from its generator config.

    The one decoding of a generator config into a solver: training, corrections, rollouts and
    warm starts all call it, so the checks and the error are the same everywhere.

    Parameters
    ----------
    source : xarray.Dataset or mapping
        A dataset written by ``ssmpde generate`` (its ``ssmpde_config`` attribute is read), or
        such a generator config itself, as a checkpoint records it
        (``{"equation": ..., "solver": {...}, "seed": ..., "num_samples": ...}``).
    origin : str, optional
        Where ``source`` came from, for the error (``"the checkpoint runs/ks"``); default the
        dataset's file.

    Returns
    -------
    Solver
        ``get_solver(config["equation"], **config["solver"])``.

    Raises
    ------
    ValueError
        One line, "cannot rebuild the solver from ...", naming what is missing or wrong.

    Example
    -------
    >>> solver_of({"equation": "burgers", "solver": {"resolution": 32}}).grid
    (32,)
    """
    if isinstance(source, xr.Dataset):
        path = source.encoding.get("source")
        origin = origin or (f"the generator config of '{path}'" if path
                            else "the dataset's generator config")
        try:
            config = config_of(source)
        except ValueError as error:  # SchemaError: missing, not JSON, not an object
            problem = getattr(error, "problems", None) or [str(error)]
            _cannot_rebuild(origin, problem[0])
    else:
        config = source
        origin = origin or "the generator config"
    if config is None:
        _cannot_rebuild(origin, "no generator config is recorded there")
    if not isinstance(config, Mapping):
        _cannot_rebuild(origin, f"it is a {type(config).__name__}, not a JSON object")
    equation, options = config.get("equation"), config.get("solver")
    if not isinstance(equation, str):
        _cannot_rebuild(origin, "it has no 'equation' (a registered solver's name)")
    if not isinstance(options, Mapping):
        _cannot_rebuild(origin, "it has no 'solver' object (the solver's options)")
    try:
        return get_solver(equation, **options)
    except (TypeError, ValueError) as error:
        _cannot_rebuild(origin, str(error))


def _cannot_rebuild(origin: str, problem: str):
    raise ValueError(f"cannot rebuild the solver from {origin}: {problem}; the solver is rebuilt "
                     "from the 'equation' and 'solver' entries that 'ssmpde generate' writes, "
                     "so regenerate the data with it, or retrain on data it wrote") from None
