"""Navier–Stokes step: ssmpde (pyFFTW + numba, batched) against plain NumPy, in one run.

Both sides integrate the same faithful FNO scheme from the same initial vorticity at 256²
for a batch of 8 samples; the script first checks that they agree to round-off, then times
them and reports the ratio, and the wall time per ν = 1e-5, T = 20 sample (faithful: the
measured time per step times 200 000 steps; CFL mode: measured over ``--cfl-time`` units of
simulated time and scaled to T = 20).

    python -m benchmarks.bench_navier_stokes      # writes benchmarks/results/navier_stokes.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, header, interleaved, seconds, table_row, when, write
from ssmpde.core import relative_l2
from ssmpde.solvers.navier_stokes import NavierStokes2D, forcing_field, reference_step
from ssmpde.solvers.random_fields import PeriodicGRF, sample_rng


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="faithful steps per timing")
    parser.add_argument("--repeats", type=int, default=7, help="alternating timing pairs")
    parser.add_argument("--cfl-time", type=float, default=1.0,
                        help="simulated time measured in CFL mode")
    parser.add_argument("--out", type=Path, default=RESULTS / "navier_stokes.json")
    args = parser.parse_args(argv)
    n, batch, steps, nu, dt_step = args.resolution, args.batch, args.steps, 1e-5, 1e-4

    grf = PeriodicGRF(n, alpha=2.5, tau=7.0)
    w0 = grf.sample_batch([sample_rng(0, i) for i in range(batch)])
    f_hat = np.fft.rfft2(forcing_field("fno", n))

    ours = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=nu,
                          forcing="fno", final_time=steps * dt_step,
                          record_interval=steps * dt_step, time_step=dt_step)
    ours.simulate(w0[:, None], 1)  # compile the kernels, make the plans

    def run_ours():
        return ours.simulate(w0[:, None], 1)[:, -1, 0]

    def run_numpy():
        w_hat = np.fft.rfft2(w0)
        for _ in range(steps):
            w_hat = reference_step(w_hat, f_hat, nu, dt_step)
        return np.fft.irfft2(w_hat, s=(n, n))

    difference = float(np.max(np.abs(run_ours() - run_numpy())) / np.max(np.abs(w0)))
    timings = interleaved({"ours": run_ours, "numpy": run_numpy}, repeats=args.repeats)
    ratios = timings.ratios("numpy", "ours")
    median = timings.medians()
    t_ours, t_numpy = median["ours"] / steps, median["numpy"] / steps

    fast = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=nu, forcing="fno",
                          final_time=args.cfl_time, record_interval=args.cfl_time,
                          time_stepping="cfl")
    fast.simulate(w0[:, None], 1)
    t_cfl = seconds(lambda: fast.simulate(w0[:, None], 1))[0] / args.cfl_time
    faithful_end = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=nu,
                                  forcing="fno", final_time=args.cfl_time,
                                  record_interval=args.cfl_time)
    elapsed, reference_end = seconds(lambda: faithful_end.simulate(w0[:, None], 1)[:, -1, 0])
    t_faithful_measured = elapsed / args.cfl_time
    cfl_end = fast.simulate(w0[:, None], 1)[:, -1, 0]
    # the whole batch as one sample: one error over every trajectory
    cfl_error = float(relative_l2(cfl_end[None], reference_end[None])[0])

    per_sample = 20.0 / dt_step * t_ours / batch
    result = {
        **header("navier_stokes_faithful_step"),
        "resolution": n, "batch": batch, "viscosity": nu, "time_step": dt_step,
        "max_abs_difference_relative": difference,
        "seconds_per_step": {"ssmpde": t_ours, "numpy_reference": t_numpy},
        "speedup_vs_numpy": float(np.median(ratios)),
        "speedup_vs_numpy_all_pairs": ratios.round(3).tolist(),
        "repeats": args.repeats,
        "seconds_per_sample_T20": {
            "faithful_ssmpde": per_sample,
            "faithful_numpy_reference": 20.0 / dt_step * t_numpy / batch,
            "faithful_ssmpde_measured_over_cfl_time": 20.0 * t_faithful_measured / batch,
            "cfl_ssmpde": 20.0 * t_cfl / batch,
        },
        "cfl_mode_relative_l2_vs_faithful_at_cfl_time": cfl_error,
        "cfl_time": args.cfl_time,
    }
    write(result, args.out)

    print(f"Navier-Stokes faithful step, {n}² x batch {batch}, ν = {nu:g}, Δt = {dt_step:g}")
    print(f"  agreement ours vs NumPy after {steps} steps: max |Δω| / max|ω0| = {difference:.1e}")
    print("| implementation | ms / step (batch) | ms / sample-step | speed-up |")
    print("|---|---|---|---|")
    print(f"| NumPy reference (numpy.fft) | {1e3 * t_numpy:.1f} | {1e3 * t_numpy / batch:.2f} | 1.0x |")
    print(f"| ssmpde (pyFFTW + numba) | {1e3 * t_ours:.1f} | {1e3 * t_ours / batch:.2f} | "
          f"{np.median(ratios):.1f}x |")
    print(f"  (medians of {args.repeats} alternating pairs; per-pair speed-ups "
          f"{np.min(ratios):.1f}x to {np.max(ratios):.1f}x)")
    print(f"Wall time per ν=1e-5, T=20 sample: faithful {per_sample / 60:.1f} min "
          f"(NumPy {20.0 / dt_step * t_numpy / batch / 60:.1f} min); CFL mode "
          f"{20.0 * t_cfl / batch / 60:.2f} min (rel. L2 vs faithful at t={args.cfl_time:g}: "
          f"{cfl_error:.1e})")
    return result


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table."""
    s = result["seconds_per_step"]
    return [table_row(f"Navier–Stokes faithful step, {result['resolution']}², batch "
                      f"{result['batch']}", f"{s['ssmpde'] * 1e3:.1f} ms",
                      f"{s['numpy_reference'] * 1e3:.1f} ms (plain NumPy, same scheme)",
                      f"**{result['speedup_vs_numpy']:.1f}x**", when(result))]


if __name__ == "__main__":
    main()
