"""GeoMaNO inference step on the CPU: this version against an older one, eager and compiled.

One rollout step (forward, no gradients, float32, one thread) of the Navier–Stokes preset
(64², 10 frames in, width 256, depth 8, 16×16 tokens) at batch 4, and of the 1D preset on
Kuramoto–Sivashinsky data (128 points, a window of 4 frames as in
``benchmarks/bench_ks_learning.py``: width 64, depth 8, 64 tokens) at batch 16. Side by side
in one process, alternating rounds:

* ``baseline``: the package at ``--baseline`` (a git revision, extracted with ``git archive``
  and imported under another name from its own folder, the interpreter's module search
  path untouched), same weights and inputs;
* ``eager``: this checkout;
* ``compiled``: this checkout through :func:`ssmpde.surrogates.compiled.compile_model`
  (inductor), with ``--compile``.

Timed by the process's CPU time (``--clock wall`` for the wall clock): on one thread that is
the wall time of a quiet machine, and other jobs disturb it far less. Reported: medians per
step, the median of the per-round ratios, the largest relative L2
difference of each output from the baseline's (or from eager), the load average before and
after, and with ``--profile`` the operators that take the most time (torch.profiler).

    python -m benchmarks.bench_geomano_speed --baseline 67fb60f --compile --profile
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    RESULTS,
    cpu_seconds,
    header,
    import_revision,
    interleaved,
    seconds,
    table_row,
    when,
    write,
)

#: case: (build arguments, input shape).
CASES = {
    "navier-stokes": (dict(preset="navier-stokes"), (4, 10, 64, 64)),
    "ks": (dict(preset="1d", grid=(128,), in_channels=4), (16, 4, 128)),
}
TINY = {
    "navier-stokes": (dict(preset="navier-stokes", grid=(16, 16), latent_grid=(4, 4),
                           width=16, depth=1), (2, 10, 16, 16)),
    "ks": (dict(preset="1d", grid=(32,), latent_grid=(8,), in_channels=4, width=16,
                depth=1), (2, 4, 32)),
}


def profile(call, rounds: int = 3, top: int = 8) -> list[dict]:
    """The ``top`` operators by self CPU time over ``rounds`` calls: name, ms per call, share."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(rounds):
            call()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    return [{"name": e.key, "ms_per_step": e.self_cpu_time_total / 1e3 / rounds,
             "share": e.self_cpu_time_total / total} for e in events[:top]]


def difference(a: torch.Tensor, b: torch.Tensor) -> float:
    from ssmpde.core import relative_l2

    return float(relative_l2(a, b).max())


def run_case(name, build_args, shape, *, baseline, compile_backend, repeats, want_profile,
             clock):
    from ssmpde.surrogates import build_model, parameter_count

    torch.manual_seed(0)
    model = build_model("geomano", **build_args).eval()
    x = torch.randn(*shape)
    models = {"eager": model}
    if baseline is not None:
        old = baseline.build_model("geomano", **build_args).eval()
        old.load_state_dict(model.state_dict())
        models = {"baseline": old, **models}
    compile_status = None
    if compile_backend:
        from ssmpde.surrogates.compiled import compile_model

        compiled = compile_model(model, (x,), backend=compile_backend)
        compile_status = "compiled" if compiled is not model else "refused"
        if compiled is not model:
            models["compiled"] = compiled
    calls = {key: (lambda m=m: m(x)) for key, m in models.items()}
    with torch.no_grad():
        outputs = {key: call() for key, call in calls.items()}
        reference = outputs.get("baseline", outputs["eager"])
        load_before = os.getloadavg()
        timings = interleaved(calls, repeats=repeats, warmup=1, threads=1,
                              clock=cpu_seconds if clock == "cpu" else seconds)
        load_after = os.getloadavg()
        profiles = {key: profile(call) for key, call in calls.items()} if want_profile else {}
    medians = timings.medians()
    result = {"build": {k: list(v) if isinstance(v, tuple) else v for k, v in build_args.items()},
              "batch": shape[0], "input_shape": list(shape),
              "parameters": parameter_count(model),
              "ms_per_step": {key: 1e3 * s for key, s in medians.items()},
              "difference_from_" + ("baseline" if baseline else "eager"):
                  {key: difference(out, reference) for key, out in outputs.items()},
              "load_average": {"before": list(load_before), "after": list(load_after)},
              "compile": compile_status}
    if baseline is not None:
        for key in models:
            if key != "baseline":
                result[f"speedup_{key}"] = float(np.median(timings.ratios("baseline", key)))
    if "compiled" in models:
        result["speedup_compiled_over_eager"] = float(np.median(timings.ratios("eager",
                                                                               "compiled")))
    if profiles:
        result["profile"] = profiles
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="git revision to compare against (e.g. a commit)")
    parser.add_argument("--compile", action="store_true",
                        help="also time the model compiled by compile_model (inductor)")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                        help="time by the process's CPU time (default) or the wall clock")
    parser.add_argument("--profile", action="store_true", help="top operators per variant")
    parser.add_argument("--tiny", action="store_true", help="small models (to test the script)")
    parser.add_argument("--out", type=Path, default=RESULTS / "geomano_speed.json")
    args = parser.parse_args(argv)

    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            baseline = import_revision(args.baseline, Path(tmp)) if args.baseline else None
            cases = TINY if args.tiny else CASES
            result = header("geomano_speed")
            result.update({"baseline": args.baseline, "threads": 1, "dtype": "float32",
                           "clock": args.clock,
                           "torch": torch.__version__, "cases": {}})
            for name in args.cases:
                build_args, shape = cases[name]
                result["cases"][name] = run_case(
                    name, build_args, shape, baseline=baseline,
                    compile_backend=args.backend if args.compile else None,
                    repeats=args.repeats, want_profile=args.profile, clock=args.clock)
                report(name, result["cases"][name])
    finally:
        torch.set_num_threads(threads)
    write(result, args.out)
    return result


def report(name: str, case: dict) -> None:
    times = ", ".join(f"{key} {ms:.1f} ms" for key, ms in case["ms_per_step"].items())
    speedups = ", ".join(f"{key[8:]} {value:.2f}x" for key, value in case.items()
                         if key.startswith("speedup_"))
    diff = next(v for k, v in case.items() if k.startswith("difference_from_"))
    load = case["load_average"]["before"][0], case["load_average"]["after"][0]
    print(f"GeoMaNO {name}, batch {case['batch']}: {times}; {speedups or 'no baseline'}; "
          f"largest rel. difference {max(diff.values()):.1e}; load {load[0]:.1f} -> "
          f"{load[1]:.1f}")
    for key, entries in case.get("profile", {}).items():
        top = "; ".join(f"{e['name']} {e['ms_per_step']:.1f} ms" for e in entries[:6])
        print(f"  {key}: {top}")


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table."""
    out = []
    for name, case in result["cases"].items():
        ms = case["ms_per_step"]
        if "baseline" not in ms:
            continue
        out.append(table_row(f"GeoMaNO {name} inference step, batch {case['batch']}, 1 thread",
                             f"{ms['eager']:.1f} ms"
                             + (f" ({ms['compiled']:.1f} ms compiled)" if "compiled" in ms
                                else ""),
                             f"{ms['baseline']:.1f} ms ({result['baseline']})",
                             f"**{case['speedup_eager']:.2f}x**", when(result)))
    return out


if __name__ == "__main__":
    main()
