"""The golden pins hold on every CPU: MKL rounds differently on Intel (AVX-512, AVX2) and on
AMD (its compatible path), at ~1e-9 relative in float64 where a float32 step is involved.

``MKL_CBWR`` ("conditional bitwise reproducibility") makes MKL take one code path whatever
the machine, so running the pins under each of the three paths in a fresh process (MKL reads
the variable once, when it loads) covers both vendors from one machine. A pin that passes
here under all three passes on a user's laptop.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The golden-output tests of the surrogates (tests/surrogates/golden/*.json).
PINS = [f"tests/surrogates/test_{name}.py::test_golden_output"
        for name in ("geomano", "lamo", "lean_fno", "mno", "ssno")]


@pytest.mark.mkl_paths  # `make test-mkl-paths`, which .ci/run runs after `make test`
@pytest.mark.parametrize("branch", ["AVX2", "AVX512", "COMPATIBLE"])
def test_golden_pins_hold_on_every_mkl_code_path(branch):
    env = {**os.environ, "MKL_CBWR": branch, "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-o", "addopts=", *PINS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"MKL_CBWR={branch}:\n{result.stdout[-3000:]}"
    assert "5 passed" in result.stdout, result.stdout[-1000:]
