"""Every surrogate model at every preset against this CPU's compute bound: the reference run.

For every registered model and each of its presets (``ssmpde models``), on the preset's grid
at batch 1, 4 and 16, one thread, float32 unless the row says otherwise:

* parameters;
* FLOPs, counted by ``torch.utils.flop_counter.FlopCounterMode`` with three additions:
  FFTs (2.5 N log2 N per real transform of N points, 5 N log2 N per complex one: the
  convention of FFTW's benchmarks), and the selective scans of
  ``torch.ops.ssmpde.selective_scan_{1d,2d}_cpu`` (9 B·D·L·N for one pass, as mamba-ssm's
  ``flops_selective_scan_fn`` counts it, plus B·D·L for D and for the gate; the 2D scan is
  two passes; a backward counts twice its forward). Element-wise work is not counted, so the
  counts are a floor of the arithmetic done. They are counted at batch 1 and scaled by the
  batch (every model here is linear in the batch);
* forward (inference, ``no_grad``) and forward + backward (a training step without the
  optimiser: the loss is the mean square of the output) wall times, medians of interleaved
  rounds (``benchmarks.common.interleaved``);
* the achieved rate (counted FLOPs over the time) and the ratio of the time to the **compute
  bound**: the matmul-class FLOPs (matrix products, convolutions, scans) at the machine's
  measured float32 matmul rate plus the FFT FLOPs at its measured FFT rate (1D and 2D
  measured separately), all measured in the same run (the roofline this CPU allows one
  thread; the fastest of its rounds). A ratio of 2 means twice the time the counted
  arithmetic needs at peak;
* the peak memory of each call: resident memory above the level before the call, sampled every
  millisecond in this process (an allocator that keeps freed memory can hide part of it);
* rows in bfloat16 (``torch.autocast``, as ``SurrogateStepper(precision="bfloat16")`` runs
  it) with the relative L2 of its output against float32; float16's error at batch 1 on each
  model's smallest preset (float16 has no fast path on most CPUs, up to 20x slower here: it
  is timed once, not in rounds);
* compiled rows (forward at batch 4) for one preset per model (``--compiled``) through
  ``ssmpde.surrogates.compiled.compile_model``, which refuses a compiled model whose output
  differs from eager (a refusal is reported as such);
* with ``--baseline REV``, the same model at git revision ``REV`` (imported side by side by
  :func:`benchmarks.common.import_revision`, the same weights and inputs): its forward and
  forward + backward in the same interleaved rounds, its ratio to the same compute bound
  (this checkout's FLOP count of the same function), the median of the per-round speedups
  and its output's relative L2 difference from this checkout's.

Times are the process's CPU time by default (``--clock cpu``): on one thread that is the
wall time of a quiet machine, and other jobs on a shared one disturb it far less than the
wall clock (``--clock wall``).

Budget: the full run took 268 s on 2 shared cores (load average about 2; 405 s at 3-5; 552 s
with ``--baseline``), with inductor's on-disk cache warm (a cold one adds 30-70 s per compiled
preset). Calls slower than ``--single-above`` seconds at their warm-up are timed in one round
instead of ``--repeats``; forward + backward is skipped where three times the forward exceeds
``--max-call`` seconds, and a whole batch where its forward, extrapolated from the previous
batch, exceeds ``--max-forward`` seconds (the biggest presets at batch 16; the JSON says what
was skipped and why). The machine's load average is recorded before and after.

    python -m benchmarks.bench_models            # writes benchmarks/results/models.json
    python -m benchmarks.bench_models --baseline 67fb60f   # with the before-state side by side
    python -m benchmarks.bench_models --quick    # two tiny presets, one round (smoke test)
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    RESULTS,
    cpu_seconds,
    fixed_threads,
    header,
    import_revision,
    interleaved,
    model_configuration,
    preset_layout,
    sampled,
    seconds,
    table_row,
    when,
    write,
)
from ssmpde.core import relative_l2

BATCHES = (1, 4, 16)
#: The preset of each model that also gets compiled rows (compiling takes 30-90 s each).
COMPILED = {"fno": "navier-stokes", "geomano": "navier-stokes", "lamo": "small",
            "lean-fno": "default", "mno": "gnot", "ssno": "ks"}
#: The smoke test's models: the FNO and GeoMaNO (a scan), shrunk.
QUICK = {("fno", "burgers"): dict(width=8, depth=1, modes=(4,), grid=(32,)),
         ("geomano", "1d"): dict(width=8, depth=1, state_size=4, grid=(32,), latent_grid=(16,))}
MATMUL_KINDS = ("matmul", "scan")


# -- FLOP counting ----------------------------------------------------------------------------
def _fft_points(shape, dim) -> tuple[int, int]:
    """(points per transform, number of transforms) of an FFT over ``dim`` of ``shape``."""
    points = math.prod(shape[d] for d in dim)
    return points, math.prod(shape) // max(points, 1)


class Counter:
    """FLOPs of one call by kind: ``matmul`` (what FlopCounterMode counts: matrix products,
    convolutions, attention), ``scan``, ``fft1d``, ``fft2d`` (…``fft{n}d``)."""

    def __init__(self):
        self.extra = defaultdict(int)

    def _fft(self, per_point: float, shape, dim) -> int:
        points, count = _fft_points(shape, dim)
        flops = int(per_point * points * math.log2(max(points, 2)) * count)
        self.extra[f"fft{len(dim)}d"] += flops
        return flops

    def _scan(self, u, A, D, z, passes: int, backward: bool) -> int:
        batch, channels, *space = u
        length, state = math.prod(space), A[1]
        flops = passes * 9 * batch * channels * length * state
        flops += batch * channels * length * ((D is not None) + (z is not None))
        flops *= 2 if backward else 1
        self.extra["scan"] += flops
        return flops

    def mapping(self) -> dict:
        """FlopCounterMode's ``custom_mapping``: formulas on the shapes of the arguments."""
        import ssmpde.kernels.scan_cpu  # noqa: F401  (registers torch.ops.ssmpde's scans)

        aten, mapping = torch.ops.aten, {}

        def r2c(self_shape, dim, *args, out_shape=None, **kwargs):
            return self._fft(2.5, self_shape, dim)

        def c2r(self_shape, dim, *args, out_shape=None, **kwargs):
            return self._fft(2.5, out_shape, dim)

        def c2c(self_shape, dim, *args, out_shape=None, **kwargs):
            return self._fft(5.0, self_shape, dim)

        mapping.update({aten._fft_r2c: r2c, aten._fft_c2r: c2r, aten._fft_c2c: c2c})
        ops = getattr(torch.ops, "ssmpde", None)
        for kind, passes in (("1d", 1), ("2d", 2)):
            for suffix, backward in (("", False), ("_backward", True)):
                op = getattr(ops, f"selective_scan_{kind}_cpu{suffix}", None) if ops else None
                if op is None:
                    continue

                def scan(u, delta, A, B, C, D, R, z, *args, passes=passes, backward=backward,
                         out_shape=None, **kwargs):
                    return self._scan(u, A, D, z, passes, backward)

                mapping[op] = scan
        return mapping


