"""The conservative (flux-form) learned correction of the finite-volume Euler solver
(``correction_mode="flux"``): bit-for-bit with a zero model, conservation of mass, momentum,
energy and tracer mass to round-off with a random one, positivity by fallback, bad options."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ssmpde.coupling.corrected import stepper_from_checkpoint
from ssmpde.coupling.steps import rollout
from ssmpde.data import open_dataset
from ssmpde.generation import generate
from ssmpde.surrogates.correction import flux_divergence
from ssmpde.surrogates.train import TrainConfig, train

FIELDS = ("density", "velocity_x", "velocity_y", "pressure", "tracer")


@pytest.fixture(scope="module")
def kh_data(tmp_path_factory):
    """Kelvin-Helmholtz (periodic) trajectories simulated on 16², stored on 8²."""
    path = tmp_path_factory.mktemp("euler") / "kh.nc"
    generate("euler", num_samples=3, seed=0, out=path, preset="kelvin-helmholtz",
             resolution=8, simulation_resolution=16, final_time=0.06, record_interval=0.02,
             progress=False).close()
    return path


def _corrector(data, out, correction_mode, **options):
    config = TrainConfig(**{**dict(epochs=1, batch_size=4, window=1, num_test=1,
                                   target="correction", coarse="2x1",
                                   correction_mode=correction_mode),
                            **options})
    train("conv-corrector", data, out=out, preset="kolmogorov", progress=False,
          model_overrides={"width": 4, "depth": 1}, config=config)
    return stepper_from_checkpoint(out)


@pytest.fixture(scope="module")
def flux_run(kh_data, tmp_path_factory):
    return tmp_path_factory.mktemp("runs") / "flux"


@pytest.fixture(scope="module")
def flux_stepper(kh_data, flux_run):
    return _corrector(kh_data, flux_run, "flux")


def _history(data):
    with open_dataset(data) as ds:
        return np.stack([ds[f].values[:, :1] for f in FIELDS], axis=2)


def _totals(stepper, frames):
    """Domain totals of the conserved densities, ``[batch, time, 5]``."""
    form = stepper.coarse.conservative_form()
    conserved = form.to_conserved(frames.reshape(-1, *frames.shape[2:]))
    return conserved.sum(axis=(-2, -1)).reshape(*frames.shape[:2], -1)


def _scale_last_layer(model, factor):
    with torch.no_grad():
        last = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)][-1]
        last.weight.mul_(factor)
        if last.bias is not None:
            last.bias.mul_(factor)


@pytest.mark.parametrize("mode", ["flux", "after"])
def test_a_zero_euler_corrector_is_the_coarse_solver_bit_for_bit(kh_data, tmp_path, mode):
    stepper = _corrector(kh_data, tmp_path / mode, mode)
    assert stepper.label == f"corrected 2x1{', flux' if mode == 'flux' else ''}"
    _scale_last_layer(stepper.model, 0.0)
    stepper._wrapped.corrections.mean = [0.0] * 5
    history = _history(kh_data)
    np.testing.assert_array_equal(rollout(stepper, history, 3),
                                  rollout(stepper.coarse, history, 3))
    assert stepper.fallbacks == 0


def test_the_flux_correction_conserves_the_totals_to_round_off(kh_data, flux_stepper):
    """A random (untrained, amplified) model changes the state visibly, yet mass, x and y
    momentum, energy and tracer mass stay those of the start, to round-off: the coarse
    solver conserves them, and the correction is the divergence of face fluxes."""
    _scale_last_layer(flux_stepper.model, 3.0)
    history = _history(kh_data)
    corrected = rollout(flux_stepper, history, 3)
    coarse = rollout(flux_stepper.coarse, history, 3)
    assert np.abs(corrected - coarse).max() > 1e-3  # the correction does something
    totals = _totals(flux_stepper, np.concatenate([history, corrected], axis=1))
    scale = np.abs(totals).max(axis=1, keepdims=True) + 1.0
    drift = np.abs(totals - totals[:, :1]) / scale
    assert drift.max() < 1e-13, drift.max()
    # the plain post-step correction has no such property: its totals drift
    assert flux_stepper.fallbacks == 0


@pytest.mark.parametrize("periodic", [(True, True), (False, True), (False, False)])
def test_flux_divergence_has_zero_totals_under_every_boundary(periodic):
    fluxes = torch.randn(2, 3, 2, 6, 7, dtype=torch.float64)
    change = flux_divergence(fluxes, periodic)
    assert change.abs().max() > 0.1
    torch.testing.assert_close(change.sum(dim=(-2, -1)), torch.zeros(2, 3, dtype=torch.float64),
                               atol=1e-13, rtol=0)
    # the divergence of a cell's upper-face flux: minus it here, plus it at the neighbour
    single = torch.zeros(1, 1, 2, 6, 7, dtype=torch.float64)
    single[0, 0, 1, 2, 3] = 1.0  # x face between cells (2, 3) and (2, 4)
    change = flux_divergence(single, periodic)[0, 0]
    assert change[2, 3] == -1.0 and change[2, 4] == 1.0 and change.abs().sum() == 2.0


def test_positivity_falls_back_to_the_coarse_step_and_counts_it(kh_data, flux_stepper):
    _scale_last_layer(flux_stepper.model, 1e6)  # corrections that empty cells
    flux_stepper.fallbacks = 0
    history = _history(kh_data)
    corrected = flux_stepper.step(history)
    coarse = flux_stepper.coarse.step(history)
    assert flux_stepper.fallbacks == len(history)
    np.testing.assert_array_equal(corrected, coarse)
    assert (corrected[:, [0, 3]] > 0).all()


def test_flux_correctors_train_on_policy(kh_data, tmp_path):
    """The variant without gradients through the numba step: one-step items on the states
    the corrected rollout visits, regenerated every epoch."""
    stepper = _corrector(kh_data, tmp_path / "on-policy", "flux", horizon=2,
                         mode="autoregressive", on_policy=1, epochs=2)
    log = (tmp_path / "on-policy" / "metrics.jsonl").read_text().splitlines()
    assert len(log) == 2
    frames = rollout(stepper, _history(kh_data), 2)
    assert np.all(np.isfinite(frames)) and (frames[:, :, [0, 3]] > 0).all()


@pytest.mark.parametrize("scale, falls_back", [(3.0, False), (1e6, True)],
                         ids=["float64-flux", "fallback"])
def test_on_policy_collection_visits_the_states_the_deployed_stepper_does(kh_data, tmp_path,
                                                                         scale, falls_back):
    """On-policy training collects the states of the corrected rollout as the runtime stepper
    makes it: the flux divergence in float64 and, where a correction would empty cells, the
    fallback to the plain coarse step (an earlier copy of the step had neither)."""
    from ssmpde.surrogates.correction_training import on_policy_items
    from ssmpde.surrogates.datasets import TaskDataset

    stepper = _corrector(kh_data, tmp_path / "run", "flux")
    _scale_last_layer(stepper.model, scale)
    history = _history(kh_data).astype(np.float32)  # as the training items hold the frames
    stepper.fallbacks = 0
    frames = rollout(stepper, history, 2)
    assert (stepper.fallbacks > 0) == falls_back
    if not falls_back:  # the correction does something
        assert np.abs(frames - rollout(stepper.coarse, history, 2)).max() > 1e-4
    wrapped = stepper._wrapped  # the same model, on the runtime stepper's conservative form
    task = dataclasses.replace(wrapped.task, horizon=3)
    trajectories = TaskDataset(kh_data, task, np.arange(len(history)))
    assert len(trajectories) == len(history)  # one start per trajectory: its first frame
    items = on_policy_items(wrapped, trajectories, stepper.coarse, batch_size=8)
    visited = items.items["history"].numpy()[:, 0]
    batch = len(history)  # the items: per step, the batch
    assert visited.shape == (3 * batch, *history.shape[2:])
    np.testing.assert_array_equal(visited[:batch], history[:, 0].astype(np.float32))
    for k in (1, 2):
        np.testing.assert_array_equal(visited[k * batch:(k + 1) * batch],
                                      frames[:, k - 1].astype(np.float32))
    assert (visited[:, [0, 3]] > 0).all()


def test_bad_flux_options_get_one_clear_line(kh_data, tmp_path):
    ks = tmp_path / "ks.nc"
    generate("kuramoto-sivashinsky", num_samples=2, seed=0, out=ks, preset="lpsda",
             resolution=32, simulation_resolution=64, final_time=0.2, progress=False).close()
    with pytest.raises(ValueError, match="has no conservative .flux. form"):
        train("conv-corrector", ks, out=tmp_path / "ks-flux", preset="ks", progress=False,
              model_overrides={"width": 4, "depth": 1},
              config=TrainConfig(epochs=1, window=1, num_test=1, target="correction",
                                 coarse="2x1", correction_mode="flux"))
    assert not (tmp_path / "ks-flux").exists()
    with pytest.raises(ValueError, match="correction_mode='flux' is for correctors"):
        TrainConfig(correction_mode="flux")
    with pytest.raises(ValueError, match="trains one step at a time .* or on-policy"):
        train("conv-corrector", kh_data, out=tmp_path / "unrolled", preset="kolmogorov",
              progress=False, model_overrides={"width": 4, "depth": 1},
              config=TrainConfig(epochs=1, window=1, num_test=1, target="correction",
                                 coarse="2x1", correction_mode="flux", horizon=2,
                                 mode="autoregressive"))
    assert not (tmp_path / "unrolled").exists()  # refused before any coarse prediction
