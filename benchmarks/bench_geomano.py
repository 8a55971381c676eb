"""GeoMaNO training step on the CPU: the fast CPU scans against the reference scans.

Side by side in one run: forward + backward of the Darcy preset (85×85, 2D scan, correction
0011, width 64, depth 8, state 16, 17×17 latent tokens) on a batch of 4, float32, with
``scan_backend="cpu"`` and ``scan_backend="reference"`` (the plain-loop oracle), same weights
and inputs, alternating rounds; medians and the median of the per-round ratios. Also the
largest difference between the two models' outputs, relative to their largest value.

    python -m benchmarks.bench_geomano            # writes benchmarks/results/geomano.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import RESULTS, header, interleaved, table_row, when, write


def step(model, x, y):
    out = model(x)
    loss = torch.linalg.vector_norm(out - y) / torch.linalg.vector_norm(y)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return float(loss.detach())


def main(argv=None) -> dict:
    from ssmpde.surrogates import build_model, parameter_count

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The reference scans take minutes per step: one round by default.
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--out", type=Path, default=RESULTS / "geomano.json")
    parser.add_argument("--tiny", action="store_true",
                        help="a 9x9, width 8, one-layer model (to test this script)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    sizes = dict(grid=(9, 9), latent_grid=(3, 3), width=8, depth=1) if args.tiny else {}
    grid = sizes.get("grid", (85, 85))
    models = {backend: build_model("geomano", preset="darcy", scan_backend=backend, **sizes)
              for backend in ("cpu", "reference")}
    models["reference"].load_state_dict(models["cpu"].state_dict())
    x = torch.randn(args.batch_size, 1, *grid)
    y = torch.randn(args.batch_size, 1, *grid)
    with torch.no_grad():
        outputs = {name: model(x) for name, model in models.items()}  # also warms up
    difference = float((outputs["cpu"] - outputs["reference"]).abs().max()
                       / outputs["reference"].abs().max())
    timings = interleaved({name: lambda m=model: step(m, x, y) for name, model in models.items()},
                          repeats=args.repeats)
    median = timings.medians()
    ratios = timings.ratios("reference", "cpu")
    result = header("geomano_darcy_step")
    result.update({
        "config": {"preset": "darcy", **{k: list(v) if isinstance(v, tuple) else v
                                         for k, v in sizes.items()},
                   "batch": args.batch_size, "grid": list(grid),
                   "parameters": parameter_count(models["cpu"]), "dtype": "float32",
                   "threads": torch.get_num_threads()},
        "cpu_scan_seconds": median["cpu"],
        "reference_scan_seconds": median["reference"],
        "speedup": float(np.median(ratios)), "speedups": ratios.round(2).tolist(),
        "output_difference": difference,
    })
    print(f"GeoMaNO darcy preset, batch {args.batch_size} at {grid[0]}x{grid[1]}, forward + "
          f"backward (median of {args.repeats}): CPU scans {result['cpu_scan_seconds']:.2f} s, "
          f"reference scans {result['reference_scan_seconds']:.2f} s, "
          f"{result['speedup']:.0f}x; outputs agree to {difference:.1e} (max abs, relative)")
    write(result, args.out)
    return result


def rows(result: dict) -> list[str]:
    """This benchmark's row of the results table."""
    return [table_row("GeoMaNO darcy preset, train step, batch 4 at 85²",
                      f"{result['cpu_scan_seconds']:.2f} s (CPU scans)",
                      f"{result['reference_scan_seconds']:.0f} s (reference scans)",
                      f"**{result['speedup']:.0f}x**", when(result))]


if __name__ == "__main__":
    main()
