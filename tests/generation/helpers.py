"""Helpers shared by the generation tests (in one process, on a cluster, on a full disk)."""

import numpy as np
import xarray as xr


def assert_same_dataset(a: xr.Dataset, b: xr.Dataset, *, history: bool = False) -> None:
    """Bit for bit: every variable's values, dtype and attributes, every global attribute
    (the history line, which carries the time of the run, only with ``history``)."""
    assert set(a.variables) == set(b.variables)
    assert dict(a.sizes) == dict(b.sizes)
    for name in a.variables:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].dims == b[name].dims, name
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
        assert a[name].attrs == b[name].attrs, name
    skip = set() if history else {"history"}
    assert {k: v for k, v in a.attrs.items() if k not in skip} == \
        {k: v for k, v in b.attrs.items() if k not in skip}
