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

Kolmogorov flow (``--problem kolmogorov``; see :data:`KOLMOGOROV_CONFIGURATIONS`): the first
correctors learn 128² data (frames strided onto 64²); the ``-from256`` ones learn the 256²
reference itself, its frames restricted spectrally onto 64² (simulated, 577 s for 8
trajectories of 40 time units) and from there onto 32² (derived)::

    taskset -c 1 env SSMPDE_THREADS=1 python -m benchmarks.train_correctors \
        --problem kolmogorov --out runs/k256 --samples 8 --final-time 40 --num-test 1 \
        --only conv-velocity-source-unrolled64-8x-from256 --epochs 12

(the committed 8x corrector, ``benchmarks/correctors/``; its twelve epochs took 3,862 wall
seconds on a core shared with two or three other jobs, the last three (unrolled 32, 32, 64
intervals) three quarters of it. The development runs stopped at ``--budget 1000`` wall
seconds, before the longest unrolls.)

Euler (``--problem euler-kh`` or ``euler-ce-rm``; the ``euler-*`` problems of
``bench_correction``): trajectories simulated on the reference's 256² (T = 1, record 0.1)
and stored on the coarse grids, 128² (2x) and 64² (4x); the coarse solver is the generating
one coarsened ``Sx1`` (same CFL number). Configurations, all one step at a time on the cached
coarse predictions unless named on-policy:

* ``conv-flux-{2x,4x}``: the local convolutional corrector in flux form (conservative);
* ``conv-after-2x``: the same model, a plain post-step correction;
* ``conv-flux-onpolicy-2x``: flux form, trained on the corrected rollout's own states
  (horizon 4, regenerated every 2 epochs; no gradient through the numba step);
* ``lean-fno-flux-2x``: the global Fourier corrector in flux form;
* ``ssno-flux-2x``: an SSM (SS-NO, narrow as for KS) in flux form;
* ``conv-flux-onpolicy-4x``, ``ssno-flux-4x``: as above on the 4x coarser grid.

    taskset -c 0 env SSMPDE_THREADS=1 python -m benchmarks.train_correctors --out runs/correctors \
        --budget 240
    python -m benchmarks.bench_correction --correctors runs/correctors
    taskset -c 0 env SSMPDE_THREADS=1 python -m benchmarks.train_correctors \
        --problem euler-kh --out runs/euler --epochs 30 --samples 32 --final-time 1