def count_flops(model, x) -> dict[str, dict[str, int]]:
    """FLOPs of the forward and of the backward of ``model(x)`` by kind (see :class:`Counter`).

    The forward is counted with gradients enabled: without them the scans skip the operator
    dispatch (their eager fast path), which the counter would not see; the arithmetic is the
    same.
    """
    from torch.utils.flop_counter import FlopCounterMode

    out, result = None, {}
    for name in ("forward", "backward"):
        counter = Counter()
        mapping = counter.mapping()
        with FlopCounterMode(display=False, custom_mapping=mapping) as mode:
            if name == "forward":
                out = model(x)
            else:
                _loss(out).backward()
        counted = {str(op) for op in mapping}
        matmul = sum(n for op, n in mode.get_flop_counts().get("Global", {}).items()
                     if str(op) not in counted)
        kinds = {"matmul": matmul, **counter.extra}
        result[name] = {"kinds": kinds, "total": sum(kinds.values())}
    model.zero_grad(set_to_none=True)
    return result


# -- the roofline ------------------------------------------------------------------------------
def roofline(repeats: int, quick: bool, clock=seconds) -> dict:
    """This CPU's rates on one thread, GFLOP/s: float32 and bfloat16 matmul, 1D and 2D FFTs
    (a forward and an inverse real transform, 2.5 N log2 N each), from the fastest of
    ``repeats`` interleaved rounds (and their medians)."""
    n = 256 if quick else 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    a16, b16 = a.bfloat16(), b.bfloat16()
    x1 = torch.randn(64, 1024)
    x2 = torch.randn(64, 64, 64)
    calls = {"matmul": lambda: a @ b, "matmul_bfloat16": lambda: a16 @ b16,
             "fft1d": lambda: torch.fft.irfft(torch.fft.rfft(x1), n=1024),
             "fft2d": lambda: torch.fft.irfft2(torch.fft.rfft2(x2), s=(64, 64))}
    flops = {"matmul": 2 * n ** 3, "matmul_bfloat16": 2 * n ** 3,
             "fft1d": 2 * 2.5 * 1024 * math.log2(1024) * 64,
             "fft2d": 2 * 2.5 * 4096 * math.log2(4096) * 64}
    timings = interleaved(calls, repeats=repeats, warmup=1, clock=clock)
    # A roof is the best the machine does: the fastest round (the median, disturbed by
    # other jobs on a shared machine, is kept beside it).
    best = {k: min(v) for k, v in timings.times.items()}
    median = timings.medians()
    return {"gflops": {k: flops[k] / best[k] / 1e9 for k in calls},
            "gflops_median": {k: flops[k] / median[k] / 1e9 for k in calls},
            "sizes": {"matmul": f"{n}x{n} @ {n}x{n}", "fft1d": "rfft + irfft, 64 x 1024",
                      "fft2d": "rfft2 + irfft2, 64 x 64²"}}


