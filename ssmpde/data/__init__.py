"""Dataset schema and file IO: the one place that says what an ssmpde dataset is.

The implementation lives in :mod:`ssmpde.data.schema`; every public name is re-exported here.
"""

from .schema import *  # noqa: F403
from .schema import (  # noqa: F401
    ENCODED_BY,
    NETCDF_COMPRESSION,
    NETCDF_SUFFIXES,
    STANDARD_DIMS,
    ZARR_FORMAT,
    ZARR_SUFFIXES,
    __all__,
    is_ssmpde_output,
)
