"""The SSM surrogates (LaMO, GeoMaNO) against the FNO baseline at one CPU wall-clock budget.

For each model, in one run: time an epoch (on ``--probe-samples`` samples, scaled), set the
number of epochs so that the whole OneCycle schedule fits the budget (a model slower than one
epoch per budget gets one epoch over as many training samples as the budget buys), train (with
the budget as a hard stop too), and evaluate the test relative L2. Same data, split, batch
size, learning rate and seed for every model.

    python -m benchmarks.bench_training --task darcy --data darcy43.nc --num-test 100 \\
        --budget 300 --models lamo geomano fno
    python -m benchmarks.bench_training --task navier-stokes --data ns.nc --num-test 20 \\
        --window 10 --frames 20 --budget 300 --batch-size 2

Writes ``benchmarks/results/training_<task>.json`` and the runs under ``--runs``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from benchmarks.common import (
    RESULTS,
    header,
    model_configuration,
    portable_path,
    seconds,
    table_row,
    training_recipe,
    when,
    write,
)

#: The papers' test relative L2 after 500 epochs (LaMO, GeoMaNO, and the FNO paper's own).
PAPERS = {"darcy": {"lamo": 0.0039, "geomano": 0.0036, "fno": 0.0108},
          "navier-stokes": {"lamo": 0.0460, "fno": 0.1556}}


def _test_file(data: Path, num_test: int, frames: int | None, workdir: Path) -> Path:
    """The held-out samples (the last ``num_test``), cut to ``frames`` frames, as a file."""
    from ssmpde.data import load_dataset, save

    ds = load_dataset(data)
    test = ds.isel(sample=slice(ds.sizes["sample"] - num_test, None))
    if frames is not None:
        test = test.isel(time=slice(0, frames))
    path = workdir / "test.nc"
    save(test, path, overwrite=True)
    return path


def _subset_file(data: Path, num_test: int, samples: int, path: Path) -> tuple[Path, int]:
    """The first ``samples`` training samples, with the ``num_test`` test samples after them,
    as a file; and the number of training samples of the whole file."""
    from ssmpde.data import load_dataset, save

    ds = load_dataset(data)
    num_train = ds.sizes["sample"] - num_test
    keep = list(range(min(samples, num_train))) + list(range(num_train, ds.sizes["sample"]))
    save(ds.isel(sample=keep), path, overwrite=True)
    return path, num_train


def budget_plan(model: str, preset: str, *, data: Path, num_test: int, budget: float,
                probe_data: Path, probe_samples: int, num_train: int, common: dict,
                overrides: dict, workdir: Path, name: str) -> dict:
    """How ``model`` spends ``budget`` seconds of training: epochs, data file, samples.

    An epoch is timed on ``probe_samples`` samples (twice: the first run compiles and warms the
    caches) by the trainer's own epoch clock, which leaves out set-up and evaluation, and
    scaled to ``num_train``. A model slower than one epoch per budget gets one epoch over as
    many training samples as the budget buys (written as a subset file in ``workdir``).
    """
    from ssmpde.surrogates.train import TrainConfig, train

    probe = workdir / f"{name}-probe"
    for _ in range(2):
        shutil.rmtree(probe, ignore_errors=True)
        metrics = train(model, probe_data, out=probe, preset=preset, model_overrides=overrides,
                        config=TrainConfig(epochs=1, **dict(common, num_test=0)),
                        progress=False)
    shutil.rmtree(probe, ignore_errors=True)
    epoch_seconds = metrics["seconds"] * num_train / probe_samples
    plan = {"epochs": max(1, int(budget // epoch_seconds)), "data": data,
            "train_samples": num_train, "epoch_seconds_estimate": epoch_seconds}
    if epoch_seconds > budget:
        used = max(1, int(num_train * budget / epoch_seconds))
        plan.update(train_samples=used,
                    data=_subset_file(data, num_test, used, workdir / f"{name}.nc")[0])
    return plan


def main(argv=None) -> dict:
    from ssmpde.surrogates import parameter_count
    from ssmpde.surrogates.train import TrainConfig, evaluate, load_checkpoint, train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["darcy", "navier-stokes"], required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--num-test", type=int, required=True)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per model")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--frames", type=int, help="frames of the test trajectories used")
    parser.add_argument("--models", nargs="+", default=["lamo", "geomano", "fno"])
    parser.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                        help="override for every model (JSON value)")
    parser.add_argument("--probe-samples", type=int, default=16,
                        help="samples of the timing epoch that sets each model's epochs")
    parser.add_argument("--runs", type=Path, default=Path(tempfile.gettempdir()) / "ssmpde-runs")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import json

    overrides = {}
    for option in args.model_option:
        key, _, value = option.partition("=")
        overrides[key] = json.loads(value)
    out = args.out or RESULTS / f"training_{args.task}.json"
    args.runs.mkdir(parents=True, exist_ok=True)
    test_file = _test_file(args.data, args.num_test, args.frames, args.runs)
    # An epoch is timed on a few samples and scaled: a whole probe epoch of a slow model
    # (LaMO on a CPU) would cost more than its budget.
    probe_data, num_train = _subset_file(args.data, 0, args.probe_samples,
                                         args.runs / "probe.nc")
    probe_samples = min(args.probe_samples, num_train)
    num_train -= args.num_test
    common = dict(batch_size=args.batch_size, lr=args.lr, num_test=args.num_test, seed=0)
    if args.task == "navier-stokes":
        common.update(window=args.window, horizon=1, mode="teacher-forcing")

    result = header(f"training_{args.task}")
    result.update({"data": portable_path(args.data), "budget_seconds": args.budget,
                   "settings": common, "model_options": overrides, "models": {}})
    for name in args.models:
        plan = budget_plan(name, args.task, data=args.data, num_test=args.num_test,
                           budget=args.budget, probe_data=probe_data,
                           probe_samples=probe_samples, num_train=num_train, common=common,
                           overrides=overrides, workdir=args.runs, name=name)
        data, epochs = plan["data"], plan["epochs"]
        run = args.runs / name
        shutil.rmtree(run, ignore_errors=True)
        elapsed, metrics = seconds(lambda: train(
            name, data, out=run, preset=args.task, model_overrides=overrides,
            config=TrainConfig(epochs=epochs, **common), progress=False,
            time_limit=args.budget))
        evaluation = evaluate(run, test_file)
        model, record = load_checkpoint(run)
        row = {"parameters": parameter_count(model), "model_config": record["model_config"],
               "epoch_seconds_estimate": plan["epoch_seconds_estimate"],
               "train_samples": plan["train_samples"], "epochs_planned": epochs,
               "epochs_done": metrics["epoch"],
               "train_seconds": elapsed, "final_train_loss": metrics["train_loss"],
               "test_rel_l2": evaluation["rel_l2"],
               "train_config": record["train_config"], "recipe": record.get("recipe")}
        if "rel_l2_per_step" in evaluation:
            row["test_rel_l2_per_step"] = evaluation["rel_l2_per_step"]
        result["models"][name] = row
        print(f"{name}: {row['parameters']:,} parameters, {metrics['epoch']}/{epochs} epochs "
              f"in {elapsed:.0f} s, test relative L2 {row['test_rel_l2']:.4f}", flush=True)
    rows = result["models"]
    if {"geomano", "fno"} <= set(rows):
        result["ratio_fno_over_geomano"] = rows["fno"]["test_rel_l2"] / rows["geomano"][
            "test_rel_l2"]
    write(result, out)
    return result


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table (one file, one task): each SSM surrogate
    against the FNO at the same budget, each model's preset (and layout) and the training
    both had (:func:`benchmarks.common.model_configuration`, :func:`~benchmarks.common.
    training_recipe`: from the JSON where it records them, else from the result's date)."""
    task = result["benchmark"].removeprefix("training_")
    models = result["models"]
    if "fno" not in models:
        return []
    f = models["fno"]
    options = result.get("model_options", {})

    def configuration(name: str) -> str:
        return model_configuration(name, task, result, models[name]["model_config"], options)

    lines = []
    for name in ("lamo", "geomano"):
        if name not in models:
            continue
        g = models[name]
        cited = ", ".join(f"{m} {v}" for m, v in PAPERS[task].items() if m in (name, "fno"))
        recipe = training_recipe(result, g, result["settings"], gradient_loss=task == "darcy",
                                 rollout=task == "navier-stokes")
        lines.append(table_row(
            f"{task}: {name} vs FNO, {result['budget_seconds']:.0f} s CPU training each (test "
            f"rel. L2; papers, 500 epochs: {cited}); both trained with {recipe}",
            f"{g['test_rel_l2']:.4f} ({configuration(name)}; {g['epochs_done']} epochs"
            + (f" over {g['train_samples']} samples"
               if g.get("train_samples", 0) < f.get("train_samples", 0) else "")
            + f", {g['parameters']:,} parameters{_fitted_to(g['model_config'])})",
            f"{f['test_rel_l2']:.4f} (FNO {configuration('fno')}; {f['epochs_done']} epochs)",
            f"{g['test_rel_l2'] / f['test_rel_l2']:.2f}", when(result)))
    return lines


def _fitted_to(config: dict) -> str:
    """What a parameter count was fitted to: the data's grid and input channels (a preset on
    its own grid counts differently, as ``ssmpde models`` shows)."""
    grid = config.get("grid") or []
    text = f" at {grid[0]}²" if len(grid) == 2 and grid[0] == grid[1] else \
        (f" at {'×'.join(map(str, grid))}" if grid else "")
    channels = config.get("in_channels", 1)
    return text + (f" with {channels} input channels" if channels > 1 else "")


if __name__ == "__main__":
    main()
