"""Sweep the 1D Triton scan's tuning (chunk, channels per program, warps) on a CUDA GPU.

For each chunk size, the forward kernel is timed over ``max_block_d × num_warps`` and then
the backward kernel over the same grid (its time is that of forward + backward minus the
forward's, with the forward at its best setting for that chunk). mamba-ssm's
``selective_scan_fn`` is timed on the same inputs in the same run when it is importable, so
every line also gives the ratio a user cares about. The result is the setting to write into
``ssmpde.kernels.scan_triton.TUNING`` and ``DEFAULT_CHUNK_SIZE``.

    PYTHONPATH=/tmp/site:/tmp/mamba/src:/tmp/mamba/build \\
        python -m benchmarks.gpu.tune_scan --budget 240 --out /tmp/tune.json

Settings that fail to compile (register or shared-memory limits) are reported and skipped.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch

from benchmarks.bench_scan import cuda_call, gpu_inputs_1d, mamba_selective_scan
from benchmarks.common import cuda_seconds, interleaved
from ssmpde.kernels import scan_triton

SHAPES = {"mamba": (4, 1536, 16, 2048), "geomano_latent": (4, 128, 16, 289)}


def median_seconds(call, repeats, warmup=2):
    """Median CUDA-event seconds of ``call`` over ``repeats`` rounds after ``warmup``."""
    return interleaved({"call": call}, repeats=repeats, warmup=warmup,
                       clock=cuda_seconds).medians()["call"]


def triton_call(inputs, chunk, backward):
    """bench_scan's Triton call with ``chunk`` positions per chunk (the default is read at
    call time)."""
    call = cuda_call("triton", inputs, backward)

    def chunked():
        saved, scan_triton.DEFAULT_CHUNK_SIZE = scan_triton.DEFAULT_CHUNK_SIZE, chunk
        try:
            return call()
        finally:
            scan_triton.DEFAULT_CHUNK_SIZE = saved

    return chunked


def timed_setting(kernel, setting, call, repeats):
    """Seconds of ``call`` with ``TUNING[kernel]`` set to ``setting`` (None if it fails)."""
    saved = dict(scan_triton.TUNING[kernel])
    scan_triton.TUNING[kernel] = setting
    try:
        return median_seconds(call, repeats)
    except Exception as error:  # noqa: BLE001 - a setting the compiler rejects: report, go on
        print(f"  {kernel} {setting}: failed ({type(error).__name__}: {str(error)[:80]})")
        torch.cuda.synchronize()
        return None
    finally:
        scan_triton.TUNING[kernel] = saved


def sweep(shape, dtype, chunks, blocks, warps, repeats, deadline, peer):
    batch, channels, state, length = shape
    inputs = gpu_inputs_1d(batch, channels, state, length, dtype)
    result = {"shape": shape, "dtype": str(dtype), "rows": []}
    if peer is not None:
        result["mamba_fwd"] = median_seconds(cuda_call("mamba", inputs, False, peer), repeats)
        result["mamba_fwd_bwd"] = median_seconds(cuda_call("mamba", inputs, True, peer), repeats)
        print(f"mamba-ssm: fwd {result['mamba_fwd'] * 1e3:.3f} ms, fwd+bwd "
              f"{result['mamba_fwd_bwd'] * 1e3:.3f} ms", flush=True)
    for chunk in chunks:
        best_fwd = None
        for block, warp in itertools.product(blocks, warps):
            if time.monotonic() > deadline:
                return result
            setting = dict(max_block_d=block, num_warps=warp)
            seconds = timed_setting("scan_fwd", setting, triton_call(inputs, chunk, False),
                                    repeats)
            result["rows"].append(dict(kernel="fwd", chunk=chunk, **setting, seconds=seconds))
            if seconds is not None:
                print(f"fwd chunk {chunk:4d} block {block:2d} warps {warp}: "
                      f"{seconds * 1e3:.3f} ms", flush=True)
                if best_fwd is None or seconds < best_fwd[1]:
                    best_fwd = (setting, seconds)
        if best_fwd is None:
            continue
        scan_triton.TUNING["scan_fwd"] = best_fwd[0]
        for block, warp in itertools.product(blocks, warps):
            if time.monotonic() > deadline:
                return result
            setting = dict(max_block_d=block, num_warps=warp)
            seconds = timed_setting("scan_bwd", setting, triton_call(inputs, chunk, True),
                                    repeats)
            result["rows"].append(dict(kernel="fwd_bwd", chunk=chunk, fwd=best_fwd[0],
                                       **setting, seconds=seconds))
            if seconds is not None:
                print(f"fwd+bwd chunk {chunk:4d} (fwd {best_fwd[0]}) bwd block {block:2d} "
                      f"warps {warp}: {seconds * 1e3:.3f} ms", flush=True)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="mamba")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--chunks", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--blocks", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--warps", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for the sweep")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    peer, version = mamba_selective_scan()
    print(f"{torch.cuda.get_device_name(0)}; mamba-ssm {version}", flush=True)
    deadline = time.monotonic() + args.budget
    result = sweep(SHAPES[args.shape], getattr(torch, args.dtype), args.chunks, args.blocks,
                   args.warps, args.repeats, deadline, peer)
    rows = [r for r in result["rows"] if r["seconds"] is not None]
    for kernel in ("fwd", "fwd_bwd"):
        ranked = sorted((r for r in rows if r["kernel"] == kernel), key=lambda r: r["seconds"])
        reference = result.get(f"mamba_{kernel}")
        for r in ranked[:5]:
            ratio = f", {reference / r['seconds']:.2f}x mamba" if reference else ""
            print(f"best {kernel}: {r} {r['seconds'] * 1e3:.3f} ms{ratio}")
    fwd = min((r for r in rows if r["kernel"] == "fwd_bwd"), key=lambda r: r["seconds"],
              default=None)
    if fwd is not None:
        # The setting bench_scan.py --tuning applies: the best forward + backward pair.
        result["best"] = {"chunk_size": fwd["chunk"], "scan_fwd": fwd["fwd"],
                          "scan_bwd": dict(max_block_d=fwd["max_block_d"],
                                           num_warps=fwd["num_warps"])}
        print("best setting:", json.dumps(result["best"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
