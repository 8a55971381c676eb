"""Seconds per training epoch of the GeoMaNO ``darcy`` preset on a GPU, on synthetic inputs.

One epoch of the paper's Darcy setting is 1000 samples at batch 4: 250 AdamW steps of the
relative-L2 loss at 85². Random inputs cost the same as real ones, so this measures the
epoch time without a dataset (the paper reports 23.98 s/epoch and 1.17 s inference); the
accuracy needs the full run (``benchmarks/gpu/session.sh train``).

    python -m benchmarks.gpu.epoch_time
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import cuda_seconds, interleaved
from ssmpde.surrogates import build_model


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2, help="epochs timed")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    torch.manual_seed(0)
    model = build_model("geomano", preset="darcy").cuda()
    print("parameters", sum(p.numel() for p in model.parameters()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = torch.randn(4, 1, 85, 85, device="cuda"), torch.randn(4, 1, 85, 85, device="cuda")

    def step():
        optimizer.zero_grad()
        loss = (model(x) - y).norm() / y.norm()
        loss.backward()
        optimizer.step()

    for _ in range(10):  # compile the kernels, warm the allocator
        step()

    def epoch():
        for _ in range(250):
            step()

    for seconds in interleaved({"epoch": epoch}, repeats=args.epochs,
                               clock=cuda_seconds).times["epoch"]:
        print(f"seconds for 250 training steps (one epoch of 1000 at batch 4): {seconds:.2f}")
    model.eval()
    inputs = torch.randn(200, 1, 85, 85, device="cuda")

    @torch.no_grad()
    def inference():
        for i in range(0, 200, 4):
            model(inputs[i:i + 4])

    seconds, _ = cuda_seconds(inference)
    print(f"inference, 200 samples at batch 4: {seconds:.2f} s")
    print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
