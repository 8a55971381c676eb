"""GeoMaNO's Darcy preset trained on a GPU, against the paper's test error and time per epoch.

Writes a GPU training run's figures to ``benchmarks/results/training_darcy_gpu.json``.

``session.sh train N`` trains the GeoMaNO ``darcy`` preset on 1000 / 200 FNO Darcy samples at
85²; this reads the run's ``metrics.jsonl`` (one line per epoch: seconds, test relative L2) and
records them next to the paper's figures (Table 2 of the GeoMaNO paper: 0.0036 test relative
L2, 23.98 s per epoch).

    python -m benchmarks.gpu.training_result RUN/metrics.jsonl --device "NVIDIA H100 80GB HBM3" \\
        --note "epochs 1-33 shared the GPU with the kernel tests and the tuning sweep"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.common import (
    RESULTS,
    header,
    model_configuration,
    table_row,
    training_recipe,
    when,
    write,
)

PAPER = {"test_rel_l2": 0.0036, "seconds_per_epoch": 23.98}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path)
    parser.add_argument("--device", required=True)
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=RESULTS / "training_darcy_gpu.json")
    args = parser.parse_args(argv)
    epochs = [json.loads(line) for line in args.metrics.read_text().splitlines() if line]
    seconds = np.array([e["seconds"] for e in epochs])
    result = header("training_darcy_gpu")
    result.update(
        device=args.device, model="geomano", preset="darcy",
        data="FNO Darcy (darcy --preset fno), 1000 train / 200 test at 85², seed 0",
        epochs=len(epochs), batch_size=4,
        test_rel_l2=epochs[-1]["test_rel_l2"],
        best_test_rel_l2=min(e["test_rel_l2"] for e in epochs),
        seconds_per_epoch_median=float(np.median(seconds)),
        seconds_per_epoch_min=float(seconds.min()),
        seconds_per_epoch_max=float(seconds.max()),
        total_seconds=float(seconds.sum()), paper=PAPER, note=args.note,
        per_epoch=[{k: e[k] for k in ("epoch", "seconds", "test_rel_l2", "train_loss")}
                   for e in epochs])
    write(result, args.out)
    print(f"{len(epochs)} epochs: test rel. L2 {result['test_rel_l2']:.4f} (paper "
          f"{PAPER['test_rel_l2']}), {result['seconds_per_epoch_median']:.1f} s/epoch median "
          f"(paper {PAPER['seconds_per_epoch']})")
    return result


#: The run's settings besides the package's defaults, as its ``note`` records them (a peak lr
#: of 1e-3); the batch is recorded as a field.
SETTINGS = {"lr": 1e-3}


def rows(result: dict) -> list[str]:
    """This benchmark's row of the results table: the run against the paper's figures, with
    the preset and the training it had (:func:`benchmarks.common.model_configuration`,
    :func:`~benchmarks.common.training_recipe`)."""
    paper = result["paper"]
    recipe = training_recipe(result, result, {**SETTINGS, "batch_size": result["batch_size"]},
                             gradient_loss=True)
    configuration = model_configuration(result["model"], result["preset"], result)
    return [table_row(f"GPU training: GeoMaNO {configuration}, FNO Darcy 1000/200 at 85², "
                      f"{result['epochs']} epochs, trained with {recipe}",
                      f"test rel. L2 {result['test_rel_l2']:.4f}; "
                      f"{result['seconds_per_epoch_min']:.1f} s/epoch (median "
                      f"{result['seconds_per_epoch_median']:.1f} on a shared GPU)",
                      f"paper: {paper['test_rel_l2']}; {paper['seconds_per_epoch']} s/epoch",
                      f"{paper['seconds_per_epoch'] / result['seconds_per_epoch_min']:.1f}x "
                      "epoch speed", when({**result, "machine": {"cpus": 1, "processor": result["device"]}}))]


if __name__ == "__main__":
    main()
