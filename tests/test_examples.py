"""Every example script runs, at tiny sizes, and leaves what it promises."""

import numpy as np

from ssmpde import data


def test_demo_runs_and_writes_dataset_and_figure(tmp_path):
    from examples import demo

    result = demo.main(["--out", str(tmp_path), "--tiny"])
    with data.open_dataset(result["dataset"]) as ds:
        assert ds.vorticity.shape == (2, 3, 16, 16)
        assert np.all(np.isfinite(ds.vorticity.values))
    png = result["figure"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
