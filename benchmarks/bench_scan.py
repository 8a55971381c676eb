"""Selective scans: ssmpde's CPU path against the PyTorch loop a user would write.

Side by side in one run, forward + backward, float32:

* 1D scan at batch 4, channels 128, state 16, length 1936 (Darcy's 44×44 tokens; with R, D, z,
  delta_bias), and
* the 2D scan on a 44×44 grid (same batch, channels, state),

each timed as the median of alternating rounds, and the peak memory of each measured in a
fresh subprocess (peak RSS above the level before the call, sampled every millisecond), also at
state 4 to show how memory scales with state × length.

``--gpu`` (on a CUDA machine) times the Triton kernels instead, in one run:

* the 1D scan, both Triton kernels (``chunked``, the default, and ``recurrent``), against
  mamba-ssm's ``selective_scan_fn`` (its CUDA kernel; the peer a user would otherwise pick) at
  Mamba's size (batch 4, 1536 channels, state 16, length 2048), at GeoMaNO's 44² = 1936
  tokens (batch 4, 128 channels) and on short sequences (length 64: a 64×64 grid's rows,
  4 × 64 sequences of 128 channels), with the options both support (D, z, delta_bias,
  softplus), float32 and bfloat16;
* the 2D scan against the PyTorch loop on the GPU (17×17 and 44×44, float32);

forward and forward+backward, CUDA-event medians of alternating rounds, the peak GPU memory
each call allocates above its inputs, and the largest difference between the two outputs.
mamba-ssm is an optional peer (``pip install mamba-ssm``, built for the GPU); without it the 1D
rows time the Triton kernel alone.

    python -m benchmarks.bench_scan            # writes benchmarks/results/scan.json
    python -m benchmarks.bench_scan --gpu      # writes benchmarks/results/scan_gpu.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import platform
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.common import (RESULTS, cuda_seconds, header, interleaved, table_row, when,
                               write)


def loop_scan_1d(u, delta, A, B, C, D, R, z, delta_bias):
    """The straightforward PyTorch implementation: discretise everything, loop over length."""
    dt_ = F.softplus(delta + delta_bias[:, None])
    deltaA = torch.exp(dt_.unsqueeze(2) * A[None, :, :, None])           # [b, d, n, l]
    deltaBu = dt_.unsqueeze(2) * B.unsqueeze(1) * u.unsqueeze(2)         # [b, d, n, l]
    # unbind, not deltaA[..., l]: indexing in the loop makes autograd build a full-size zero
    # gradient per step (mamba-ssm's reference does that; it did not finish in 10 minutes here)
    h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for a_l, bu_l, c_l in zip(deltaA.unbind(-1), deltaBu.unbind(-1), C.unbind(-1)):
        h = a_l * h + bu_l
        ys.append((h * c_l[:, None, :]).sum(-1))
    y = torch.stack(ys, -1) - (R[None, :, :, None] * deltaBu).sum(2) + D[:, None] * u
    return y * F.silu(z)


def loop_scan_2d(u, delta, A, B, C, D, R, z, delta_bias):
    """The straightforward 2D version: a row pass and a column pass of Python loops."""
    dt_ = F.softplus(delta + delta_bias[:, None, None])
    deltaA = torch.exp(dt_.unsqueeze(2) * A[None, :, :, None, None])     # [b, d, n, H, W]
    deltaBu = dt_.unsqueeze(2) * B.unsqueeze(1) * u.unsqueeze(2)
    rows = []
    for a_row, bu_row in zip(deltaA.unbind(-2), deltaBu.unbind(-2)):
        g = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
        row = []
        for a_ij, bu_ij in zip(a_row.unbind(-1), bu_row.unbind(-1)):
            g = a_ij * g + bu_ij
            row.append(g)
        rows.append(torch.stack(row, -1))
    h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1], u.shape[-1])
    ys = []
    for a_row, g_row, c_row in zip(deltaA.unbind(-2), rows, C.unbind(-2)):
        h = a_row * h + g_row
        ys.append((h * c_row[:, None]).sum(2))
    y = torch.stack(ys, -2) - (R[None, :, :, None, None] * deltaBu).sum(2) + D[:, None, None] * u
    return y * F.silu(z)


def make_inputs(kind, batch, channels, state, side, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    space = (side * side,) if kind == "1d" else (side, side)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device).requires_grad_()

    return dict(u=rnd(batch, channels, *space), delta=rnd(batch, channels, *space),
                A=(-torch.exp(torch.randn(channels, state, generator=g))).to(device)
                .requires_grad_(),
                B=rnd(batch, state, *space), C=rnd(batch, state, *space), D=rnd(channels),
                R=rnd(channels, state), z=rnd(batch, channels, *space),
                delta_bias=rnd(channels))


def run(implementation, kind, inputs):
    from ssmpde.kernels import selective_scan, selective_scan_2d

    args = [inputs[k] for k in ("u", "delta", "A", "B", "C")]
    extra = {k: inputs[k] for k in ("D", "R", "z", "delta_bias")}
    if implementation == "loop":
        out = (loop_scan_1d if kind == "1d" else loop_scan_2d)(*args, **extra)
    else:
        scan = selective_scan if kind == "1d" else selective_scan_2d
        out = scan(*args, **extra, backend=implementation)
    out.sum().backward()
    for tensor in inputs.values():
        tensor.grad = None


def _rss():
    import psutil

    return psutil.Process().memory_info().rss


def _peak_memory_child(queue, implementation, kind, batch, channels, state, side):
    torch.set_num_threads(os.cpu_count() or 1)
    run(implementation, kind, make_inputs(kind, 1, 2, 2, 3))  # compile / warm up
    inputs = make_inputs(kind, batch, channels, state, side)
    base, peak, done = _rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.001)

    watcher = threading.Thread(target=sample)
    watcher.start()
    run(implementation, kind, inputs)
    done.set()
    watcher.join()
    queue.put((max(peak[0], _rss()) - base) / 2 ** 20)


def peak_memory_mib(implementation, kind, batch, channels, state, side):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_peak_memory_child,
                              args=(queue, implementation, kind, batch, channels, state, side))
    process.start()
    value = queue.get()
    process.join()
    return value


def compare(kind, fast, batch, channels, state, side, repeats):
    """The PyTorch loop against the ``fast`` backend on the CPU, alternating rounds."""
    inputs = make_inputs(kind, batch, channels, state, side)
    run(fast, kind, make_inputs(kind, 1, 2, 2, 3))  # compile outside the timing
    timings = interleaved({"loop": lambda: run("loop", kind, inputs),
                           fast: lambda: run(fast, kind, inputs)}, repeats=repeats)
    median, ratios = timings.medians(), timings.ratios("loop", fast)
    return {"loop_seconds": median["loop"], f"{fast}_seconds": median[fast],
            "speedup": float(np.median(ratios)), "speedups": ratios.round(2).tolist()}


# ----------------------------------------------------------------------------------------------
# GPU: Triton against mamba-ssm (1D) and the PyTorch loop (2D)
# ----------------------------------------------------------------------------------------------

GPU_1D_CASES = {  # name: (batch, channels, state, length)
    "mamba": (4, 1536, 16, 2048),
    "geomano_44x44": (4, 128, 16, 1936),
    "rows_64": (256, 128, 16, 64),
}
#: The Triton 1D kernels timed side by side (``scan_triton.KERNELS``): the JSON keys.
TRITON_1D = {"triton": "chunked", "recurrent": "recurrent"}
GPU_2D_CASES = {"geomano_darcy_latent": (4, 128, 16, 17), "geomano_44x44": (4, 128, 16, 44)}


def mamba_selective_scan():
    """``(selective_scan_fn, version)`` of mamba-ssm, or ``(None, why not)``.

    Only the scan's module is imported: the package's ``__init__`` imports every model
    (Mamba, Mamba2, Mamba3, the LM head), which the scan does not need and which did not
    finish importing in 7 minutes on the benchmark's GPU machine.
    """
    import importlib.util
    import re
    import types

    try:
        spec = importlib.util.find_spec("mamba_ssm")
        if spec is None:
            return None, "mamba-ssm is not installed"
        locations = list(spec.submodule_search_locations)
        if "mamba_ssm" not in sys.modules:
            package = types.ModuleType("mamba_ssm")
            package.__path__ = locations
            sys.modules["mamba_ssm"] = package
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except Exception as error:  # noqa: BLE001 - any failure of an optional peer: report it
        return None, f"mamba-ssm unavailable ({type(error).__name__}: {error})"
    found = re.search(r'__version__\s*=\s*"([^"]+)"',
                      (Path(locations[0]) / "__init__.py").read_text())
    return selective_scan_fn, found.group(1) if found else "unknown"


def gpu_inputs_1d(batch, channels, state, length, dtype, seed=0):
    """Mamba's layout: u, delta, z, B, C in ``dtype``; A, D, delta_bias in float32."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*shape, dtype=dtype, scale=1.0, shift=0.0):
        x = torch.randn(*shape, generator=g, device="cuda") * scale + shift
        return x.to(dtype).requires_grad_()

    return dict(u=rnd(batch, channels, length), delta=rnd(batch, channels, length, scale=0.5,
                                                          shift=-1.0),
                A=(-torch.exp(torch.randn(channels, state, generator=g, device="cuda")))
                .requires_grad_(),
                B=rnd(batch, state, length), C=rnd(batch, state, length),
                D=rnd(channels, dtype=torch.float32), z=rnd(batch, channels, length),
                delta_bias=rnd(channels, dtype=torch.float32, scale=0.3))


