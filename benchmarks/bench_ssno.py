"""SS-NO's S4D by FFT against the loop recurrence: forward + backward of the KS preset.

The ``ks`` preset (128 points, window 4 with temporal memory, 4 blocks, width 64, 64 states),
batch 32, float32, one training step's forward and backward with ``s4d_backend="fft"`` and
``"reference"`` on the same weights and inputs, alternating, medians of ``--repeats`` rounds.
The two outputs are compared too (they compute the same function).

    python -m benchmarks.bench_ssno          # writes benchmarks/results/ssno.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    RESULTS,
    header,
    interleaved,
    model_configuration,
    table_row,
    when,
    write,
)


def step(model, x):
    """One forward + backward; the output, detached."""
    model.zero_grad(set_to_none=True)  # the previous round's gradients: no accumulation
    out = model(x)
    out.square().mean().backward()
    return out.detach()


def main(argv=None) -> dict:
    from ssmpde.surrogates import build_model, parameter_count

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="a small model (smoke test)")
    parser.add_argument("--out", type=Path, default=RESULTS / "ssno.json")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    small = dict(width=8, depth=2, state_size=4, memory_state_size=4,
                 grid=(32,)) if args.tiny else {}
    models = {backend: build_model("ssno", preset="ks", s4d_backend=backend, **small)
              for backend in ("fft", "reference")}
    models["reference"].load_state_dict(models["fft"].state_dict())
    config = models["fft"].config
    x = torch.randn(args.batch, config.window, config.in_channels, *config.grid)
    timings = interleaved({name: lambda m=model: step(m, x) for name, model in models.items()},
                          repeats=args.repeats, warmup=1)
    outputs = timings.results
    ratios = timings.ratios("reference", "fft")
    difference = float((outputs["fft"] - outputs["reference"]).abs().max()
                       / outputs["reference"].abs().max())
    result = header("ssno_s4d")
    result.update({
        "model": {"preset": "ks", "parameters": parameter_count(models["fft"]),
                  "batch": args.batch, "grid": list(config.grid), "window": config.window},
        "threads": torch.get_num_threads(),
        "seconds_per_step": timings.medians(),
        "speedup": float(np.median(ratios)), "speedups": ratios.round(2).tolist(),
        "max_relative_difference": difference})
    s = result["seconds_per_step"]
    print(f"SS-NO ks preset, batch {args.batch}, forward+backward: S4D by FFT "
          f"{s['fft'] * 1e3:.0f} ms, loop recurrence {s['reference'] * 1e3:.0f} ms, "
          f"{result['speedup']:.0f}x; outputs agree to {difference:.1e}")
    write(result, args.out)
    return result


def rows(result: dict) -> list[str]:
    """This benchmark's row of the results table (with the preset's layout at the result's
    date: :func:`benchmarks.common.model_configuration`)."""
    s, m = result["seconds_per_step"], result["model"]
    return [table_row(f"SS-NO {model_configuration('ssno', m['preset'], result)}, train step "
                      f"(fwd+bwd), batch {m['batch']} at "
                      f"{m['grid'][0]} points, window {m['window']}",
                      f"{s['fft'] * 1e3:.0f} ms (S4D by FFT)",
                      f"{s['reference']:.2f} s (loop recurrence)",
                      f"**{result['speedup']:.0f}x**", when(result))]


if __name__ == "__main__":
    main()
