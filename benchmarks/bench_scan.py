"""Selective scans: ssmpde's CPU path against the PyTorch loop a user would write.

Side by side in one run, forward + backward, float32:

* 1D scan at batch 4, channels 128, state 16, length 1936 (Darcy's 44×44 tokens; with R, D, z,
  delta_bias), and
* the 2D scan on a 44×44 grid (same batch, channels, state),

each timed as the median of alternating rounds, and the peak memory of each measured in a
fresh subprocess (peak RSS above the level before the call, sampled every millisecond), also at
state 4 to show how memory scales with state × length. When CUDA is available, the Triton
kernels are timed against the loop on the GPU too.

    python benchmarks/bench_scan.py            # writes benchmarks/results/scan.json
"""

from __future__ import annotations

import argparse
import datetime as dt
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import RESULTS, write  # noqa: E402


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


def timed(implementation, kind, inputs, device):
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    run(implementation, kind, inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def compare(kind, fast, device, batch, channels, state, side, repeats):
    inputs = make_inputs(kind, batch, channels, state, side, device=device)
    run(fast, kind, make_inputs(kind, 1, 2, 2, 3, device=device))  # compile outside the timing
    loop_t, fast_t = [], []
    for _ in range(repeats):
        loop_t.append(timed("loop", kind, inputs, device))
        fast_t.append(timed(fast, kind, inputs, device))
    ratios = np.array(loop_t) / np.array(fast_t)
    return {"loop_seconds": float(np.median(loop_t)), f"{fast}_seconds": float(np.median(fast_t)),
            "speedup": float(np.median(ratios)), "speedups": ratios.round(2).tolist()}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS / "scan.json")
    args = parser.parse_args(argv)
    batch, channels, side = 4, 128, 44
    result = {
        "benchmark": "selective_scan",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "shape": {"batch": batch, "channels": channels, "length": side * side, "grid": [side, side]},
        "cpu": {}, "peak_memory_mib": {}, "cuda": None,
    }
    print(f"Selective scan, forward + backward, float32, batch {batch}, channels {channels}, "
          f"L = {side * side} (1D) / {side}x{side} (2D); medians of {args.repeats} rounds")
    print("| scan | state | loop s | ssmpde cpu s | speed-up | loop peak MiB | cpu peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("1d", "2d"):
        for state in (4, 16):
            row = compare(kind, "cpu", "cpu", batch, channels, state, side, args.repeats)
            memory = {name: peak_memory_mib(name, kind, batch, channels, state, side)
                      for name in ("loop", "cpu")}
            result["cpu"][f"{kind}_state{state}"] = row
            result["peak_memory_mib"][f"{kind}_state{state}"] = memory
            print(f"| {kind} | {state} | {row['loop_seconds']:.2f} | {row['cpu_seconds']:.3f} | "
                  f"{row['speedup']:.0f}x | {memory['loop']:.0f} | {memory['cpu']:.0f} |")
    if torch.cuda.is_available():
        result["cuda"] = {kind: compare(kind, "triton", "cuda", batch, channels, 16, side,
                                        args.repeats) for kind in ("1d", "2d")}
        for kind, row in result["cuda"].items():
            print(f"CUDA {kind}: loop {row['loop_seconds'] * 1e3:.1f} ms, triton "
                  f"{row['triton_seconds'] * 1e3:.2f} ms, {row['speedup']:.0f}x")
    write(result, args.out)
    return result


if __name__ == "__main__":
    main()
