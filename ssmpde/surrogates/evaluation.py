"""Evaluation of a trained run: :func:`evaluate` on a dataset, and the test error of an epoch.

Operator tasks predict every sample's outputs; rollout tasks roll out autoregressively from
each sample's first ``window`` frames; a corrector's test error is that of one corrected
coarse step. The error is the relative L2 per field, averaged over fields
(:func:`ssmpde.core.relative_l2`), reported two ways for a rollout: the mean of the per-frame
errors (:func:`ssmpde.core.relative_l2_per_frame`) and the papers' error pooled over the
whole output horizon (:func:`ssmpde.core.pooled_relative_l2`); for one output frame the two
are the same. :func:`best_so_far` reads a run's best epoch off its metrics log.
:func:`evaluate` is re-exported by :mod:`ssmpde.surrogates.train`, where it has always been
imported from.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ssmpde.core import pooled_relative_l2, relative_l2_per_frame
from ssmpde.data import SAMPLE, SPATIAL_DIMS, TIME, check_output, open_dataset, output_lock, \
    save, validate
from ssmpde.threads import entry_point

from .batching import _collate
from .checkpoint import METRICS, NormalisedModel, load_checkpoint, normalised_model
from .compiled import CompiledOnFirstCall, compile_backend
from .correction_training import corrected, corrected_step
from .datasets import Task, TaskDataset, parse_selector, relative_l2
from .train_config import check_device

__all__ = ["best_so_far", "evaluate"]


def _predict(wrapped: NormalisedModel, batch: dict[str, torch.Tensor], coarse_step=None):
    """(prediction, per-sample error of each frame ``[batch, steps]``, per-sample error
    pooled over the frames ``[batch]``) of a batch: operator pairs, the corrected coarse step
    (through ``coarse_step`` for an in-step corrector), or the free autoregressive rollout
    over the batch's horizon."""
    if wrapped.task.kind == "operator":
        prediction = wrapped(batch["x"])
        errors = relative_l2(prediction, batch["y"], fields=True)[:, None]
        return prediction, errors, errors[:, 0]
    if wrapped.task.correction and wrapped.task.correction_mode == "source":
        prediction = corrected_step(wrapped, coarse_step, batch["history"],
                                    batch["conditioning"][:, 0]).unsqueeze(1)
    elif wrapped.task.correction:
        prediction = corrected(wrapped, batch)
    else:
        prediction = wrapped.rollout(batch["history"], batch["conditioning"])
    # A corrector's error is that of its one corrected step.
    target = batch["target"][:, :prediction.shape[1]]
    return (prediction, relative_l2_per_frame(prediction, target),
            pooled_relative_l2(prediction, target))


def _evaluate_split(wrapped: NormalisedModel, dataset: TaskDataset, batch_size: int,
                    device, coarse_step=None) -> dict[str, Any]:
    """Test relative L2: operator pairs, or per step of an autoregressive rollout, and pooled
    over its steps (``test_pooled_rel_l2``, equal to ``test_rel_l2`` for one step)."""
    if len(dataset) == 0:
        return {}
    wrapped.model.eval()
    errors: list[torch.Tensor] = []
    pooled: list[torch.Tensor] = []
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            batch = _collate(dataset, range(start, min(start + batch_size, len(dataset))))
            _, frames, whole = _predict(wrapped, {k: v.to(device) for k, v in batch.items()},
                                        coarse_step)
            errors.append(frames)
            pooled.append(whole)
    wrapped.model.train()
    values = torch.cat(errors)
    result = {"test_rel_l2": float(values.mean()),
              "test_pooled_rel_l2": float(torch.cat(pooled).mean())}
    if dataset.task.kind != "operator":
        result["test_rel_l2_per_step"] = [float(v) for v in values.mean(dim=0)]
    return result