def bound_seconds(kinds: dict[str, int], rates: dict[str, float]) -> float:
    """Seconds the counted FLOPs need at the measured rates (matmul-class and FFTs)."""
    seconds = 0.0
    for kind, flops in kinds.items():
        rate = rates["matmul"] if kind in MATMUL_KINDS else rates.get(kind, rates["fft2d"])
        seconds += flops / (rate * 1e9)
    return seconds


# -- one preset --------------------------------------------------------------------------------
def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.float().square().mean()


def make_input(model, batch: int, seed: int = 0) -> torch.Tensor:
    """A random input of the model's layout: ``[batch, channels, *grid]`` or
    ``[batch, window, channels, *grid]``."""
    config = model.config
    g = torch.Generator().manual_seed(seed)
    if getattr(config, "input_layout", "channels") == "history":
        return torch.randn(batch, config.window, config.in_channels, *config.grid, generator=g)
    return torch.randn(batch, config.in_channels, *config.grid, generator=g)


@contextlib.contextmanager
def peak_rss(result: dict):
    """Set ``result["mib"]`` to the peak resident memory during the block above the level
    before it (sampled every millisecond)."""
    import psutil

    process = psutil.Process()
    base = process.memory_info().rss
    samples: list = []
    try:
        with sampled(lambda: process.memory_info().rss, 0.001) as samples:
            yield
    finally:
        peak = max([base, *samples, process.memory_info().rss])
        result["mib"] = max(0.0, (peak - base) / 2 ** 20)


def calls_for(model, x, compiled=None) -> dict:
    """The calls timed for one input: eager, bfloat16 (and compiled) forward, forward +
    backward."""

    def forward():
        with torch.no_grad():
            return model(x)

    def bfloat16():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x).float()

    def forward_backward():
        model.zero_grad(set_to_none=True)
        out = model(x)
        _loss(out).backward()
        return None

    calls = {"forward": forward, "forward_bfloat16": bfloat16}
    if compiled is not None:
        def compiled_forward():
            with torch.no_grad():
                return compiled(x)

        calls["forward_compiled"] = compiled_forward
    calls["forward_backward"] = forward_backward
    return calls


def compile_for(model, x, backend: str) -> tuple[object | None, dict]:
    """``(compiled model or None, what happened)``: ``compile_model`` asked to raise where it
    refuses, so that the reason is recorded."""
    try:
        from ssmpde.surrogates.compiled import CompileMismatchError, compile_model
    except ImportError as error:
        return None, {"status": "unavailable", "reason": f"{type(error).__name__}: {error}"}
    start = time.perf_counter()
    try:
        with torch.no_grad():
            compiled = compile_model(model, (x,), backend=backend, on_mismatch="raise")
    except CompileMismatchError as error:
        return None, {"status": "refused", "reason": str(error)[:500],
                      "compile_seconds": time.perf_counter() - start}
    return compiled, {"status": "compiled", "backend": backend,
                      "compile_seconds": time.perf_counter() - start}


