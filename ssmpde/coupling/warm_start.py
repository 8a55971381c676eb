"""Steady problems: a trained operator surrogate as the initial guess of an iterative solve.

For Darcy, :func:`warm_start` predicts u from a with the surrogate (on the stored grid),
interpolates the prediction to the solver's grid, and runs
:meth:`ssmpde.solvers.darcy.Darcy.solve_iterative` from it and from zero to the same tolerance,
reporting iterations and wall time of both.
"""

from __future__ import annotations

import time as _time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ssmpde.core import relative_l2
from ssmpde.surrogates.checkpoint import load_checkpoint, normalised_model

__all__ = ["OperatorSurrogate", "warm_start"]


class OperatorSurrogate:
    """A trained operator surrogate (e.g. Darcy a → u) on NumPy arrays, without gradients.

    Attributes
    ----------
    task : Task
        What the model maps (inputs, outputs, grid).
    grid : tuple of int
        The stored grid it was trained on.
    record : dict
        The checkpoint's ``config.json`` as loaded.
    source : str or None
        The run directory it was loaded from.
    """

    def __init__(self, model, record: dict, *, device=None, source: str | None = None):
        self.device = torch.device(device or "cpu")
        self._wrapped = normalised_model(model.to(self.device).eval(), record)
        task = self._wrapped.task  # record["task"], decoded once
        if task.kind != "operator":
            raise ValueError("this checkpoint is a time-stepper (trained on trajectories); "
                             "use SurrogateStepper for it")
        self.task, self.grid, self.source, self.record = task, task.grid, source, record

    @classmethod
    def from_checkpoint(cls, path, device=None) -> OperatorSurrogate:
        model, record = load_checkpoint(path, device=device or "cpu")
        return cls(model, record, device=device, source=str(Path(path).resolve()))

    def predict(self, inputs: np.ndarray) -> np.ndarray:
        """``[batch, inputs, *grid]`` (or ``[batch, *grid]`` for one input variable) →
        ``[batch, outputs, *grid]``, float64."""
        x = np.asarray(inputs, dtype=np.float64)
        if x.ndim == 1 + len(self.grid):
            x = x[:, None]
        expected = (len(self.task.inputs), *self.grid)
        if x.shape[1:] != expected:
            raise ValueError(f"inputs must have shape [batch, {', '.join(map(str, expected))}] "
                             f"({', '.join(self.task.inputs)} on the trained grid), got "
                             f"{list(x.shape)}")
        with torch.no_grad():
            out = self._wrapped(torch.as_tensor(x, dtype=torch.float32, device=self.device))
        return out.double().cpu().numpy()


def _to_grid(u: np.ndarray, size: int) -> np.ndarray:
    """Bilinear interpolation between node grids that include the boundary (align_corners)."""
    if u.shape[-1] == size:
        return u
    t = torch.as_tensor(u, dtype=torch.float64)[:, None]
    return F.interpolate(t, size=(size, size), mode="bilinear", align_corners=True)[:, 0].numpy()


def warm_start(solver, surrogate: OperatorSurrogate, a: np.ndarray, *,
               rtol: float = 1e-8) -> dict:
    """Cold and warm PCG solves of Darcy problems to the same tolerance.

    Parameters
    ----------
    solver : ssmpde.solvers.darcy.Darcy
    surrogate : OperatorSurrogate
        Trained on ``a → u`` at the solver's stored resolution.
    a : array ``[batch, K, K]``
        Coefficients at the solver's resolution K (``simulation_resolution``).
    rtol : float
        Relative residual both solves stop at.

    Returns
    -------
    dict
        ``iterations_cold``, ``iterations_warm`` (``[batch]``), ``seconds_cold``,
        ``seconds_warm`` (the warm figure includes the prediction), ``seconds_prediction``,
        ``initial_guess_error`` (relative L2 of the interpolated prediction against the
        converged solution), ``solution_difference`` (relative L2 between the warm and cold
        solutions), and ``u`` (the warm solutions).
    """
    a = np.asarray(a, dtype=np.float64)
    k = solver.config.simulation_resolution
    if a.ndim != 3 or a.shape[1:] != (k, k):
        raise ValueError(f"a must have shape [batch, {k}, {k}] (the solver's grid), got "
                         f"{list(a.shape)}")
    stride = solver.config.stride
    stored = a[:, ::stride, ::stride]
    started = _time.perf_counter()
    guess = _to_grid(surrogate.predict(stored)[:, 0], k)
    seconds_prediction = _time.perf_counter() - started
    started = _time.perf_counter()
    u_cold, cold = solver.solve_iterative(a, rtol=rtol)
    seconds_cold = _time.perf_counter() - started
    started = _time.perf_counter()
    u_warm, warm = solver.solve_iterative(a, x0=guess, rtol=rtol)
    seconds_warm = _time.perf_counter() - started + seconds_prediction

    return {"iterations_cold": cold["iterations"], "iterations_warm": warm["iterations"],
            "converged": cold["converged"] & warm["converged"],
            "seconds_cold": seconds_cold, "seconds_warm": seconds_warm,
            "seconds_prediction": seconds_prediction,
            "initial_guess_error": relative_l2(guess, u_cold),
            "solution_difference": relative_l2(u_warm, u_cold), "u": u_warm}