def cuda_call(implementation, inputs, backward, peer=None):
    """A closure running one scan (and its backward) on ``inputs``."""
    from ssmpde.kernels import selective_scan_2d

    args = [inputs[k] for k in ("u", "delta", "A", "B", "C")]
    gradient = None

    def call():
        nonlocal gradient
        with torch.set_grad_enabled(backward):
            if implementation == "mamba":
                out = peer(*args, D=inputs["D"], z=inputs["z"], delta_bias=inputs["delta_bias"],
                           delta_softplus=True)
            elif implementation == "triton" and inputs["u"].dim() == 4:
                extra = {k: inputs[k] for k in ("D", "R", "z", "delta_bias") if k in inputs}
                out = selective_scan_2d(*args, **extra, backend="triton")
            elif implementation in TRITON_1D:
                from ssmpde.kernels.scan_triton import selective_scan_triton

                extra = {k: inputs[k] for k in ("D", "R", "z", "delta_bias") if k in inputs}
                out = selective_scan_triton(*args, **extra, kernel=TRITON_1D[implementation])
            else:
                out = loop_scan_2d(*args, **{k: inputs[k] for k in ("D", "R", "z",
                                                                     "delta_bias")})
            if backward:
                if gradient is None:
                    gradient = torch.randn_like(out)
                out.backward(gradient)
                for tensor in inputs.values():
                    tensor.grad = None
        return out

    return call


