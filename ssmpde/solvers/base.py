"""Solver base class, the Stepper protocol, and the solver registry.

Every PDE lives in its own module, subclasses :class:`Solver`, declares a frozen config
dataclass, and registers itself with :func:`register_solver`. The dataset generator
(:mod:`ssmpde.solvers.generate`) and the coupling loops only talk to the interface here.
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import xarray as xr

from .. import data

__all__ = [
    "Solver",
    "Stepper",
    "VariableSpec",
    "get_solver",
    "get_solver_class",
    "list_solvers",
    "register_solver",
]


@runtime_checkable
class Stepper(Protocol):
    """Anything that advances a state by one record interval: a solver or a trained surrogate.

    Attributes
    ----------
    fields : tuple of str
        Names of the state fields, in order (the ``field`` axis of states).
    dt : float
        Physical time one :meth:`step` advances (the dataset's record interval).
    window : int
        Number of past frames :meth:`step` needs (1 for a Markovian solver).

    Methods
    -------
    step(history) -> frame
        ``history`` has shape ``[batch, window, field, *grid]``; returns the next frame,
        ``[batch, field, *grid]``. Solvers accept the optional keyword arguments ``time``
        (the physical time of the last history frame) and ``parameters`` (per-sample
        parameters such as viscosity), which time-dependent forcing and per-sample physics need.
    """

    fields: tuple[str, ...]
    dt: float
    window: int

    def step(self, history: np.ndarray) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class VariableSpec:
    """How a solver output becomes a dataset variable.

    ``dims`` excludes the leading ``sample`` dimension, which every output array has.
    """

    dims: tuple[str, ...]
    long_name: str
    units: str


_REGISTRY: dict[str, type[Solver]] = {}


def register_solver(name: str) -> Callable[[type[Solver]], type[Solver]]:
    """Class decorator: make a :class:`Solver` subclass available as ``get_solver(name)``."""

    def decorate(cls: type[Solver]) -> type[Solver]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"a solver named {name!r} is already registered "
                             f"({_REGISTRY[name].__module__}.{_REGISTRY[name].__qualname__})")
        if not (isinstance(cls, type) and issubclass(cls, Solver)):
            raise TypeError(f"@register_solver({name!r}) decorates Solver subclasses, got {cls!r}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _unknown(kind: str, name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} Known: {', '.join(sorted(known))}."


def get_solver_class(name: str) -> type[Solver]:
    """The registered solver class called ``name`` (ValueError with suggestions otherwise)."""
    _load_builtin_solvers()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(_unknown("equation", str(name), list(_REGISTRY))) from None


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
    _load_builtin_solvers()
    return sorted(_REGISTRY)


def _load_builtin_solvers() -> None:
    # Importing the modules runs their @register_solver decorators.
    from . import darcy, navier_stokes  # noqa: F401


def _to_json_value(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_to_json_value(v) for v in value]
    return value


class Solver(abc.ABC):
    """Base class of the built-in PDE solvers.

    A subclass sets the class attributes below and implements the three generation hooks;
    :func:`ssmpde.solvers.generate.generate` does batching, seeding, files and progress.

    Class attributes
    ----------------
    name : str
        Registry name (set by :func:`register_solver`).
    Config : type
        Frozen dataclass of the scientific configuration. Its ``__post_init__`` validates.
    PRESETS : dict
        Named configurations (benchmark datasets of the literature).
    title, references : str
        Dataset attributes.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type]
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    title: ClassVar[str] = ""
    references: ClassVar[str] = ""

    def __init__(self, **config: Any) -> None:
        self.config = self.make_config(**config)

    # -- configuration ---------------------------------------------------------------------
    @classmethod
    def make_config(cls, **config: Any):
        """Build and validate the config dataclass; unknown keys get a clear TypeError."""
        names = [f.name for f in dataclasses.fields(cls.Config)]
        for key in config:
            if key not in names:
                raise TypeError(_unknown(f"{cls.name or cls.__name__} option", key, names))
        normalised = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
        return cls.Config(**normalised)

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> Solver:
        """The solver configured as the named benchmark, with ``overrides`` applied."""
        if preset not in cls.PRESETS:
            raise ValueError(_unknown(f"{cls.name} preset", preset, list(cls.PRESETS)))
        return cls(**{**cls.PRESETS[preset], **overrides})

    def config_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able values (stored as the ``ssmpde_config`` attribute)."""
        return {k: _to_json_value(v) for k, v in dataclasses.asdict(self.config).items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({json.dumps(self.config_dict())[1:-1]})"

    # -- dataset generation hooks ----------------------------------------------------------
    @abc.abstractmethod
    def sample_inputs(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Random inputs of the given samples (initial conditions, per-sample parameters).

        Sample ``indices[i]`` must depend on ``(seed, indices[i])`` alone, so that a dataset
        is the same whatever the batch size (use :func:`ssmpde.solvers.random_fields.sample_rng`).
        """

    @abc.abstractmethod
    def solve_batch(self, inputs: Mapping[str, np.ndarray], *,
                    progress: Callable[[float], None] | None = None) -> dict[str, np.ndarray]:
        """Run a batch; return arrays ``[batch, ...]`` named as in :meth:`variables`.

        ``progress(fraction)`` is called with the fraction of the batch's work just finished.
        """

    @abc.abstractmethod
    def variables(self) -> dict[str, VariableSpec]:
        """Dataset variables this solver writes, in order."""

    @abc.abstractmethod
    def coordinates(self) -> dict[str, xr.DataArray]:
        """Coordinates of the non-sample dimensions (``time``, ``y``, ``x``, ...)."""

    def to_dataset(self, outputs: Mapping[str, np.ndarray], indices: Sequence[int], *,
                   config: Mapping[str, Any], history: str | None = None) -> xr.Dataset:
        """Wrap :meth:`solve_batch` outputs as a schema-valid dataset (see :mod:`ssmpde.data`)."""
        coords = dict(self.coordinates())
        coords[data.SAMPLE] = data.sample_coordinate(np.asarray(indices, dtype=np.int64))
        data_vars = {}
        for name, spec in self.variables().items():
            values = np.asarray(outputs[name])
            dims = (data.SAMPLE, *spec.dims)
            if values.ndim != len(dims):
                raise RuntimeError(f"{self.name}: output {name!r} has shape {values.shape}, "
                                   f"expected dims {dims}")
            data_vars[name] = xr.DataArray(values, dims=dims,
                                           attrs={"long_name": spec.long_name,
                                                  "units": spec.units})
        return data.build_dataset(
            data_vars, coords=coords, equation=self.name, config=config, title=self.title,
            references=self.references, solver=type(self).__name__, history=history)
