r"""A coarse solver with a trained correction, as one Stepper.

One step of a :class:`CorrectedStepper` advances the coarse solver one record interval from
the last frame, then adds the correction a trained model predicts from the history, the coarse
prediction and the conditioning:

.. math:: u_{t+1} = c_{t+1} + M(u_{t-w+1..t},\ c_{t+1},\ \text{conditioning}),
          \qquad c_{t+1} = \mathcal{C}(u_t).

A corrector trained with ``correction_mode="source"`` acts inside the step instead (INC's
"indirect" correction, Wei et al. 2025): its correction δ = M(u_{t-w+1..t}, u_t, conditioning)
enters the coarse solver's right-hand side as the source S = δ / Δt over the interval,
u_{t+1} = 𝒞(u_t; S), so the solver's implicit diffusion, exact linear part and dealiasing act
on it.

A corrector trained with ``correction_mode="flux"`` (finite-volume solvers with a
:class:`~ssmpde.solvers.base.ConservativeForm`, Euler) acts after the step in conservative
form: the model predicts a correction flux per conserved density and cell face, and the
conserved densities U = to_conserved(c_{t+1}) change by its discrete divergence ΔU, so mass,
momentum and energy are conserved to round-off:
u_{t+1} = c_{t+1} + to_primitive(U + ΔU) − to_primitive(U). In every mode a corrected frame
whose positive fields (density, pressure: the solver's ``checks``) are not all positive falls
back, sample by sample, to the uncorrected coarse step (counted in
:attr:`CorrectedStepper.fallbacks`).

Every mode is :func:`ssmpde.surrogates.correction_training.corrected_step`, the one corrected
step of the package: unrolled training, on-policy training and the one-step loss call it too,
so a corrector runs as it was trained.

The state stays on the coarse solver's simulation grid (the data the corrector was trained on
are stored there), so nothing is lost handing frames between the two. The correction is added
in float64: a correction of exactly zero gives the coarse solver's step bit for bit. This is
the "solver in the loop" of Um et al. (NeurIPS 2020) and the learned correction of Kochkov et
al. (PNAS 2021); training is :func:`ssmpde.surrogates.train.train` with
``target="correction"``. See ``docs/hybrid.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from ssmpde.surrogates.checkpoint import load_checkpoint, normalised_model
from ssmpde.surrogates.correction import coarse_solver
from ssmpde.surrogates.correction_training import SolverStep, corrected_step, positive_fields

from .stepper import SurrogateStepper
from .steps import stepper_inputs

__all__ = ["CorrectedStepper", "stepper_from_checkpoint"]

_NOT_A_CORRECTOR = ("this checkpoint is not a correction of a coarse solver (train one with "
                    "target='correction', --target correction --coarse SxT)")


class CorrectedStepper(SurrogateStepper):
    """A coarse solver corrected after every step by a trained model.

    Attributes
    ----------
    coarse : TimeDependentSolver
        The coarsened solver (its ``dt`` is the record interval of the data).
    coarsening : str
        ``"SxT"`` (grid ``S`` times coarser, step ``T`` times longer than the generator's).
    fields, dt, window, parameter_names
        The Stepper protocol; ``parameter_names`` holds what the solver and the model take.
    """

    #: Its steps count as ``corrected`` in a rollout's report, never as ``surrogate``.
    kind = "corrected"

    def __init__(self, model: torch.nn.Module, record: dict, *, coarse=None, device=None,
                 source: str | None = None, compile: bool | str = False,
                 precision: str = "float32"):
        if "correction" not in record:
            raise ValueError(_NOT_A_CORRECTOR)
        self.coarsening = record["correction"]["coarsening"]
        if coarse is None:
            coarse = coarse_solver(record["dataset"].get("generator_config"), self.coarsening,
                                   origin=f"the checkpoint {source or 'record'}")
        # Built once: a flux corrector's model takes this solver's conservative form.
        self.coarse = coarse
        super().__init__(model, record, device=device, source=source, compile=compile,
                         precision=precision)
        if not self.task.correction:
            raise ValueError(_NOT_A_CORRECTOR)
        self.mode = self.task.correction_mode
        self.conservative = self._wrapped.conservative
        if tuple(coarse.simulation_grid) != tuple(self.grid):
            raise ValueError(f"the coarse solver steps a {list(coarse.simulation_grid)} grid, "
                             f"the corrector was trained on {list(self.grid)}")
        if abs(coarse.dt - self.dt) > 1e-12 * max(1.0, self.dt):
            raise ValueError(f"the coarse solver's record interval {coarse.dt} differs from the "
                             f"corrector's {self.dt}")
        if self.mode == "source" and not coarse.takes_source:
            raise ValueError(f"the corrector acts inside the coarse step as a source term, "
                             f"which {coarse.name} does not take")
        self._step = SolverStep(coarse)
        #: Field indices that must stay > 0 (density, pressure): a corrected frame that breaks
        #: this is replaced by the uncorrected coarse step, sample by sample.
        self.positive = positive_fields(coarse, self.fields)
        #: Samples whose correction was refused (non-positive or non-finite) and replaced by
        #: the uncorrected coarse step, over this stepper's life (reset it to count a run).
        self.fallbacks = 0
        self.parameter_names = tuple(dict.fromkeys((*self.task.conditioning,
                                                    *coarse.parameter_names)))

    def _normalised(self, model: torch.nn.Module, record: dict):
        """The model with its normalisers, given the coarse solver's conservative form (a
        flux corrector's; not rebuilt from the record)."""
        return normalised_model(model, record, conservative=self.coarse.conservative_form())

    @property
    def label(self) -> str:
        """How reports name it: ``corrected 4x5``; ``corrected 4x5, unrolled 4`` for a
        corrector trained through 4 unrolled coarse steps, ``, on-policy 4`` for one trained
        on the states of 4-step corrected rollouts; ``, in-step`` and ``, flux`` name the
        source and flux modes."""
        trained = self.record.get("train_config", {})
        horizon = trained.get("horizon", 1)
        mode = {"source": ", in-step", "flux": ", flux"}.get(self.mode, "")
        variant = ""
        if horizon > 1:
            variant = (f", on-policy {horizon}" if trained.get("on_policy")
                       else f", unrolled {horizon}")
        return f"corrected {self.coarsening}{mode}{variant}"

    def step(self, history: np.ndarray, *, time: float = 0.0,
             parameters: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """``history [batch, window, field, *grid]`` → the corrected next frame (float64):
        :func:`~ssmpde.surrogates.correction_training.corrected_step`, the step the corrector
        was trained with, in float64 around the coarse solver.

        ``time`` is the time of the last frame (the coarse solver's forcing reads it);
        ``parameters`` holds what the solver and the model take.
        """
        history = self.check_history(history)
        cond = self._conditioning(history.shape[0], parameters)

        def count(refused: int) -> None:
            self.fallbacks += refused

        with torch.no_grad():
            frame = corrected_step(
                self._wrapped, self._step,
                torch.as_tensor(history, dtype=torch.float64, device=self.device),
                torch.as_tensor(cond, dtype=torch.float32, device=self.device), time=time,
                parameters=stepper_inputs(self.coarse, parameters, time), fallbacks=count)
        return frame.cpu().numpy()


def stepper_from_checkpoint(path, device=None, *, compile: bool | str = False,
                            precision: str = "float32") -> SurrogateStepper:
    """The Stepper a run directory holds: a :class:`CorrectedStepper` for a correction of a
    coarse solver, a :class:`~ssmpde.coupling.stepper.SurrogateStepper` otherwise; the
    options are those of :meth:`~ssmpde.coupling.stepper.SurrogateStepper.configure`."""
    model, record = load_checkpoint(path, device=device or "cpu")
    kind = CorrectedStepper if "correction" in record else SurrogateStepper
    return kind(model, record, device=device, source=str(Path(path).resolve()),
                compile=compile, precision=precision)