def cuda_peak_mib(call):
    """GPU memory a call allocates at its peak, above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 20


def cuda_compare(calls, repeats, warmup=3):
    """Median seconds and peak memory of each call, timed in alternating rounds (CUDA events)
    after ``warmup`` untimed calls of each (compilation, autotuning, the allocator)."""
    median = interleaved(calls, repeats=repeats, warmup=warmup, clock=cuda_seconds).medians()
    return {name: {"seconds": median[name], "peak_mib": cuda_peak_mib(calls[name])}
            for name in calls}


def apply_tuning(best: dict) -> None:
    """Set ``scan_triton``'s chunk sizes and ``TUNING`` entries to a tuning sweep's ``best``."""
    from ssmpde.kernels import scan_triton

    for name in ("DEFAULT_CHUNK_SIZE", "RECURRENT_CHUNK_SIZE"):
        if name in best:
            setattr(scan_triton, name, best[name])
    scan_triton.TUNING.update({k: v for k, v in best.items() if k in scan_triton.TUNING})


def gpu_main(repeats, two_d=True) -> dict:
    peer, peer_version = mamba_selective_scan()
    props = torch.cuda.get_device_properties(0)
    import triton

    result = {"device": props.name, "torch": torch.__version__, "triton": triton.__version__,
              "mamba_ssm": peer_version if peer else None,
              "mamba_ssm_missing": None if peer else peer_version, "1d": {}, "2d": {}}
    print(f"GPU: {props.name}; torch {torch.__version__}, triton {triton.__version__}, "
          f"mamba-ssm {peer_version}. CUDA-event medians of {repeats} rounds.")
    kernels = dict(TRITON_1D)
    for name in TRITON_1D:
        # A kernel that fails to compile or run on this GPU is reported, not fatal: the other
        # one and mamba-ssm are still timed.
        try:
            for dtype in (torch.float32, torch.bfloat16):
                cuda_call(name, gpu_inputs_1d(2, 64, 16, 100, dtype), True)()
        except Exception as error:  # noqa: BLE001 - reported in the result and the log
            result[f"{name}_error"] = f"{type(error).__name__}: {error}"[:2000]
            print(f"Triton {TRITON_1D[name]} kernel failed: {result[f'{name}_error']}")
            kernels.pop(name)
    print("| 1D scan | dtype | pass | chunked ms | recurrent ms | mamba-ssm ms | chunked / mamba "
          "| recurrent / mamba | MiB chunked, recurrent, mamba | max rel diff chunked, "
          "recurrent |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case, (batch, channels, state, length) in GPU_1D_CASES.items():
        for dtype in (torch.float32, torch.bfloat16):
            inputs = gpu_inputs_1d(batch, channels, state, length, dtype)
            diffs = {}
            if peer is not None:
                with torch.no_grad():
                    theirs = cuda_call("mamba", inputs, False, peer)().float()
                    for name in kernels:
                        ours = cuda_call(name, inputs, False)().float()
                        diffs[name] = float((ours - theirs).abs().max() / theirs.abs().max())
            for backward in (False, True):
                calls = {name: cuda_call(name, inputs, backward) for name in kernels}
                if peer is not None:
                    calls["mamba"] = cuda_call("mamba", inputs, backward, peer)
                row = cuda_compare(calls, repeats)
                for name in kernels if peer is not None else ():
                    suffix = "" if name == "triton" else f"_{name}"
                    row[f"speed_ratio{suffix}"] = row["mamba"]["seconds"] / row[name]["seconds"]
                    row[f"max_rel_diff_forward{suffix}"] = diffs[name]
                passes = "fwd_bwd" if backward else "fwd"
                key = f"{case}_{str(dtype).removeprefix('torch.')}_{passes}"
                row["shape"] = dict(batch=batch, channels=channels, state=state, length=length)
                result["1d"][key] = row
                nan = float("nan")
                mamba, chunked, recurrent = (row.get(k, {}) for k in ("mamba", "triton",
                                                                       "recurrent"))
                print(f"| {case} {batch}x{channels}x{state}x{length} | {dtype} | "
                      f"{'fwd+bwd' if backward else 'fwd'} | "
                      f"{chunked.get('seconds', nan) * 1e3:.3f} | "
                      f"{recurrent.get('seconds', nan) * 1e3:.3f} | "
                      f"{mamba.get('seconds', nan) * 1e3:.3f} | "
                      f"{row.get('speed_ratio', nan):.2f} | "
                      f"{row.get('speed_ratio_recurrent', nan):.2f} | "
                      f"{chunked.get('peak_mib', nan):.0f}, {recurrent.get('peak_mib', nan):.0f}, "
                      f"{mamba.get('peak_mib', nan):.0f} | "
                      f"{diffs.get('triton', nan):.1e}, {diffs.get('recurrent', nan):.1e} |",
                      flush=True)
    print("| 2D scan | pass | triton ms | loop ms | speed-up | triton MiB | loop MiB |")
    print("|---|---|---|---|---|---|---|")
    for case, (batch, channels, state, side) in (GPU_2D_CASES.items() if two_d else ()):
        inputs = make_inputs("2d", batch, channels, state, side, device="cuda")
        for backward in (False, True):
            row = cuda_compare({"triton": cuda_call("triton", inputs, backward),
                                "loop": cuda_call("loop", inputs, backward)}, max(3, repeats // 3))
            row["speedup"] = row["loop"]["seconds"] / row["triton"]["seconds"]
            row["shape"] = dict(batch=batch, channels=channels, state=state, grid=[side, side])
            result["2d"][f"{case}_{'fwd_bwd' if backward else 'fwd'}"] = row
            print(f"| {case} {batch}x{channels}x{state}x{side}x{side} | "
                  f"{'fwd+bwd' if backward else 'fwd'} | {row['triton']['seconds'] * 1e3:.3f} | "
                  f"{row['loop']['seconds'] * 1e3:.1f} | {row['speedup']:.0f}x | "
                  f"{row['triton']['peak_mib']:.0f} | {row['loop']['peak_mib']:.0f} |", flush=True)
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--gpu", action="store_true",
                        help="time the Triton kernels on CUDA (writes scan_gpu.json)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tuning", type=Path, nargs="+", default=[],
                        help="JSON of benchmarks/gpu/tune_scan.py (one per kernel): time the 1D "
                             "scans with its best setting instead of the defaults")
    parser.add_argument("--no-2d", action="store_true", help="--gpu: the 1D scans only")
    args = parser.parse_args(argv)
    for path in args.tuning:
        apply_tuning(json.loads(path.read_text())["best"])
        print(f"1D tuning from {path}")
    if args.gpu:
        if not torch.cuda.is_available():
            raise SystemExit("--gpu needs a CUDA device")
        result = header("selective_scan_gpu")
        result["cuda"] = gpu_main(args.repeats, two_d=not args.no_2d)
        write(result, args.out or RESULTS / "scan_gpu.json")
        return result
    args.out = args.out or RESULTS / "scan.json"
    batch, channels, side = 4, 128, 44
    result = {
        "benchmark": "selective_scan",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "shape": {"batch": batch, "channels": channels, "length": side * side, "grid": [side, side]},
        "cpu": {}, "peak_memory_mib": {},
    }
    print(f"Selective scan, forward + backward, float32, batch {batch}, channels {channels}, "
          f"L = {side * side} (1D) / {side}x{side} (2D); medians of {args.repeats} rounds")
    print("| scan | state | loop s | ssmpde cpu s | speed-up | loop peak MiB | cpu peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("1d", "2d"):
        for state in (4, 16):
            row = compare(kind, "cpu", batch, channels, state, side, args.repeats)
            memory = {name: peak_memory_mib(name, kind, batch, channels, state, side)
                      for name in ("loop", "cpu")}
            result["cpu"][f"{kind}_state{state}"] = row
            result["peak_memory_mib"][f"{kind}_state{state}"] = memory
            print(f"| {kind} | {state} | {row['loop_seconds']:.2f} | {row['cpu_seconds']:.3f} | "
                  f"{row['speedup']:.0f}x | {memory['loop']:.0f} | {memory['cpu']:.0f} |")
    write(result, args.out)
    return result


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table: the CPU scans (``scan.json``) or the GPU
    ones (``scan_gpu.json``, against mamba-ssm and the loop on the GPU)."""
    if result["benchmark"] == "selective_scan_gpu":
        return _gpu_rows(result) if result.get("cuda") else []
    lines = []
    shape = result["shape"]
    for key, label in (("1d_state16", f"1D scan, L {shape['length']}"),
                       ("2d_state16", "2D scan, {0}×{1}".format(*shape["grid"]))):
        row = result["cpu"].get(key)
        if row:
            memory = result["peak_memory_mib"][key]
            lines.append(table_row(
                f"{label}, fwd+bwd, batch {shape['batch']} × {shape['channels']} channels × "
                "state 16", f"{row['cpu_seconds'] * 1e3:.0f} ms, {memory['cpu']:.0f} MiB",
                f"{row['loop_seconds']:.2f} s, {memory['loop']:.0f} MiB (PyTorch loop)",
                f"**{row['speedup']:.0f}x**", when(result)))
    return lines


