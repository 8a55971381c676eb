"""The lowest layer of the coupling: one step of any Stepper, and a rollout of one.

Everything above it (hybrid schedules, error indicators, parareal, the coarse-solver
baseline) advances steppers through these functions, so a stepper is fed its inputs the same
way everywhere:

* :class:`Conditions` holds the per-sample inputs of a rollout, static and time-dependent,
  and gives each step the values at its time;
* :func:`stepper_inputs` picks the entries a stepper takes (its ``parameter_names``);
* :func:`check_history` checks a start history against the steppers that will read it;
* :func:`advance` is one step of a stepper from the last frames of a window, also for a
  stepper that advances only some of the fields;
* :func:`rollout` is ``num_steps`` of one stepper.

States are NumPy ``[batch, window, field, *grid]`` histories, as in the Stepper protocol of
:mod:`ssmpde.solvers.base`. This module imports no other coupling module. See
``docs/hybrid.md``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import xarray as xr

from ssmpde.core import autoregressive
from ssmpde.data import ROLE, SAMPLE, TIME, roles_of

__all__ = ["Conditions", "advance", "check_history", "rollout", "stepper_inputs"]


class Conditions:
    """Per-sample inputs of a rollout: static values and time-dependent forcing.

    Parameters
    ----------
    static : mapping of str to array ``[batch, ...]``
    series : mapping of str to array ``[batch, time, *grid]``, optional
        Known forcing at ``times``; a step at time ``t`` gets the frame at ``t``.
    times : array ``[time]``, optional
    """

    def __init__(self, static: Mapping[str, np.ndarray],
                 series: Mapping[str, np.ndarray] | None = None, times=None) -> None:
        self.static = dict(static)
        self.series = dict(series or {})
        self.times = None if times is None else np.asarray(times, dtype=np.float64)

    @classmethod
    def from_dataset(cls, ds: xr.Dataset, *, validate: bool = True) -> Conditions:
        """The ``parameter`` and ``forcing`` variables of a dataset (roles), by sample, and the
        first frame of each time-dependent state as ``name@0`` (see ``infer_task``).

        Parameters
        ----------
        ds : xarray.Dataset
        validate : bool
            Check the schema (:func:`ssmpde.data.roles_of`). False for a dataset the caller
            has just opened with validation: then only the presence of the roles is checked.
        """
        if validate:
            roles = roles_of(ds)
        else:
            roles = {name: var.attrs.get(ROLE) for name, var in ds.data_vars.items()}
            if None in roles.values():
                roles_of(ds)  # raises, naming the variables without a role
        static, series = {}, {}
        for name, role in roles.items():
            if role in ("parameter", "forcing"):
                target = series if TIME in ds[name].dims else static
                target[name] = np.asarray(ds[name].transpose(SAMPLE, ...).values)
            elif role == "state" and TIME in ds[name].dims:
                static[f"{name}@0"] = np.asarray(
                    ds[name].isel({TIME: 0}).transpose(SAMPLE, ...).values)
        times = ds[TIME].values if series else None
        return cls(static, series, times)

    def at(self, time: float) -> dict[str, np.ndarray]:
        """The inputs of a step whose history ends at ``time``."""
        values = dict(self.static)
        if self.series:
            index = int(np.argmin(np.abs(self.times - time)))
            spacing = np.min(np.diff(self.times)) if len(self.times) > 1 else 1.0
            if abs(self.times[index] - time) > 1e-6 * spacing:
                raise ValueError(f"the forcing {sorted(self.series)} is known at times "
                                 f"{self.times[0]:g}..{self.times[-1]:g}; a step from t = "
                                 f"{time:g} needs it there: shorten the rollout")
            values.update({name: value[:, index] for name, value in self.series.items()})
        return values


def check_history(history: np.ndarray, *steppers) -> np.ndarray:
    """``history`` as float64, checked against the steppers that will read it.

    Parameters
    ----------
    history : array ``[batch, window, field, *grid]``
        At least the largest window of ``steppers``.
    *steppers : Stepper
        The first (the solver) advances every field of ``history``; the others may advance a
        subset of them.

    Returns
    -------
    array ``[batch, window, field, *grid]``, float64

    Raises
    ------
    ValueError
        If the history is too short or has the wrong number of fields, or a stepper advances
        a field the first one does not.
    """
    history = np.asarray(history, dtype=np.float64)
    need = max(s.window for s in steppers)
    if history.ndim < 4 or history.shape[1] < need:
        raise ValueError(f"history must be [batch, window >= {need}, field, *grid], got "
                         f"{list(history.shape)}")
    # The first stepper (the solver) advances every field; the others may advance a subset
    # (an Euler surrogate that predicts ρ, u, v, p but not the passive tracer).
    fields = tuple(steppers[0].fields)
    for other in steppers[1:]:
        extra = [f for f in other.fields if f not in fields]
        if extra:
            raise ValueError(f"the steppers advance different fields: {list(other.fields)} "
                             f"has {extra}, which {list(fields)} lacks")
    if history.shape[2] != len(fields):
        raise ValueError(f"history has {history.shape[2]} fields; the steppers advance "
                         f"{list(fields)}")
    return history


def stepper_inputs(stepper, parameters, time: float):
    """The entries of ``parameters`` (a mapping, or a :class:`Conditions` read at ``time``)
    that ``stepper`` takes: a solver needs viscosity and the forcing amplitudes, a surrogate
    the forcing field. All of them for a stepper without ``parameter_names``."""
    if isinstance(parameters, Conditions):
        parameters = parameters.at(time)
    names = getattr(stepper, "parameter_names", None)
    if parameters is not None and names is not None:
        parameters = {k: v for k, v in parameters.items() if k in names}
    return parameters


def advance(stepper, window: np.ndarray, time: float, parameters,
            fields: tuple[str, ...] | None = None) -> np.ndarray:
    """One step of ``stepper`` from the last frames of ``window``, given the inputs it takes.

    Parameters
    ----------
    stepper : Stepper
    window : array ``[batch, time, field, *grid]``
        At least ``stepper.window`` frames, the last at ``time``; it holds ``fields``
        (default the stepper's own).
    time : float
    parameters : mapping, Conditions or None
        Filtered by :func:`stepper_inputs`.
    fields : tuple of str, optional
        The fields of ``window``. A stepper that advances only some of them sees only those;
        the others keep their last values in the new frame (they are re-anchored by the next
        solver step).

    Returns
    -------
    array ``[batch, field, *grid]``, float64
    """
    parameters = stepper_inputs(stepper, parameters, time)
    history = window[:, -stepper.window:]
    own = tuple(stepper.fields)
    if fields is None or own == tuple(fields):
        return np.asarray(stepper.step(history, time=time, parameters=parameters),
                          dtype=np.float64)
    index = [tuple(fields).index(f) for f in own]
    frame = window[:, -1].copy()
    frame[:, index] = stepper.step(history[:, :, index], time=time, parameters=parameters)
    return frame


def rollout(stepper, history: np.ndarray, num_steps: int, *, time: float = 0.0,
            parameters: Mapping[str, np.ndarray] | Conditions | None = None) -> np.ndarray:
    """``num_steps`` steps of one Stepper from ``history`` (its last frame at ``time``):
    ``[batch, num_steps, field, *grid]``."""
    history = check_history(history, stepper)
    return autoregressive(
        lambda k, window: advance(stepper, window, time + k * stepper.dt, parameters),
        history, num_steps)
