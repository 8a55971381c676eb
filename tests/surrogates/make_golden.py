"""Regenerate the GeoMaNO golden output. Run only when the model is meant to change:

    python tests/surrogates/make_golden.py
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.surrogates.test_geomano import GOLDEN, golden_output  # noqa: E402

if __name__ == "__main__":
    out = golden_output()
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({"shape": list(out.shape),
                                  "values": [float(v) for v in out.flatten()]}))
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes)")
