"""Sweep the 1D Triton scans' tuning on a CUDA GPU.

``--kernel chunked`` (the default kernel): for each chunk size, the forward kernel is timed over
``max_block_d × num_warps`` and then the backward kernel over the same grid (its time is that of
forward + backward, with the forward at its best setting for that chunk).

``--kernel recurrent``: one coordinate at a time from the current ``TUNING`` (channels per
program, warps, the position loop's unroll factor, the programs that segments must reach), the
forward first, then the backward with the best forward (timed as forward + backward), then the
chunk size.

mamba-ssm's ``selective_scan_fn`` is timed on the same inputs in the same run when it is
importable, so every line also gives the ratio a user cares about. The result (``best``) is the
setting to write into ``ssmpde.kernels.scan_triton`` (``TUNING`` and the chunk sizes);
``bench_scan.py --tuning`` applies it.

    PYTHONPATH=/tmp/site:/tmp/mamba/src:/tmp/mamba/build \\
        python -m benchmarks.gpu.tune_scan --kernel recurrent --budget 120 --out /tmp/tune.json

Settings that fail to compile (register or shared-memory limits) are reported and skipped.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch

from benchmarks.bench_scan import TRITON_1D, cuda_call, gpu_inputs_1d, mamba_selective_scan
from benchmarks.common import cuda_seconds, interleaved
from ssmpde.kernels import scan_triton

SHAPES = {"mamba": (4, 1536, 16, 2048), "geomano_44x44": (4, 128, 16, 1936),
          "rows_64": (256, 128, 16, 64)}

#: The recurrent kernels' coordinates, each swept with the others held.
RECURRENT_SPACE = {"max_block_d": [16, 32, 64, 128], "num_warps": [1, 2, 4, 8],
                   "unroll": [1, 2, 4], "min_programs": [1, 264, 528, 1056, 2112, 4224]}


def median_seconds(call, repeats, warmup=2):
    """Median CUDA-event seconds of ``call`` over ``repeats`` rounds after ``warmup``."""
    return interleaved({"call": call}, repeats=repeats, warmup=warmup,
                       clock=cuda_seconds).medians()["call"]


def triton_call(inputs, chunk, backward, kernel="chunked"):
    """bench_scan's call of the Triton ``kernel`` with ``chunk`` positions per chunk (the
    default is read at call time)."""
    implementation = {v: k for k, v in TRITON_1D.items()}[kernel]
    call = cuda_call(implementation, inputs, backward)
    name = "RECURRENT_CHUNK_SIZE" if kernel == "recurrent" else "DEFAULT_CHUNK_SIZE"

    def chunked():
        saved = getattr(scan_triton, name)
        setattr(scan_triton, name, chunk)
        try:
            return call()
        finally:
            setattr(scan_triton, name, saved)

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


def start(shape, dtype, repeats, peer):
    """The inputs of ``shape`` and a result holding mamba-ssm's times on them."""
    batch, channels, state, length = shape
    inputs = gpu_inputs_1d(batch, channels, state, length, dtype)
    result = {"shape": shape, "dtype": str(dtype), "rows": []}
    if peer is not None:
        result["mamba_fwd"] = median_seconds(cuda_call("mamba", inputs, False, peer), repeats)
        result["mamba_fwd_bwd"] = median_seconds(cuda_call("mamba", inputs, True, peer), repeats)
        print(f"mamba-ssm: fwd {result['mamba_fwd'] * 1e3:.3f} ms, fwd+bwd "
              f"{result['mamba_fwd_bwd'] * 1e3:.3f} ms", flush=True)
    return inputs, result


def sweep_recurrent(shape, dtype, chunks, repeats, deadline, peer):
    """Coordinate sweep of the recurrent kernels (module docstring); ``best`` as it stands
    when the deadline comes."""
    inputs, result = start(shape, dtype, repeats, peer)
    chunk = scan_triton.RECURRENT_CHUNK_SIZE
    best = {"RECURRENT_CHUNK_SIZE": chunk}
    for kernel, backward in (("scan_rec_fwd", False), ("scan_rec_bwd", True)):
        current = dict(scan_triton.TUNING[kernel])
        fastest = None
        for knob, values in RECURRENT_SPACE.items():
            for value in values:
                if time.monotonic() > deadline:
                    break
                setting = dict(current, **{knob: value})
                seconds = timed_setting(kernel, setting, triton_call(inputs, chunk, backward,
                                                                     "recurrent"), repeats)
                result["rows"].append(dict(kernel=kernel, chunk=chunk, **setting,
                                           seconds=seconds))
                if seconds is None:
                    continue
                print(f"{kernel} {setting}: {seconds * 1e3:.3f} ms", flush=True)
                if fastest is None or seconds < fastest:
                    fastest, current = seconds, setting
        best[kernel] = current
        scan_triton.TUNING[kernel] = current  # the backward sweep runs the best forward
    fastest = None
    for value in chunks:
        if time.monotonic() > deadline:
            break
        seconds = median_seconds(triton_call(inputs, value, True, "recurrent"), repeats)
        result["rows"].append(dict(kernel="chunk", chunk=value, seconds=seconds))
        print(f"recurrent fwd+bwd chunk {value}: {seconds * 1e3:.3f} ms", flush=True)
        if fastest is None or seconds < fastest:
            fastest, best["RECURRENT_CHUNK_SIZE"] = seconds, value
    result["best"] = best
    return result


def sweep(shape, dtype, chunks, blocks, warps, repeats, deadline, peer):
    inputs, result = start(shape, dtype, repeats, peer)
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
    parser.add_argument("--kernel", choices=scan_triton.KERNELS, default="chunked")
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
    if args.kernel == "recurrent":
        result = sweep_recurrent(SHAPES[args.shape], getattr(torch, args.dtype), args.chunks,
                                 args.repeats, deadline, peer)
        reference = result.get("mamba_fwd_bwd")
        final = median_seconds(triton_call(gpu_inputs_1d(*SHAPES[args.shape],
                                                         getattr(torch, args.dtype)),
                                           result["best"]["RECURRENT_CHUNK_SIZE"], True,
                                           "recurrent"), args.repeats)
        ratio = f", {reference / final:.2f}x mamba" if reference else ""
        print(f"best setting: {json.dumps(result['best'])}: fwd+bwd {final * 1e3:.3f} ms{ratio}")
        if args.out:
            args.out.write_text(json.dumps(result, indent=1, default=str))
        return result
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
        result["best"] = {"DEFAULT_CHUNK_SIZE": fwd["chunk"], "scan_fwd": fwd["fwd"],
                          "scan_bwd": dict(max_block_d=fwd["max_block_d"],
                                           num_warps=fwd["num_warps"])}
        print("best setting:", json.dumps(result["best"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
