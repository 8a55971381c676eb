"""Shared helpers of the benchmark scripts: machine facts, timing, atomic JSON results."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import time
from pathlib import Path

from ssmpde.data import atomic_path

RESULTS = Path(__file__).parent / "results"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def header(name: str) -> dict:
    """The fields every result file starts with: what, when, on what machine."""
    import numpy as np

    import ssmpde

    return {"benchmark": name,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(), "processor": cpu_model(),
                        "cpus": os.cpu_count(), "python": platform.python_version()},
            "versions": {"ssmpde": ssmpde.__version__, "numpy": np.__version__}}


def seconds(function):
    """(elapsed seconds, result) of one call."""
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def write(result: dict, path: Path) -> None:
    """Write ``result`` as JSON through a temporary name (no half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(result, indent=2))
