"""The normalisation statistics of ``stats.yaml``, gathered block by block while an export
writes the training split."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ssmpde import __version__

from .plan import _Field


class _Moments:
    """Count, mean and sum of squared deviations over all axes but the trailing ``order``,
    merged block by block (Chan, Golub & LeVeque) so a dataset need not fit in memory."""

    def __init__(self, order: int):
        self.order = order
        self.count = 0
        self.mean: np.ndarray | None = None
        self.m2: np.ndarray | None = None

    def add(self, block: np.ndarray) -> None:
        block = np.asarray(block, dtype=np.float64)
        axes = tuple(range(block.ndim - self.order))
        count = math.prod(block.shape[:block.ndim - self.order])
        if count == 0:
            return
        # Non-finite values (inf - inf) make NaN statistics, written as .nan: no warning.
        with np.errstate(invalid="ignore", over="ignore"):
            mean = block.mean(axis=axes)
            m2 = ((block - mean) ** 2).sum(axis=axes)
            if self.count == 0:
                self.count, self.mean, self.m2 = count, mean, m2
                return
            total = self.count + count
            delta = mean - self.mean
            self.mean = self.mean + delta * (count / total)
            self.m2 = self.m2 + m2 + delta ** 2 * (self.count * count / total)
        self.count = total

    def values(self) -> dict[str, Any]:
        with np.errstate(invalid="ignore", over="ignore"):
            variance = self.m2 / self.count
            return {"mean": self.mean, "std": np.sqrt(variance),
                    "rms": np.sqrt(variance + self.mean ** 2)}


class _Statistics:
    """The statistics of ``stats.yaml`` for the fields of the training split."""

    def __init__(self, fields: list[_Field]):
        self.values = {f.name: _Moments(f.order) for f in fields}
        self.deltas = {f.name: _Moments(f.order) for f in fields if f.time_varying}

    def add(self, field: _Field, block: np.ndarray, *, samples: bool = False) -> None:
        """``block``: the field's array for one sample (or all of it if not sample-varying),
        time first if time-varying; with ``samples``, for several samples (sample first, then
        time)."""
        self.values[field.name].add(block)
        if field.time_varying:
            with np.errstate(invalid="ignore", over="ignore"):
                increments = np.diff(np.asarray(block, dtype=np.float64),
                                     axis=1 if samples else 0)
            self.deltas[field.name].add(increments)

    def yaml(self) -> str:
        sections: dict[str, dict[str, Any]] = {}
        for suffix, moments in (("", self.values), ("_delta", self.deltas)):
            for key in ("mean", "std", "rms"):
                sections[key + suffix] = {name: m.values()[key] for name, m in moments.items()
                                          if m.count}
        lines = ["# Normalisation statistics of the training split, written by ssmpde "
                 f"{__version__}:",
                 "# mean, std (population) and rms of every field over samples, times and grid",
                 "# points (one per component for vectors), and of its increments between",
                 "# consecutive times (*_delta)."]
        for section, entries in sections.items():
            if not entries:
                lines.append(f"{section}: {{}}")
                continue
            lines.append(f"{section}:")
            for name, value in entries.items():
                lines.append(f"  {json.dumps(name)}: {_yaml_number(value)}")
        return "\n".join(lines) + "\n"


def _yaml_float(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if exponent and "." not in mantissa:
        # YAML 1.1 (PyYAML) reads '1e-05' as a string: a float needs its '.'.
        text = f"{mantissa}.0e{exponent}"
    return text


def _yaml_number(value: np.ndarray) -> str:
    value = np.asarray(value)
    if value.ndim == 0:
        return _yaml_float(value)
    return "[" + ", ".join(_yaml_float(v) for v in value.ravel()) + "]"
