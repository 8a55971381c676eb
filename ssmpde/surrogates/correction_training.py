"""Training a corrector of a coarse solver, and the one corrected step it trains.

:func:`corrected_step` is the corrected coarse step, the only one in the package: the
runtime stepper (:class:`ssmpde.coupling.corrected.CorrectedStepper`), unrolled training,
on-policy collection and the one-step loss all call it, so what is trained is what runs. It
takes the coarse step as a callable on tensors: the differentiable PyTorch copy of the
solver (:mod:`ssmpde.solvers.differentiable`, unrolled training), the NumPy/numba solver
behind :class:`SolverStep` (the runtime stepper, on-policy collection, no gradient), or the
cached coarse prediction behind :class:`HeldStep` (the one-step loss).

A corrector (``TrainConfig(target="correction", coarse="SxT")``) trains on one of three
kinds of item. One step at a time, on the coarse predictions of the stored frames, computed
once into the run directory (:func:`_with_coarse_predictions`, from
:mod:`ssmpde.surrogates.correction`). Unrolled through the differentiable coarse step, so
the loss of later steps sees how the solver carries the corrections. Or on-policy, on the
states the corrected numba solver visits (:func:`on_policy_items`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from ssmpde.data import open_dataset

from .batching import _collate
from .checkpoint import NormalisedModel
from .correction import (CorrectionDataset, cache_directory, coarse_predictions,
                         coarse_solver, require_conservative)
from .datasets import Task, TaskDataset, relative_l2
from .train_config import TrainConfig

__all__ = ["HeldStep", "OnPolicyItems", "SolverStep", "corrected", "corrected_step",
           "on_policy_items", "positive_fields", "solver_parameters"]


def _unrolled_correction_loss(wrapped: NormalisedModel, batch: dict[str, torch.Tensor],
                              config: TrainConfig, coarse_step) -> torch.Tensor:
    """A corrector's loss over ``horizon`` corrected coarse steps, differentiated through the
    coarse solver (Um et al. 2020): each step's coarse prediction is made from the previous
    corrected frame by ``coarse_step``."""
    target, conditioning = batch["target"], batch["conditioning"]
    window, steps = batch["history"], target.shape[1]
    losses = []
    for k in range(steps):
        frame = corrected_step(wrapped, coarse_step, window, conditioning[:, k])
        losses.append(relative_l2(frame, target[:, k], fields=True).mean())
        truncated = config.truncation and (k + 1) % config.truncation == 0
        fed = frame.detach() if (config.pushforward or truncated) and k < steps - 1 \
            else frame
        window = torch.cat([window[:, 1:], fed.unsqueeze(1)], dim=1)
    return losses[-1] if config.pushforward else torch.stack(losses).mean()


# -- the corrected step --------------------------------------------------------------------
class SolverStep:
    """A NumPy/numba solver's record interval as :func:`corrected_step` takes a coarse step:
    ``step(frame, *, time, parameters, source=None)``, ``frame [batch, field, *grid]`` a
    tensor, the next frame a float64 tensor on ``frame``'s device; no gradient. It calls
    ``solver.step(frame[:, None], ...)``; tensors among ``parameters`` and the ``source``
    are read as float64 NumPy values."""

    def __init__(self, solver):
        self.solver = solver

    def __call__(self, frame: torch.Tensor, *, time: float = 0.0,
                 parameters: Mapping | None = None,
                 source: torch.Tensor | None = None) -> torch.Tensor:
        given = None if parameters is None else {
            name: _float64(value) if isinstance(value, torch.Tensor) else value
            for name, value in parameters.items()}
        extra = {} if source is None else {"source": _float64(source)}
        out = self.solver.step(_float64(frame)[:, None], time=time, parameters=given, **extra)
        return torch.as_tensor(np.asarray(out, dtype=np.float64), device=frame.device)


def _float64(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()


class HeldStep:
    """The coarse step of the one-step loss: the cached ``prediction [batch, field, *grid]``
    of the plain coarse step, and for an in-step corrector the solver's response to a source
    S held at its first order, ``prediction + S dt`` (on-policy training of an in-step
    corrector: no solve per item). It has no ``solver``: no positivity fallback."""

    solver = None

    def __init__(self, prediction: torch.Tensor, dt: float):
        self.prediction, self.dt = prediction, dt

    def __call__(self, frame: torch.Tensor, *, time: float = 0.0,
                 parameters: Mapping | None = None,
                 source: torch.Tensor | None = None) -> torch.Tensor:
        return self.prediction if source is None else self.prediction + source * self.dt


def positive_fields(solver, fields: Sequence[str]) -> list[int]:
    """Indices in ``fields`` of the fields ``solver`` keeps positive (density, pressure: its
    ``checks.positive``); none for ``solver`` None."""
    checks = getattr(solver, "checks", None)
    return [list(fields).index(f) for f in getattr(checks, "positive", ()) if f in fields]


def corrected_step(wrapped: NormalisedModel, coarse_step, window: torch.Tensor,
                   conditioning: torch.Tensor, *, time: float = 0.0,
                   parameters: Mapping | None = None, coarse: torch.Tensor | None = None,
                   fallbacks: Callable[[int], None] | None = None) -> torch.Tensor:
    r"""One corrected coarse step: the one used at run time, in training and on-policy.

    By ``wrapped.task.correction_mode``:

    * ``"after"``: :math:`u_{t+1} = c_{t+1} + M(u, c_{t+1})`, :math:`c_{t+1}` the plain
      coarse step;
    * ``"source"`` (in-step): the correction δ enters the coarse step's right-hand side as
      the source S = δ / Δt over the interval, :math:`u_{t+1} = \mathcal{C}(u_t; S)`;
    * ``"flux"`` (conservative): the model's face fluxes change the conserved densities by
      their divergence, computed in float64 from the float64 coarse state, so the totals
      are conserved to round-off: :math:`u_{t+1} = c + P(U + \Delta U) - P(U)` with
      :math:`U` the conserved densities of :math:`c` and :math:`P` the primitive map of
      the conservative form the model was built with (``wrapped.conservative``).

    In every mode a sample whose corrected fields that the solver keeps positive (density,
    pressure: :func:`positive_fields` of ``coarse_step.solver``) are not all positive and
    finite falls back to the plain coarse step.

    Parameters
    ----------
    wrapped : NormalisedModel
        A corrector (``task.correction``); its model runs in float32.
    coarse_step : callable
        ``coarse_step(frame, *, time, parameters, source=None)`` → the next frame, with a
        ``solver`` attribute: a :class:`~ssmpde.solvers.differentiable.DifferentiableStep`
        (gradients flow through it), a :class:`SolverStep` or a :class:`HeldStep`.
    window : torch.Tensor ``[batch, window, field, *grid]``
        The state's history, in the state's dtype: the result has it (float64 at run time,
        float32 in unrolled training).
    conditioning : torch.Tensor ``[batch, k, *grid]``
        The model's conditioning channels of this step.
    time : float
        The time of the last frame (the coarse solver's forcing may read it).
    parameters : mapping, optional
        What the coarse solver takes; default read from ``conditioning``
        (:func:`solver_parameters`).
    coarse : torch.Tensor ``[batch, field, *grid]``, optional
        The plain coarse step of the last frame when the caller has it (not stepped again).
    fallbacks : callable, optional
        Told the number of samples that fell back, when some did.

    Returns
    -------
    torch.Tensor ``[batch, field, *grid]``, ``window``'s dtype and device.
    """
    task, solver = wrapped.task, getattr(coarse_step, "solver", None)
    if parameters is None and solver is not None:
        parameters = solver_parameters(task, conditioning, solver)
    frame, inputs, conditioning = window[:, -1], window.float(), conditioning.float()

    def plain() -> torch.Tensor:
        return coarse if coarse is not None else coarse_step(frame, time=time,
                                                             parameters=parameters)

    if task.correction_mode == "source":
        source = wrapped.source(inputs, conditioning).to(window.dtype)
        corrected = coarse_step(frame, time=time, parameters=parameters, source=source)
    else:
        coarse = plain()
        if task.correction_mode == "flux":
            form = wrapped.conservative
            change = wrapped.flux_change(inputs, coarse.float(), conditioning,
                                         dtype=torch.float64)
            conserved = form.to_conserved(coarse.to(torch.float64))
            delta = form.to_primitive(conserved + change) - form.to_primitive(conserved)
        else:
            delta = wrapped.correction(inputs, coarse.float(), conditioning)
        corrected = coarse + delta.to(coarse.dtype)
    positive = positive_fields(solver, task.outputs)
    if not positive:
        return corrected
    values = corrected[:, positive].reshape(len(corrected), -1)
    refused = ~(torch.isfinite(values) & (values > 0)).all(dim=1)
    if not bool(refused.any()):
        return corrected
    if fallbacks is not None:
        fallbacks(int(refused.sum()))
    return torch.where(refused.reshape(-1, *[1] * (corrected.ndim - 1)),
                       plain().to(corrected.dtype), corrected)


def solver_parameters(task: Task, conditioning: torch.Tensor, solver) -> dict:
    """The per-sample parameters ``solver`` takes, read from a batch's conditioning channels
    ``[batch, k, *grid]`` (a scalar parameter fills its channel); the config's default for the
    others."""
    parameters = {}
    for name, shape in solver.parameter_specs().items():
        if name in task.conditioning and shape == ():
            channel = conditioning[:, task.conditioning.index(name)]
            parameters[name] = channel.reshape(channel.shape[0], -1)[:, 0].detach()
        elif solver.default_parameter(name) is None:
            raise ValueError(f"unrolling through the coarse solver needs its per-sample "
                             f"parameter {name!r}, which the corrector's conditioning does not "
                             "carry as a scalar: train one step at a time (horizon 1)")
    return parameters


def corrected(wrapped: NormalisedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """A corrector's one-step prediction ``[batch, 1, fields, *grid]``: the corrected step
    on the batch's cached coarse prediction (:class:`HeldStep`; an in-step corrector's
    source acting at first order, the solver's response to it held constant)."""
    held = HeldStep(batch["coarse"][:, 0], wrapped.task.dt)
    return corrected_step(wrapped, held, batch["history"],
                          batch["conditioning"][:, 0]).unsqueeze(1)


class OnPolicyItems(torch.utils.data.Dataset):
    """One-step correction items on the states a corrected rollout visited (in memory):
    ``{"history": [1, fields, *grid], "coarse", "target": [1, ...], "conditioning": [1, k,
    *grid]}``, as :class:`~ssmpde.surrogates.correction.CorrectionDataset` gives them."""

    def __init__(self, task: Task, items: dict[str, torch.Tensor]):
        self.task, self.items = dataclasses.replace(task, horizon=1), items

    def __len__(self) -> int:
        return len(self.items["history"])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {key: value[index] for key, value in self.items.items()}

    def close(self) -> None:
        """Nothing to close (in memory); the interface of the file-backed datasets."""


def on_policy_items(wrapped: NormalisedModel, trajectories: TaskDataset, solver,
                    batch_size: int) -> OnPolicyItems:
    """Roll the corrected ``solver`` (numba, no gradient) out over each item of
    ``trajectories`` (windows of one frame, ``horizon`` targets) and collect every visited
    state with its coarse prediction and the true next frame. The states are those of the
    deployed corrected stepper: :func:`corrected_step` through a :class:`SolverStep`, in
    float64, with the flux form's float64 divergence and the positivity fallback."""
    task, step = wrapped.task, SolverStep(solver)
    collected = {"history": [], "coarse": [], "target": [], "conditioning": []}
    with torch.no_grad():
        for start in range(0, len(trajectories), batch_size):
            batch = _collate(trajectories, range(start, min(start + batch_size,
                                                            len(trajectories))))
            state = batch["history"][:, -1].double()
            for k in range(batch["target"].shape[1]):
                conditioning = batch["conditioning"][:, k]
                parameters = solver_parameters(task, conditioning, solver)
                coarse = step(state, parameters=parameters)
                collected["history"].append(state[:, None].float())
                collected["coarse"].append(coarse[:, None].float())
                collected["target"].append(batch["target"][:, k:k + 1])
                collected["conditioning"].append(conditioning[:, None])
                state = corrected_step(wrapped, step, state[:, None], conditioning,
                                       parameters=parameters, coarse=coarse)
    return OnPolicyItems(task, {key: torch.cat(values) for key, values in collected.items()})


def _with_coarse_predictions(task: Task, train_set: TaskDataset, test_set: TaskDataset,
                             config: TrainConfig, out: Path, progress: bool = False):
    """A correction's (training set, test set, the training file's coarse predictions): the
    coarse predictions of the stored frames are computed into (or read from) ``out``.
    One-step items on them (the test set always: one corrected step is the comparable
    metric); unrolled training, and a source corrector's, reads plain trajectory windows."""
    one_step = dataclasses.replace(task, horizon=1)
    cache = coarse_predictions(train_set.path, config.coarse, cache_directory(out),
                               progress=progress)
    test_cache = cache if test_set.path == train_set.path else coarse_predictions(
        test_set.path, config.coarse, cache_directory(out, "test"), progress=progress)
    if task.horizon == 1 and task.correction_mode != "source":
        train_set = CorrectionDataset(train_set.path, one_step, train_set.samples, cache.values)
    return (train_set,
            CorrectionDataset(test_set.path, one_step, test_set.samples, test_cache.values),
            cache.values)


def _correction_data(task: Task, train_set: TaskDataset, test_set: TaskDataset,
                     config: TrainConfig, data, out: Path, progress: bool = False):
    """What a corrector's run needs beside the model: (training set, test set, the training
    file's coarse predictions (the corrections' statistics), the differentiable coarse step
    it is unrolled through or None, the solver's conservative form for a flux corrector or
    None). None of them goes into the checkpoint. Called once the model's config is known to
    fit the data: the coarse predictions take a coarse solve of every stored frame."""
    coarse_step = conservative = None
    # Unrolled training goes through the differentiable coarse step; on-policy training holds
    # the solver's response constant (one-step items on the visited states).
    unrolled = task.horizon > 1 and not config.on_policy
    if task.correction_mode == "flux":
        with open_dataset(data) as ds:  # refused before the coarse predictions are computed
            solver = coarse_solver(ds, config.coarse)
            conservative = require_conservative(solver)
        if unrolled:
            raise ValueError(f"a flux-form corrector of {solver.name} trains one step at a time "
                             "(--horizon 1) or on-policy (--on-policy N --horizon K --mode "
                             "autoregressive): there is no differentiable step of it to "
                             "unroll through")
    if unrolled or task.correction_mode == "source":
        from ssmpde.solvers.differentiable import differentiable_step

        # Refused (a solver without a differentiable step) before the coarse predictions
        # are computed: a refused run leaves no cache behind.
        with open_dataset(data) as ds:
            coarse_step = differentiable_step(coarse_solver(ds, config.coarse))
    train_set, test_set, coarse_values = _with_coarse_predictions(
        task, train_set, test_set, config, out, progress)
    return train_set, test_set, coarse_values, coarse_step, conservative
