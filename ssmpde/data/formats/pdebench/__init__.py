"""PDEBench HDF5 files: read them as ssmpde datasets, write ssmpde datasets in their layout.

PDEBench (Takamoto et al., NeurIPS 2022 Datasets and Benchmarks) keeps its data in HDF5 files
of two layouts, read by its loaders as follows (written here from its documentation and
loaders; no PDEBench code is used).

*One file of stacked samples* (``.hdf5``; PDEBench's ``FNODatasetSingle``):

* 1D scalar PDEs (Burgers, advection, ...): ``tensor`` ``[N, nt, nx]`` with ``x-coordinate``
  ``[nx]`` and ``t-coordinate`` ``[nt + 1]`` (the frame times and one more record interval);
* Darcy flow: ``tensor`` ``[N, 1, nx, ny]`` (the solution) and ``nu`` ``[N, nx, ny]`` (the
  coefficient, the operator's input), ``x-coordinate`` and ``y-coordinate``;
* compressible flow: ``density``, ``pressure``, ``Vx`` (``Vy`` in 2D), each
  ``[N, nt, nx(, ny)]``, with ``x-coordinate``, ``y-coordinate`` and ``t-coordinate``.

*One group per sample* (``.h5``; ``FNODatasetMult``, 2D reaction-diffusion and shallow water):
groups ``"0000"``, ``"0001"``, ... each holding ``data`` ``[nt, nx(, ny), channels]`` and
``grid/x``, ``grid/y``, ``grid/t`` (``nt`` entries). The loaders take every top-level key as a
sample, so such a file holds nothing else at the top.

Spatial axes are x first (``[..., nx, ny]``, ``meshgrid(x, y, indexing="ij")``), the reverse
of ssmpde's ``(y, x)``; values are float32; parameters are file attributes (``Nu``, ``beta``,
``eta``, ``zeta``, ``M``) and parts of the file name (``1D_Burgers_Sols_Nu0.001.hdf5``,
``2D_DarcyFlow_beta1.0_Train.hdf5``, ``2D_CFD_Rand_M0.1_Eta0.01_Zeta0.01_periodic_128_Train.hdf5``,
``2D_diff-react_NA_NA.h5``).

ssmpde's datasets map to them as

=========================  ==========================================================
KS, Burgers, KdV (1D)      ``tensor`` (the one state field), ``x-``/``t-coordinate``
Darcy                      ``tensor`` (the solution ``u``), ``nu`` (the coefficient ``a``)
Euler (2D)                 ``density``, ``pressure``, ``Vx``, ``Vy``; the tracer beside them
Navier–Stokes (vorticity)  per-sample groups, ``data`` ``[nt, nx, ny, 1]``; the forcing
                           (time-dependent for ``torus-vis-force``) beside it in each group
=========================  ==========================================================

Whatever PDEBench has no dataset for (per-sample parameters, forcings, tracers) is written
beside the PDEBench datasets where its loaders do not look: in the group ``ssmpde`` of a
stacked file, inside each sample group of a per-sample file. The ssmpde attributes, roles,
coordinates and config are in one file attribute, :data:`METADATA_ATTR`, so an exported
dataset reads back exactly, its floating data variables as float32 (PDEBench's precision).
A PDEBench file without that attribute reads as a dataset named after the file
(``pdebench-1d-burgers``), with its parameters parsed from the name and attributes.

Everything goes through netCDF4 (a default dependency, which writes and reads HDF5): no h5py
needed. Reading is lazy: each variable reads from the file only what is indexed.

The modules: :mod:`~ssmpde.data.formats.pdebench.read` (recognising and opening files),
:mod:`~ssmpde.data.formats.pdebench.export` (writing them),
:mod:`~ssmpde.data.formats.pdebench.unwritten` (chunks a writer never wrote) and
:mod:`~ssmpde.data.formats.pdebench.layout` (the names they share); this package is the
format's interface (:mod:`ssmpde.data.formats`) and its xarray engine.
"""

from __future__ import annotations

from ..backend import FormatBackendEntrypoint
from .export import conventional_name, export
from .layout import DESCRIPTION, EXTRAS_GROUP, METADATA_ATTR, NAME, REFERENCE
from .read import is_export, open, parse_name, sniff
from .unwritten import unwritten_chunks

__all__ = ["DESCRIPTION", "EXTRAS_GROUP", "METADATA_ATTR", "NAME", "PDEBenchBackendEntrypoint",
           "REFERENCE", "conventional_name", "export", "is_export", "open", "parse_name", "sniff",
           "unwritten_chunks"]


class PDEBenchBackendEntrypoint(FormatBackendEntrypoint):
    """``xr.open_dataset(path, engine="pdebench")``: a PDEBench file as :func:`open` reads it.

    Name the engine: without it xarray's netCDF4 engine, which looks first, takes every HDF5
    file and shows PDEBench's raw datasets instead.
    """

    format_name = NAME
    description = DESCRIPTION
    url = "https://github.com/pdebench/PDEBench"
