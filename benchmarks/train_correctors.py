"""Train the KS correctors that ``benchmarks/bench_correction.py --correctors`` judges.

The ``ks`` problem of ``bench_correction``: Kuramoto–Sivashinsky (LPSDA: L = 64, ν = 0.1),
reference 512 points at h = 0.0025. Training data are generated the same way (simulated on
512 points at h = 0.0025) and stored on the coarse grids, 128 points (4x coarser) and 64
(8x); each corrector corrects the generating solver coarsened ``Sx4`` (S x coarser grid,
h = 0.01, ten coarse steps per record interval of 0.1). Every corrector gets the same
wall-clock budget on one thread (``--budget`` seconds, the issue allows 20 CPU minutes; the
default is what a 2-core session could spend on six of them), and its data generation and
training seconds are recorded for the break-even count.

Configurations (``--only`` picks some):

* ``conv-source-unrolled-{4x,8x}``: the local convolutional corrector inside the step (a
  source term), unrolled through the differentiable coarse step with a curriculum 1 → 4 → 8;
* ``conv-after-onestep-4x``: the same model after the step, one step on cached coarse
  predictions (today's default recipe);
* ``conv-source-onpolicy-4x``: inside the step, trained on the corrected rollout's own
  states, the solver's response held constant (no gradient through the solver);
* ``lean-fno-source-unrolled-4x``: the global Fourier corrector, as the first;
* ``ssno-source-unrolled-4x``: an SSM (SS-NO, no memory, narrow: width 16, lifting 32,
  depth 2, state 16) as the first.

    taskset -c 0 env SSMPDE_THREADS=1 python -m benchmarks.train_correctors --out runs/correctors
    python -m benchmarks.bench_correction --correctors runs/correctors/*
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ssmpde.generation import generate
from ssmpde.surrogates.train import TrainConfig, train

#: name -> (coarse grid, model, preset, model options, training options)
CONFIGURATIONS = {
    "conv-source-unrolled-4x": (128, "conv-corrector", "ks", {},
                                dict(correction_mode="source", horizon=8,
                                     mode="autoregressive", pushforward=False,
                                     curriculum=(1, 4, 8))),
    "conv-after-onestep-4x": (128, "conv-corrector", "ks", {}, dict()),
    "conv-source-onpolicy-4x": (128, "conv-corrector", "ks", {},
                                dict(correction_mode="source", horizon=8,
                                     mode="autoregressive", on_policy=1)),
    "lean-fno-source-unrolled-4x": (128, "lean-fno", "ks-corrector", {"modes": [65]},
                                    dict(correction_mode="source", horizon=8,
                                         mode="autoregressive", pushforward=False,
                                         curriculum=(1, 4, 8))),
    "ssno-source-unrolled-4x": (128, "ssno", "ks",
                                {"width": 16, "lifting": 32, "depth": 2, "state_size": 16,
                                 "memory": False, "window": 1},
                                dict(correction_mode="source", horizon=8,
                                     mode="autoregressive", pushforward=False,
                                     curriculum=(1, 4, 8))),
    "conv-source-unrolled-8x": (64, "conv-corrector", "ks", {},
                                dict(correction_mode="source", horizon=8,
                                     mode="autoregressive", pushforward=False,
                                     curriculum=(1, 4, 8))),
}


def data(out: Path, grid: int, samples: int, final_time: float) -> tuple[Path, float]:
    """KS trajectories simulated like bench_correction's reference, stored on ``grid``."""
    path = out / f"ks{grid}.nc"
    started = time.perf_counter()
    if not path.exists():
        generate("kuramoto-sivashinsky", num_samples=samples, seed=0, out=path,
                 preset="lpsda", resolution=grid, simulation_resolution=512,
                 time_step=0.0025, final_time=final_time, progress=False).close()
    return path, time.perf_counter() - started


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/correctors"))
    parser.add_argument("--budget", type=float, default=240.0, help="seconds per corrector")
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--final-time", type=float, default=20.0)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--only", nargs="+", choices=sorted(CONFIGURATIONS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name in args.only or CONFIGURATIONS:
        grid, model, preset, options, extra = CONFIGURATIONS[name]
        path, data_seconds = data(args.out, grid, args.samples, args.final_time)
        run = args.out / name
        config = TrainConfig(epochs=args.epochs, batch_size=16, lr=1e-3, window=1,
                             num_test=4, target="correction", coarse=f"{512 // grid}x4",
                             schedule="cosine", **extra)
        started = time.perf_counter()
        metrics = train(model, path, out=run, preset=preset, model_overrides=options,
                        config=config, progress=False, time_limit=args.budget)
        seconds = time.perf_counter() - started
        summary[name] = {"data_seconds": data_seconds, "train_seconds": seconds,
                         "epochs": metrics.get("epoch"), "test_rel_l2": metrics.get("test_rel_l2"),
                         "train_loss": metrics.get("train_loss")}
        (run / "upfront.json").write_text(json.dumps(summary[name]))
        print(name, json.dumps(summary[name]))
    return summary


if __name__ == "__main__":
    main()