def float16_error(model, x) -> dict:
    """float16 autocast against float32 on ``x``: relative L2 and the seconds of one call
    (float16 has no fast path on most CPUs: it is timed once, not in rounds)."""
    with torch.no_grad():
        reference = model(x)
        try:
            with torch.autocast("cpu", dtype=torch.float16):
                start = time.perf_counter()
                half = model(x).float()
                seconds = time.perf_counter() - start
        except RuntimeError as error:
            return {"failed": f"{type(error).__name__}: {error}"[:300]}
    return {"rel_l2_vs_float32": float(relative_l2(half, reference).mean()),
            "seconds_once": seconds}


def _known_at_baseline(package, name: str, preset: str) -> bool:
    """Whether the baseline revision has this model and preset (a model added since, such as
    the lean FNO, has no before-state: its rows carry none)."""
    try:
        return preset in package.get_model_class(name).PRESETS
    except ValueError:  # an unknown model
        return False


def bench_preset(name: str, preset: str, overrides: dict, rates: dict, args) -> dict:
    """Every row of one preset (see the module docstring)."""
    from ssmpde.surrogates import build_model, parameter_count

    torch.manual_seed(0)
    model = build_model(name, preset=preset, **overrides)
    model.eval()  # no dropout here; eval keeps any running statistics fixed
    before = None
    if args.baseline_package is not None and _known_at_baseline(args.baseline_package, name,
                                                                 preset):
        before = args.baseline_package.build_model(name, preset=preset, **overrides).eval()
        before.load_state_dict(model.state_dict())
    small = make_input(model, 1)
    if before is not None:
        # The baseline's numba kernels compile at their first call (their cache is not this
        # checkout's): once here, so that warm-up times decide the rounds as they do for
        # this checkout.
        for call in calls_for(before, small).values():
            call()
    flops = count_flops(model, small)
    entry = {"model": name, "preset": preset, "overrides": {k: list(v) if isinstance(v, tuple)
                                                             else v for k, v in overrides.items()},
             "grid": list(model.config.grid), "parameters": parameter_count(model),
             "flops_batch1": flops,
             "batches": {}}
    if args.float16.get(name) == preset:
        entry["float16_batch1"] = float16_error(model, small)
    compile_here = args.compiled.get(name) == preset
    previous = None  # (batch, forward seconds) of the last batch measured
    for batch in args.batches:
        if previous is not None and previous[1] * batch / previous[0] > args.max_forward:
            estimate = previous[1] * batch / previous[0]
            entry["skipped_batches"] = {**entry.get("skipped_batches", {}), str(batch): (
                f"forward estimated at {estimate:.1f} s from batch {previous[0]}, above "
                f"--max-forward {args.max_forward:g} s")}
            continue
        x = make_input(model, batch)
        compiled, compile_info = (None, None)
        if compile_here and batch == args.compile_batch:
            compiled, compile_info = compile_for(model, x, args.backend)
        calls = calls_for(model, x, compiled)
        if before is not None:
            old = calls_for(before, x)
            calls.update({f"baseline_{kind}": old[kind]
                          for kind in ("forward", "forward_backward")})
        memory, warm, outputs = {}, {}, {}
        for kind in list(calls):
            # The baseline's training step is timed where this checkout's is, so that both
            # rows compare the same calls.
            if (kind == "forward_backward" and warm["forward"] * 3 > args.max_call
                    or kind == "baseline_forward_backward" and "forward_backward" not in calls):
                del calls[kind]
                continue
            holder = {}
            with peak_rss(holder):
                start = time.perf_counter()
                outputs[kind] = calls[kind]()
                warm[kind] = time.perf_counter() - start
            memory[kind] = holder["mib"]
        slow = {k for k in calls if warm[k] > args.single_above}
        fast = {k: v for k, v in calls.items() if k not in slow}
        times = {}
        if fast:
            timings = interleaved(fast, repeats=args.repeats, clock=args.clock_function)
            times.update(timings.times)
            outputs.update({k: v for k, v in timings.results.items()})
        if slow:
            timings = interleaved({k: calls[k] for k in calls if k in slow}, repeats=1,
                                  clock=args.clock_function)
            times.update(timings.times)
        old_times = {k[len("baseline_"):]: times.pop(k) for k in list(times)
                     if k.startswith("baseline_")}
        old_outputs = {k[len("baseline_"):]: outputs.pop(k) for k in list(outputs)
                       if k.startswith("baseline_")}
        memory = {k: v for k, v in memory.items() if not k.startswith("baseline_")}
        total = {k: v * batch for k, v in flops["forward"]["kinds"].items()}
        training = {k: total.get(k, 0) + v * batch for k, v in
                    flops["backward"]["kinds"].items()}
        training.update({k: v for k, v in total.items() if k not in training})
        row = {"seconds": {k: float(np.median(v)) for k, v in times.items()},
               # the fastest round: the least disturbed by other jobs on a shared machine
               "seconds_best": {k: float(np.min(v)) for k, v in times.items()},
               "rounds": {k: len(v) for k, v in times.items()},
               "peak_mib": memory,
               "flops": {"forward": sum(total.values()),
                         "forward_backward": sum(training.values())},
               "bound_seconds": {"forward": bound_seconds(total, rates),
                                 "forward_backward": bound_seconds(training, rates)}}
        if "forward_backward" not in calls:
            row["skipped"] = {"forward_backward": f"forward takes {warm['forward']:.1f} s: "
                                                  f"forward + backward would exceed --max-call "
                                                  f"{args.max_call:g} s"}
        seconds = row["seconds"]
        row["gflops"] = {k: row["flops"]["forward_backward" if k == "forward_backward"
                                         else "forward"] / s / 1e9 for k, s in seconds.items()}
        row["ratio_to_bound"] = {
            k: s / row["bound_seconds"]["forward_backward" if k == "forward_backward"
                                        else "forward"]
            for k, s in seconds.items() if k in ("forward", "forward_backward")}
        full = outputs["forward"]
        row["rel_l2_vs_float32"] = {"forward_bfloat16": float(relative_l2(
            outputs["forward_bfloat16"], full).mean())}
        if before is not None:
            row["baseline"] = baseline_row(old_times, times, row["bound_seconds"],
                                           old_outputs["forward"], full)
        if compile_info is not None:
            row["compiled"] = compile_info
            if "forward_compiled" in outputs:
                row["rel_l2_vs_float32"]["forward_compiled"] = float(relative_l2(
                    outputs["forward_compiled"].float(), full).mean())
        entry["batches"][str(batch)] = row
        previous = (batch, seconds["forward"])
        print(f"  {name} {preset} batch {batch}: " + ", ".join(
            f"{k} {v * 1e3:.1f} ms" for k, v in seconds.items())
            + f"; bound fwd {row['bound_seconds']['forward'] * 1e3:.1f} ms"
            + ("" if before is None else "; before: " + ", ".join(
                f"{k} {v * 1e3:.1f} ms ({row['baseline']['speedup'].get(k, math.nan):.2f}x)"
                for k, v in row["baseline"]["seconds"].items()))
            + f"; load {os.getloadavg()[0]:.1f}", flush=True)
    return entry


