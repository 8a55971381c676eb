"""Generate datasets with the built-in solvers and look at them with plain xarray.

Same as the command line:

    ssmpde generate navier-stokes --preset fno-nu1e-4 --samples 8 --time-stepping cfl --out ns.nc
    ssmpde generate darcy --samples 64 --resolution 29 --out darcy.nc

Run: python examples/generate_datasets.py --out examples_output [--tiny]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ssmpde.data import describe
from ssmpde.generation import generate


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples_output"))
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sizes = dict(resolution=64, simulation_resolution=128, final_time=10.0)
    if args.tiny:
        sizes = dict(resolution=16, simulation_resolution=32, final_time=2.0)
    # Vorticity on the 2D torus with FNO's forcing; CFL time stepping (RK3/CN) is far faster
    # than the FNO scheme's fixed Δt and records its choice in the file's attributes.
    ns = generate("navier-stokes", num_samples=4, seed=0, out=args.out / "ns.nc",
                  preset="fno-nu1e-4", time_stepping="cfl", overwrite=True,
                  progress=not args.tiny, **sizes)
    # Darcy flow: coefficient a (two values on a thresholded random field) -> pressure u.
    darcy = generate("darcy", num_samples=16, seed=0, out=args.out / "darcy.nc",
                     resolution=9 if args.tiny else 29,
                     simulation_resolution=17 if args.tiny else 57, overwrite=True,
                     progress=not args.tiny)
    print(describe(ns))
    print(describe(darcy))
    # Everything is plain xarray from here: e.g. enstrophy of each sample over time.
    enstrophy = (ns.vorticity ** 2).mean(("y", "x"))
    print(enstrophy.round(4).to_pandas() if hasattr(enstrophy, "to_pandas") else enstrophy)
    return {"ns": args.out / "ns.nc", "darcy": args.out / "darcy.nc",
            "enstrophy": enstrophy.values}


if __name__ == "__main__":
    main()
