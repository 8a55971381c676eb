"""Regenerate the golden outputs of the surrogate tests. Run only when a model is meant to
change:

    python tests/surrogates/make_golden.py                 # GeoMaNO (golden/geomano_tiny.json)
    python tests/surrogates/make_golden.py --model ssno    # SS-NO (golden/ssno_tiny.json)
    python tests/surrogates/make_golden.py --model lamo    # LaMO (golden/lamo_tiny.json)
    python tests/surrogates/make_golden.py --model mno     # MNO (golden/mno_tiny.json)
    python tests/surrogates/make_golden.py --model lean-fno  # lean FNO (golden/lean_fno_tiny.json)
    python tests/surrogates/make_golden.py --model all     # all of them
"""

import argparse
import contextlib
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

#: Model name → the test module holding its GOLDEN path and golden_output().
MODULES = {"geomano": "tests.surrogates.test_geomano", "ssno": "tests.surrogates.test_ssno",
           "lamo": "tests.surrogates.test_lamo", "mno": "tests.surrogates.test_mno",
           "lean-fno": "tests.surrogates.test_lean_fno"}


@contextlib.contextmanager
def built_in_float64():
    """Build a golden model in float64 from the start, not in float32 and then ``.double()``.

    A model's initialisation runs transcendental functions (``exp``, ``log``, ``expm1`` of the
    S6 Δ bias, ...) that torch hands to MKL's vector math library. Their float32 results
    differ by one ulp between MKL's code paths (Intel AVX-512 or AVX2 against AMD, where it
    takes its compatible path), and a weight one float32 ulp off moves an output by ~1e-9
    relative, twenty times a float64 pin's tolerance. Built in float64, the same paths differ
    at round-off (~1e-15), so the pins hold on every CPU (``MKL_CBWR=AVX2|AVX512|COMPATIBLE``;
    tests/test_portability.py runs them under each).
    """
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def check_golden(path: Path, out) -> None:
    """Assert ``out`` equals the golden file at ``path`` (float64, rtol 1e-10)."""
    import torch

    expected = json.loads(path.read_text())
    assert list(out.shape) == expected["shape"]
    torch.testing.assert_close(out.flatten(), torch.tensor(expected["values"],
                                                            dtype=torch.float64),
                               rtol=1e-10, atol=1e-12)
    assert path.stat().st_size < 50_000


def write_golden(model: str) -> None:
    module = importlib.import_module(MODULES[model])
    out = module.golden_output()
    golden = module.GOLDEN
    golden.parent.mkdir(exist_ok=True)
    golden.write_text(json.dumps({"shape": list(out.shape),
                                  "values": [float(v) for v in out.flatten()]}))
    print(f"wrote {golden} ({golden.stat().st_size} bytes)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="Regenerate the golden outputs of the surrogate tests.")
    parser.add_argument("--model", choices=[*MODULES, "all"], default="geomano",
                        help="which golden file to regenerate (default: geomano)")
    args = parser.parse_args()
    for name in (MODULES if args.model == "all" else [args.model]):
        write_golden(name)
