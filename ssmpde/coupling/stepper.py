"""A trained surrogate behind the Stepper protocol of :mod:`ssmpde.solvers.base`.

``SurrogateStepper.from_checkpoint(run_dir)`` needs only the run's ``config.json`` and
``weights.safetensors``. It takes and returns NumPy states like a solver
(``history [batch, window, field, *grid] -> frame [batch, field, *grid]``, float64) and does
the normalisation, the conditioning channels and the device inside, without gradients.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from ssmpde.surrogates.checkpoint import load_checkpoint, normalised_model
from ssmpde.surrogates.datasets import Task

__all__ = ["SurrogateStepper"]


class SurrogateStepper:
    """A trained rollout surrogate as a time-stepper.

    Attributes
    ----------
    fields : tuple of str
        The state fields, in order (from the training data).
    dt : float
        The record interval the model was trained on.
    window : int
        Past frames one step needs.
    parameter_names : tuple of str
        The per-sample inputs :meth:`step` needs in ``parameters`` (the task's conditioning,
        e.g. ``viscosity``, ``forcing``): scalars ``[batch]`` or fields ``[batch, *grid]``
        (time-dependent forcing at the step's ``time``).
    record : dict
        The checkpoint's ``config.json`` as loaded (model, task, normalisers, dataset facts).
    """

    def __init__(self, model: torch.nn.Module, record: dict, *, device=None,
                 source: str | None = None):
        task = Task.from_dict(record["task"])
        if task.kind != "rollout":
            raise ValueError("this checkpoint maps inputs to outputs (an operator task, e.g. "
                             "Darcy); a time-stepper needs a model trained on trajectories")
        self.task = task
        self.fields = task.outputs
        self.dt = task.dt
        self.window = task.window
        self.parameter_names = task.conditioning
        self.grid = task.grid
        self.device = torch.device(device or "cpu")
        self.source = source
        self.record = record
        self.model = model.to(self.device).eval()
        self._wrapped = normalised_model(self.model, record)

    @classmethod
    def from_checkpoint(cls, path, device=None) -> SurrogateStepper:
        """Load a run directory written by ``ssmpde train`` (config.json + weights)."""
        model, record = load_checkpoint(path, device=device or "cpu")
        return cls(model, record, device=device, source=str(Path(path).resolve()))

    def _conditioning(self, batch: int, parameters: Mapping[str, np.ndarray] | None):
        channels = []
        conditioning = self.task.conditioning
        for name in conditioning:
            if parameters is None or name not in parameters:
                raise ValueError(f"the surrogate is conditioned on {list(conditioning)}; pass "
                                 f"parameters={{'{name}': ...}} to step()")
            value = np.asarray(parameters[name], dtype=np.float64)
            if value.shape not in ((batch,), (batch, *self.grid)):
                raise ValueError(f"parameter {name!r} must have shape [{batch}] or "
                                 f"[{batch}, {', '.join(map(str, self.grid))}], got "
                                 f"{list(value.shape)}")
            value = value.reshape(batch, *(1,) * len(self.grid)) if value.ndim == 1 else value
            channels.append(np.broadcast_to(value, (batch, *self.grid)))
        if not channels:
            return np.zeros((batch, 0, *self.grid))
        return np.stack(channels, axis=1)

    def check_history(self, history: np.ndarray) -> np.ndarray:
        """``history`` as an array, checked to be ``[batch, window, field, *grid]``."""
        history = np.asarray(history)
        expected = (self.window, len(self.fields), *self.grid)
        if history.ndim != 2 + len(self.grid) + 1 or history.shape[1:] != expected:
            raise ValueError(f"history must have shape [batch, {', '.join(map(str, expected))}]"
                             f" (window, field, *grid), got {list(history.shape)}")
        return history

    def step(self, history: np.ndarray, *, time: float = 0.0,
             parameters: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """``history [batch, window, field, *grid]`` → next frame ``[batch, field, *grid]``.

        ``time`` is accepted for the protocol and unused (the model is autonomous in time);
        ``parameters`` supplies the conditioning variables.
        """
        history = self.check_history(history)
        cond = self._conditioning(history.shape[0], parameters)
        with torch.no_grad():
            frame = self._wrapped.step(
                torch.as_tensor(history, dtype=torch.float32, device=self.device),
                torch.as_tensor(cond, dtype=torch.float32, device=self.device))
        return frame.double().cpu().numpy()
