"""A trained surrogate behind the Stepper protocol of :mod:`ssmpde.solvers.base`.

``SurrogateStepper.from_checkpoint(run_dir)`` needs only the run's ``config.json`` and
``weights.safetensors``. It takes and returns NumPy states like a solver
(``history [batch, window, field, *grid] -> frame [batch, field, *grid]``, float64) and does
the normalisation, the conditioning channels and the device inside, without gradients.
Two inference options, both off by default: ``compile`` (``torch.compile`` through
:func:`ssmpde.surrogates.compiled.compile_model`, which refuses a compiled model whose output
differs from eager) and ``precision`` (bfloat16 or float16 autocast; its error against
float32 per model is in ``benchmarks/results/models.json``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from ssmpde.surrogates.checkpoint import load_checkpoint, normalised_model
from ssmpde.surrogates.compiled import CompiledOnFirstCall, compile_backend

__all__ = ["PRECISIONS", "SurrogateStepper"]

#: The precisions a stepper can run its model in: float32 as trained, or autocast to a
#: 16-bit type (matrix products, convolutions and what autocast lists; the rest in float32).
PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _Inference(torch.nn.Module):
    """The model as a stepper runs it: compiled on the first call (with that call's input as
    the example :func:`~ssmpde.surrogates.compiled.compile_model` checks against eager) and/or
    under autocast to a 16-bit type, the output back in float32."""

    def __init__(self, model: torch.nn.Module, *, backend: str | None,
                 dtype: torch.dtype | None):
        super().__init__()
        self.model = model if backend is None else CompiledOnFirstCall(model, backend)
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        autocast = (torch.autocast(x.device.type, dtype=self.dtype) if self.dtype is not None
                    else contextlib.nullcontext())
        with autocast:
            out = self.model(x)
        return out.float()


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
    compile : str or None
        The ``torch.compile`` backend :meth:`step` runs the model with (None: eager).
    precision : {"float32", "bfloat16", "float16"}
        What :meth:`step` computes the model in (see :meth:`configure`).
    """

    #: What its steps count as in a rollout's report (``corrected`` for a corrector).
    kind: ClassVar[str] = "surrogate"
    #: The name of its row when it runs alone (None: the schedule's text).
    label: ClassVar[str | None] = None

    def __init__(self, model: torch.nn.Module, record: dict, *, device=None,
                 source: str | None = None, compile: bool | str = False,
                 precision: str = "float32"):
        self.device = torch.device(device or "cpu")
        self.model = model.to(self.device).eval()
        self._wrapped = self._normalised(self.model, record)  # decodes record["task"], once
        task = self._wrapped.task
        if task.kind != "rollout":
            raise ValueError("this checkpoint maps inputs to outputs (an operator task, e.g. "
                             "Darcy); a time-stepper needs a model trained on trajectories")
        self.task = task
        self.fields = task.outputs
        self.dt = task.dt
        self.window = task.window
        self.parameter_names = task.conditioning
        self.grid = task.grid
        self.source = source
        self.record = record
        self.configure(compile=compile, precision=precision)

    def _normalised(self, model: torch.nn.Module, record: dict):
        """The model with its task's normalisers (a corrector passes its coarse solver's
        conservative form)."""
        return normalised_model(model, record)

    @classmethod
    def from_checkpoint(cls, path, device=None, *, compile: bool | str = False,
                        precision: str = "float32") -> SurrogateStepper:
        """Load a run directory written by ``ssmpde train`` (config.json + weights); the
        options are those of :meth:`configure`."""
        model, record = load_checkpoint(path, device=device or "cpu")
        return cls(model, record, device=device, source=str(Path(path).resolve()),
                   compile=compile, precision=precision)

    def configure(self, *, compile: bool | str = False,
                  precision: str = "float32") -> SurrogateStepper:
        """Choose how :meth:`step` runs the model; returns the stepper.

        Parameters
        ----------
        compile : bool or str
            False: eager. True or a backend name (``"inductor"``, ``"aot_eager"``, ...):
            ``torch.compile`` at the first step, through
            :func:`ssmpde.surrogates.compiled.compile_model`, which checks the compiled
            output against eager on that step's input and refuses a compiled model that
            differs.
        precision : {"float32", "bfloat16", "float16"}
            float32 computes as trained. The 16-bit types run the model under
            ``torch.autocast`` (matrix products and convolutions in 16 bits, the rest and
            the output in float32): relative errors against float32 of 6e-4 to 3e-3
            (float16) and 2e-3 to 4e-2 (bfloat16) per step for the built-in models
            (``benchmarks/results/models.json``), which a long rollout compounds. Never on
            unless asked. On a CPU without native 16-bit arithmetic it is slower, not faster
            (float16 on most CPUs).
        """
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got "
                             f"{precision!r}")
        self.compile = compile_backend(compile)
        self.precision = precision
        dtype = PRECISIONS[precision]
        self._wrapped.model = (self.model if self.compile is None and dtype is None
                               else _Inference(self.model, backend=self.compile, dtype=dtype))
        return self

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
