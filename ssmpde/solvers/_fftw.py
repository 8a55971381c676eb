"""FFTW called from compiled code: plans made once here, executed inside numba kernels.

pyFFTW executes a plan from Python, which costs about a microsecond a call: more than a
512-point transform itself. A time step of a 1D semilinear PDE makes eight transforms a
sample, so at small batches the calls, not the arithmetic, set the pace. This module makes
FFTW plans (``FFTW_ESTIMATE``, one transform each) through FFTW's C interface in the copy of
FFTW that pyFFTW ships and has already loaded, and gives numba kernels FFTW's new-array
execute functions (``fftw_execute_dft_r2c`` and ``_c2r``, and the single-precision ``fftwf_``
ones) as external symbols. A kernel then runs whole time steps, transforms included, without
returning to Python.

One plan serves every row: FFTW's new-array execute applies a plan to any arrays of the
plan's size, strides and alignment, so each sample is transformed by the same plan whatever
the batch (its bits do not depend on the batch size or its place in it), and threads share
plans, each with its own rows.

See the FFTW manual, "New-array Execute Functions" and "Thread safety".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading

import numpy as np
import pyfftw
from llvmlite import binding
from numba import types

__all__ = ["EXECUTE", "Plans", "aligned_row"]

_FFTW_ESTIMATE = 1 << 6
_FFTW_DESTROY_INPUT = 1
_PREFIX = {np.float64: "fftw", np.float32: "fftwf"}
_LIBRARY_STEM = {np.float64: "libfftw3-", np.float32: "libfftw3f-"}


def _library_path(dtype) -> str:
    """The FFTW library pyFFTW loaded (its wheel's ``pyfftw.libs``), else the system's."""
    stem = _LIBRARY_STEM[dtype]
    folder = os.path.join(os.path.dirname(os.path.dirname(pyfftw.__file__)), "pyfftw.libs")
    found = sorted(glob.glob(os.path.join(folder, stem + "*.so*")))
    if found:
        return found[0]
    system = ctypes.util.find_library(stem.rstrip("-").removeprefix("lib"))
    if system is None:
        raise ImportError(f"no FFTW library ({stem.rstrip('-')}) next to pyFFTW or on the "
                          "system: reinstall pyfftw (pip install --force-reinstall pyfftw)")
    return system


def _load(dtype) -> ctypes.CDLL:
    path = _library_path(dtype)
    library = ctypes.CDLL(path)
    # The same library for the kernels: their external symbols resolve to it at link time.
    binding.load_library_permanently(path)
    prefix = _PREFIX[dtype]
    pointer, integer = ctypes.c_void_p, ctypes.c_int
    for kind in ("r2c", "c2r"):
        make = getattr(library, f"{prefix}_plan_many_dft_{kind}")
        make.restype = pointer
        make.argtypes = [integer, ctypes.POINTER(integer), integer, pointer, pointer, integer,
                         integer, pointer, pointer, integer, integer, ctypes.c_uint]
    getattr(library, f"{prefix}_destroy_plan").argtypes = [pointer]
    safe = getattr(library, f"{prefix}_make_planner_thread_safe", None)
    if safe is not None:  # FFTW >= 3.3.5: pyFFTW's threads and ours may plan at once
        safe()
    return library


_LIBRARIES = {dtype: _load(dtype) for dtype in (np.float64, np.float32)}
_PLANNING = threading.Lock()


def _external(name: str):
    # the plan travels as a pointer-sized integer (its address), the arrays as pointers
    return types.ExternalFunction(name, types.void(types.intp, types.voidptr, types.voidptr))


#: The new-array execute functions per real dtype: ``(r2c, c2r)``, each called from a numba
#: kernel as ``f(plan, in.ctypes.data, out.ctypes.data)`` (the plan an address, see
#: :attr:`Plans.forward`).
EXECUTE = {dtype: (_external(f"{prefix}_execute_dft_r2c"),
                   _external(f"{prefix}_execute_dft_c2r"))
           for dtype, prefix in _PREFIX.items()}


def aligned_row(length: int, dtype) -> np.ndarray:
    """A zeroed 1D array on pyFFTW's SIMD alignment (the alignment the plans are made for)."""
    out = pyfftw.empty_aligned(length, dtype=dtype)
    out[...] = 0
    return out


class Plans:
    """A forward (r2c) and a backward (c2r, input destroyed) plan of one ``n``-point transform.

    Unnormalised, as :class:`~ssmpde.solvers.spectral.RealFFT`. The plans are made on two
    scratch rows of pyFFTW's alignment; a kernel may execute them on any rows of the same
    alignment (:func:`aligned_row`). ``dtype`` is the real type, float64 or float32.
    """

    def __init__(self, n: int, dtype=np.float64) -> None:
        self.dtype = np.dtype(dtype).type
        if self.dtype not in _LIBRARIES:
            raise ValueError(f"FFTW plans are float64 or float32, got {np.dtype(dtype)}")
        self.n = int(n)
        complex_dtype = np.result_type(self.dtype, np.complex64)
        real, spectral = aligned_row(n, self.dtype), aligned_row(n // 2 + 1, complex_dtype)
        library, prefix = _LIBRARIES[self.dtype], _PREFIX[self.dtype]
        size = (ctypes.c_int * 1)(n)
        with _PLANNING:
            self.forward = getattr(library, f"{prefix}_plan_many_dft_r2c")(
                1, size, 1, real.ctypes.data, None, 1, n, spectral.ctypes.data, None, 1,
                n // 2 + 1, _FFTW_ESTIMATE)
            self.backward = getattr(library, f"{prefix}_plan_many_dft_c2r")(
                1, size, 1, spectral.ctypes.data, None, 1, n // 2 + 1, real.ctypes.data,
                None, 1, n, _FFTW_ESTIMATE | _FFTW_DESTROY_INPUT)
        if not self.forward or not self.backward:
            raise RuntimeError(f"FFTW could not plan a {n}-point real transform")
        self._destroy = getattr(library, f"{prefix}_destroy_plan")

    def __del__(self) -> None:
        destroy = getattr(self, "_destroy", None)
        # At interpreter exit this module's globals may already be gone (None): the process
        # frees the plans with everything else then.
        if destroy is None or _PLANNING is None:
            return
        with _PLANNING:
            destroy(self.forward)
            destroy(self.backward)
