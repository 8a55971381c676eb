"""Figures that say more than numbers: snapshots of dataset fields (matplotlib, to file)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import xarray as xr

from . import data

__all__ = ["plot_snapshots"]


def plot_snapshots(ds: xr.Dataset, path: str | os.PathLike, *, variable: str = "vorticity",
                   samples: Sequence[int] = (0, 1), num_times: int = 5,
                   dpi: int = 110) -> os.PathLike:
    """Write a grid of snapshots: one row per sample, ``num_times`` evenly spaced times.

    Each row shares a symmetric colour scale (a diverging map centred on zero) and has its
    own colour bar labelled with the variable's long name and units.

    Parameters
    ----------
    ds : xarray.Dataset
        A dataset with ``variable[sample, time, y, x]``.
    path : path
        Output image (PNG, PDF or SVG by suffix); written atomically.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if variable not in ds:
        raise ValueError(f"dataset has no variable {variable!r}; it has {sorted(ds.data_vars)}")
    field = ds[variable]
    if field.dims != (data.SAMPLE, data.TIME, data.Y, data.X):
        raise ValueError(f"{variable!r} must have dims (sample, time, y, x), got {field.dims}")
    samples = [s for s in samples if s < ds.sizes[data.SAMPLE]]
    times = np.unique(np.linspace(0, ds.sizes[data.TIME] - 1, num_times).round().astype(int))
    units = field.attrs.get("units", "")
    label = f"{field.attrs.get('long_name', variable)}" + (f" [{units}]" if units != "1" else
                                                            " (non-dimensional)")
    x, y = ds[data.X].values, ds[data.Y].values
    dx = x[1] - x[0] if len(x) > 1 else 1.0
    dy = y[1] - y[0] if len(y) > 1 else 1.0
    extent = (x[0], x[-1] + dx, y[0], y[-1] + dy)
    fig, axes = plt.subplots(len(samples), len(times), squeeze=False,
                             figsize=(2.3 * len(times) + 1.0, 2.3 * len(samples) + 0.6),
                             layout="constrained")
    for row, sample in enumerate(samples):
        frames = field.isel(sample=sample, time=list(times)).values
        limit = float(np.max(np.abs(frames))) or 1.0
        for col, t in enumerate(times):
            ax = axes[row, col]
            image = ax.imshow(frames[col], origin="lower", extent=extent, cmap="RdBu_r",
                              vmin=-limit, vmax=limit, interpolation="nearest")
            ax.set_title(f"sample {int(ds[data.SAMPLE][sample])}, "
                         f"t = {float(ds[data.TIME][t]):g}", fontsize=9)
            ax.set_xticks([0, 0.5, 1])
            ax.set_yticks([0, 0.5, 1])
            ax.tick_params(labelsize=7)
            if row == len(samples) - 1:
                ax.set_xlabel("x", fontsize=8)
            if col == 0:
                ax.set_ylabel("y", fontsize=8)
        fig.colorbar(image, ax=axes[row, :].tolist(), shrink=0.9, label=label)
    title = ds.attrs.get("title", "")
    config = data.config_of(ds).get("solver", {})
    details = ", ".join(f"{k} = {config[k]}" for k in ("viscosity", "forcing") if k in config)
    fig.suptitle(f"{title}\n{details}", fontsize=10)
    path = os.fspath(path)
    root, suffix = os.path.splitext(path)
    tmp = f"{root}.tmp{suffix}"
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)
    return path
