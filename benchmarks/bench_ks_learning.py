"""SS-NO (with and without temporal memory), FNO 1D and GeoMaNO 1D on Kuramoto–Sivashinsky,
at an equal CPU budget per model, for the three SS-NO viscosities.

For each viscosity (``lpsda-nu0.075``, ``lpsda-nu0.1``, ``lpsda-nu0.125``: 128 points,
Δt = 0.1, T = 5, 51 frames) and model: train with teacher forcing on one-step windows of
``--window`` frames (AdamW, cosine schedule, lr 1e-3, weight decay 1e-4, Gaussian input
noise σ = 0.001, batch 32: the SS-NO paper's settings, set by hand; the rest are the package's
defaults, Gaussian normalisation among them, where ``--recipe paper``, which came later,
normalises to [-1, 1]), stop when the budget of wall-clock seconds on one core is
spent (the cosine schedule is sized from a timed first epoch), then roll out every test
trajectory from its first ``window`` frames to T and report the full-trajectory relative L2,
next to the last epoch's one-step (teacher-forced) test relative L2. Runs go ``--jobs`` at a time, each on one thread.

    python -m ssmpde.cli generate kuramoto-sivashinsky --preset lpsda-nu0.1 --samples 640 \\
        --seed 1 --out ks_nu0.1.nc      # likewise nu0.075, nu0.125
    python -m benchmarks.bench_ks_learning --data-dir . --budget 420 --train 128 --test 128

Writes ``benchmarks/results/ks_learning.json``. The paper (SS-NO, 64 states, 500 epochs)
reports 0.0086 / 0.0026 / 0.0013 for ν = 0.075 / 0.1 / 0.125.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks.common import (
    RESULTS,
    header,
    model_configuration,
    seconds,
    table_row,
    training_recipe,
    when,
    write,
)

VISCOSITIES = ("0.075", "0.1", "0.125")
PAPER = {"0.075": 0.0086, "0.1": 0.0026, "0.125": 0.0013}
#: The training settings every model gets (with the window, teacher forcing and one step).
SETTINGS = dict(batch_size=32, lr=1e-3, weight_decay=1e-4, noise_std=0.001, schedule="cosine")
#: label: (model, preset, overrides)
MODELS = {
    "ssno_memory": ("ssno", "ks", {}),
    "ssno_no_memory": ("ssno", "ks", {"memory": False}),
    "fno_1d": ("fno", "burgers", {}),
    "geomano_1d": ("geomano", "1d", {}),
}


def split(data: Path, train: int, test: int, workdir: Path) -> tuple[Path, Path]:
    """The first ``train`` samples followed by the last ``test`` (one file, for ``num_test``),
    and the test samples alone."""
    from ssmpde.data import load_dataset, save

    ds = load_dataset(data)
    n = ds.sizes["sample"]
    if train + test > n:
        raise SystemExit(f"{data} has {n} samples; --train {train} + --test {test} is more")
    both = ds.isel(sample=list(range(train)) + list(range(n - test, n)))
    paths = workdir / f"{data.stem}_train.nc", workdir / f"{data.stem}_test.nc"
    save(both, paths[0], overwrite=True)
    save(ds.isel(sample=slice(n - test, n)), paths[1], overwrite=True)
    return paths


def run_one(label, nu, train_file, test_file, budget, window, test, runs):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_one(label, nu, train_file, test_file, budget, window, test, runs)
    finally:
        torch.set_num_threads(threads)


def _run_one(label, nu, train_file, test_file, budget, window, test, runs):
    from ssmpde.surrogates import parameter_count
    from ssmpde.surrogates.train import TrainConfig, evaluate, load_checkpoint, train

    name, preset, overrides = MODELS[label]
    common = dict(SETTINGS, window=window, horizon=1, mode="teacher-forcing", num_test=test,
                  seed=0)
    probe = runs / f"{label}-{nu}-probe"
    shutil.rmtree(probe, ignore_errors=True)
    epoch_seconds, _ = seconds(lambda: train(
        name, train_file, out=probe, preset=preset, model_overrides=overrides,
        config=TrainConfig(epochs=1, **common), progress=False))
    epochs = max(1, int(budget // epoch_seconds))
    run = runs / f"{label}-{nu}"
    shutil.rmtree(run, ignore_errors=True)
    train_seconds, metrics = seconds(lambda: train(
        name, train_file, out=run, preset=preset, model_overrides=overrides,
        config=TrainConfig(epochs=epochs, **common), progress=False, time_limit=budget))
    evaluation = evaluate(run, test_file)
    model, record = load_checkpoint(run)
    return {"model": label, "viscosity": nu, "parameters": parameter_count(model),
            "model_config": record["model_config"], "train_config": record["train_config"],
            "recipe": record.get("recipe"),
            "epoch_seconds": epoch_seconds, "epochs_planned": epochs,
            "epochs_done": metrics["epoch"], "train_seconds": train_seconds,
            "final_train_loss": metrics["train_loss"],
            "test_rel_l2_one_step": metrics["test_rel_l2"],
            "test_rel_l2_trajectory": evaluation["rel_l2"]}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True,
                        help="folder with ks_nu0.075.nc, ks_nu0.1.nc, ks_nu0.125.nc")
    parser.add_argument("--budget", type=float, default=180.0, help="seconds per model")
    parser.add_argument("--train", type=int, default=128, help="training trajectories")
    parser.add_argument("--test", type=int, default=128, help="test trajectories")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--viscosities", nargs="+", default=list(VISCOSITIES),
                        choices=list(VISCOSITIES))
    parser.add_argument("--runs", type=Path, default=Path(tempfile.gettempdir()) / "ks-runs")
    parser.add_argument("--out", type=Path, default=RESULTS / "ks_learning.json")
    args = parser.parse_args(argv)
    args.runs.mkdir(parents=True, exist_ok=True)
    files = {nu: split(args.data_dir / f"ks_nu{nu}.nc", args.train, args.test, args.runs)
             for nu in args.viscosities}
    result = header("ks_learning")
    result.update({"budget_seconds_per_model": args.budget, "threads_per_model": 1,
                   "parallel_jobs": args.jobs, "train_trajectories": args.train,
                   "test_trajectories": args.test, "window": args.window,
                   "paper_ssno_64_states": PAPER, "rows": []})
    jobs = [(label, nu) for nu in args.viscosities for label in args.models]
    arguments = [(label, nu, *files[nu], args.budget, args.window, args.test, args.runs)
                 for label, nu in jobs]
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            pool = stack.enter_context(ProcessPoolExecutor(
                args.jobs, mp_context=multiprocessing.get_context("spawn")))
            rows = (future.result() for future in
                    [pool.submit(run_one, *a) for a in arguments])
        else:  # in this process, one after the other
            rows = (run_one(*a) for a in arguments)
        for row in rows:
            result["rows"].append(row)
            print(f"ν {row['viscosity']:>5} {row['model']:>15}: {row['parameters']:,} "
                  f"parameters, {row['epochs_done']} epochs, trajectory rel. L2 "
                  f"{row['test_rel_l2_trajectory']:.4f}", flush=True)
    write(result, args.out)
    return result


#: The models of the benchmarks page's table, in its column order.
MODEL_COLUMNS = {"ssno_memory": "SS-NO + memory", "ssno_no_memory": "SS-NO",
                 "fno_1d": "FNO 1D", "geomano_1d": "GeoMaNO 1D"}


def details(result: dict) -> str:
    """The benchmarks page's table: per viscosity and model, the trajectory error (the
    one-step error; epochs done)."""
    by = {(r["viscosity"], r["model"]): r for r in result["rows"]}
    lines = ["| ν | " + " | ".join(MODEL_COLUMNS.values()) + " | paper (SS-NO, 500 epochs) |",
             "|---|" + "---|" * (len(MODEL_COLUMNS) + 1)]
    for nu, paper in result["paper_ssno_64_states"].items():
        cells = []
        for model in MODEL_COLUMNS:
            row = by.get((nu, model))
            cells.append("–" if row is None else
                         f"{row['test_rel_l2_trajectory']:.2f} "
                         f"({row['test_rel_l2_one_step']:.3f}; {row['epochs_done']})")
        lines.append(f"| {nu} | " + " | ".join(cells) + f" | {paper} |")
    return "\n".join(lines)


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table: per viscosity, SS-NO with memory against
    the FNO (the other models' errors in the ssmpde cell), each model's preset (and layout)
    and the training all had (:func:`benchmarks.common.model_configuration`,
    :func:`~benchmarks.common.training_recipe`: from the JSON where it records them, else from
    the result's date)."""
    lines = []
    by = {(r["viscosity"], r["model"]): r for r in result["rows"]}
    settings = dict(SETTINGS, window=result["window"], mode="teacher-forcing")
    for nu, paper in result["paper_ssno_64_states"].items():
        ssno_row, fno_row = by.get((nu, "ssno_memory")), by.get((nu, "fno_1d"))
        if not (ssno_row and fno_row):
            continue
        error = {label: row["test_rel_l2_trajectory"] for (v, label), row in by.items()
                 if v == nu}
        others = ", ".join(f"{_model(label, by[nu, label], result)}: {error[label]:.3f}"
                           for label in ("ssno_no_memory", "geomano_1d") if label in error)
        lines.append(table_row(
            f"KS lpsda ν {nu}, 128 points: trajectory rel. L2 after "
            f"{result['budget_seconds_per_model']:.0f} s CPU per model (paper, 500 epochs: "
            f"{paper}); all trained with "
            f"{training_recipe(result, ssno_row, settings, rollout=True)}",
            f"{ssno_row['test_rel_l2_trajectory']:.3f} "
            f"({_model('ssno_memory', ssno_row, result)}, {ssno_row['epochs_done']} epochs; "
            f"{others})",
            f"{fno_row['test_rel_l2_trajectory']:.3f} ({_model('fno_1d', fno_row, result)}, "
            f"{fno_row['epochs_done']} epochs)",
            f"{error['ssno_memory'] / error['fno_1d']:.2f}", when(result)))
    return lines


#: The models' names in the rows.
MODEL_NAMES = {"ssno": "SS-NO", "fno": "FNO", "geomano": "GeoMaNO"}


def _model(label: str, row: dict, result: dict) -> str:
    """``label``'s model in words: its name, preset, layout and overrides."""
    name, preset, overrides = MODELS[label]
    return (f"{MODEL_NAMES[name]} "
            + model_configuration(name, preset, result, row.get("model_config"), overrides))


if __name__ == "__main__":
    main()
