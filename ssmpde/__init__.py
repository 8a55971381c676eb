"""ssmpde: classical PDE solvers and state-space-model neural-operator surrogates in one loop."""

from __future__ import annotations

import os as _os

# numba's OpenMP workers spin after each parallel region; FFTW's threads then fight them for
# the cores and a step takes ten times longer. Passive waiting fixes that; a user's own
# setting wins. (Read once, when the OpenMP runtime loads, i.e. at `import torch`: import
# ssmpde before torch for it to take effect; measured in benchmarks/bench_threads.py.)
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

__all__ = ["__version__", "show_versions"]


def show_versions() -> str:
    """Return (and print) the versions of ssmpde and the libraries it stands on.

    Include the output in bug reports.
    """
    import importlib.metadata as metadata
    import platform

    lines = [f"ssmpde: {__version__}", f"python: {platform.python_version()}",
             f"platform: {platform.platform()}"]
    for name in ("numpy", "scipy", "numba", "pyfftw", "xarray", "netCDF4", "zarr", "dask",
                 "torch", "triton", "safetensors", "tqdm", "matplotlib"):
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "not installed"
        lines.append(f"{name}: {version}")
    text = "\n".join(lines)
    print(text)
    return text
