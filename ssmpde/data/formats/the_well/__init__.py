"""The Well's HDF5 format: export ssmpde datasets for The Well's loaders, open Well data lazily.

`The Well <https://polymathic-ai.org/the_well/>`_ (Ohana et al., NeurIPS 2024) keeps each
dataset as a directory ::

    NAME/
      stats.yaml                 mean, std, rms of every field and of its time increments
      data/train/NAME.hdf5       trajectories for training
      data/valid/NAME.hdf5       ... for validation
      data/test/NAME.hdf5        ... for testing

Each HDF5 file holds ``n_trajectories`` trajectories on one grid: root attributes
``dataset_name``, ``grid_type``, ``n_spatial_dims``, ``n_trajectories`` and
``simulation_parameters``; a ``dimensions`` group (``time`` and one coordinate per name in its
``spatial_dims`` attribute, in array order); the fields in ``t0_fields`` (scalars),
``t1_fields`` (vectors: one array with a trailing component axis, components in
``spatial_dims`` order) and ``t2_fields`` (tensors), each array shaped
``[sample?, time?, *space, *components]`` as its ``sample_varying``, ``time_varying`` and
``dim_varying`` flags say; per-sample or per-time numbers in ``scalars``; and one group per
boundary in ``boundary_conditions`` (``bc_type`` WALL, OPEN or PERIODIC, ``associated_dims``,
``associated_fields``, a boolean ``mask`` over the associated dimensions that is true where the
condition holds).

:func:`export` writes an ssmpde dataset in this layout, :func:`open` reads a Well file or
directory back as an ssmpde dataset (lazily), :func:`sniff` recognises one. The mapping:

* a field ``[sample, time, y, x]`` is a t0 field ``[sample, time, x, y]`` (The Well's axis
  order is ``spatial_dims = ["x", "y"]``); a 1D field ``[sample, time, x]`` keeps its order;
* the components of a vector (``velocity_x``, ``velocity_y`` with ``vector="velocity"``) are
  one t1 field ``velocity`` ``[sample, time, x, y, 2]``;
* a field without a time axis (``[sample, y, x]``) is a t0 field with ``time_varying`` false
  (one of The Well's constant fields);
* a per-sample parameter is a scalar ``[sample]``; one with extra dimensions, such as the
  ``[sample, 2, 6]`` forcing amplitudes, one scalar per element (``forcing_amplitude_0_0``,
  ...); a parameter without a sample axis is also listed in ``simulation_parameters``;
* ``boundary_conditions`` become boundary groups: periodic → PERIODIC, reflective and
  dirichlet → WALL, outflow and neumann → OPEN.

Values keep their dtype (float64 from the solvers; The Well's own files are float32), so a
round trip is exact; the names, units, roles, grid placement, coordinates and global attributes
that The Well has no place for are kept in an extra ``ssmpde_metadata`` dataset and an
``ssmpde_sample`` attribute, which The Well's loaders ignore and :func:`open` uses to give the
original dataset back exactly.

Reading and writing use h5py: The Well's loaders read scalar and boolean HDF5 attributes, which
netCDF cannot write (its attributes are always arrays) and which the netCDF library does not
reliably read back (it drops HDF5 boolean attributes). h5py is in the ``interop`` extra.

The modules: :mod:`~ssmpde.data.formats.the_well.read` and
:mod:`~ssmpde.data.formats.the_well.header` read, :mod:`~ssmpde.data.formats.the_well.export`,
:mod:`~ssmpde.data.formats.the_well.plan` and :mod:`~ssmpde.data.formats.the_well.statistics`
write, :mod:`~ssmpde.data.formats.the_well.layout` holds the names they share; this package is
the format's interface (:mod:`ssmpde.data.formats`) and its xarray engine.

References
----------
R. Ohana et al., The Well: a large-scale collection of diverse physics simulations for machine
learning, NeurIPS 2024 Datasets and Benchmarks.
"""

from __future__ import annotations

from ..backend import FormatBackendEntrypoint
from .export import dataset_name, export, is_export, split_sizes
from .layout import (DESCRIPTION, METADATA, NAME, SAMPLE_INDICES, SPLIT_FRACTIONS, SPLITS,
                     STATS_FILE)
from .read import open, sniff

__all__ = [
    "DESCRIPTION",
    "METADATA",
    "NAME",
    "SAMPLE_INDICES",
    "SPLITS",
    "SPLIT_FRACTIONS",
    "STATS_FILE",
    "TheWellBackendEntrypoint",
    "dataset_name",
    "export",
    "is_export",
    "open",
    "sniff",
    "split_sizes",
]


class TheWellBackendEntrypoint(FormatBackendEntrypoint):
    """``xr.open_dataset(path, engine="the-well")``: a file, split directory or dataset
    directory of The Well as :func:`open` reads it (needs h5py).

    ``xr.open_dataset(directory)`` finds this engine by itself: no engine of xarray's own
    claims a directory that holds no zarr store.
    """

    format_name = NAME
    description = DESCRIPTION
    url = "https://polymathic-ai.org/the_well/"
