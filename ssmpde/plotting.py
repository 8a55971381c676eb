"""Figures that say more than numbers: snapshots of dataset fields (matplotlib, to file)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import xarray as xr

from . import data

__all__ = ["plot_hybrid", "plot_snapshots"]


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
    return _save(fig, path, dpi)


def _save(fig, path, dpi) -> os.PathLike:
    """Write ``fig`` through a temporary name (no half-written image) and close it."""
    import matplotlib.pyplot as plt

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


def plot_hybrid(path: str | os.PathLike, *, reference: np.ndarray, hybrid: np.ndarray,
                surrogate: np.ndarray, times: Sequence[float], errors: dict[str, np.ndarray],
                schedule: str, field: str = "vorticity", sample: int = 0,
                sample_label: int | None = None, dpi: int = 110) -> os.PathLike:
    """Hybrid rollout figure: the last frame of the solver-only reference, the hybrid run and
    the surrogate-only run, the hybrid's error, and relative L2 error against time for every
    schedule on one axis.

    ``reference``, ``hybrid``, ``surrogate`` are ``[batch, time, field, y, x]``; ``errors``
    maps a schedule to its per-step relative L2 ``[time]``.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13.5, 6.2), layout="constrained")
    top = fig.subfigures(2, 1, height_ratios=[1.0, 0.9])
    axes = top[0].subplots(1, 4)
    last = -1
    frames = [reference[sample, last, 0], hybrid[sample, last, 0], surrogate[sample, last, 0]]
    limit = float(max(np.abs(f).max() for f in frames)) or 1.0
    titles = ["solver only (reference)", f"hybrid ({schedule})", "surrogate only"]
    for ax, frame, title in zip(axes[:3], frames, titles):
        image = ax.imshow(frame, origin="lower", extent=(0, 1, 0, 1), cmap="RdBu_r",
                          vmin=-limit, vmax=limit, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("x", fontsize=8)
        ax.set_ylabel("y", fontsize=8)
    top[0].colorbar(image, ax=list(axes[:3]), shrink=0.85, label=f"{field} (non-dimensional)")
    error = np.abs(frames[1] - frames[0])
    image = axes[3].imshow(error, origin="lower", extent=(0, 1, 0, 1), cmap="magma",
                           interpolation="nearest")
    axes[3].set_title("|hybrid − reference|", fontsize=9)
    axes[3].set_xlabel("x", fontsize=8)
    top[0].colorbar(image, ax=axes[3], shrink=0.85, label="absolute error")
    label = sample if sample_label is None else sample_label
    top[0].suptitle(f"sample {label}, t = {float(times[last]):g}", fontsize=10)
    ax = top[1].subplots()
    for name, curve in errors.items():
        if not np.any(curve > 0):  # the solver-only run matches exactly: no place on log axes
            ax.plot([], [], " ", label=f"{name}: exact (0)")
            continue
        ax.plot(times, np.where(curve > 0, curve, np.nan), marker="o", markersize=3,
                label=name)
    ax.set_xlabel("time (non-dimensional)")
    ax.set_ylabel("relative L2 error vs solver")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, title="schedule", title_fontsize=8)
    return _save(fig, path, dpi)