Each run directory holds what ``bench_correction --correctors`` needs to evaluate it again
without training: ``config.json``, ``weights.safetensors`` and ``upfront.json`` (the data
generation and training seconds of its break-even); a folder of such directories, committed,
is re-evaluated whole (``--correctors FOLDER``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ssmpde.generation import generate
from ssmpde.surrogates.train import TrainConfig, train


def unrolled(horizon: int, curriculum: tuple[int, ...] | None = None,
             correction_mode: str | None = "source") -> dict:
    """Training options of a corrector unrolled through the differentiable coarse step over
    ``horizon`` intervals, the curriculum doubling from 1 unless given."""
    if curriculum is None:
        curriculum = tuple(2 ** k for k in range(horizon.bit_length()))
    options = dict(horizon=horizon, mode="autoregressive", pushforward=False,
                   curriculum=curriculum)
    return options if correction_mode is None else dict(options,
                                                        correction_mode=correction_mode)


#: SS-NO's earlier layout (layout="ssmpde"), which the recorded results were measured with.
_SSNO_NARROW = {"layout": "ssmpde", "width": 16, "lifting": 32, "depth": 2, "state_size": 16,
                "memory": False, "window": 1}
#: name -> (coarse grid, model, preset, model options, training options)
CONFIGURATIONS = {
    "conv-source-unrolled-4x": (128, "conv-corrector", "ks", {}, unrolled(8, (1, 4, 8))),
    "conv-after-onestep-4x": (128, "conv-corrector", "ks", {}, dict()),
    "conv-source-onpolicy-4x": (128, "conv-corrector", "ks", {},
                                dict(correction_mode="source", horizon=8,
                                     mode="autoregressive", on_policy=1)),
    "lean-fno-source-unrolled-4x": (128, "lean-fno", "ks-corrector", {"modes": [65]},
                                    unrolled(8, (1, 4, 8))),
    "ssno-source-unrolled-4x": (128, "ssno", "ks", _SSNO_NARROW, unrolled(8, (1, 4, 8))),
    "conv-source-unrolled-8x": (64, "conv-corrector", "ks", {}, unrolled(8, (1, 4, 8))),
}
#: Euler: name -> (coarse grid, model, preset, model options, training options)
EULER_CONFIGURATIONS = {
    "conv-flux-2x": (128, "conv-corrector", "kolmogorov", {}, dict(correction_mode="flux")),
    "conv-after-2x": (128, "conv-corrector", "kolmogorov", {}, dict()),
    "conv-flux-onpolicy-2x": (128, "conv-corrector", "kolmogorov", {},
                              dict(correction_mode="flux", horizon=4, mode="autoregressive",
                                   on_policy=2)),
    "lean-fno-flux-2x": (128, "lean-fno", None, {"modes": [16, 16], "width": 16,
                                                  "depth": 2},
                         dict(correction_mode="flux")),
    "ssno-flux-2x": (128, "ssno", "torus", _SSNO_NARROW, dict(correction_mode="flux")),
    "conv-flux-4x": (64, "conv-corrector", "kolmogorov", {}, dict(correction_mode="flux")),
    "conv-flux-onpolicy-4x": (64, "conv-corrector", "kolmogorov", {},
                              dict(correction_mode="flux", horizon=4, mode="autoregressive",
                                   on_policy=2)),
    "ssno-flux-4x": (64, "ssno", "torus", _SSNO_NARROW, dict(correction_mode="flux")),
}
_GRID32 = {"grid": [32, 32]}
_VELOCITY32 = {"grid": [32, 32], "velocity": True}
#: Kolmogorov flow: name -> (coarse grid, model, preset, model options, training options);
#: the data are simulated on 128² (h = 0.0025) after a spin-up of 50 time units, the
#: corrected solver is 64² with h = 0.025 (coarsening 2x10): 4x coarser than the benchmark's
#: 256² reference, and it learns what the 128² solver (2x finer than itself) does. A grid
#: ``(stored, simulated[, seeds])`` names data simulated on another grid (and seeds).
KOLMOGOROV_CONFIGURATIONS = {
    "conv-after-4x": (64, "conv-corrector", "kolmogorov", {}, dict()),
    "conv-source-unrolled-4x": (64, "conv-corrector", "kolmogorov", {}, unrolled(4)),
    "conv-source-unrolled8-4x": (64, "conv-corrector", "kolmogorov", {}, unrolled(8)),
    "lean-fno-after-4x": (64, "lean-fno", "ns-corrector", {"modes": [32, 32]}, dict()),
    "ssno-after-4x": (64, "ssno", "torus", _SSNO_NARROW, dict()),
    # learning the reference itself: data simulated on 256² and restricted spectrally (the
    # state the coarse pseudospectral solver carries), corrected solver 4x10 (64², h 0.025)
    # or 8x20 (32², h 0.05); longer unrolled curricula
    "conv-source-unrolled16-4x-from256": ((64, 256), "conv-corrector", "kolmogorov", {},
                                          unrolled(16)),
    "conv-source-unrolled16-8x-from256": ((32, 256), "conv-corrector", "kolmogorov",
                                          _GRID32, unrolled(16)),
    "conv-source-unrolled32-8x-from256": ((32, 256), "conv-corrector", "kolmogorov",
                                          _GRID32, unrolled(32)),
    "conv-velocity-source-unrolled16-8x-from256": ((32, 256), "conv-corrector", "kolmogorov",
                                                   _VELOCITY32, unrolled(16)),
    "conv-velocity-source-unrolled32-8x-from256": ((32, 256), "conv-corrector", "kolmogorov",
                                                   _VELOCITY32, unrolled(32)),
    "conv-velocity-source-unrolled64-8x-from256": ((32, 256), "conv-corrector", "kolmogorov",
                                                   _VELOCITY32, unrolled(64)),
    "conv-velocity-source-unrolled64b-8x-from256": ((32, 256), "conv-corrector", "kolmogorov",
                                                    _VELOCITY32,
                                                    unrolled(64, (1, 4, 16, 64))),
    # twice the trajectories (seeds 0 and 1, 16 of 40 time units)
    "conv-velocity-source-unrolled32-8x-from256x2": ((32, 256, 2), "conv-corrector",
                                                     "kolmogorov", _VELOCITY32, unrolled(32)),
    "conv-velocity-source-unrolled16-4x-from256": ((64, 256), "conv-corrector", "kolmogorov",
                                                   {"velocity": True}, unrolled(16)),
    "conv-after-unrolled16-8x-from256": ((32, 256), "conv-corrector", "kolmogorov",
                                         _GRID32, unrolled(16, correction_mode=None)),
    "ssno-source-unrolled16-8x-from256": ((32, 256), "ssno", "torus",
                                          {**_SSNO_NARROW, **_GRID32}, unrolled(16)),
}
#: bench_correction's Euler problems: their presets and reference grid
EULER_PROBLEMS = {"euler-kh": "kelvin-helmholtz", "euler-ce-rm": "ce-rm"}
EULER_REFERENCE = 256


def coarsened_dataset(source: Path, path: Path, grid: int) -> None:
    """``source``'s spectrally down-sampled Navier–Stokes frames restricted spectrally
    further, to ``grid``² (the same as simulating them again with that stored grid)."""
    import xarray as xr

    from ssmpde.data import save
    from ssmpde.solvers.spectral import spectral_resample

    with xr.open_dataset(source) as ds:
        ds = ds.load()
    config = json.loads(ds.attrs["ssmpde_config"])
    if config["solver"].get("downsampling") != "spectral":
        raise ValueError(f"{source} is not spectrally down-sampled")
    step = ds.sizes["x"] // grid
    coarse = ds.isel(y=slice(None, None, step), x=slice(None, None, step))
    # the forcing is a formula evaluated at the stored nodes (kept strided, as generated)
    coarse["vorticity"] = coarse["vorticity"].copy(
        data=spectral_resample(ds["vorticity"].values, grid))
    config["solver"]["resolution"] = grid
    coarse.attrs["ssmpde_config"] = json.dumps(config)
    save(coarse, path)


def kolmogorov_256(grid: int, final_time: float) -> dict:
    """The generator options of Kolmogorov data that learn the 256² reference."""
    return dict(preset="kolmogorov-re1000", resolution=grid, simulation_resolution=256,
                time_step=0.0025, final_time=final_time, record_interval=0.1, spin_up=50.0,
                spin_up_resolution=128, downsampling="spectral", progress=False)


def concatenated_dataset(sources: list[Path], path: Path) -> None:
    """The trajectories of ``sources`` (the same configuration, other seeds) in one file,
    samples renumbered; the config is the first's with ``seeds`` listing them all."""
    import xarray as xr

    from ssmpde.data import save

    parts = []
    for source in sources:
        with xr.open_dataset(source) as ds:
            parts.append(ds.load())
    configs = [json.loads(ds.attrs["ssmpde_config"]) for ds in parts]
    if any(c["solver"] != configs[0]["solver"] for c in configs):
        raise ValueError(f"{sources} hold different configurations")
    joined = xr.concat(parts, dim="sample", combine_attrs="override")
    joined = joined.assign_coords(sample=joined["sample"].copy(
        data=list(range(joined.sizes["sample"]))))
    config = dict(configs[0], num_samples=joined.sizes["sample"],
                  seeds=[c["seed"] for c in configs])
    joined.attrs["ssmpde_config"] = json.dumps(config)
    save(joined, path)


def data(out: Path, grid: int, samples: int, final_time: float,
         problem: str = "ks", simulation: int | None = None,
         seeds: int = 1) -> tuple[Path, float]:
    """Trajectories simulated like bench_correction's reference, stored on ``grid``: KS
    (512 points, h = 0.0025), an Euler problem (256², its CFL number, record 0.1) or
    Kolmogorov flow (``simulation``² at h = 0.0025, record 0.1, after a spin-up of 50 on
    128²; 128² frames strided, 256² frames restricted spectrally; ``seeds`` > 1: that many
    seeds' ``samples`` trajectories each, in one file)."""
    tag = "" if simulation in (None, 128) else f"-from{simulation}"
    tag += "" if seeds == 1 else f"-x{seeds}"
    path = out / f"{problem}{grid}{tag}.nc"
    started = time.perf_counter()
    if path.exists():
        return path, time.perf_counter() - started
    if problem == "kolmogorov" and simulation == 256 and grid < 64:
        source, seconds = data(out, 64, samples, final_time, problem, simulation, seeds)
        started = time.perf_counter()  # the 64² data's seconds are counted once, in seconds
        coarsened_dataset(source, path, grid)
        return path, seconds + time.perf_counter() - started
    if problem == "kolmogorov" and simulation == 256 and seeds > 1:
        first, _ = data(out, grid, samples, final_time, problem, simulation)
        others = [out / f"{problem}{grid}-from256-seed{seed}.nc" for seed in range(1, seeds)]
        for seed, other in enumerate(others, start=1):
            if not other.exists():
                generate("navier-stokes", num_samples=samples, seed=seed, out=other,
                         **kolmogorov_256(grid, final_time)).close()
        concatenated_dataset([first, *others], path)
        return path, time.perf_counter() - started
    if problem == "kolmogorov" and simulation == 256:
        generate("navier-stokes", num_samples=samples, seed=0, out=path,
                 **kolmogorov_256(grid, final_time)).close()
    elif problem == "kolmogorov":
        generate("navier-stokes", num_samples=samples, seed=0, out=path,
                 preset="kolmogorov-re1000", resolution=grid, simulation_resolution=128,
                 time_step=0.0025, final_time=final_time, record_interval=0.1,
                 spin_up=50.0, progress=False).close()
    elif problem == "ks":
        generate("kuramoto-sivashinsky", num_samples=samples, seed=0, out=path,
                 preset="lpsda", resolution=grid, simulation_resolution=512,
                 time_step=0.0025, final_time=final_time, progress=False).close()
    else:
        generate("euler", num_samples=samples, seed=0, out=path,
                 preset=EULER_PROBLEMS[problem], resolution=grid,
                 simulation_resolution=EULER_REFERENCE, final_time=final_time,
                 record_interval=0.1, progress=False).close()
    return path, time.perf_counter() - started


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/correctors"))
    parser.add_argument("--budget", type=float,
                        help="wall seconds per corrector, a hard stop (default: none; the "
                             "epochs decide, so a run is the same whatever the load)")
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--final-time", type=float, default=20.0)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--problem", default="ks",
                        choices=["ks", "kolmogorov", *EULER_PROBLEMS])
    parser.add_argument("--only", nargs="+",
                        choices=sorted({*CONFIGURATIONS, *EULER_CONFIGURATIONS,
                                        *KOLMOGOROV_CONFIGURATIONS}))
    parser.add_argument("--num-test", type=int, default=4, help="held-out samples")
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args(argv)
    euler = args.problem.startswith("euler")
    configurations = (EULER_CONFIGURATIONS if euler else KOLMOGOROV_CONFIGURATIONS
                      if args.problem == "kolmogorov" else CONFIGURATIONS)
    unknown = sorted(set(args.only or ()) - set(configurations))
    if unknown:
        parser.error(f"{unknown} are not configurations of {args.problem}: choose from "
                     f"{sorted(configurations)}")
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name in args.only or configurations:
        grid, model, preset, options, extra = configurations[name]
        grid, simulation, seeds = (*grid, 1)[:3] if isinstance(grid, tuple) else (grid, None, 1)
        path, data_seconds = data(args.out, grid, args.samples, args.final_time,
                                  args.problem, simulation, seeds)
        saved = args.out / f"{path.name}.seconds"  # the first call's generation time
        if saved.exists():
            data_seconds = float(saved.read_text())
        else:
            saved.write_text(str(data_seconds))
        run = args.out / (name if args.problem == "ks" else f"{args.problem}-{name}")
        coarse = (f"{EULER_REFERENCE // grid}x1" if euler
                  else f"{(simulation or 128) // grid}x{640 // grid}"  # h = 1.6 / grid
                  if args.problem == "kolmogorov" else f"{512 // grid}x4")
        config = TrainConfig(epochs=args.epochs, batch_size=16 if args.problem == "ks" else 8,
                             lr=args.lr, window=1, num_test=args.num_test,
                             target="correction", coarse=coarse, schedule="cosine", **extra)
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
