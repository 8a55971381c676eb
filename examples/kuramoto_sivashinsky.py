"""Kuramoto–Sivashinsky in 1D: generate the MemNO/SS-NO data, train an FNO, roll it out with
the solver re-anchoring it, and draw both as space–time diagrams.

Same as the command line:

    ssmpde generate kuramoto-sivashinsky --preset lpsda --samples 256 --out ks.nc
    ssmpde train fno --preset burgers --data ks.nc --window 4 --num-test 16 --out runs/ks
    ssmpde rollout --checkpoint runs/ks --steps 40 --schedule surrogate:4,solver:1 \\
        --samples 240:244 --plot ks_rollout.png

Run: python examples/kuramoto_sivashinsky.py --out examples_output [--tiny]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from ssmpde.coupling.run import describe, run_rollout
from ssmpde.plotting import plot_snapshots
from ssmpde.generation import generate
from ssmpde.surrogates.train import TrainConfig, train


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples_output"))
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    config = dict(preset="lpsda", viscosity=0.1)  # L = 64, stored at 128 of 512 points
    samples, num_test, epochs, steps = 256, 16, 20, 40
    if args.tiny:
        config.update(resolution=32, simulation_resolution=64, final_time=1.0)
        samples, num_test, epochs, steps = 6, 2, 1, 4
    data = out / "ks.nc"
    ds = generate("kuramoto-sivashinsky", num_samples=samples, seed=0, out=data,
                  overwrite=True, progress=not args.tiny, **config)
    plot_snapshots(ds, out / "ks.png", samples=(0, 1))  # space–time diagrams
    ds.close()
    run = out / "runs" / "ks-fno"
    shutil.rmtree(run, ignore_errors=True)
    metrics = train("fno", data, out=run, preset="burgers",
                    model_overrides=dict(width=8) if args.tiny else dict(width=48),
                    config=TrainConfig(epochs=epochs, batch_size=16, lr=1e-3, window=4,
                                       num_test=num_test), progress=not args.tiny)
    rows = run_rollout(run, steps=steps, schedules=["surrogate:4,solver:1"], data=data,
                       samples=f"{samples - num_test}:{samples - num_test + 2}",
                       out=out / "ks_rollout.nc", plot=out / "ks_rollout.png",
                       overwrite=True)
    for row in rows:
        print(f"{row['schedule']:>22}: {describe(row)}")
    return {"metrics": metrics, "rollout": rows, "run": run}


if __name__ == "__main__":
    main()
