"""Dataset schema and file IO: the one place that says what an ssmpde dataset is.

Every dataset the toolkit writes or reads is an :class:`xarray.Dataset` with

* dimensions ``sample``, ``time``, ``y``, ``x`` (1D problems have no ``y``; steady problems no
  ``time``), each with a coordinate variable that carries ``units``;
* one data variable per physical field or per-sample parameter, each with ``long_name`` and
  ``units``; extra non-standard dimensions (``forcing_mode``, ...) are allowed on data variables;
* on the variables the solvers write, their boundary conditions, vector components and the
  placement of the grid points (:func:`boundary_conditions_of`, :func:`vectors_of`,
  :data:`GRID_PLACEMENT`);
* the global attributes :data:`REQUIRED_GLOBAL_ATTRS`, with ``Conventions = "CF-1.10"`` and the
  full generator config as a JSON object in ``ssmpde_config``.

:func:`build_dataset` assembles such a dataset, :func:`validate` checks one and lists every
problem with its fix, :func:`save` writes netCDF4 or zarr atomically, :func:`open_dataset` and
:func:`load_dataset` read them back and validate, :func:`describe` summarises one for
``ssmpde info``, :func:`check_file` reads every chunk of one (``ssmpde info --check``),
:func:`convert` copies one between netCDF4 and zarr.  The ``ds.ssmpde`` accessor
exposes the same operations on a dataset.

Parallel writers (dask workers of ``ssmpde generate --workers``) share one zarr store:
:func:`create_store` lays it out with every sample still missing, each worker fills its own
samples with :func:`write_store_region`, the one driver records finished sample ranges in the
store's :data:`PROGRESS_ATTR` attribute (:class:`StoreProgress`), and :func:`finish_store` marks
it complete. Readers refuse a store that still has a progress record.

Every name is importable from ``ssmpde.data``; the modules underneath, each one concept, are

* :mod:`ssmpde.data.schema`: :func:`build_dataset` and :func:`roles_of`, and every name of
  the schema's parts below, re-exported;
* :mod:`ssmpde.data.coordinates`: dimension names and coordinates;
* :mod:`ssmpde.data.roles`: what each variable is (roles, vector components);
* :mod:`ssmpde.data.boundary`: boundary conditions;
* :mod:`ssmpde.data.global_attrs`: global attributes and the generator config;
* :mod:`ssmpde.data.validation`: :func:`validate`;
* :mod:`ssmpde.data.errors`: :class:`SchemaError` and :class:`DatasetFileError`;
* :mod:`ssmpde.data.outputs`: atomic writes, write locks and full disks for any output;
* :mod:`ssmpde.data.files`: writing netCDF4 and zarr files (save, convert);
* :mod:`ssmpde.data.reading`: reading them (open, load);
* :mod:`ssmpde.data.output_policy`: the output policy of every command (:func:`check_output`);
* :mod:`ssmpde.data.integrity`: what every reader checks (missing and undecodable chunks,
  dimension order) and :func:`check_file`;
* :mod:`ssmpde.data.formats`: the foreign formats (:mod:`ssmpde.data.formats.pdebench`, ...)
  that :func:`open_dataset` reads and :func:`convert` writes, each also an xarray engine;
* :mod:`ssmpde.data.progress`: the progress record of a store being written;
* :mod:`ssmpde.data.store`: zarr stores written in parallel;
* :mod:`ssmpde.data.summary`: :func:`describe`;
* :mod:`ssmpde.data.accessor`: the ``ds.ssmpde`` accessor.

Notes
-----
Time is a plain number with plain units (``"1"``, ``"s"``, ...), never a calendar date, so files
are always opened with ``decode_times=False`` and ``decode_timedelta=False``: the ``time``
coordinate comes back with the dtype, values and ``units`` attribute it was written with.
"""

from __future__ import annotations

from .accessor import SsmpdeAccessor
from .files import NETCDF_COMPRESSION, ZARR_FORMAT, Conversion, convert, save, size_bound
from .check import IntegrityReport, check_file
from .integrity import DamagedChunk
from .output_policy import (
    FIGURE_FORMATS,
    NETCDF_SUFFIXES,
    ZARR_SUFFIXES,
    check_output,
    figure_metadata,
    is_ssmpde_output,
)
from .outputs import (
    DiskFullError,
    OutputLockedError,
    atomic_path,
    block_size,
    disk_space,
    disk_usage,
    free_space,
    output_lock,
    remove_output,
    remove_stale_temporaries,
)
from .progress import PROGRESS_ATTR, StoreProgress, store_progress
from .reading import check_path, load_dataset, open_dataset
from .schema import (
    BOUNDARY_CONDITIONS,
    BOUNDARY_KINDS,
    BOUNDS_DIM,
    CONVENTIONS,
    ENCODED_BY,
    GRID_PLACEMENT,
    GRID_PLACEMENTS,
    REQUIRED_GLOBAL_ATTRS,
    ROLE,
    ROLES,
    SAMPLE,
    SPATIAL_DIMS,
    STANDARD_DIMS,
    TIME,
    VECTOR,
    VECTOR_COMPONENT,
    X,
    Y,
    DatasetFileError,
    SchemaError,
    boundary_conditions_of,
    build_dataset,
    canonical_dims,
    config_of,
    format_boundary_conditions,
    grid_coordinates,
    parse_boundary_conditions,
    roles_of,
    sample_coordinate,
    spatial_coordinate,
    time_coordinate,
    validate,
    vectors_of,
)
from .store import create_store, finish_store, update_store_progress, write_store_region
from .summary import describe

__all__ = [
    "BOUNDARY_CONDITIONS",
    "BOUNDARY_KINDS",
    "BOUNDS_DIM",
    "CONVENTIONS",
    "ENCODED_BY",
    "FIGURE_FORMATS",
    "GRID_PLACEMENT",
    "GRID_PLACEMENTS",
    "NETCDF_COMPRESSION",
    "NETCDF_SUFFIXES",
    "PROGRESS_ATTR",
    "REQUIRED_GLOBAL_ATTRS",
    "ROLE",
    "ROLES",
    "SAMPLE",
    "SPATIAL_DIMS",
    "STANDARD_DIMS",
    "TIME",
    "VECTOR",
    "VECTOR_COMPONENT",
    "X",
    "Y",
    "ZARR_FORMAT",
    "ZARR_SUFFIXES",
    "Conversion",
    "DamagedChunk",
    "DatasetFileError",
    "DiskFullError",
    "IntegrityReport",
    "OutputLockedError",
    "SchemaError",
    "SsmpdeAccessor",
    "StoreProgress",
    "atomic_path",
    "block_size",
    "boundary_conditions_of",
    "build_dataset",
    "canonical_dims",
    "check_file",
    "check_output",
    "check_path",
    "config_of",
    "convert",
    "create_store",
    "describe",
    "disk_space",
    "disk_usage",
    "figure_metadata",
    "finish_store",
    "format_boundary_conditions",
    "free_space",
    "grid_coordinates",
    "is_ssmpde_output",
    "load_dataset",
    "open_dataset",
    "output_lock",
    "parse_boundary_conditions",
    "remove_output",
    "remove_stale_temporaries",
    "roles_of",
    "sample_coordinate",
    "save",
    "size_bound",
    "spatial_coordinate",
    "store_progress",
    "time_coordinate",
    "update_store_progress",
    "validate",
    "vectors_of",
    "write_store_region",
]