def baseline_row(old_times: dict, times: dict, bound: dict, old_output: torch.Tensor,
                 output: torch.Tensor) -> dict:
    """The baseline revision's figures for one batch: median seconds, ratio to this
    checkout's compute bound, the median of the per-round speedups (the ratio of the medians
    where the two were not timed in the same rounds) and the relative L2 difference of its
    forward output from this checkout's."""
    speedup = {}
    for kind, old in old_times.items():
        new = times.get(kind)
        if new is None:
            continue
        speedup[kind] = float(np.median(np.asarray(old) / np.asarray(new)) if len(old)
                              == len(new) else np.median(old) / np.median(new))
    medians = {k: float(np.median(v)) for k, v in old_times.items()}
    return {"seconds": medians,
            "ratio_to_bound": {k: v / bound[k] for k, v in medians.items()},
            "speedup": speedup,
            "rel_l2_vs_current": float(relative_l2(old_output.float(), output.float()).max())}


def main(argv=None) -> dict:
    from ssmpde.surrogates import get_model_class, list_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the fast calls")
    parser.add_argument("--single-above", type=float, default=1.0, metavar="SECONDS",
                        help="time calls slower than this (at warm-up) in one round")
    parser.add_argument("--max-call", type=float, default=3.0, metavar="SECONDS",
                        help="skip forward + backward where it would take longer")
    parser.add_argument("--max-forward", type=float, default=8.0, metavar="SECONDS",
                        help="skip a batch whose forward, extrapolated from the previous "
                             "batch, would take longer")
    parser.add_argument("--models", nargs="+", metavar="MODEL[:PRESET]",
                        help="only these models (or model:preset); default all")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--no-compile", action="store_true", help="no compiled rows")
    parser.add_argument("--quick", action="store_true",
                        help="two tiny models, batches 1 and 2, one round, aot_eager (smoke "
                             "test)")
    parser.add_argument("--baseline", metavar="REV",
                        help="also time the models of this git revision side by side")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                        help="time by the process's CPU time (default) or the wall clock")
    parser.add_argument("--out", type=Path, default=RESULTS / "models.json")
    args = parser.parse_args(argv)
    args.clock_function = cpu_seconds if args.clock == "cpu" else seconds
    args.compiled = {} if args.no_compile else dict(COMPILED)
    args.compile_batch = 4
    if args.quick:
        jobs = [(name, preset, overrides) for (name, preset), overrides in QUICK.items()]
        args.repeats, args.batches, args.compile_batch = 1, [1, 2], 2
        args.compiled = {} if args.no_compile else {"fno": "burgers"}
        args.backend = "aot_eager" if args.backend == "inductor" else args.backend
    else:
        wanted = None if args.models is None else [m.partition(":") for m in args.models]
        jobs = [(name, preset, {}) for name in list_models()
                for preset in sorted(get_model_class(name).PRESETS)
                if wanted is None or any(m == name and (not p or p == preset)
                                         for m, _, p in wanted)]
    args.float16 = smallest_presets(jobs)
    load_before = os.getloadavg()
    started = time.perf_counter()
    with fixed_threads(1), tempfile.TemporaryDirectory() as tmp:
        args.baseline_package = (import_revision(args.baseline, Path(tmp)) if args.baseline
                                 else None)
        roof = roofline(1 if args.quick else 9, args.quick, args.clock_function)
        rates = roof["gflops"]
        print("roofline, 1 thread: " + ", ".join(f"{k} {v:.1f} GFLOP/s"
                                                 for k, v in rates.items()), flush=True)
        models = [bench_preset(name, preset, overrides, rates, args)
                  for name, preset, overrides in jobs]
    load_after = os.getloadavg()
    result = header("models")
    result.update({
        "threads": 1, "torch": torch.__version__, "repeats": args.repeats,
        "clock": args.clock, "baseline": args.baseline,
        "single_above_seconds": args.single_above, "max_call_seconds": args.max_call,
        "max_forward_seconds": args.max_forward,
        "batches": args.batches, "compile_backend": args.backend,
        "compiled_presets": args.compiled, "compile_batch": args.compile_batch,
        "float16_presets": args.float16, "roofline": roof,
        "load_average_1_5_15min": {"before": [round(v, 2) for v in load_before],
                                   "after": [round(v, 2) for v in load_after]},
        "wall_seconds": time.perf_counter() - started,
        "models": models,
        "notes": ("One thread, float32 unless a row says bfloat16 (torch.autocast on the CPU) "
                  "or compiled. FLOPs: FlopCounterMode's matrix products, convolutions and "
                  "attention, plus FFTs (2.5 N log2 N per real transform, 5 N log2 N complex) "
                  "and the selective scans (9 B·D·L·N per pass, as mamba-ssm counts them; "
                  "backward twice the forward); element-wise work is not counted. Bound: "
                  "matmul-class FLOPs at the measured float32 matmul rate plus FFT FLOPs at "
                  "the measured FFT rate of their dimension. ratio_to_bound = time / bound. "
                  "Peak memory: RSS above the level before the call, sampled every ms, "
                  "in-process. Compiled rows: forward at compile_batch through compile_model; "
                  "compile_seconds is small where inductor's on-disk cache holds the code "
                  "from an earlier run (30-70 s when cold here). seconds_best: the fastest "
                  "round (one round for calls above single_above_seconds). "
                  "float16: error and one call's time at batch 1 on each model's smallest "
                  "preset (no fast path on this CPU)."),
    })
    print(f"{len(models)} presets in {result['wall_seconds']:.0f} s, load "
          f"{load_before[0]:.1f} -> {load_after[0]:.1f}")
    write(result, args.out)
    return result


