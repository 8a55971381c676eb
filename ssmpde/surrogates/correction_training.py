"""Training a corrector of a coarse solver: the pieces of a training run that only correctors
have.

A corrector (``TrainConfig(target="correction", coarse="SxT")``) trains on one of three
kinds of item. One step at a time, on the coarse predictions of the stored frames, computed
once into the run directory (:func:`_with_coarse_predictions`, from
:mod:`ssmpde.surrogates.correction`). Unrolled through the differentiable coarse step
(:func:`corrected_step`, :mod:`ssmpde.solvers.differentiable`), so the loss of later steps
sees how the solver carries the corrections. Or on-policy, on the states the corrected numba
solver visits (:func:`on_policy_items`). The corrected step is the same in training,
on-policy collection and evaluation: the correction after the coarse step, or its source
term inside it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ssmpde.data import open_dataset

from .batching import _collate
from .checkpoint import NormalisedModel
from .correction import (CorrectionDataset, cache_directory, coarse_predictions,
                         coarse_solver, require_conservative)
from .datasets import Task, TaskDataset, relative_l2
from .train_config import TrainConfig

__all__ = ["OnPolicyItems", "corrected", "corrected_step", "on_policy_items",
           "solver_parameters"]


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


def corrected_step(wrapped: NormalisedModel, coarse_step, window: torch.Tensor,
                   conditioning: torch.Tensor) -> torch.Tensor:
    """One corrected coarse step in PyTorch, ``[batch, fields, *grid]``, from ``window`` and
    one step's ``conditioning``: the correction after the differentiable coarse step, or
    its source term inside it (``task.correction_mode``)."""
    parameters = solver_parameters(wrapped.task, conditioning, coarse_step.solver)
    if wrapped.task.correction_mode == "source":
        return coarse_step(window[:, -1], parameters=parameters,
                           source=wrapped.source(window, conditioning).to(window.dtype))
    coarse = coarse_step(window[:, -1], parameters=parameters)
    return coarse + wrapped.correction(window, coarse, conditioning)


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
    """A corrector's one-step prediction ``[batch, 1, fields, *grid]``: the batch's coarse
    prediction plus the model's correction (an in-step corrector's δ = S dt, the solver's
    response to it held constant)."""
    coarse, history = batch["coarse"][:, 0], batch["history"]
    seen = history[:, -1] if wrapped.task.correction_mode == "source" else coarse
    return (coarse + wrapped.correction(history, seen,
                                        batch["conditioning"][:, 0])).unsqueeze(1)


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
    state with its coarse prediction and the true next frame."""
    task, collected = wrapped.task, {"history": [], "coarse": [], "target": [],
                                     "conditioning": []}
    with torch.no_grad():
        for start in range(0, len(trajectories), batch_size):
            batch = _collate(trajectories, range(start, min(start + batch_size,
                                                            len(trajectories))))
            state = batch["history"][:, -1].double().numpy()
            for k in range(batch["target"].shape[1]):
                conditioning = batch["conditioning"][:, k]
                parameters = {name: value.double().numpy() for name, value in
                              solver_parameters(task, conditioning, solver).items()}
                coarse = solver.step(state[:, None], parameters=parameters)
                window = torch.as_tensor(state[:, None], dtype=torch.float32)
                coarse_t = torch.as_tensor(coarse, dtype=torch.float32)
                collected["history"].append(window)
                collected["coarse"].append(coarse_t[:, None])
                collected["target"].append(batch["target"][:, k:k + 1])
                collected["conditioning"].append(conditioning[:, None])
                if task.correction_mode == "source":
                    source = wrapped.source(window, conditioning).double().numpy()
                    state = solver.step(state[:, None], parameters=parameters, source=source)
                else:
                    state = coarse + wrapped.correction(window, coarse_t,
                                                        conditioning).double().numpy()
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
    train_set, test_set, coarse_values = _with_coarse_predictions(
        task, train_set, test_set, config, out, progress)
    if unrolled or task.correction_mode == "source":
        from ssmpde.solvers.differentiable import differentiable_step

        with open_dataset(data) as ds:
            coarse_step = differentiable_step(coarse_solver(ds, config.coarse))
    return train_set, test_set, coarse_values, coarse_step, conservative
