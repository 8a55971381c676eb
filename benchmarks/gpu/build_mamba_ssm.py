"""Build mamba-ssm's selective-scan CUDA extension for this machine's GPU only.

``pip install mamba-ssm`` either downloads a prebuilt wheel (impossible on a machine without
network) or compiles ``selective_scan_cuda`` for eight GPU architectures, which takes tens of
minutes. This script compiles the same sources with the same nvcc flags as mamba-ssm's
``setup.py``, for the local architecture only, and for real (float) weights only: the complex
weight instantiations of the backward, which the benchmark never calls, are left out by
dropping the complex branch of the weight-type dispatch. The kernels themselves are untouched.

    python -m benchmarks.gpu.build_mamba_ssm mamba_ssm-2.3.2.post1.tar.gz --out /tmp/mamba

Afterwards ``PYTHONPATH=/tmp/mamba/src:/tmp/mamba/build`` makes ``import mamba_ssm`` and its
``selective_scan_fn`` work (the Python package from the source distribution, the extension
from the build folder).
"""

from __future__ import annotations

import argparse
import os
import re
import tarfile
import time
from pathlib import Path

FLAGS = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
         "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
         "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
         "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo"]
SOURCES = ["selective_scan.cpp", "selective_scan_fwd_fp32.cu", "selective_scan_fwd_fp16.cu",
           "selective_scan_fwd_bf16.cu", "selective_scan_bwd_fp32_real.cu",
           "selective_scan_bwd_fp16_real.cu", "selective_scan_bwd_bf16_real.cu"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdist", type=Path, help="mamba_ssm-*.tar.gz")
    parser.add_argument("--out", type=Path, default=Path("/tmp/mamba"))
    args = parser.parse_args(argv)
    import torch
    from torch.utils.cpp_extension import load

    src = args.out / "src"
    with tarfile.open(args.sdist) as archive:
        archive.extractall(args.out, filter="data")
    root = next(args.out.glob("mamba_ssm-*"))
    if src.exists() or src.is_symlink():
        src.unlink()
    src.symlink_to(root.resolve())
    csrc = root / "csrc" / "selective_scan"
    cpp = csrc / "selective_scan.cpp"
    text = cpp.read_text()
    text, count = re.subn(r"\} else if \(WTYPE == at::ScalarType::ComplexFloat\) \{.*?__VA_ARGS__\(\);\s*\\\n",
                          "", text, flags=re.S)
    if count != 1:
        raise SystemExit("could not find the complex-weight branch in selective_scan.cpp")
    cpp.write_text(text)
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    build = args.out / "build"
    build.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    started = time.perf_counter()
    load(name="selective_scan_cuda", sources=[str(csrc / s) for s in SOURCES],
         extra_cflags=["-O3", "-std=c++17"],
         extra_cuda_cflags=FLAGS + [f"-gencode=arch=compute_{arch},code=sm_{arch}"],
         extra_include_paths=[str(csrc)], build_directory=str(build), verbose=False)
    print(f"built selective_scan_cuda for sm_{arch} in {time.perf_counter() - started:.0f} s "
          f"into {build}")


if __name__ == "__main__":
    main()
