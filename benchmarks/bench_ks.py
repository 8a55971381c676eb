"""Kuramoto–Sivashinsky: ssmpde's ETDRK4 against SciPy Radau (how LPSDA made the published
data), side by side in one run.

1. Radau: ``solve_ivp(method="Radau", atol=rtol=1e-9)`` on a NumPy pseudospectral right-hand
   side u_t = −(u²/2)_x − u_xx − ν u_xxxx (no Jacobian given, as LPSDA's generator), against
   ssmpde with ``dealias=False`` (the same spatial discretisation: real FFTs, the Nyquist
   mode's derivative zeroed, no 2/3 rule). Preset ``lpsda``: L = 64, N = 512, ν = 0.1, T = 5,
   frames every 0.1 (``t_eval`` for Radau). Both are measured against ssmpde ETDRK4 at
   h = 1e-4 (relative L2 at T); ssmpde's step is swept, and the speed-up is quoted at the
   fastest step whose error is at or below Radau's. Radau is timed on ``--radau-batch``
   trajectories one at a time, ssmpde on a batch of ``--batch``; time per trajectory is the
   batch time over the batch size.
The comparison with Exponax (and torch-cfd) is ``benchmarks/bench_peers.py``: one pinned core,
per step at every shape, float64 and float32.

    python -m benchmarks.bench_ks            # writes benchmarks/results/ks.json
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, header, interleaved, seconds, table_row, when, write
from ssmpde.core import relative_l2
from ssmpde.solvers.kuramoto_sivashinsky import KuramotoSivashinsky


def solver(n: int, final_time: float, time_step: float, *, dealias: bool,
           record_interval: float | None = None, viscosity: float = 0.1) -> KuramotoSivashinsky:
    config = dict(KuramotoSivashinsky.PRESETS["lpsda"])
    config.update(simulation_resolution=n, resolution=n, final_time=final_time,
                  time_step=time_step, dealias=dealias, viscosity=viscosity,
                  record_interval=record_interval or config["record_interval"])
    return KuramotoSivashinsky(**config)


def radau_rhs(n: int, length: float, nu: float):
    """u_t = −(u²/2)_x − u_xx − ν u_xxxx with numpy real FFTs (Nyquist derivative zeroed, no
    dealiasing): the spatial discretisation of ssmpde with ``dealias=False``."""
    k = 2 * np.pi / length * np.fft.rfftfreq(n, 1.0 / n)
    k[-1] = 0.0
    linear = k ** 2 - nu * k ** 4
    flux = -0.5j * k

    def rhs(t, u):
        return np.fft.irfft(linear * np.fft.rfft(u) + flux * np.fft.rfft(u * u), n)

    return rhs


def radau_part(args, u0: np.ndarray) -> dict:
    from scipy.integrate import solve_ivp

    n, T, nu, length = args.resolution, args.final_time, args.viscosity, 64.0
    frames = round(T / 0.1)
    t_eval = np.linspace(0.0, T, frames + 1)
    rhs = radau_rhs(n, length, nu)
    nr = args.radau_batch

    # reference: ssmpde ETDRK4 at a tiny step (and at twice it, for its own error)
    ref_ks = solver(n, T, args.reference_step, dealias=False)
    t_ref, reference = seconds(lambda: ref_ks.simulate(u0[:nr], frames)[:, -1, 0])
    half = solver(n, T, 2 * args.reference_step, dealias=False)
    reference_self_error = float(relative_l2(half.simulate(u0[:nr], frames)[:, -1, 0],
                                             reference).max())

    radau_times, radau_ends, radau_stats = [], [], []
    for i in range(nr):
        elapsed, sol = seconds(lambda i=i: solve_ivp(rhs, (0.0, T), u0[i, 0], method="Radau",
                                                     t_eval=t_eval, atol=args.radau_tol,
                                                     rtol=args.radau_tol))
        if not sol.success:
            raise RuntimeError(f"Radau failed: {sol.message}")
        radau_times.append(elapsed)
        radau_ends.append(sol.y[:, -1])
        radau_stats.append({"nfev": int(sol.nfev), "njev": int(sol.njev), "nlu": int(sol.nlu)})
    radau_error = relative_l2(np.array(radau_ends), reference)
    radau_per_traj = float(np.mean(radau_times))

    sweep = []
    for h in args.steps:
        ks = solver(n, T, h, dealias=False)
        ks.simulate(u0[:1], 1)  # compile kernels, plan FFTs
        timings = interleaved({"ssmpde": lambda ks=ks: ks.simulate(u0, frames)},
                              repeats=args.sweep_repeats)
        out = timings.results["ssmpde"]
        error = relative_l2(out[:nr, -1, 0], reference)
        sweep.append({"time_step": h,
                      "seconds_per_trajectory": timings.medians()["ssmpde"] / len(u0),
                      "rel_l2_error_max": float(error.max()),
                      "rel_l2_error": error.tolist()})
    good = [row for row in sweep if row["rel_l2_error_max"] <= radau_error.max()]
    chosen = min(good, key=lambda row: row["seconds_per_trajectory"]) if good else None
    preset = next((row for row in sweep if abs(row["time_step"] - 0.01) < 1e-12), None)
    return {
        "resolution": n, "domain_length": length, "viscosity": nu, "final_time": T,
        "record_interval": 0.1, "ssmpde_dealias": False, "radau_tol": args.radau_tol,
        "reference": {"method": "ssmpde ETDRK4, dealias=False", "time_step": args.reference_step,
                      "rel_l2_vs_twice_the_step": reference_self_error,
                      "seconds": t_ref},
        "radau": {"trajectories": nr, "seconds_per_trajectory": radau_per_traj,
                  "seconds": radau_times, "rel_l2_error": radau_error.tolist(),
                  "rel_l2_error_max": float(radau_error.max()), "stats": radau_stats},
        "ssmpde_batch": len(u0),
        "ssmpde_sweep": sweep,
        "chosen_time_step": chosen and chosen["time_step"],
        "speedup_at_equal_or_better_error": chosen and radau_per_traj
        / chosen["seconds_per_trajectory"],
        "speedup_at_preset_step_0.01": preset and radau_per_traj
        / preset["seconds_per_trajectory"],
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", type=int, default=512)
    parser.add_argument("--final-time", type=float, default=5.0)
    parser.add_argument("--viscosity", type=float, default=0.1)
    parser.add_argument("--batch", type=int, default=16, help="ssmpde batch vs Radau")
    parser.add_argument("--radau-batch", type=int, default=2, help="trajectories Radau solves")
    parser.add_argument("--radau-tol", type=float, default=1e-9)
    parser.add_argument("--reference-step", type=float, default=1e-4)
    parser.add_argument("--steps", type=float, nargs="+",
                        default=[0.02, 0.01, 0.005, 0.002, 0.001, 0.0005],
                        help="ssmpde time steps swept (each divides 0.1)")
    parser.add_argument("--sweep-repeats", type=int, default=3, help="timings per swept step")
    parser.add_argument("--out", type=Path, default=RESULTS / "ks.json")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()[0]
    ks0 = solver(args.resolution, args.final_time, 0.01, dealias=False)
    u0 = ks0.initial_condition(0, range(max(args.batch, args.radau_batch)))
    radau = radau_part(args, u0)
    result = {**header("kuramoto_sivashinsky"), "preset": "lpsda", "initial_seed": 0,
              "load_average_1min_before_after": [load_before, os.getloadavg()[0]],
              "radau_comparison": radau}
    write(result, args.out)

    r = radau
    print(f"Kuramoto-Sivashinsky, L = 64, N = {r['resolution']}, nu = {r['viscosity']:g}, "
          f"T = {r['final_time']:g} (lpsda law, seed 0); load average "
          f"{result['load_average_1min_before_after'][0]:.1f} -> "
          f"{result['load_average_1min_before_after'][1]:.1f} on {os.cpu_count()} CPUs")
    print(f"1. vs SciPy Radau (atol = rtol = {r['radau_tol']:g}, LPSDA's method), no dealiasing; "
          f"reference ETDRK4 h = {args.reference_step:g} (its own error "
          f"{r['reference']['rel_l2_vs_twice_the_step']:.1e})")
    print("| method | s / trajectory | rel. L2 at T | speed-up |")
    print("|---|---|---|---|")
    print(f"| Radau ({r['radau']['trajectories']} traj.) | "
          f"{r['radau']['seconds_per_trajectory']:.2f} | {r['radau']['rel_l2_error_max']:.1e} "
          "| 1x |")
    for row in r["ssmpde_sweep"]:
        print(f"| ssmpde h = {row['time_step']:g} (batch {r['ssmpde_batch']}) | "
              f"{row['seconds_per_trajectory']:.4f} | {row['rel_l2_error_max']:.1e} | "
              f"{r['radau']['seconds_per_trajectory'] / row['seconds_per_trajectory']:.0f}x |")
    if r["chosen_time_step"] is not None:
        print(f"  at equal-or-better error (h = {r['chosen_time_step']:g}): "
              f"{r['speedup_at_equal_or_better_error']:.0f}x faster than Radau")
    else:
        print("  no swept ssmpde step reached Radau's error")
    return result


def rows(result: dict) -> list[str]:
    """This benchmark's row of the results table: Radau at equal or better error."""
    lines = []
    r = result["radau_comparison"]
    chosen = next((row for row in r["ssmpde_sweep"]
                   if row["time_step"] == r["chosen_time_step"]), None)
    if chosen:
        lines.append(table_row(
            f"KS lpsda trajectory (N {r['resolution']}, T {r['final_time']:g}) at equal-or-better"
            f" error, rel. L2 {chosen['rel_l2_error_max']:.0e} vs "
            f"{r['radau']['rel_l2_error_max']:.0e}",
            f"{chosen['seconds_per_trajectory']:.2f} s (ETDRK4, h = {chosen['time_step']:g})",
            f"{r['radau']['seconds_per_trajectory']:.1f} s (SciPy Radau, tol "
            f"{r['radau_tol']:g}, as LPSDA)",
            f"**{r['speedup_at_equal_or_better_error']:.0f}x**", when(result)))
    return lines


if __name__ == "__main__":
    main()