def details(result: dict) -> str:
    """The benchmarks page's table: every CPU case (state sizes 4 and 16) with the peak
    memory of each side, or every GPU case of ``scan_gpu.json``."""
    if result["benchmark"] == "selective_scan_gpu":
        cuda = result.get("cuda") or {}
        lines = ["| case | ours ms (MiB) | other ms (MiB) | speed ratio | largest rel. "
                 "difference |", "|---|---|---|---|---|"]
        for key, row in cuda.get("1d", {}).items():
            for name in ("triton", "recurrent"):
                if name in row and "mamba" in row:
                    ratio = row["speed_ratio" if name == "triton" else "speed_ratio_recurrent"]
                    lines.append(f"| 1D {key} ({name}) | {row[name]['seconds'] * 1e3:.3f} "
                                 f"({row[name]['peak_mib']:.0f}) | mamba-ssm "
                                 f"{row['mamba']['seconds'] * 1e3:.3f} "
                                 f"({row['mamba']['peak_mib']:.0f}) | {ratio:.2f}x | "
                                 f"{row['max_rel_diff_forward']:.1e} |")
        for key, row in cuda.get("2d", {}).items():
            lines.append(f"| 2D {key} | {row['triton']['seconds'] * 1e3:.3f} "
                         f"({row['triton']['peak_mib']:.0f}) | PyTorch loop "
                         f"{row['loop']['seconds'] * 1e3:.1f} ({row['loop']['peak_mib']:.0f}) | "
                         f"{row['speedup']:.0f}x | – |")
        return "\n".join(lines)
    lines = ["| scan | state | PyTorch loop s | ssmpde CPU s | speed-up | loop peak MiB | "
             "CPU peak MiB |", "|---|---|---|---|---|---|---|"]
    for key, row in result["cpu"].items():
        kind, state = key.split("_state")
        memory = result["peak_memory_mib"][key]
        lines.append(f"| {kind.upper()} | {state} | {row['loop_seconds']:.3f} | "
                     f"{row['cpu_seconds']:.4f} | {row['speedup']:.0f}x | {memory['loop']:.0f} | "
                     f"{memory['cpu']:.0f} |")
    return "\n".join(lines)


