"""How to train: :class:`TrainConfig`, every option of a training run but the model's own.

The model's config is separate (each model's frozen dataclass, :mod:`ssmpde.surrogates.base`);
a :class:`TrainConfig` holds the optimiser, schedule, loss, normalisation, task and corrector
options, checks them when it is made, and is stored in the run's ``config.json`` (a resumed
run must have the same options). :meth:`TrainConfig.recipe` makes the config of a paper's
recipe (:mod:`ssmpde.surrogates.recipes`). :data:`OPTIMIZERS` and :data:`LOSSES` are the
optimisers and per-sample losses the options name. :func:`check_device` checks the
``device`` option against this machine and :func:`horizon_at` reads the unroll horizon of an
epoch from the curriculum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ssmpde.solvers.base import parse_coarsening

from .compiled import compile_backend
from .datasets import NORMALIZATIONS, relative_l2
from .recipes import resolve_recipe

__all__ = ["CORRECTION_MODES", "LOSSES", "NORMALIZATIONS", "OPTIMIZERS", "SCHEDULES",
           "TARGETS", "TrainConfig", "check_device", "horizon_at"]

SCHEDULES = ("onecycle", "cosine")
TARGETS = ("state", "increment", "correction")

#: The optimisers by name: AdamW (decoupled weight decay; GeoMaNO, LaMO, SS-NO, MNO's GNOT)
#: and Adam (weight decay as an L2 term of the gradient; MNO's Galerkin and OFormer).
OPTIMIZERS = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}


def _relative_l2_loss(prediction, target):
    return relative_l2(prediction, target, fields=True)


def _mse_loss(prediction, target):
    return (prediction - target).square().flatten(1).mean(dim=1)


#: Per-sample losses by name, on the fields in physical units (``[batch, field, *grid]`` →
#: ``[batch]``): the relative L2 per field averaged over the fields (the papers' loss), or the
#: mean squared error over every field and point (MNO's release: ``nn.MSELoss`` on
#: un-normalised fields, so our decoded fields are exactly what it compares).
LOSSES = {"relative-l2": _relative_l2_loss, "mse": _mse_loss}


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
    optimizer : {"adamw", "adam"}
        AdamW (default) or Adam (its weight decay is an L2 term added to the gradient).
    lr : float
        Peak learning rate of OneCycleLR (the papers' "initial lr", 3e-4 by default), or the
        starting one of the cosine schedule.
    weight_decay : float
        The optimiser's weight decay.
    max_grad_norm : float
        Gradient clipping norm (0 disables it).
    loss : {"relative-l2", "mse"}
        The loss per sample, on the fields in physical units (decoded): relative L2 per field,
        averaged over fields (default), or the mean squared error (MNO's release). The Darcy
        gradient term uses the same loss on the gradients. Not for correctors.
    normalization : {"gaussian", "range", "none"}
        How inputs and outputs are normalised, per channel with statistics of the training
        split: unit Gaussian (default), the training range mapped to [-1, 1] (SS-NO), or
        not at all (MNO's release; LaMO's and Transolver's Navier–Stokes).
    div_factor, final_div_factor, pct_start : float
        OneCycleLR's: the schedule starts at ``lr / div_factor``, rises to ``lr`` over the
        fraction ``pct_start`` of the steps and ends at ``lr / (div_factor *
        final_div_factor)``; torch's defaults (25, 1e4, 0.3) unless a recipe sets them
        (MNO's release: 1e4, 1e4, 0.3). Ignored by the cosine schedule.
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
    optimizer: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 1e-4
    max_grad_norm: float = 1.0
    loss: str = "relative-l2"
    normalization: str = "gaussian"
    div_factor: float = 25.0
    final_div_factor: float = 1e4
    pct_start: float = 0.3
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
                                  ("gradient_loss_weight", 0.0, False),
                                  ("div_factor", 0.0, True), ("final_div_factor", 0.0, True),
                                  ("pct_start", 0.0, True)):
            value = getattr(self, name)
            if value is None and name == "gradient_loss_weight":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < low or (strict and value == low):
                bound = "positive" if strict else "non-negative"
                raise ValueError(f"{name} must be a finite {bound} number, got {value!r}")
        if not self.pct_start < 1:
            raise ValueError(f"pct_start must be below 1 (a fraction of the steps), got "
                             f"{self.pct_start!r}")
        for name, choices in (("optimizer", tuple(OPTIMIZERS)), ("loss", tuple(LOSSES)),
                              ("normalization", NORMALIZATIONS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got "
                                 f"{getattr(self, name)!r}")
        if self.loss != "relative-l2" and self.target == "correction":
            raise ValueError(f"loss={self.loss!r} is for surrogates: a corrector trains on the "
                             "relative L2 of its corrected step")
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

    @classmethod
    def recipe(cls, model: str, name: str = "paper", variant: str | None = None,
               **options) -> TrainConfig:
        """The config of ``model``'s recipe ``name`` (:mod:`ssmpde.surrogates.recipes`),
        ``options`` winning over it.

        ``variant`` is what the recipe differs by: the problem (GeoMaNO, LaMO, SS-NO: the
        dataset's equation, e.g. ``"darcy"``, ``"navier-stokes"``,
        ``"kuramoto-sivashinsky"``) or MNO's backbone; ``name`` may carry it too
        (``"paper:darcy"``). ``train(..., recipe="paper")`` reads it off the data.

        Example
        -------
        >>> config = TrainConfig.recipe("lamo", "paper", "navier-stokes", epochs=10)
        >>> config.lr, config.weight_decay, config.batch_size, config.epochs
        (0.0005, 0.05, 2, 10)
        """
        return cls(**{**resolve_recipe(model, name, variant=variant).fields, **options})


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
