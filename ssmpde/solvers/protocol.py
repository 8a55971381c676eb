"""What a solver promises the rest of the toolkit: the Stepper protocol and the declarations.

:class:`Stepper` is the one interface coupling loops drive (a solver or a trained surrogate);
:class:`VariableSpec` (a dataset variable and its role), :class:`Checks` (physical checks of
a proposed frame) and :class:`ConservativeForm` (stored fields to conserved densities) are
what a solver declares about itself; :class:`SolverDivergedError` is what it raises when its
solution blows up. Re-exported by :mod:`ssmpde.solvers.base`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..data import ENCODED_BY, ROLE, ROLES

__all__ = ["Checks", "ConservativeForm", "SolverDivergedError", "Stepper", "VariableSpec",
           "stack_fields"]


class SolverDivergedError(FloatingPointError):
    """The solution became non-finite: the time step is too large for the flow."""


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
    parameter_names : tuple of str
        The per-sample inputs :meth:`step` reads from ``parameters`` (dataset variables with
        the role ``parameter`` or ``forcing``); a rollout passes each stepper only these.

    Methods
    -------
    step(history, *, time=0.0, parameters=None) -> frame
        ``history`` has shape ``[batch, window, field, *grid]``; returns the next frame,
        ``[batch, field, *grid]``. ``time`` is the physical time of the last history frame;
        ``parameters`` maps names of ``parameter_names`` to per-sample arrays ``[batch, ...]``
        (time-dependent forcing is given at ``time``: ``[batch, *grid]``).
    """

    fields: tuple[str, ...]
    dt: float
    window: int
    parameter_names: tuple[str, ...]

    def step(self, history: np.ndarray, *, time: float = 0.0,
             parameters: Mapping[str, np.ndarray] | None = None) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class VariableSpec:
    """How a solver output becomes a dataset variable.

    ``dims`` excludes the leading ``sample`` dimension, which every output array has.
    ``role`` is one of :data:`ssmpde.data.ROLES`; ``encoded_by`` names the grid variable that
    carries a non-scalar parameter to a model (see :data:`ssmpde.data.ENCODED_BY`).
    """

    dims: tuple[str, ...]
    long_name: str
    units: str
    role: str = "state"
    encoded_by: str | None = None
    #: CF ``cell_methods`` of the values on the grid, e.g. ``"y: x: mean"`` for finite-volume
    #: cell averages; None for point values.
    cell_methods: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; choose one of {ROLES}")

    def attrs(self) -> dict[str, str]:
        attrs = {"long_name": self.long_name, "units": self.units, ROLE: self.role}
        if self.encoded_by is not None:
            attrs[ENCODED_BY] = self.encoded_by
        if self.cell_methods is not None:
            attrs["cell_methods"] = self.cell_methods
        return attrs


