"""A trained surrogate as a time-stepper next to the solver, with the Python API.

Same as the command line:

    ssmpde rollout --checkpoint runs/ns --steps 8 --schedule "surrogate:2,solver:1" --out r.nc

Run: python examples/hybrid_rollout.py --out examples_output [--tiny]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

from ssmpde.coupling import SurrogateStepper, hybrid_rollout, to_dataset
from ssmpde.data import open_dataset, save
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.surrogates.train import TrainConfig, train


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples_output"))
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    solver_config = dict(resolution=16 if args.tiny else 32,
                         simulation_resolution=16 if args.tiny else 64, record_interval=0.5,
                         viscosity=1e-3, time_stepping="cfl")
    path = args.out / "ns_small.nc"
    generate("navier-stokes", num_samples=6 if args.tiny else 24, seed=0, out=path,
             final_time=4.0, overwrite=True, progress=not args.tiny, **solver_config)
    run = args.out / "runs" / "ns-geomano"
    shutil.rmtree(run, ignore_errors=True)
    train("geomano", path, out=run, preset="navier-stokes",
          model_overrides=dict(width=8 if args.tiny else 32, depth=1 if args.tiny else 2),
          config=TrainConfig(epochs=2 if args.tiny else 20, window=2, num_test=2),
          progress=not args.tiny)

    solver = get_solver("navier-stokes", **solver_config)     # a Stepper
    surrogate = SurrogateStepper.from_checkpoint(run)        # the same protocol
    with open_dataset(path) as ds:
        test = ds.isel(sample=slice(-2, None))
        history = test.vorticity.values[:, :2, None]         # [batch, window, field, y, x]
        parameters = {"viscosity": test.viscosity.values, "forcing": test.forcing.values}
        time = float(test.time[1])
    result = hybrid_rollout(solver, surrogate, history, 6, "surrogate:2,solver:1",
                            time=time, parameters=parameters)
    print("sources:", result.source)
    print("relative L2 against the solver:", np.round(result.errors, 4))
    print("seconds:", {k: round(v, 3) for k, v in result.seconds.items()},
          "reference:", round(result.reference_seconds, 3))
    ds = to_dataset(result, solver=solver, surrogate=surrogate,
                    schedule="surrogate:2,solver:1")
    save(ds, args.out / "hybrid_rollout.nc", overwrite=True)
    return {"result": result, "path": args.out / "hybrid_rollout.nc"}


if __name__ == "__main__":
    main()
