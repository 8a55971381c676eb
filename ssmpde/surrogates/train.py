"""Training and evaluation: from an ssmpde dataset to a self-contained checkpoint.

The recipe of the SSM operator papers (``docs/models/training.md``): AdamW with OneCycleLR,
relative L2 loss on un-normalised fields (plus, for Darcy, 0.1 × the relative L2 of the
central-difference gradients), gradient clipping; unit Gaussian normalisers fitted on the
training split. Time-dependent data train with teacher forcing, or autoregressive unrolling
with pushforward (gradients only through the last step) and Gaussian input noise.

A run directory holds:

* ``config.json`` and ``weights.safetensors``: the checkpoint (model, task, normalisers,
  dataset facts, versions), all :class:`ssmpde.coupling` needs; no pickles;
* ``training_state.safetensors`` / ``training_state.json``: optimiser and schedule state,
  for exact resume;
* ``metrics.jsonl``: one JSON line per epoch.

Files are replaced atomically, so an interrupted run leaves the last complete epoch behind
and ``resume=True`` continues from it. With ``torchrun`` the same code runs data parallel
(DistributedDataParallel; gloo on CPU, NCCL on GPU); only rank 0 writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch import nn

from ssmpde.core import decode_json
from ssmpde.data import (SAMPLE, SPATIAL_DIMS, TIME, check_output, config_of, open_dataset,
                         output_lock, save, validate)
from ssmpde.solvers.base import parse_coarsening, positive_finite
from ssmpde.threads import entry_point

from . import config_from_dict, get_model_class, instantiate
from .checkpoint import (CONFIG, STATE_JSON, STATE_TENSORS, WEIGHTS, NormalisedModel,
                         check_consistent, checkpoint_record, load_checkpoint, normalised_model,
                         normalizers_of, optimizer_state, read_record, recover, save_run)
from .compiled import CompiledOnFirstCall, compile_backend
from .correction import (CorrectionDataset, cache_directory, coarse_predictions,
                         coarse_solver, fit_corrections, require_conservative)
from .datasets import Task, TaskDataset, fit_normalizers, infer_task, parse_selector, \
    relative_l2, split_samples

__all__ = ["TrainConfig", "evaluate", "load_checkpoint", "process_rank", "train"]

SCHEDULES = ("onecycle", "cosine")
TARGETS = ("state", "increment", "correction")


#: Where a corrector acts: after the coarse step, inside it as a source term, or after it as
#: the divergence of correction fluxes (finite-volume solvers: conservative).
CORRECTION_MODES = ("after", "source", "flux")


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model's own config is separate).

    Attributes
    ----------
    epochs, batch_size : int
        ``batch_size`` is the global batch (split across processes under torchrun).
    lr : float
        Peak learning rate of OneCycleLR (initial lr of the papers, 3e-4 by default).
    weight_decay : float
        AdamW weight decay.
    max_grad_norm : float
        Gradient clipping norm (0 disables it).
    gradient_loss_weight : float or None
        Weight of the gradient term of the Darcy loss; None: 0.1 for operator tasks on 2D
        grids, 0 otherwise.
    window, horizon : int
        Rollout tasks: frames in, frames predicted per training item.
    mode : {"teacher-forcing", "autoregressive"}
        Rollout tasks: feed the true frames back, or the model's own predictions.
    pushforward : bool
        Autoregressive mode: gradients only through the last unrolled step.
    noise_std : float
        Standard deviation of the Gaussian noise added to the (normalised) input frames.
    target : {"state", "increment", "correction"}
        Rollout tasks: the model predicts the next frame, or its increment over the last
        input frame (normalised by the statistics of the training data's increments; the
        next frame is then the last one plus the prediction). Increments halve the one-step
        error of a CPU-trained KS surrogate (``benchmarks/results/long_rollout.json``).
        ``"correction"``: the model corrects the step of the generating solver coarsened by
        ``coarse`` (it sees the coarse prediction too, and predicts next frame − coarse
        prediction, normalised by the corrections' statistics). Horizon 1 with teacher
        forcing: on the coarse predictions of the stored frames, computed once and kept in
        the run directory (:mod:`ssmpde.surrogates.correction`). Horizon > 1 with
        ``mode="autoregressive"``: unrolled through a differentiable PyTorch version of the
        coarse step (:mod:`ssmpde.solvers.differentiable`), so the loss of the later steps
        sees how the solver carries the corrections (``pushforward`` as for surrogates).
    coarse : str, optional
        With ``target="correction"``: the coarsening ``"SxT"`` of the solver to correct
        (grid ``S`` times coarser, step ``T`` times longer), e.g. ``"2x5"``.
    curriculum : tuple of int
        Unrolled training: the horizons of successive phases of equal length (in epochs),
        increasing and ending at ``horizon``, e.g. ``(1, 4, 16, 32)``; empty: ``horizon``
        throughout. Short horizons first let the model learn its one-step job before the
        long unrolls, whose gradients are large and noisy (Um et al. 2020; List et al. 2022).
    truncation : int
        Unrolled correction training: backpropagate through at most this many steps (the
        state is detached every ``truncation`` steps; truncated backpropagation through time);
        0: through all of them.
    on_policy : int
        Correctors, without gradients through the solver: every ``on_policy`` epochs, roll
        the current corrected solver out ``horizon`` steps from the training frames (the
        numba solver, no gradient) and train one step at a time on the states it visited,
        each against the true next frame, the solver's output held constant (the model's
        correction δ enters as δ, in either mode). The training states are then those the
        deployed corrector meets, errors included (a DAgger-like data aggregation; Ross et
        al. 2011). 0: off.
    correction_mode : {"after", "source", "flux"}
        With ``target="correction"``: add the correction after the coarse step (default), or
        inside it as a source term of the solver's right-hand side (INC's "indirect"
        correction, Wei et al. 2025; the spectral solvers). A source corrector always trains
        through the differentiable coarse step, one step (horizon 1) or unrolled. ``flux``
        (finite-volume solvers with a :class:`~ssmpde.solvers.base.ConservativeForm`,
        Euler): after the step, as the divergence of predicted correction fluxes, one per
        conserved density and face, so mass, momentum and energy are conserved; trained one
        step at a time or on-policy.
    num_test : int
        Samples held out from the training file when no test file is given.
    seed : int
        Seeds the model initialisation, the data order and the noise.
    schedule : {"onecycle", "cosine"}
        Learning-rate schedule: OneCycleLR (GeoMaNO, LaMO) or cosine annealing from ``lr``
        to 0 (SS-NO).
    device : str
        Torch device; under torchrun with CUDA, each rank takes ``cuda:LOCAL_RANK``.
    compile : bool or str
        ``torch.compile`` the model for training and the test evaluation (True: inductor, or
        a backend name such as ``"aot_eager"``), through
        :func:`ssmpde.surrogates.compiled.compile_model`, which checks the compiled output
        against eager on the first batch and refuses a compiled model that differs. Off by
        default. It does not change the run (a resumed run may switch it).
    """

    epochs: int = 100
    batch_size: int = 4
    lr: float = 3e-4
    weight_decay: float = 1e-4
    max_grad_norm: float = 1.0
    gradient_loss_weight: float | None = None
    window: int = 10
    horizon: int = 1
    mode: str = "teacher-forcing"
    pushforward: bool = True
    noise_std: float = 0.0
    target: str = "state"
    coarse: str | None = None
    correction_mode: str = "after"
    curriculum: tuple[int, ...] = ()
    truncation: int = 0
    on_policy: int = 0
    num_test: int = 0
    seed: int = 0
    schedule: str = "onecycle"
    device: str = "cpu"
    compile: bool | str = False

    def __post_init__(self):
        for name, low in (("epochs", 1), ("batch_size", 1), ("window", 1), ("horizon", 1),
                          ("num_test", 0), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name, low, strict in (("lr", 0.0, True), ("weight_decay", 0.0, False),
                                  ("max_grad_norm", 0.0, False), ("noise_std", 0.0, False),
                                  ("gradient_loss_weight", 0.0, False)):
            value = getattr(self, name)
            if value is None and name == "gradient_loss_weight":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < low or (strict and value == low):
                bound = "positive" if strict else "non-negative"
                raise ValueError(f"{name} must be a finite {bound} number, got {value!r}")
        if self.mode not in ("teacher-forcing", "autoregressive"):
            raise ValueError(f"mode must be 'teacher-forcing' or 'autoregressive', got "
                             f"{self.mode!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
        if (self.target == "correction") != (self.coarse is not None):
            raise ValueError("target='correction' and coarse='SxT' go together: a correction "
                             "corrects a coarsened solver (--target correction --coarse 2x5)")
        if self.coarse is not None:
            space, steps = parse_coarsening(self.coarse)
            object.__setattr__(self, "coarse", f"{space}x{steps}")
            if (self.horizon == 1) != (self.mode == "teacher-forcing"):
                raise ValueError("a correction trains one record interval at a time (horizon "
                                 "1, teacher forcing) or unrolled through the differentiable "
                                 "coarse step (horizon > 1, mode autoregressive)")
        if self.correction_mode not in CORRECTION_MODES:
            raise ValueError(f"correction_mode must be one of {CORRECTION_MODES}, got "
                             f"{self.correction_mode!r}")
        if self.correction_mode != "after" and self.target != "correction":
            raise ValueError(f"correction_mode={self.correction_mode!r} is for correctors: "
                             "pass target='correction' and coarse='SxT' (--target correction "
                             f"--coarse 4x1 --correction-mode {self.correction_mode})")
        curriculum = tuple(self.curriculum)
        if curriculum:
            if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1
                       for h in curriculum) or list(curriculum) != sorted(set(curriculum)) \
                    or curriculum[-1] != self.horizon:
                raise ValueError(f"curriculum must be increasing horizons ending at horizon "
                                 f"{self.horizon}, e.g. (1, 4, {self.horizon}); got "
                                 f"{self.curriculum!r}")
            if len(curriculum) > self.epochs:
                raise ValueError(f"a curriculum of {len(curriculum)} phases needs at least as "
                                 f"many epochs, got {self.epochs}")
            object.__setattr__(self, "curriculum", curriculum)
        if isinstance(self.truncation, bool) or not isinstance(self.truncation, int) \
                or self.truncation < 0:
            raise ValueError(f"truncation must be an integer >= 0, got {self.truncation!r}")
        if isinstance(self.on_policy, bool) or not isinstance(self.on_policy, int) \
                or self.on_policy < 0:
            raise ValueError(f"on_policy must be an integer >= 0, got {self.on_policy!r}")
        if self.on_policy and (self.target != "correction" or self.window != 1
                               or self.curriculum or self.horizon < 2):
            raise ValueError("on_policy (training on the corrected rollout's own states) is "
                             "for correctors with --window 1, a rollout --horizon of 2 or "
                             "more, and no curriculum")
        if not isinstance(self.pushforward, bool):
            raise ValueError(f"pushforward must be true or false, got {self.pushforward!r}")
        check_device(self.device)
        compile_backend(self.compile)


def horizon_at(config: TrainConfig, epoch: int) -> int:
    """The unroll horizon of ``epoch`` (from 0): the curriculum's phase, or ``horizon``."""
    if not config.curriculum:
        return config.horizon
    phase = min(len(config.curriculum) - 1, epoch * len(config.curriculum) // config.epochs)
    return config.curriculum[phase]


def check_device(name) -> torch.device:
    """The torch device ``name``, checked against what this machine offers."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {name!r}: use cpu, cuda or cuda:N") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"device {name!r} is not supported: use cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: CUDA is not available on this machine (no GPU, or "
                         f"torch {torch.__version__} was built without CUDA): use --device cpu")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device {name!r} does not exist: this machine has "
                         f"{torch.cuda.device_count()} GPU(s), cuda:0..")
    return device


class TrainingDivergedError(FloatingPointError):
    """The loss or the weights became non-finite; the last good checkpoint is kept."""


# ---------------------------------------------------------------------------------------
# Distributed helpers.
# ---------------------------------------------------------------------------------------
def _distributed() -> tuple[int, int, bool]:
    """(rank, world size, whether this call started the process group) under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    started = False
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        started = True
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), started
    return 0, 1, started


def process_rank() -> int:
    """This process's rank: the process group's while one is up, else the ``RANK`` that
    torchrun sets (0 outside torchrun). Rank 0 alone prints a run's results."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _mean_across(value: float, world: int) -> float:
    if world == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor) / world


def _stop_everywhere(stop: bool, world: int) -> bool:
    """True on every rank if it is true on any (ranks must leave the loop together)."""
    if world == 1:
        return stop
    flag = torch.tensor([1.0 if stop else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


# ---------------------------------------------------------------------------------------
# Losses.
# ---------------------------------------------------------------------------------------
def _central_gradients(u: torch.Tensor) -> list[torch.Tensor]:
    """Central differences along each grid axis (interior points), in grid units."""
    grads = []
    for axis in range(2, u.dim()):
        n = u.shape[axis]
        if n >= 3:
            grads.append((u.narrow(axis, 2, n - 2) - u.narrow(axis, 0, n - 2)) / 2)
    return grads


def operator_loss(prediction, target, gradient_weight: float) -> torch.Tensor:
    """Relative L2 per field, averaged over fields and the batch, plus ``gradient_weight`` ×
    the same for the central-difference gradients (the Darcy loss of GeoMaNO's recipe)."""
    loss = relative_l2(prediction, target, fields=True).mean()
    if gradient_weight:
        pairs = zip(_central_gradients(prediction), _central_gradients(target))
        loss = loss + gradient_weight * sum(relative_l2(p, t, fields=True).mean()
                                            for p, t in pairs)
    return loss


def rollout_loss(wrapped: NormalisedModel, batch: dict[str, torch.Tensor],
                 config: TrainConfig, generator: torch.Generator | None,
                 coarse_step=None, horizon: int | None = None) -> torch.Tensor:
    """Mean per-field relative L2 over the horizon, teacher-forced or unrolled (with
    pushforward: gradients only through the last step); a corrector's: of its corrected
    coarse step, or of its steps unrolled through ``coarse_step`` (a
    :class:`~ssmpde.solvers.differentiable.DifferentiableStep`). ``horizon``: only the
    batch's first steps (a curriculum's phase)."""
    if horizon is not None and horizon < batch["target"].shape[1]:
        batch = {**batch, "target": batch["target"][:, :horizon],
                 "conditioning": batch["conditioning"][:, :horizon]}
    target = batch["target"]
    if wrapped.task.correction and "coarse" in batch:
        return relative_l2(corrected(wrapped, batch)[:, 0], target[:, 0], fields=True).mean()
    if wrapped.task.correction:
        return _unrolled_correction_loss(wrapped, batch, config, coarse_step)
    steps = target.shape[1]
    fields = wrapped.task.window * len(wrapped.task.inputs)

    def noise(k, x):
        if not (config.noise_std and generator is not None):
            return None
        drawn = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        drawn[:, fields:] = 0  # not the parameters
        return drawn * config.noise_std

    def feed(k, frame):
        if config.mode == "teacher-forcing":
            return target[:, k]
        last = k == steps - 1
        return frame.detach() if config.pushforward and not last else frame

    frames = wrapped.rollout(batch["history"], batch["conditioning"], feed=feed, noise=noise)
    losses = [relative_l2(frames[:, k], target[:, k], fields=True).mean() for k in range(steps)]
    if config.mode == "autoregressive" and config.pushforward:
        return losses[-1]
    return torch.stack(losses).mean()


# ---------------------------------------------------------------------------------------
# Training, step by step.
# ---------------------------------------------------------------------------------------
def _model_config(model_name: str, preset: str | None, overrides: dict, task: Task) -> Any:
    """The model config for a task (see ``ModelConfig.for_task``): channels and grid from the
    data, the rest from the preset and the user's options (which must agree with the data)."""
    layout = get_model_class(model_name).Config.input_layout
    needed = {"in_channels": task.input_channels(layout), "out_channels": task.out_channels,
              "grid": task.grid}
    for key, value in needed.items():
        if key in overrides and tuple(np.atleast_1d(overrides[key])) != tuple(
                np.atleast_1d(value)):
            raise ValueError(f"the model's {key}={overrides[key]} does not fit the data, "
                             f"which needs {key}={value}")
    config = config_from_dict(model_name, overrides, preset=preset, task=task)
    # A preset's sizes are capped at what the data's grid holds (one preset fits any grid);
    # a size the user asked for is refused instead, with the most the grid allows.
    for name in type(config).spatial_fields:
        if name not in overrides:
            continue
        asked = tuple(int(v) for v in np.atleast_1d(overrides[name]))
        if len(asked) != len(task.grid):
            asked = asked[:1] * len(task.grid)
        if asked == tuple(getattr(config, name)):
            continue
        widest = {**overrides, name: [max(task.grid) + 1] * len(task.grid)}
        most = list(getattr(config_from_dict(model_name, widest, preset=preset, task=task),
                            name))
        raise ValueError(f"the model option {name}={list(asked)} is more than the data's "
                         f"{'x'.join(map(str, task.grid))} grid holds: at most {most} for "
                         f"{model_name}; choose {name} within that")
    return config


def _batches(order: np.ndarray, batch_size: int, rank: int, world: int):
    """Global batches of ``batch_size`` from ``order``; each rank takes its share."""
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        yield batch[rank::world]


def _collate(dataset: TaskDataset, indices) -> dict[str, torch.Tensor]:
    items = [dataset[int(i)] for i in indices]
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


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


def _predict(wrapped: NormalisedModel, batch: dict[str, torch.Tensor], coarse_step=None):
    """(prediction, per-sample error ``[batch, steps]``) of a batch: operator pairs, the
    corrected coarse step (through ``coarse_step`` for an in-step corrector), or the free
    autoregressive rollout over the batch's horizon."""
    if wrapped.task.kind == "operator":
        prediction = wrapped(batch["x"])
        return prediction, relative_l2(prediction, batch["y"], fields=True)[:, None]
    if wrapped.task.correction and wrapped.task.correction_mode == "source":
        prediction = corrected_step(wrapped, coarse_step, batch["history"],
                                    batch["conditioning"][:, 0]).unsqueeze(1)
        return prediction, relative_l2(prediction[:, 0], batch["target"][:, 0],
                                       fields=True)[:, None]
    if wrapped.task.correction:
        prediction = corrected(wrapped, batch)
        return prediction, relative_l2(prediction[:, 0], batch["target"][:, 0],
                                       fields=True)[:, None]
    prediction = wrapped.rollout(batch["history"], batch["conditioning"])
    errors = [relative_l2(prediction[:, k], batch["target"][:, k], fields=True)
              for k in range(prediction.shape[1])]
    return prediction, torch.stack(errors, dim=1)


def _evaluate_split(wrapped: NormalisedModel, dataset: TaskDataset, batch_size: int,
                    device, coarse_step=None) -> dict[str, Any]:
    """Test relative L2: operator pairs, or per step of an autoregressive rollout."""
    if len(dataset) == 0:
        return {}
    wrapped.model.eval()
    errors: list[torch.Tensor] = []
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            batch = _collate(dataset, range(start, min(start + batch_size, len(dataset))))
            errors.append(_predict(wrapped, {k: v.to(device) for k, v in batch.items()},
                                   coarse_step)[1])
    wrapped.model.train()
    values = torch.cat(errors)
    if dataset.task.kind == "operator":
        return {"test_rel_l2": float(values.mean())}
    return {"test_rel_l2": float(values.mean()),
            "test_rel_l2_per_step": [float(v) for v in values.mean(dim=0)]}


def _require_samples(ds, path, purpose: str) -> None:
    """A dataset without samples is a clear error, not an empty loop further down."""
    if ds.sizes.get(SAMPLE, 0) == 0:
        raise ValueError(f"'{path}' holds no samples: there is nothing to {purpose}; "
                         "generate it with --samples 1 or more, or choose another file")


def _datasets(data, test_data, config: TrainConfig, inputs, outputs):
    """(task, training set, test set, dataset facts for the checkpoint). A correction's task
    is marked as one here; its coarse predictions come later (:func:`_with_coarse_predictions`),
    once the model's config is known to fit the data."""
    def task_of(ds):
        return infer_task(ds, window=config.window, horizon=config.horizon,
                          inputs=tuple(inputs) if inputs else None,
                          outputs=tuple(outputs) if outputs else None)

    with open_dataset(data) as ds:
        _require_samples(ds, data, "train on")
        task = task_of(ds)
        num_samples = ds.sizes[SAMPLE]
        facts = {"path": str(Path(data).resolve()), "equation": ds.attrs.get("ssmpde_equation"),
                 "fields": list(task.fields), "dt": task.dt, "grid": list(task.grid),
                 "generator_config": config_of(ds)}
    if test_data is not None:
        train_samples = np.arange(num_samples)
        with open_dataset(test_data) as ds:
            _require_samples(ds, test_data, "test on")
            test_task = task_of(ds)
            if (test_task.grid, test_task.inputs) != (task.grid, task.inputs):
                raise ValueError(f"the test data ({test_task.inputs} on {test_task.grid}) do "
                                 f"not match the training data ({task.inputs} on {task.grid})")
            test_set = TaskDataset(test_data, task, np.arange(ds.sizes[SAMPLE]))
    else:
        train_samples, test_samples = split_samples(num_samples, config.num_test)
        test_set = TaskDataset(data, task, test_samples)
    if config.target == "correction":
        task = dataclasses.replace(task, correction=True,
                                   correction_mode=config.correction_mode)
        if task.horizon > 1 and task.time_dependent:
            raise ValueError("unrolling through the coarse solver does not take time-dependent "
                             f"forcing ({list(task.time_dependent)}): train one step at a time "
                             "(horizon 1)")
    return task, TaskDataset(data, task, train_samples), test_set, facts


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


def _scheduler(optimizer, config: TrainConfig, total_steps: int):
    if config.schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr,
                                               total_steps=total_steps)


def _check_run_directory(out: Path, resume: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out '{out}' is a file; a run is a directory: choose another path")
    if (out / CONFIG).exists() and not resume:
        raise ValueError(f"{out} already holds a run; pass resume=True (--resume) to continue "
                         "it, or choose another --out")
    # The coarse predictions of a correction run that stopped before its first epoch are
    # kept: the same command goes on from them.
    cache = cache_directory(out).parent
    if not resume and out.is_dir() and any(p != cache for p in out.iterdir()):
        raise ValueError(f"--out '{out}' is a directory with other files in it: a run needs a "
                         "new or empty directory")
    if resume:
        recover(out)
        if not (out / STATE_JSON).exists():
            hint = (" (it holds only the coarse predictions of an interrupted correction run: "
                    "run the same command without --resume to go on from them)"
                    if cache.exists() else "")
            raise ValueError(f"nothing to resume in {out}: no {STATE_JSON}{hint}")
        check_consistent(out)


def _restore_model(out: Path, model, model_name: str, model_config, config) -> dict:
    """Load the weights of the run in ``out``; return its record. Refuses a different model
    or different training options (they would make a different run, not a resumed one)."""
    record = read_record(out / CONFIG)
    if (record["model"] != model_name or record["model_config"]
            != json.loads(json.dumps(dataclasses.asdict(model_config)))):
        raise ValueError(f"the run in {out} was trained with a different model config; "
                         "resume with the same model and options")
    stored = record.get("train_config", {})
    now = json.loads(json.dumps(dataclasses.asdict(config)))
    # an option added after the run was written had its default value then
    defaults = json.loads(json.dumps(dataclasses.asdict(TrainConfig())))
    changed = [f"{key} {stored.get(key, defaults[key])!r} (now {value!r})"
               for key, value in now.items() if key not in ("device", "compile")
               and stored.get(key, defaults[key]) != value]
    if changed:
        raise ValueError(f"the run in {out} was started with other training options: "
                         f"{'; '.join(changed)}. Resume with the run's options (the schedule is "
                         "built for its epochs), or start a new run to train differently")
    model.load_state_dict(load_file(out / WEIGHTS))
    return record


def _restore_optimizer(out: Path, optimizer, scheduler) -> tuple[int, int]:
    """Load the optimiser and schedule state; return (epochs done, steps done)."""
    state = decode_json(out / STATE_JSON, keys={"epoch": int, "step": int, "optimizer": dict,
                                                "scheduler": dict},
                        fix="the run directory is damaged; start a new run")
    optimizer.load_state_dict(optimizer_state(load_file(out / STATE_TENSORS),
                                              state["optimizer"]))
    scheduler.load_state_dict(state["scheduler"])
    return state["epoch"], state["step"]


def _train_epoch(wrapped, model, train_set, optimizer, scheduler, config, gradient_weight,
                 generator, rank, world, device, bar, epoch, coarse_step=None
                 ) -> tuple[float, int, int]:
    """One pass over the training set; returns (mean loss, items, optimiser steps)."""
    order = torch.randperm(len(train_set), generator=generator).numpy()
    total, count, steps, started = 0.0, 0, 0, time.perf_counter()
    for indices in _batches(order, config.batch_size, rank, world):
        batch = {k: v.to(device) for k, v in _collate(train_set, indices).items()}
        if train_set.task.kind == "operator":
            x, noise = batch["x"], None
            if config.noise_std:
                noise = config.noise_std * torch.randn(x.shape, generator=generator)
                noise = noise.to(x.device)
            loss = operator_loss(wrapped(x, noise), batch["y"], gradient_weight)
        else:
            loss = rollout_loss(wrapped, batch, config, generator, coarse_step,
                                horizon=horizon_at(config, epoch))
        loss_value = _mean_across(float(loss.detach()), world)
        if not math.isfinite(loss_value):
            raise TrainingDivergedError(
                f"the training loss became {loss_value} at epoch {epoch + 1}, batch "
                f"{steps + 1}: lower --lr, check the data for constant or extreme fields; the "
                "last good epoch is kept in the run directory")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.max_grad_norm:
            nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        steps += 1
        total += loss_value * len(indices) * world
        count += len(indices) * world
        bar.update(len(indices) * world)
        bar.set_postfix(loss=f"{loss_value:.4f}",
                        items_per_s=f"{count / (time.perf_counter() - started):.1f}")
    return total / max(count, 1), count, steps


@entry_point("train")
def train(model_name: str, data, *, out, preset: str | None = None,
          model_overrides: dict | None = None, config: TrainConfig | None = None,
          test_data=None, resume: bool = False, progress: bool = True,
          time_limit: float | None = None, inputs=None, outputs=None,
          threads: int | None = None) -> dict[str, Any]:
    """Train ``model_name`` on the dataset file ``data`` and write a run directory ``out``.

    Parameters
    ----------
    model_name : str
        A registered model (``ssmpde.surrogates.list_models()``).
    data, test_data : path
        ssmpde dataset files (netCDF or zarr). Without ``test_data``, the last
        ``config.num_test`` samples of ``data`` are held out.
    out : path
        Run directory (created). Must not hold a run unless ``resume``.
    preset, model_overrides
        Model preset and options; channels and grid come from the data.
    config : TrainConfig
    resume : bool
        Continue the run in ``out`` from its last completed epoch, bit for bit.
    time_limit : float, optional
        Stop after the epoch during which this many seconds have passed (a wall-clock
        budget, finite and >= 0: 0 stops after one epoch); the run stays resumable.
    inputs, outputs : sequence of str, optional
        An operator task's variables (``name`` or ``name@frame``, e.g. Burgers
        ``["u@0"] → ["u@-1"]``); by default the task follows the variables' roles
        (see :func:`ssmpde.surrogates.datasets.infer_task`).
    threads : int, optional
        torch and numba threads (default ``SSMPDE_THREADS``, else as the process started:
        every core, or ``OMP_NUM_THREADS``; see :mod:`ssmpde.threads`). Not part of the run:
        a resumed run may use another count.

    Returns
    -------
    dict
        The last epoch's metrics.
    """

    # 0 is a budget too: stop after the first epoch.
    if time_limit is not None and not (positive_finite(time_limit) or (
            time_limit == 0 and not isinstance(time_limit, (bool, np.bool_)))):
        raise ValueError(f"time_limit (--time-limit) must be a finite number of seconds >= 0 "
                         f"(0: stop after one epoch), got {time_limit!r}; leave it out to "
                         "train every epoch")
    config = config or TrainConfig()
    out = Path(out)
    rank, world, started_group = _distributed()
    if config.batch_size % world:
        raise ValueError(f"batch_size {config.batch_size} must be a multiple of the number of "
                         f"processes ({world})")
    device = check_device(config.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    for source in (data, test_data):
        if source is not None and Path(source).resolve() == out.resolve():
            raise ValueError(f"--out '{out}' is one of the inputs: choose another path")
    # The directories this call creates, deepest first: a run that fails before it wrote
    # anything (bad options, a loss that is NaN in the first epoch) leaves none of them.
    created = [path for path in (out, *out.parents) if not path.exists()]
    try:
        with contextlib.ExitStack() as stack:
            if rank == 0:  # one writer per run directory; a second one fails at once
                out.parent.mkdir(parents=True, exist_ok=True)
                stack.enter_context(output_lock(out))
            _check_run_directory(out, resume)
            metrics = _train(model_name, data, out, preset, model_overrides, config,
                             test_data, resume, progress, time_limit, inputs, outputs, rank,
                             world, device)
    except Exception:  # an interrupt keeps everything, for --resume
        if rank == 0:
            _remove_empty(created)
        raise
    if started_group:
        # Leave together and shut the group down before the interpreter does: a gloo group
        # torn down at exit while a peer still talks to it can abort the process.
        dist.barrier()
        dist.destroy_process_group()
    return metrics


def _remove_empty(directories: list[Path]) -> None:
    """Remove ``directories`` (deepest first) while they are empty: what a failed run made
    and never filled. A directory holding anything (a completed epoch, the coarse
    predictions a correction run reuses) stops it."""
    for directory in directories:
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


def _train(model_name, data, out, preset, model_overrides, config, test_data, resume, progress,
           time_limit, inputs, outputs, rank, world, device) -> dict[str, Any]:
    """The body of :func:`train`, under the run's lock."""
    from tqdm.auto import tqdm

    task, train_set, test_set, facts = _datasets(data, test_data, config, inputs, outputs)
    # The model's options are checked against the data first: a corrector's coarse
    # predictions take a coarse solve of every stored frame (hours at benchmark sizes).
    model_config = _model_config(model_name, preset, dict(model_overrides or {}), task)
    # A corrector's coarse predictions (the corrections' statistics), and the differentiable
    # coarse step it is unrolled through (horizon > 1); neither goes into the checkpoint.
    coarse_values = coarse_step = conservative = None
    # Unrolled training goes through the differentiable coarse step; on-policy training holds
    # the solver's response constant (one-step items on the visited states).
    unrolled = task.horizon > 1 and not config.on_policy
    if task.correction and task.correction_mode == "flux":
        with open_dataset(data) as ds:  # refused before the coarse predictions are computed
            solver = coarse_solver(ds, config.coarse)
            conservative = require_conservative(solver)
        if unrolled:
            raise ValueError(f"a flux-form corrector of {solver.name} trains one step at a time "
                             "(--horizon 1) or on-policy (--on-policy N --horizon K --mode "
                             "autoregressive): there is no differentiable step of it to "
                             "unroll through")
    if task.correction:
        train_set, test_set, coarse_values = _with_coarse_predictions(
            task, train_set, test_set, config, out, progress and rank == 0)
    if task.correction and (unrolled or task.correction_mode == "source"):
        from ssmpde.solvers.differentiable import differentiable_step

        with open_dataset(data) as ds:
            coarse_step = differentiable_step(coarse_solver(ds, config.coarse))

    torch.manual_seed(config.seed)
    model = instantiate(model_name, model_config).to(device)
    if resume:
        normalizers = normalizers_of(_restore_model(out, model, model_name, model_config,
                                                    config))
    else:
        if config.target == "increment" and task.kind != "rollout":
            raise ValueError("target='increment' is for rollout tasks (trajectories); an "
                             "operator task maps inputs to outputs: use target='state'")
        normalizers = fit_normalizers(train_set, increments=config.target == "increment")
        if task.correction:
            normalizers["corrections"] = fit_corrections(train_set, coarse_values,
                                                         conservative)
    gradient_weight = config.gradient_loss_weight
    if gradient_weight is None:
        gradient_weight = 0.1 if task.kind == "operator" and len(task.grid) == 2 else 0.0
    record = checkpoint_record(model, task, normalizers, config, facts)

    # Evaluation (rank 0 only) uses the bare module: DDP's forward may start collectives
    # that the other ranks would never join.
    evaluator = NormalisedModel(model, task, normalizers, conservative=conservative)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    wrapped = NormalisedModel(model, task, normalizers, conservative=conservative)
    backend = compile_backend(config.compile)
    if backend is not None:
        wrapped.model = CompiledOnFirstCall(model, backend)
        evaluator.model = CompiledOnFirstCall(evaluator.model, backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    trajectories, solver = train_set, None
    if config.on_policy:  # one-step items on each visited state: horizon per trajectory item
        with open_dataset(data) as ds:
            solver = coarse_solver(ds, config.coarse)
    items_per_epoch = len(train_set) * (config.horizon if config.on_policy else 1)
    steps_per_epoch = math.ceil(items_per_epoch / config.batch_size)
    scheduler = _scheduler(optimizer, config, config.epochs * steps_per_epoch)
    # The run directory appears with the first checkpoint (save_run): a run that fails in its
    # first epoch (a damaged sample of the data) leaves nothing behind.
    first_epoch, step = _restore_optimizer(out, optimizer, scheduler) if resume else (0, 0)

    started = time.perf_counter()
    metrics: dict[str, Any] = {}
    model.train()
    for epoch in range(first_epoch, config.epochs):
        # The data order and the noise of epoch e depend on (seed, e) only: resuming needs
        # no random-number state.
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + epoch)
        if config.on_policy and (epoch % config.on_policy == 0 or epoch == first_epoch):
            # the states the corrected solver visits now (a resumed run regenerates them
            # from its resumed weights)
            train_set = on_policy_items(evaluator, trajectories, solver, config.batch_size)
        bar = tqdm(total=len(train_set), desc=f"epoch {epoch + 1}/{config.epochs}",
                   unit="item", disable=not progress or rank != 0, leave=False)
        epoch_start = time.perf_counter()
        loss, _, steps = _train_epoch(wrapped, model, train_set, optimizer, scheduler, config,
                                      gradient_weight, generator, rank, world, device, bar,
                                      epoch, coarse_step)
        if not all(torch.isfinite(p).all() for p in model.parameters()):
            raise TrainingDivergedError(
                f"the weights became non-finite in epoch {epoch + 1}: lower --lr; the last "
                "good epoch is kept in the run directory")
        bar.close()
        step += steps
        metrics = {"epoch": epoch + 1, "step": step, "train_loss": loss,
                   "horizon": horizon_at(config, epoch),
                   "lr": scheduler.get_last_lr()[0],
                   "seconds": time.perf_counter() - epoch_start}
        if rank == 0:
            metrics.update(_evaluate_split(evaluator, test_set, config.batch_size, device,
                                           coarse_step))
            save_run(out, model, optimizer, scheduler, record, epoch + 1, step, metrics)
            if progress:
                shown = {k: (round(v, 5) if isinstance(v, float) else v)
                         for k, v in metrics.items() if not isinstance(v, list)}
                tqdm.write(json.dumps(shown))
        if time_limit is not None and _stop_everywhere(
                time.perf_counter() - started > time_limit, world):
            break
    trajectories.close()
    if train_set is not trajectories:
        train_set.close()
    test_set.close()
    return metrics


# ---------------------------------------------------------------------------------------
# Evaluation.
# ---------------------------------------------------------------------------------------
@entry_point("evaluate")
def evaluate(run, data, *, out=None, batch_size: int = 8, device: str = "cpu",
             overwrite: bool = False, threads: int | None = None,
             compile: bool | str = False) -> dict[str, Any]:
    """Relative L2 of a trained run on a dataset, and optionally its predictions as netCDF.

    Operator tasks predict every sample's outputs. Rollout tasks start from each sample's
    first ``window`` frames and roll out autoregressively to the end of the trajectory; the
    errors (relative L2 per field, averaged over fields) are per step and over the horizon.
    ``threads``: torch and numba threads (default ``SSMPDE_THREADS``, else as the process
    started; :mod:`ssmpde.threads`). ``compile``: as :attr:`TrainConfig.compile`.

    Returns
    -------
    dict
        ``rel_l2`` (mean over samples), ``rel_l2_per_sample``, ``rel_l2_per_field`` (each
        field's relative L2 over the whole prediction, mean over samples), and for rollouts
        ``rel_l2_per_step``.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    backend = compile_backend(compile)
    if out is not None:
        check_output(out, inputs=(data, run), overwrite=overwrite, kind="dataset")
    model, record = load_checkpoint(run, device=check_device(device))
    task = Task.from_dict(record["task"])
    if task.correction:
        raise ValueError(f"{run} corrects the coarse solver {record['correction']['coarsening']}"
                         ": it is evaluated in the loop of that solver, with 'ssmpde rollout "
                         f"--checkpoint {run} --data DATA'")
    wrapped = normalised_model(model, record)
    if backend is not None:
        wrapped.model = CompiledOnFirstCall(model, backend)
    with open_dataset(data) as ds:
        needed = [parse_selector(v)[0] for v in (*task.inputs, *task.outputs,
                                                  *task.conditioning)]
        missing = [v for v in needed if v not in ds.data_vars]
        if missing:
            raise ValueError(f"{data} lacks the variables {missing} the model was trained on "
                             f"(it has {sorted(ds.data_vars)})")
        _require_samples(ds, data, "evaluate on")
        num_samples = ds.sizes[SAMPLE]
        grid_dims = SPATIAL_DIMS[len(task.grid)]
        grid = tuple(ds.sizes.get(d, 0) for d in grid_dims)
        if grid != task.grid:
            raise ValueError(f"the model was trained on a {task.grid} grid; {data} is {grid}")
        frames = ds.sizes.get(TIME, 0)
    eval_task = task
    if task.kind == "rollout":
        if frames <= task.window:
            raise ValueError(f"the trajectories in {data} have {frames} frames; the model "
                             f"needs more than its window of {task.window}")
        eval_task = dataclasses.replace(task, horizon=frames - task.window)
    dataset = TaskDataset(data, eval_task, np.arange(num_samples))
    predictions, errors, per_field = [], [], []
    field_axis = 1 if task.kind == "operator" else 2
    with torch.no_grad():
        for start in range(0, num_samples, batch_size):
            batch = _collate(dataset, range(start, min(start + batch_size, num_samples)))
            prediction, error = _predict(wrapped, {k: v.to(device) for k, v in batch.items()})
            predictions.append(prediction.cpu())
            errors.append(error)
            target = batch["y" if task.kind == "operator" else "target"]
            per_field.append(torch.stack(
                [relative_l2(prediction.cpu().select(field_axis, f), target.select(field_axis, f))
                 for f in range(target.shape[field_axis])], dim=1))
    dataset.close()
    errors_t, per_field_t = torch.cat(errors), torch.cat(per_field).mean(dim=0)
    result: dict[str, Any] = {"rel_l2": float(errors_t.mean()),
                              "rel_l2_per_sample": [float(v) for v in errors_t.mean(dim=1)],
                              "rel_l2_per_field": {name: float(v) for name, v in
                                                   zip(task.fields, per_field_t)}}
    if task.kind == "rollout":
        result["rel_l2_per_step"] = [float(v) for v in errors_t.mean(dim=0)]
    if out is not None:
        with output_lock(out):
            _write_predictions(out, torch.cat(predictions).numpy(), data, task, run, result,
                               overwrite)
    return result


def _write_predictions(out, values: np.ndarray, data, task: Task, run, result,
                       overwrite: bool) -> None:
    """Predictions as an ssmpde dataset (same coordinates and attributes as ``data``)."""
    import xarray as xr

    with open_dataset(data) as ds:
        coords = {name: ds[name].copy() for name in ds.coords}
        if task.kind == "rollout":
            coords[TIME] = ds[TIME].isel({TIME: slice(task.window, None)})
        variables = {}
        for c, selector in enumerate(task.outputs):
            name, frame = parse_selector(selector)
            dims = tuple(d for d in ds[name].dims if frame is None or d != TIME)
            array = values[:, c] if task.kind == "operator" else values[:, :, c]
            variables[name] = xr.DataArray(array.astype(ds[name].dtype), dims=dims,
                                           attrs=dict(ds[name].attrs))
        attrs = dict(ds.attrs)
    predicted = xr.Dataset(variables, coords=coords, attrs=attrs)
    predicted.attrs["title"] = f"Predictions of {Path(run).name} on {Path(data).name}"
    predicted.attrs["history"] = (f"{attrs.get('history', '')}\n"
                                  f"predicted by ssmpde run {Path(run).resolve()}").strip()
    predicted.attrs["ssmpde_predictions"] = json.dumps(
        {"run": str(Path(run).resolve()), "data": str(Path(data).resolve()),
         "rel_l2": result["rel_l2"]})
    save(validate(predicted), out, overwrite=overwrite)