@dataclasses.dataclass(frozen=True)
class Checks:
    """Physical checks of a proposed frame (the adaptive hybrid schedule), declared by a solver.

    Every check compares with the previous frame, per sample and field, against a scale with
    an absolute floor, so a uniform or zero field (ρ = 1, u = 0 at rest) is no special case.

    Attributes
    ----------
    conserved : tuple of str
        Fields whose spatial mean the PDE conserves (mean vorticity on the torus, mass, ...).
    positive : tuple of str
        Fields that must stay > 0 (density, pressure).
    totals : mapping of str to callable
        Conserved quantities that are functions of the fields (momentum, total energy):
        ``name -> f(frame)`` with ``frame`` a mapping of field name to ``[batch, *grid]``
        and ``f`` returning the quantity's density ``[batch, *grid]``; its spatial mean is
        held to ``mean_tolerance`` like a conserved field's.
    bounded : tuple of str, optional
        Fields whose mean-square growth per step is bounded by ``growth_bound``; default
        every field. A field that starts at rest (velocity 0) cannot have a growth bound.
    mean_tolerance : float
        Largest allowed change of a conserved mean in one step, relative to
        ``max(rms(previous), floor)``.
    growth_bound : float
        Largest allowed ratio of a field's mean square to ``max(previous mean square,
        floor²)`` (enstrophy growth for vorticity).
    floor : float
        The absolute scale below which a field counts as zero.
    """

    conserved: tuple[str, ...] = ()
    positive: tuple[str, ...] = ()
    totals: Mapping[str, Callable[[Mapping[str, np.ndarray]], np.ndarray]] = \
        dataclasses.field(default_factory=dict)
    bounded: tuple[str, ...] | None = None
    mean_tolerance: float = 0.05
    growth_bound: float = 1.5
    floor: float = 1e-6

    def failure(self, previous: np.ndarray, proposed: np.ndarray,
                fields: Sequence[str]) -> str | None:
        """Why ``proposed`` ``[batch, field, *grid]`` is rejected after ``previous``, or None."""
        if not np.isfinite(proposed).all():
            return "non-finite values"
        axes = tuple(range(2, proposed.ndim))
        square_before = np.square(previous).mean(axis=axes)
        square_after = np.square(proposed).mean(axis=axes)
        scale = np.maximum(np.sqrt(square_before), self.floor)
        for f, name in enumerate(fields):
            if name in self.positive and (proposed[:, f] <= 0).any():
                return f"{name} is not positive (minimum {proposed[:, f].min():.3g})"
            if name in self.conserved:
                drift = np.abs(proposed[:, f].mean(axis=tuple(range(1, proposed.ndim - 1)))
                               - previous[:, f].mean(axis=tuple(range(1, proposed.ndim - 1))))
                relative = drift / scale[:, f]
                if (relative > self.mean_tolerance).any():
                    return (f"mean {name} drift {relative.max():.3g} x rms > "
                            f"{self.mean_tolerance}")
            if self.bounded is not None and name not in self.bounded:
                continue
            growth = square_after[:, f] / np.maximum(square_before[:, f], self.floor ** 2)
            if (growth > self.growth_bound).any():
                return f"mean-square growth of {name} {growth.max():.3g} > {self.growth_bound}"
        for name, density in self.totals.items():
            before = density(dict(zip(fields, np.moveaxis(previous, 1, 0))))
            after = density(dict(zip(fields, np.moveaxis(proposed, 1, 0))))
            space = tuple(range(1, before.ndim))
            # Against the larger rms of the two frames: momentum starts at zero from rest.
            scale = np.maximum(np.sqrt(np.maximum(np.square(before).mean(axis=space),
                                                  np.square(after).mean(axis=space))),
                               self.floor)
            relative = np.abs(after.mean(axis=space) - before.mean(axis=space)) / scale
            if (relative > self.mean_tolerance).any():
                return f"total {name} drift {relative.max():.3g} x rms > {self.mean_tolerance}"
        return None


@dataclasses.dataclass(frozen=True)
class ConservativeForm:
    """How a finite-volume solver's stored (primitive) fields map to the conserved densities
    its scheme updates in flux form: what a conservative (flux-form) learned correction needs.

    Attributes
    ----------
    names : tuple of str
        The conserved densities, one per stored field, in the fields' order (ρ, ρu, ρv, E,
        ρc for Euler).
    to_conserved, to_primitive : callable
        ``[batch, field, *grid]`` → ``[batch, field, *grid]``, each the other's inverse, on
        NumPy arrays and PyTorch tensors alike (arithmetic only, differentiable).
    periodic : tuple of bool
        Per grid axis (``(y, x)`` in 2D): whether the domain wraps. A correction flux
        through a non-periodic boundary face is zero, so the domain's totals are conserved
        under every boundary condition.
    """

    names: tuple[str, ...]
    to_conserved: Callable[[Any], Any]
    to_primitive: Callable[[Any], Any]
    periodic: tuple[bool, ...]


def stack_fields(parts: Sequence[Any]) -> Any:
    """Stack ``[batch, *grid]`` arrays or tensors into ``[batch, field, *grid]`` (the
    :class:`ConservativeForm` maps work on both)."""
    if type(parts[0]).__module__.startswith("torch"):
        import torch

        return torch.stack(list(parts), dim=1)
    return np.stack(parts, axis=1)