def smallest_presets(jobs) -> dict[str, str]:
    """Each model's preset with the fewest parameters (where float16 is measured)."""
    from ssmpde.surrogates import build_model, parameter_count

    sizes = {}
    for name, preset, overrides in jobs:
        count = parameter_count(build_model(name, preset=preset, **overrides))
        if name not in sizes or count < sizes[name][0]:
            sizes[name] = (count, preset)
    return {name: preset for name, (_, preset) in sizes.items()}


MODEL_NAMES = {"fno": "FNO", "geomano": "GeoMaNO", "lamo": "LaMO", "lean-fno": "lean FNO",
               "mno": "MNO", "ssno": "SS-NO"}


def readme_table(result: dict, batch: int = 4) -> str:
    """The table of the benchmarks page: every preset (and its layout at the result's date) at
    ``batch`` (with a ``--baseline``: the ratios to the bound at that revision too)."""
    before = result.get("baseline")
    lines = ["| model | preset | parameters | GFLOP fwd | fwd ms | fwd+bwd ms | GFLOP/s fwd | "
             "fwd / bound | fwd+bwd / bound | bf16 fwd ms (rel. L2) | compiled fwd ms |"
             + (f" fwd / bound at {before} | fwd+bwd / bound at {before} |" if before else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if before else "")]
    for entry in result["models"]:
        row = entry["batches"].get(str(batch))
        if row is None:
            continue
        s, ratio = row["seconds"], row["ratio_to_bound"]
        backward = (f"{s['forward_backward'] * 1e3:.0f}" if "forward_backward" in s
                    else "skipped")
        backward_ratio = (f"{ratio['forward_backward']:.1f}" if "forward_backward" in ratio
                          else "–")
        compiled = "–"
        if "compiled" in row:
            info = row["compiled"]
            compiled = (f"{s['forward_compiled'] * 1e3:.0f}" if "forward_compiled" in s
                        else info["status"])
        line = (
            f"| {MODEL_NAMES.get(entry['model'], entry['model'])} | {entry['preset']}"
            f"{preset_layout(entry['model'], entry['preset'], result)} | "
            f"{entry['parameters']:,} | {row['flops']['forward'] / 1e9:.2f} | "
            f"{s['forward'] * 1e3:.1f} | {backward} | {row['gflops']['forward']:.1f} | "
            f"{ratio['forward']:.1f} | {backward_ratio} | "
            f"{s['forward_bfloat16'] * 1e3:.1f} "
            f"({row['rel_l2_vs_float32']['forward_bfloat16']:.1e}) | {compiled} |")
        if before:
            old = row.get("baseline", {}).get("ratio_to_bound", {})
            line += "".join(f" {old[k]:.1f} |" if k in old else " – |"
                            for k in ("forward", "forward_backward"))
        lines.append(line)
    return "\n".join(lines)


