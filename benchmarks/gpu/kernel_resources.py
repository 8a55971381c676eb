"""Registers, spills and shared memory of the 1D scan kernels, compiled for a GPU without one.

Triton compiles ahead of time for a named target (``triton.compile`` with a ``GPUTarget``);
the resource use of the binary is read with the ``cuobjdump`` Triton ships. No GPU is needed,
so this runs on the CPU machine before a device session: a setting whose kernel spills
registers to local memory (``stack`` > 0) is unlikely to win the tuning sweep, and the
recurrent kernels' defaults in ``scan_triton.TUNING`` were chosen from this table.

    python -m benchmarks.gpu.kernel_resources               # sm_90 (H100), float32
    python -m benchmarks.gpu.kernel_resources --arch 90 --dtype bf16
    python -m benchmarks.gpu.kernel_resources --variants    # every option set compiles?

``--variants`` compiles the recurrent kernels at their default tuning for every combination of
options (all on / all off, forward / reverse, atomics or partials) with float32, bfloat16 and
float64 inputs, and exits 1 if one fails: a compile error found here costs no device time.

Each line: kernel, channels per program, warps, unroll; registers per thread, stack bytes per
thread (spills), shared memory bytes. Inputs: D, z, delta_bias and softplus, as in
``bench_scan --gpu``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

SETTINGS = [(16, 1), (32, 1), (32, 2), (64, 2), (64, 4), (128, 4)]


def resources(fn, constants, num_warps, pointer, arch):
    """``(registers, stack bytes, shared bytes)`` of ``fn`` compiled for ``sm_{arch}``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {name: "constexpr" if name in constants else
                 (pointer if name.endswith("_ptr") else "i32") for name in fn.arg_names}
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants),
                              target=GPUTarget("cuda", arch, 32),
                              options=dict(num_warps=num_warps))
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        usage = subprocess.run([str(tool), "--dump-resource-usage", str(cubin)],
                               capture_output=True, text=True, check=True).stdout
    registers = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    return (int(registers.group(1)) if registers else None,
            int(stack.group(1)) if stack else None, compiled.metadata.shared)


def variants(st, rec, tl, arch) -> int:
    """Compile the recurrent kernels (``rec``, their module) for every option set at the
    tuning in ``st.TUNING``; print each; return the failures."""
    import itertools

    failed = 0
    fwd, bwd = st.TUNING["scan_rec_fwd"], st.TUNING["scan_rec_bwd"]
    for on, reverse, (pointer, dtype) in itertools.product(
            (True, False), (True, False),
            (("*fp32", tl.float32), ("*bf16", tl.float32), ("*fp64", tl.float64))):
        flags = dict(HAS_D=on, HAS_R=on, HAS_Z=on, HAS_BIAS=on, HAS_H0=on, SOFTPLUS=on,
                     REVERSE=reverse, DTYPE=dtype, BLOCK_N=16, CHUNK=st.RECURRENT_CHUNK_SIZE)
        carry = {k: flags[k] for k in ("HAS_Z", "HAS_BIAS", "SOFTPLUS", "REVERSE", "DTYPE",
                                       "BLOCK_N", "CHUNK")}
        for name, fn, constants, tuning in (
                ("fwd", rec._rec_fwd_kernel, dict(flags, LOCAL=False), fwd),
                ("fwd, first pass", rec._rec_fwd_kernel, dict(flags, LOCAL=True), fwd),
                ("bwd", rec._rec_bwd_kernel, dict(flags, ATOMIC=on), bwd),
                ("bwd, first pass", rec._rec_bwd_carry_kernel, carry, bwd)):
            constants = dict(constants, BLOCK_D=tuning["max_block_d"], UNROLL=tuning["unroll"])
            label = (f"{name:16s} options {'on ' if on else 'off'} "
                     f"{'reverse' if reverse else 'forward'} {pointer[1:]}")
            try:
                registers, stack, shared = resources(fn, constants, tuning["num_warps"],
                                                     pointer, arch)
                print(f"{label}: {registers} registers, {stack} B stack, {shared} B shared",
                      flush=True)
            except Exception as error:  # noqa: BLE001 - report every failing variant
                failed += 1
                print(f"{label}: FAILED {type(error).__name__}: {str(error)[-300:]}", flush=True)
    for pointer in ("*fp32", "*fp64"):
        print(f"carry {pointer[1:]}:",
              resources(rec._carry_kernel, dict(REVERSE=True, BLOCK=rec._CARRY_BLOCK), 4,
                        pointer, arch))
    print(f"{failed} variants failed")
    return failed


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability, 90 = H100")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                        help="the inputs' dtype (the kernels accumulate in float32)")
    parser.add_argument("--unroll", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--variants", action="store_true",
                        help="compile every option set of the recurrent kernels instead")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("unset TRITON_INTERPRET: the interpreter compiles nothing")
    import triton.language as tl

    from ssmpde.kernels import _scan_triton_chunked as chunked
    from ssmpde.kernels import _scan_triton_recurrent as rec
    from ssmpde.kernels import scan_triton as st

    if args.variants:
        failed = variants(st, rec, tl, args.arch)
        raise SystemExit(1 if failed else 0)

    flags = dict(HAS_D=True, HAS_R=False, HAS_Z=True, HAS_BIAS=True, HAS_H0=False,
                 SOFTPLUS=True, REVERSE=False, DTYPE=tl.float32, BLOCK_N=16)
    pointer = f"*{args.dtype}"
    rows = []

    def report(name, block, warps, unroll, fn, constants):
        registers, stack, shared = resources(fn, constants, warps, pointer, args.arch)
        rows.append(dict(kernel=name, block_d=block, num_warps=warps, unroll=unroll,
                         registers=registers, stack=stack, shared=shared))
        print(f"{name:14s} channels {block:3d} warps {warps} unroll {unroll}: "
              f"{registers} registers, {stack} B stack, {shared} B shared", flush=True)

    for block, warps in SETTINGS:
        for unroll in args.unroll:
            common = dict(flags, BLOCK_D=block, CHUNK=st.RECURRENT_CHUNK_SIZE, UNROLL=unroll)
            report("recurrent fwd", block, warps, unroll, rec._rec_fwd_kernel,
                   dict(common, LOCAL=False))
            report("recurrent bwd", block, warps, unroll, rec._rec_bwd_kernel,
                   dict(common, ATOMIC=True))
    for name, kernel, fn in (("chunked fwd", "scan_fwd", chunked._scan_fwd_kernel),
                             ("chunked bwd", "scan_bwd", chunked._scan_bwd_kernel)):
        tuning = st.TUNING[kernel]
        constants = dict(flags, BLOCK_D=tuning["max_block_d"], CHUNK=st.DEFAULT_CHUNK_SIZE)
        if kernel == "scan_bwd":
            constants["ATOMIC"] = True
        report(name, tuning["max_block_d"], tuning["num_warps"], 1, fn, constants)
    return rows


if __name__ == "__main__":
    main()