def best_so_far(run) -> dict[str, Any]:
    """The best epoch of the run in ``run`` by its pooled test error, from the last line of
    its metrics log: ``best_epoch`` and ``best_test_pooled_rel_l2`` ({} without a log, a
    test set, or in a log written before they were recorded)."""
    path = Path(run) / METRICS
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        last = json.loads(lines[-1]) if lines else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if not isinstance(last, dict):
        return {}
    best = {key: last[key] for key in ("best_epoch", "best_test_pooled_rel_l2") if key in last}
    return best if len(best) == 2 else {}


def _require_samples(ds, path, purpose: str) -> None:
    """A dataset without samples is a clear error, not an empty loop further down."""
    if ds.sizes.get(SAMPLE, 0) == 0:
        raise ValueError(f"'{path}' holds no samples: there is nothing to {purpose}; "
                         "generate it with --samples 1 or more, or choose another file")


@entry_point("evaluate")
def evaluate(run, data, *, out=None, batch_size: int = 8, device: str = "cpu",
             overwrite: bool = False, threads: int | None = None,
             compile: bool | str = False) -> dict[str, Any]:
    """Relative L2 of a trained run on a dataset, and optionally its predictions as netCDF.

    Operator tasks predict every sample's outputs. Rollout tasks start from each sample's
    first ``window`` frames and roll out autoregressively to the end of the trajectory; the
    errors (relative L2 per field, averaged over fields) are per step, their mean over the
    horizon, and pooled over the horizon (the papers' rollout error,
    :func:`ssmpde.core.pooled_relative_l2`).
    ``threads``: torch and numba threads (default ``SSMPDE_THREADS``, else as the process
    started; :mod:`ssmpde.threads`). ``compile``: as :attr:`TrainConfig.compile`.

    Returns
    -------
    dict
        ``rel_l2`` (mean over samples of the per-step mean), ``rel_l2_per_sample``,
        ``rel_l2_per_field`` (each field's relative L2 over the whole prediction, mean over
        samples), ``pooled_rel_l2`` (mean over samples of the error pooled over every output
        frame and point) and ``pooled_rel_l2_per_sample`` (for an operator task, equal to
        the ``rel_l2`` ones), for rollouts ``rel_l2_per_step``; and from the run's metrics
        log, the checkpoint's ``epoch`` with the training's ``best_epoch`` and
        ``best_test_pooled_rel_l2`` (its test set's error at its best epoch; the checkpoint
        holds the last epoch's weights).
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
    predictions, errors, pooled, per_field = [], [], [], []
    field_axis = 1 if task.kind == "operator" else 2
    with torch.no_grad():
        for start in range(0, num_samples, batch_size):
            batch = _collate(dataset, range(start, min(start + batch_size, num_samples)))
            prediction, error, whole = _predict(wrapped,
                                                {k: v.to(device) for k, v in batch.items()})
            predictions.append(prediction.cpu())
            errors.append(error)
            pooled.append(whole)
            target = batch["y" if task.kind == "operator" else "target"]
            per_field.append(torch.stack(
                [relative_l2(prediction.cpu().select(field_axis, f), target.select(field_axis, f))
                 for f in range(target.shape[field_axis])], dim=1))
    dataset.close()
    errors_t, per_field_t = torch.cat(errors), torch.cat(per_field).mean(dim=0)
    pooled_t = torch.cat(pooled)
    result: dict[str, Any] = {"rel_l2": float(errors_t.mean()),
                              "rel_l2_per_sample": [float(v) for v in errors_t.mean(dim=1)],
                              "rel_l2_per_field": {name: float(v) for name, v in
                                                   zip(task.fields, per_field_t)},
                              "pooled_rel_l2": float(pooled_t.mean()),
                              "pooled_rel_l2_per_sample": [float(v) for v in pooled_t]}
    if task.kind == "rollout":
        result["rel_l2_per_step"] = [float(v) for v in errors_t.mean(dim=0)]
    if isinstance(record.get("epoch"), int):
        result["epoch"] = record["epoch"]
    result.update(best_so_far(run))
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