def details(result: dict) -> str:
    """The benchmarks page's table below the rows: every model and preset at batch 4."""
    return readme_table(result)


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table: each model's compiled preset (else its
    first) at batch 4, the training step against the compute bound (the preset's layout at
    the result's date: :func:`benchmarks.common.model_configuration`)."""
    out = []
    for name in dict.fromkeys(e["model"] for e in result["models"]):
        entries = [e for e in result["models"] if e["model"] == name and "4" in e["batches"]]
        if not entries:
            continue
        entry = next((e for e in entries if result["compiled_presets"].get(name)
                      == e["preset"]), entries[0])
        row = entry["batches"]["4"]
        kind = "forward_backward" if "forward_backward" in row["seconds"] else "forward"
        configuration = model_configuration(name, entry["preset"], result,
                                            overrides=entry.get("overrides"))
        label = (f"{MODEL_NAMES.get(name, name)} {configuration}, "
                 f"{'fwd+bwd' if kind == 'forward_backward' else 'fwd'}, batch 4, 1 thread: "
                 "time against the compute bound")
        now = f"{row['seconds'][kind] * 1e3:.0f} ms ({row['gflops'][kind]:.1f} GFLOP/s)"
        ratio = f"{row['ratio_to_bound'][kind]:.1f}x the bound"
        old = row.get("baseline", {})
        if kind in old.get("seconds", {}):
            now += (f"; {old['seconds'][kind] * 1e3:.0f} ms at {result['baseline']} "
                    f"({old['speedup'][kind]:.2f}x faster now)")
            ratio += f" ({old['ratio_to_bound'][kind]:.1f}x at {result['baseline']})"
        out.append(table_row(
            label, now, f"{row['bound_seconds'][kind] * 1e3:.1f} ms (counted FLOPs at the "
            f"measured matmul and FFT rates)", ratio, when(result)))
    return out


if __name__ == "__main__":
    main()