def _gpu_rows(result: dict) -> list[str]:
    lines, cuda = [], result["cuda"]
    measured = when({**result, "machine": {"cpus": 1, "processor": cuda["device"]}})
    for key, row in cuda["1d"].items():
        if "mamba" not in row or not key.startswith(("mamba_", "geomano_44x44_", "rows_64_")):
            continue
        shape = row["shape"]
        passes = "fwd+bwd" if key.endswith("fwd_bwd") else "fwd"
        dtype = "bfloat16" if "bfloat16" in key else "float32"
        # Files from before the recurrent kernel hold the chunked one alone, as "Triton".
        kernels = [("triton", "speed_ratio", "Triton chunked" if "recurrent" in row else
                    "Triton")] if "triton" in row else []
        if "recurrent" in row:
            kernels.append(("recurrent", "speed_ratio_recurrent", "Triton recurrent"))
        for name, ratio, label in kernels:
            lines.append(table_row(
                f"GPU 1D scan {passes}, {dtype}, {shape['batch']} × {shape['channels']} ch × "
                f"state {shape['state']} × L {shape['length']}",
                f"{row[name]['seconds'] * 1e3:.2f} ms, {row[name]['peak_mib']:.0f} MiB "
                f"({label})",
                f"{row['mamba']['seconds'] * 1e3:.2f} ms, {row['mamba']['peak_mib']:.0f} MiB "
                f"(mamba-ssm {cuda['mamba_ssm']} CUDA)", f"**{row[ratio]:.2f}x**", measured))
    for key, row in cuda["2d"].items():
        if not key.startswith("geomano_44x44_"):
            continue
        shape = row["shape"]
        passes = "fwd+bwd" if key.endswith("fwd_bwd") else "fwd"
        lines.append(table_row(
            f"GPU 2D scan {passes}, float32, {shape['batch']} × {shape['channels']} ch × state "
            "{0} on {1}×{2}".format(shape["state"], *shape["grid"]),
            f"{row['triton']['seconds'] * 1e3:.2f} ms, {row['triton']['peak_mib']:.0f} MiB "
            "(Triton)",
            f"{row['loop']['seconds'] * 1e3:.0f} ms, {row['loop']['peak_mib']:.0f} MiB "
            "(PyTorch loop on the GPU)", f"**{row['speedup']:.0f}x**", measured))
    return lines


if __name__ == "__main__":
    main()
