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

References
----------
R. Ohana et al., The Well: a large-scale collection of diverse physics simulations for machine
learning, NeurIPS 2024 Datasets and Benchmarks.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import math
import numbers
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, CachingFileManager
from xarray.core import indexing

from ssmpde import __version__
from ssmpde.core import decode_json

from ..outputs import atomic_path
from ..schema import (BOUNDARY_CONDITIONS, CONVENTIONS, ROLE, SAMPLE, SPATIAL_DIMS, TIME,
                      VECTOR, VECTOR_COMPONENT, X, Y, DatasetFileError, boundary_conditions_of,
                      format_boundary_conditions, sample_coordinate, time_coordinate, validate,
                      vectors_of)
from . import check_declared_memory
from .backend import FormatBackendEntrypoint

__all__ = [
    "DESCRIPTION",
    "NAME",
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

NAME = "the-well"
DESCRIPTION = ("The Well: a directory with data/train|valid|test/*.hdf5 and stats.yaml, or one "
               ".hdf5 file" + ("" if importlib.util.find_spec("h5py") is not None
                               else " (needs h5py: pip install 'ssmpde[interop]')"))
#: The split directories under ``data/``, in the order :func:`export` fills them.
SPLITS = ("train", "valid", "test")
#: Default shares of the samples per split: :func:`split_sizes` says how they are rounded.
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
#: The normalisation statistics beside ``data/`` (read by The Well's ``ZScoreNormalization``
#: and ``RMSNormalization``).
STATS_FILE = "stats.yaml"
HDF5_SUFFIXES = (".hdf5", ".h5")
#: Extra root dataset (JSON text): what The Well has no place for, for :func:`open`.
METADATA = "ssmpde_metadata"
#: Extra root attribute: the ssmpde sample index of each trajectory in the file.
SAMPLE_INDICES = "ssmpde_sample"
_METADATA_VERSION = 1
_REEXPORT = "the file was changed after ssmpde wrote it; export it again"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: The Well's spatial dimension names, in its array order, for an ssmpde grid.
_WELL_DIMS = {1: (X,), 2: (X, Y)}
_TO_WELL_BC = {"periodic": "PERIODIC", "reflective": "WALL", "dirichlet": "WALL",
               "outflow": "OPEN", "neumann": "OPEN"}
# The Well's WALL does not say slip or no-slip; a wall the flow does not cross is `reflective`.
_FROM_WELL_BC = {"PERIODIC": "periodic", "WALL": "reflective", "OPEN": "outflow"}
_GROUPS = ("t0_fields", "t1_fields", "t2_fields")
_ROOT_ATTRS = ("dataset_name", "grid_type", "n_spatial_dims", "n_trajectories",
               "simulation_parameters", SAMPLE_INDICES)
_REFERENCES = ("Ohana et al., The Well: a large-scale collection of diverse physics simulations "
               "for machine learning, NeurIPS 2024 Datasets and Benchmarks")


def _h5py():
    try:
        import h5py
    except ImportError as error:
        raise ImportError("reading or writing The Well's HDF5 files needs h5py: pip install "
                          "'ssmpde[interop]' (or pip install h5py)") from error
    return h5py


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------

def split_sizes(num_samples: int,
                fractions: Sequence[float] = SPLIT_FRACTIONS) -> tuple[int, int, int]:
    """How many samples :func:`export` puts in ``train``, ``valid`` and ``test``.

    The validation and test shares are rounded half up, and each split with a positive share
    gets at least one sample; the training split gets the rest. The samples go in their order:
    the first ones to ``train``, then ``valid``, then ``test``. With fewer samples than splits
    with a positive share, every sample goes to ``train``.

    Parameters
    ----------
    num_samples : int
        Number of samples in the dataset.
    fractions : sequence of three float
        Shares of ``train``, ``valid`` and ``test``: non-negative, finite, with a positive sum
        (they are divided by it).

    Returns
    -------
    tuple of int
        ``(train, valid, test)``, summing to ``num_samples``.

    Examples
    --------
    >>> split_sizes(10)
    (8, 1, 1)
    >>> split_sizes(3)
    (1, 1, 1)
    >>> split_sizes(20, (0.5, 0.5, 0.0))
    (10, 10, 0)
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) \
            or num_samples < 0:
        raise ValueError(f"num_samples must be a non-negative integer, got {num_samples!r}")
    shares = tuple(fractions)
    if len(shares) != len(SPLITS) or not all(
            isinstance(f, numbers.Real) and math.isfinite(f) and f >= 0 for f in shares) \
            or sum(shares) <= 0:
        raise ValueError(f"split fractions must be three non-negative numbers (train, valid, "
                         f"test) with a positive sum, e.g. {SPLIT_FRACTIONS}; got {fractions!r}")
    total = float(sum(shares))
    n = int(num_samples)
    if n < sum(1 for f in shares if f > 0):
        return n, 0, 0
    sizes = [0] + [0 if f == 0 else max(1, math.floor(n * f / total + 0.5)) for f in shares[1:]]
    if shares[0] > 0:
        sizes[0] = n - sizes[1] - sizes[2]
        while sizes[0] < 1:
            # valid and test rounded up past the total: give back from the larger one
            sizes[1 if sizes[1] >= sizes[2] else 2] -= 1
            sizes[0] += 1
    elif shares[1] > 0 and shares[2] > 0:
        sizes[2] = min(sizes[2], n - 1)
        sizes[1] = n - sizes[2]
    else:
        sizes[1 if shares[1] > 0 else 2] = n
    return sizes[0], sizes[1], sizes[2]


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Field:
    """One Well field: a t0 field (one variable) or a t1 field (one variable per component)."""

    name: str
    order: int
    variables: tuple[str, ...]
    well_dims: tuple[str, ...]   # the spatial axes the field varies along, in Well order
    sample_varying: bool
    time_varying: bool

    def file_dims(self) -> tuple[str, ...]:
        return ((SAMPLE,) if self.sample_varying else ()) + \
            ((TIME,) if self.time_varying else ()) + self.well_dims


@dataclasses.dataclass(frozen=True)
class _Scalar:
    """One Well scalar: a variable without spatial dimensions, or one element of one."""

    name: str
    variable: str
    element: tuple[int, ...]
    sample_varying: bool
    time_varying: bool


@dataclasses.dataclass
class _Plan:
    fields: list[_Field]
    scalars: list[_Scalar]
    constants: dict[str, Any]            # simulation_parameters: same for every sample
    boundaries: dict[str, dict]          # Well group name -> attrs and mask sides
    metadata: dict
    notes: list[str]
    cast: np.dtype | None = None         # the dtype floating data variables are written in

    def stored(self, dtype: np.dtype) -> np.dtype:
        """The dtype a data variable of ``dtype`` is written in."""
        return self.cast if self.cast is not None and dtype.kind == "f" else np.dtype(dtype)


def _float_dtype(dtype: Any) -> np.dtype | None:
    """``dtype`` of :func:`export`: None (keep) or float32 / float64."""
    if dtype is None:
        return None
    try:
        value = np.dtype(dtype)
    except TypeError:
        value = None
    if value not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be 'float32' or 'float64' (or None: keep the dataset's), "
                         f"got {dtype!r}")
    return value


def _json_value(value: Any) -> Any:
    """An attribute value as JSON that :func:`_from_json_value` turns back into an equal one."""
    if isinstance(value, np.ndarray):
        return {"__ndarray__": [_json_value(v) for v in value.tolist()],
                "dtype": value.dtype.str}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    return value


def _from_json_value(value: Any) -> Any:
    if isinstance(value, dict) and "__ndarray__" in value:
        return np.array([_from_json_value(v) for v in value["__ndarray__"]],
                        dtype=np.dtype(value["dtype"]))
    if isinstance(value, dict) and "__float__" in value:
        return float(value["__float__"])
    if isinstance(value, list):
        return [_from_json_value(v) for v in value]
    return value


def _attrs_json(attrs: Mapping) -> dict:
    return {str(key): _json_value(value) for key, value in attrs.items()}


def _attrs_from_json(attrs: Mapping) -> dict:
    return {key: _from_json_value(value) for key, value in attrs.items()}


def _check_name(name: str, what: str) -> None:
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"{what} {name!r} cannot be an HDF5 name (no '/', not empty): rename "
                         "it (ds.rename(...)) before exporting to The Well")


def _plan(ds: xr.Dataset, ndim: int, cast: np.dtype | None = None) -> _Plan:
    well_dims = _WELL_DIMS[ndim]
    spatial = set(well_dims)
    notes: list[str] = []
    vectors = vectors_of(ds)
    in_vector: dict[str, str] = {}
    fields: list[_Field] = []
    for vector, components in vectors.items():
        names = [components.get(dim) for dim in well_dims]
        problem = None
        if set(components) != spatial:
            problem = (f"has components along {sorted(components)}, not along every spatial "
                       f"dimension {list(well_dims)}")
        else:
            dims = {ds[name].dims for name in names}
            dtypes = {ds[name].dtype for name in names}
            if len(dims) > 1 or len(dtypes) > 1:
                problem = "has components with different dimensions or dtypes"
            elif not spatial & set(next(iter(dims))) or \
                    set(next(iter(dims))) - spatial - {SAMPLE, TIME}:
                problem = "is not a grid field [sample?, time?, *grid]"
        if problem is not None:
            notes.append(f"vector '{vector}' {problem}: its components are written as separate "
                         "t0 (scalar) fields")
            continue
        _check_name(vector, "vector")
        dims = ds[names[0]].dims
        fields.append(_Field(vector, 1, tuple(names), tuple(d for d in well_dims if d in dims),
                             SAMPLE in dims, TIME in dims))
        in_vector.update({name: vector for name in names})

    scalars: list[_Scalar] = []
    constants: dict[str, Any] = {}
    for name, var in ds.data_vars.items():
        if name in in_vector:
            continue
        _check_name(name, "data variable")
        dims = set(var.dims)
        extra = [d for d in var.dims if d not in spatial and d not in (SAMPLE, TIME)]
        if dims & spatial:
            if extra:
                raise ValueError(f"data variable '{name}' has dimensions {var.dims}: The Well "
                                 "holds grid fields [sample?, time?, *grid] and per-sample "
                                 f"numbers, not grids with the extra dimensions {extra}; drop "
                                 "it (ds.drop_vars) or split it into one variable per element")
            fields.append(_Field(name, 0, (name,), tuple(d for d in well_dims if d in dims),
                                 SAMPLE in dims, TIME in dims))
            continue
        shape = tuple(var.sizes[d] for d in extra)
        elements = list(np.ndindex(*shape))
        if not elements:
            raise ValueError(f"data variable '{name}' {var.dims} has no elements: The Well has "
                             "nothing to store for it; drop it (ds.drop_vars) before exporting")
        if extra:
            notes.append(f"'{name}' {var.dims} is written as {len(elements)} scalars "
                         f"{name}_<{'_'.join(extra)}> (The Well's scalars are single numbers "
                         "per sample or per time)")
        for element in elements:
            scalar = name if not extra else "_".join([name, *map(str, element)])
            scalars.append(_Scalar(scalar, name, element, SAMPLE in dims, TIME in dims))
            if SAMPLE not in dims and TIME not in dims and scalar not in _ROOT_ATTRS:
                constants[scalar] = var.values[element] if extra else var.values[()]

    taken: dict[str, str] = {}
    for kind, names in (("field", [f.name for f in fields]), ("scalar", [s.name for s in scalars])):
        for name in names:
            if name in taken:
                raise ValueError(f"The Well needs distinct names for its fields and scalars, but "
                                 f"'{name}' is both a {taken[name]} and a {kind}: rename one "
                                 "(ds.rename(...)) before exporting")
            taken[name] = kind
    for field in fields:
        roles = {ds[v].attrs.get(ROLE) for v in field.variables}
        if field.time_varying and roles & {"forcing", "diagnostic"}:
            notes.append(f"'{field.name}' (role {', '.join(sorted(r for r in roles if r))}) is a "
                         "time-varying field: The Well's loaders have no known forcing and put "
                         "it among the input and output fields")
    boundaries = _boundary_plan(ds, fields, notes)
    notes.append("units, long names, roles, grid placement and the dataset's attributes have no "
                 f"place in The Well's schema: they are kept in the extra '{METADATA}' dataset, "
                 "which ssmpde reads back and The Well's loaders ignore")
    plan = _Plan(fields, scalars, constants, boundaries, {}, notes, cast)
    plan.metadata = _metadata(ds, fields, scalars, plan)
    floating = sorted({str(var.dtype) for var in ds.data_vars.values() if var.dtype.kind == "f"})
    if floating:
        written = sorted({str(plan.stored(var.dtype)) for var in ds.data_vars.values()
                          if var.dtype.kind == "f"})
        how = "cast from " + ", ".join(floating) if written != floating else "the dataset's dtype"
        advice = ("" if written == ["float32"] else ": The Well's own files and models are "
                  "float32 (its models refuse float64 input); convert with --dtype float32 "
                  "(dtype='float32') for them")
        notes.append(f"values written as {', '.join(written)} ({how}){advice}")
    return plan


def _boundary_plan(ds: xr.Dataset, fields: list[_Field], notes: list[str]) -> dict[str, dict]:
    conditions = boundary_conditions_of(ds)
    # field -> dim -> (lower, upper) in The Well's words, from its (first) component
    per_field: dict[str, dict[str, tuple[str, str]]] = {}
    lossy: set[tuple[str, str, str]] = set()
    for field in fields:
        known = [conditions.get(v, {}) for v in field.variables]
        if any(k != known[0] for k in known[1:]):
            notes.append(f"the components of '{field.name}' have different boundary "
                         "conditions; The Well keeps one set per field: those of "
                         f"'{field.variables[0]}' are written")
        kinds = {}
        for dim, (lower, upper) in known[0].items():
            if dim not in field.well_dims:
                continue
            kinds[dim] = (_TO_WELL_BC[lower], _TO_WELL_BC[upper])
            for kind in (lower, upper):
                if kind in ("dirichlet", "neumann"):
                    lossy.add((dim, kind, _TO_WELL_BC[kind]))
        per_field[field.name] = kinds
    for dim, kind, well in sorted(lossy):
        notes.append(f"{dim}: {kind} is written as The Well's {well} (it knows WALL, OPEN and "
                     "PERIODIC only)")
    groups: dict[str, dict] = {}
    dims = sorted({d for f in fields for d in f.well_dims}, key=lambda d: (d != X, d))
    for dim in dims:
        along = [f.name for f in fields if dim in f.well_dims]
        for side in (0, 1):
            kinds = {name: per_field[name][dim][side] for name in along
                     if dim in per_field[name]}
            if not kinds:
                continue
            shared = set(kinds.values())
            if len(kinds) == len(along) and len(shared) == 1:
                keys = [(shared.pop(), ())]  # one geometric condition for every field
            else:
                keys = [(kind, (name,)) for name, kind in kinds.items()]
            for kind, owners in keys:
                group = "_".join([dim, kind.lower(), *owners])
                entry = groups.setdefault(group, {"bc_type": kind, "dim": dim,
                                                  "fields": list(owners), "sides": set()})
                entry["sides"].add(side)
    if not groups and fields:
        notes.append("no boundary conditions are recorded: The Well's loaders take every "
                     "boundary as OPEN")
    return groups


def _metadata(ds: xr.Dataset, fields: list[_Field], scalars: list[_Scalar],
              plan: _Plan) -> dict:
    stored: dict[str, dict] = {}
    for field in fields:
        for component, name in enumerate(field.variables):
            stored[name] = {"field": field.name, "group": _GROUPS[field.order],
                            "component": component if field.order else None}
    for scalar in scalars:
        var = ds[scalar.variable]
        entry = stored.setdefault(scalar.variable, {
            "scalars": [], "shape": [var.sizes[d] for d in var.dims if d not in (SAMPLE, TIME)]})
        entry["scalars"].append(scalar.name)
    variables = {}
    for name, var in ds.data_vars.items():
        variables[name] = {"dims": list(var.dims), "dtype": plan.stored(var.dtype).str,
                           "attrs": _attrs_json(var.attrs), **stored[name]}
    coords = {}
    for name, coord in ds.coords.items():
        entry = {"dims": list(coord.dims), "dtype": coord.dtype.str,
                 "attrs": _attrs_json(coord.attrs)}
        if name not in (SAMPLE, TIME, X, Y):
            entry["values"] = _json_value(coord.values)
        coords[name] = entry
    return {"version": _METADATA_VERSION, "ssmpde_version": __version__,
            "attrs": _attrs_json(ds.attrs), "coords": coords, "variables": variables}


class _Moments:
    """Count, mean and sum of squared deviations over all axes but the trailing ``order``,
    merged block by block (Chan, Golub & LeVeque) so a dataset need not fit in memory."""

    def __init__(self, order: int):
        self.order = order
        self.count = 0
        self.mean: np.ndarray | None = None
        self.m2: np.ndarray | None = None

    def add(self, block: np.ndarray) -> None:
        block = np.asarray(block, dtype=np.float64)
        axes = tuple(range(block.ndim - self.order))
        count = math.prod(block.shape[:block.ndim - self.order])
        if count == 0:
            return
        # Non-finite values (inf - inf) make NaN statistics, written as .nan: no warning.
        with np.errstate(invalid="ignore", over="ignore"):
            mean = block.mean(axis=axes)
            m2 = ((block - mean) ** 2).sum(axis=axes)
            if self.count == 0:
                self.count, self.mean, self.m2 = count, mean, m2
                return
            total = self.count + count
            delta = mean - self.mean
            self.mean = self.mean + delta * (count / total)
            self.m2 = self.m2 + m2 + delta ** 2 * (self.count * count / total)
        self.count = total

    def values(self) -> dict[str, Any]:
        with np.errstate(invalid="ignore", over="ignore"):
            variance = self.m2 / self.count
            return {"mean": self.mean, "std": np.sqrt(variance),
                    "rms": np.sqrt(variance + self.mean ** 2)}


class _Statistics:
    """The statistics of ``stats.yaml`` for the fields of the training split."""

    def __init__(self, fields: list[_Field]):
        self.values = {f.name: _Moments(f.order) for f in fields}
        self.deltas = {f.name: _Moments(f.order) for f in fields if f.time_varying}

    def add(self, field: _Field, block: np.ndarray) -> None:
        """``block``: the field's array for one sample (or all of it if not sample-varying),
        time first if time-varying."""
        self.values[field.name].add(block)
        if field.time_varying:
            with np.errstate(invalid="ignore", over="ignore"):
                increments = np.diff(np.asarray(block, dtype=np.float64), axis=0)
            self.deltas[field.name].add(increments)

    def yaml(self) -> str:
        sections: dict[str, dict[str, Any]] = {}
        for suffix, moments in (("", self.values), ("_delta", self.deltas)):
            for key in ("mean", "std", "rms"):
                sections[key + suffix] = {name: m.values()[key] for name, m in moments.items()
                                          if m.count}
        lines = ["# Normalisation statistics of the training split, written by ssmpde "
                 f"{__version__}:",
                 "# mean, std (population) and rms of every field over samples, times and grid",
                 "# points (one per component for vectors), and of its increments between",
                 "# consecutive times (*_delta)."]
        for section, entries in sections.items():
            if not entries:
                lines.append(f"{section}: {{}}")
                continue
            lines.append(f"{section}:")
            for name, value in entries.items():
                lines.append(f"  {json.dumps(name)}: {_yaml_number(value)}")
        return "\n".join(lines) + "\n"


def _yaml_float(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if exponent and "." not in mantissa:
        # YAML 1.1 (PyYAML) reads '1e-05' as a string: a float needs its '.'.
        text = f"{mantissa}.0e{exponent}"
    return text


def _yaml_number(value: np.ndarray) -> str:
    value = np.asarray(value)
    if value.ndim == 0:
        return _yaml_float(value)
    return "[" + ", ".join(_yaml_float(v) for v in value.ravel()) + "]"


def _strings(h5py, values: Sequence[str]) -> np.ndarray:
    return np.array(list(values), dtype=h5py.string_dtype())


def _field_block(ds: xr.Dataset, field: _Field, position: int | None) -> np.ndarray:
    """The field's values for one sample position (or all, if it has no sample axis), in The
    Well's axis order: [time?, *space, component?]."""
    dims = [d for d in field.file_dims() if d != SAMPLE]
    parts = []
    for name in field.variables:
        var = ds[name] if position is None else ds[name].isel({SAMPLE: position})
        parts.append(np.asarray(var.transpose(*dims).values))
    return parts[0] if field.order == 0 else np.stack(parts, axis=-1)


def _write_file(h5py, path: pathlib.Path, ds: xr.Dataset, plan: _Plan, positions: np.ndarray,
                name: str, ndim: int, statistics: _Statistics | None) -> None:
    well_dims = _WELL_DIMS[ndim]
    n = len(positions)
    with h5py.File(path, "w") as f:
        f.attrs["dataset_name"] = name
        f.attrs["grid_type"] = "cartesian"
        f.attrs["n_spatial_dims"] = np.int64(ndim)
        f.attrs["n_trajectories"] = np.int64(n)
        f.attrs["simulation_parameters"] = _strings(h5py, plan.constants)
        for key, value in plan.constants.items():
            f.attrs[key] = value
        f.attrs[SAMPLE_INDICES] = np.asarray(ds[SAMPLE].values[positions], dtype=np.int64)
        f.create_dataset(METADATA, data=json.dumps(plan.metadata, sort_keys=True),
                         dtype=h5py.string_dtype())

        dimensions = f.create_group("dimensions")
        dimensions.attrs["spatial_dims"] = _strings(h5py, well_dims)
        time = dimensions.create_dataset("time", data=ds[TIME].values)
        time.attrs["sample_varying"] = np.bool_(False)
        time.attrs["time_varying"] = np.bool_(True)
        for dim in well_dims:
            coord = dimensions.create_dataset(dim, data=ds[dim].values)
            coord.attrs["sample_varying"] = np.bool_(False)
            coord.attrs["time_varying"] = np.bool_(False)

        boundaries = f.create_group("boundary_conditions")
        for group_name, entry in plan.boundaries.items():
            group = boundaries.create_group(group_name)
            group.attrs["bc_type"] = entry["bc_type"]
            group.attrs["associated_dims"] = _strings(h5py, [entry["dim"]])
            group.attrs["associated_fields"] = _strings(h5py, entry["fields"])
            group.attrs["sample_varying"] = np.bool_(False)
            group.attrs["time_varying"] = np.bool_(False)
            mask = np.zeros(ds.sizes[entry["dim"]], dtype=bool)
            for side in entry["sides"]:
                mask[0 if side == 0 else -1] = True
            group.create_dataset("mask", data=mask)

        scalars = f.create_group("scalars")
        scalars.attrs["field_names"] = _strings(h5py, [s.name for s in plan.scalars])
        for scalar in plan.scalars:
            var = ds[scalar.variable]
            lead = [d for d in (SAMPLE, TIME) if d in var.dims]
            extra = [d for d in var.dims if d not in (SAMPLE, TIME)]
            values = np.asarray(var.transpose(*lead, *extra).values)
            values = values[(slice(None),) * len(lead) + scalar.element]
            if scalar.sample_varying:
                values = values[positions]
            values = values.astype(plan.stored(var.dtype), copy=False)
            data = scalars.create_dataset(scalar.name, data=values)
            data.attrs["sample_varying"] = np.bool_(scalar.sample_varying)
            data.attrs["time_varying"] = np.bool_(scalar.time_varying)

        for order, group_name in enumerate(_GROUPS):
            group = f.create_group(group_name)
            members = [field for field in plan.fields if field.order == order]
            group.attrs["field_names"] = _strings(h5py, [field.name for field in members])
            for field in members:
                _write_field(group, ds, field, positions, well_dims, statistics,
                             plan.stored(ds[field.variables[0]].dtype))


def _write_field(group, ds: xr.Dataset, field: _Field, positions: np.ndarray,
                 well_dims: tuple[str, ...], statistics: _Statistics | None,
                 dtype: np.dtype) -> None:
    inner = tuple(ds.sizes[d] for d in field.file_dims() if d != SAMPLE)
    inner += (len(field.variables),) if field.order else ()
    options = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
    if field.sample_varying:
        shape = (len(positions),) + inner
        layout = {"chunks": (1,) + inner, **options} if all(shape) else {}
        data = group.create_dataset(field.name, shape=shape, dtype=dtype, **layout)
        for row, position in enumerate(positions):
            block = _field_block(ds, field, int(position)).astype(dtype, copy=False)
            data[row] = block
            if statistics is not None:
                statistics.add(field, block)
    else:
        block = _field_block(ds, field, None).astype(dtype, copy=False)
        data = group.create_dataset(field.name, data=block)
        if statistics is not None:
            statistics.add(field, block)
    data.attrs["dim_varying"] = np.array([d in field.well_dims for d in well_dims], dtype=bool)
    data.attrs["sample_varying"] = np.bool_(field.sample_varying)
    data.attrs["time_varying"] = np.bool_(field.time_varying)


def dataset_name(ds: xr.Dataset) -> str:
    """The ``dataset_name`` :func:`export` gives ``ds``: its equation in The Well's style
    (``navier-stokes`` → ``navier_stokes``); The Well's loaders only require it to be the same in
    every file of a dataset."""
    equation = str(ds.attrs.get("ssmpde_equation", "")).strip() or "ssmpde"
    return "".join(c if c.isalnum() else "_" for c in equation)


def is_export(path: str | os.PathLike) -> bool:
    """Whether the Well file or directory at ``path`` was written by :func:`export` (it
    carries the ``ssmpde_metadata`` dataset), so that ``overwrite`` may replace it."""
    try:
        first = _files(pathlib.Path(os.fspath(path)).expanduser())[0]
        h5py = _h5py()
        with h5py.File(first, "r") as f:
            return METADATA in f and "n_trajectories" in f.attrs
    except (OSError, ValueError, ImportError):
        return False


def export(ds: xr.Dataset, path: str | os.PathLike, *,
           splits: Sequence[float] = SPLIT_FRACTIONS, dtype: Any = None) -> list[str]:
    """Write ``ds`` in The Well's format, for The Well's ``WellDataset`` and ``WellDataModule``.

    Parameters
    ----------
    ds : xarray.Dataset
        An ssmpde dataset with a ``time`` dimension (1D or 2D grid).
    path : str or os.PathLike
        A directory (the dataset's directory: ``data/train``, ``data/valid``, ``data/test`` and
        ``stats.yaml`` go under it), or a file ending in ``.hdf5`` or ``.h5`` (all samples in
        that one file, no statistics). Whatever is at
        ``path`` must not exist yet; it appears whole or not at all (written under a temporary
        name). :func:`ssmpde.data.convert` adds the output policy (``overwrite``, locks).
    splits : sequence of three float
        Shares of the samples for ``train``, ``valid`` and ``test`` (see :func:`split_sizes`:
        contiguous blocks in sample order). The default ``(0.8, 0.1, 0.1)`` gives every split
        at least one sample once there are three, which ``WellDataModule`` needs.
    dtype : {None, "float32", "float64"}
        The dtype of the floating data variables (fields and scalars) in the files; None keeps
        the dataset's (float64 from the solvers). The Well's own files are float32, and its
        models (``the_well.benchmark.models``, float32 weights) refuse float64 input:
        ``"float32"`` for them. Coordinates keep their dtype.

    Returns
    -------
    list of str
        Notes on what The Well's schema cannot carry and where it went instead.

    Raises
    ------
    ValueError
        For a dataset without a ``time`` dimension (The Well holds time series: steady problems
        such as Darcy do not fit), a grid variable with extra dimensions, clashing names, or
        bad ``splits``.
    FileExistsError
        If ``path`` exists.
    ImportError
        Without h5py.

    Notes
    -----
    The notes say the dtype the values were written in. Each split is one file
    ``data/<split>/<name>.hdf5`` (``<name>``: :func:`dataset_name`, also the files'
    ``dataset_name`` attribute), the fields chunked one sample per chunk and compressed
    (gzip level 4, shuffle). ``stats.yaml`` holds ``mean``, ``std``,
    ``rms`` of every field over the training split (per component for vectors; population
    standard deviation) and ``mean_delta``, ``std_delta``, ``rms_delta`` of its increments
    between consecutive times, the keys The Well's ``ZScoreNormalization`` and
    ``RMSNormalization`` read.

    Examples
    --------
    >>> notes = export(ds, "ks_well")  # doctest: +SKIP
    >>> from the_well.data import WellDataset  # doctest: +SKIP
    >>> WellDataset(path="ks_well", well_split_name="train", n_steps_input=4)  # doctest: +SKIP
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"expected an xarray.Dataset, got {type(ds).__name__}")
    cast = _float_dtype(dtype)
    validate(ds)
    if TIME not in ds.dims:
        equation = ds.attrs.get("ssmpde_equation", "this")
        raise ValueError(f"The Well holds time series (every file has a time axis and its "
                         f"loaders cut input/output windows along it), but the {equation} "
                         "dataset has no 'time' dimension (a steady problem such as Darcy): "
                         "export it to netCDF, zarr or PDEBench instead")
    if X not in ds.dims:
        raise ValueError("The Well export needs a grid: the dataset has no 'x' dimension")
    if ds.sizes[SAMPLE] == 0:
        raise ValueError("the dataset has no samples: The Well's files hold at least one "
                         "trajectory; export a dataset with samples")
    ndim = 2 if Y in ds.dims else 1
    sizes = split_sizes(ds.sizes[SAMPLE], splits)
    target = pathlib.Path(os.fspath(path)).expanduser()
    if target.exists() or target.is_symlink():
        raise FileExistsError(f"'{target}' already exists: export writes a new file or "
                              "directory (ssmpde.data.convert(..., overwrite=True) replaces an "
                              "earlier export)")
    single = target.suffix.lower() in HDF5_SUFFIXES
    name = dataset_name(ds)
    plan = _plan(ds, ndim, cast)
    h5py = _h5py()
    notes = list(plan.notes)
    with atomic_path(target) as tmp:
        if single:
            _write_file(h5py, tmp, ds, plan, np.arange(ds.sizes[SAMPLE]), name, ndim, None)
            notes.append(f"one file with all {ds.sizes[SAMPLE]} samples and no {STATS_FILE}: "
                         "export to a directory for The Well's train/valid/test layout")
            return notes
        tmp.mkdir()
        statistics = _Statistics(plan.fields)
        start = 0
        for split, size in zip(SPLITS, sizes):
            positions = np.arange(start, start + size)
            start += size
            if not size:
                continue
            folder = tmp / "data" / split
            folder.mkdir(parents=True)
            _write_file(h5py, folder / f"{name}.hdf5", ds, plan, positions, name, ndim,
                        statistics if split == "train" else None)
        (tmp / STATS_FILE).write_text(statistics.yaml())
    summary = ", ".join(f"{size} {split}" for split, size in zip(SPLITS, sizes))
    notes.append(f"samples in sample order: {summary}")
    empty = [split for split, size in zip(SPLITS, sizes) if not size]
    if empty:
        notes.append(f"no samples in {', '.join(empty)}: The Well's WellDataModule needs "
                     "files in train, valid and test (at least three samples)")
    if not sizes[0]:
        notes.append(f"no training samples: {STATS_FILE} is empty")
    return notes


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape in ((), (1,)):
        return _text(value.reshape(()).item())
    return str(value)


def _texts(value: Any) -> list[str]:
    if isinstance(value, (str, bytes)):
        return [_text(value)]
    return [_text(v) for v in np.asarray(value).ravel()]


def _flag(attrs, key: str, where: str) -> bool:
    if key not in attrs:
        raise DatasetFileError(f"{where} has no '{key}' attribute, which every entry of The "
                               "Well's schema carries: the file is not in The Well's format "
                               "(or is damaged); regenerate or re-download it")
    return bool(np.asarray(attrs[key]).reshape(-1)[0])


@dataclasses.dataclass
class _FileField:
    name: str
    order: int
    sample_varying: bool
    time_varying: bool
    dim_varying: tuple[bool, ...]
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclasses.dataclass
class _WellFile:
    path: pathlib.Path
    name: str
    n: int
    spatial_dims: tuple[str, ...]
    time: np.ndarray
    coords: dict[str, np.ndarray]
    fields: dict[str, _FileField]
    scalars: dict[str, tuple[bool, bool, np.ndarray]]
    parameters: dict[str, Any]
    boundaries: list[dict]
    metadata: dict | None
    samples: np.ndarray | None


def _is_hdf5(path: pathlib.Path) -> bool:
    try:
        with path.open("rb") as stream:
            return stream.read(len(_HDF5_SIGNATURE)) == _HDF5_SIGNATURE
    except OSError:
        return False


def _read_file(h5py, path: pathlib.Path) -> _WellFile:
    if not _is_hdf5(path):
        raise DatasetFileError(f"'{path}' is not an HDF5 file, so not a file of The Well: "
                               "check the path")
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise DatasetFileError(f"cannot read the Well file '{path}': it is truncated or "
                               f"corrupt HDF5 (underlying error: {error}); re-download or "
                               "regenerate it") from error
    with handle as f:
        missing = [g for g in ("dimensions", *_GROUPS, "scalars", "boundary_conditions")
                   if g not in f]
        missing += [a for a in ("dataset_name", "n_spatial_dims", "n_trajectories")
                    if a not in f.attrs]
        if missing:
            raise DatasetFileError(f"'{path}' is not a file of The Well: it lacks "
                                   f"{', '.join(missing)} (its root holds the attributes "
                                   "dataset_name, n_spatial_dims, n_trajectories and the groups "
                                   "dimensions, t0_fields, t1_fields, t2_fields, scalars, "
                                   "boundary_conditions)")
        n = _trajectories(f.attrs["n_trajectories"], path)
        dimensions = f["dimensions"]
        spatial_dims = tuple(_texts(dimensions.attrs.get("spatial_dims", [])))
        if len(spatial_dims) not in SPATIAL_DIMS:
            raise DatasetFileError(f"'{path}' has {len(spatial_dims)} spatial dimensions "
                                   f"{list(spatial_dims)}: ssmpde datasets are 1D or 2D grids")
        for dim in (*spatial_dims, "time"):
            if dim not in dimensions:
                raise DatasetFileError(f"'{path}' names the dimension '{dim}' but its "
                                       "'dimensions' group has no such dataset")
        _check_sizes(h5py, f, path, n, spatial_dims)
        time = dimensions["time"][()]
        if time.ndim == 2:
            if not np.all(time == time[:1]):
                raise DatasetFileError(f"'{path}' has a different time axis per trajectory: "
                                       "ssmpde datasets share one time axis")
            time = time[0]
        _check_axis(time, f"'{path}': dimensions/time")
        coords = {}
        for dim in spatial_dims:
            values = dimensions[dim][()]
            if values.ndim != 1:
                raise DatasetFileError(f"'{path}': the coordinate '{dim}' varies per sample or "
                                       "in time; ssmpde reads fixed grids only")
            _check_axis(values, f"'{path}': dimensions/{dim}")
            coords[dim] = values
        fields = {}
        for order, group_name in enumerate(_GROUPS):
            group = f[group_name]
            for name in _texts(group.attrs.get("field_names", [])):
                if name not in group:
                    raise DatasetFileError(f"'{path}' lists the field '{name}' in {group_name} "
                                           "but holds no such dataset")
                data = group[name]
                where = f"'{path}': {group_name}/{name}"
                dim_varying = tuple(bool(v) for v in np.asarray(
                    data.attrs.get("dim_varying", [True] * len(spatial_dims))).reshape(-1))
                fields[name] = _FileField(name, order, _flag(data.attrs, "sample_varying", where),
                                          _flag(data.attrs, "time_varying", where), dim_varying,
                                          tuple(data.shape), data.dtype)
        scalars = {}
        group = f["scalars"]
        for name in _texts(group.attrs.get("field_names", [])):
            data = group[name]
            where = f"'{path}': scalars/{name}"
            scalars[name] = (_flag(data.attrs, "sample_varying", where),
                             _flag(data.attrs, "time_varying", where), np.asarray(data[()]))
        parameters = {}
        for name in _texts(f.attrs.get("simulation_parameters", [])):
            if name in f.attrs:
                parameters[name] = f.attrs[name]
        boundaries = []
        for name, group in f["boundary_conditions"].items():
            where = f"'{path}': boundary_conditions/{name}"
            if "bc_type" not in group.attrs or "mask" not in group:
                raise DatasetFileError(f"{where} lacks 'bc_type' or 'mask'")
            mask = np.asarray(group["mask"][()], dtype=bool)
            lead = int(_flag(group.attrs, "sample_varying", where)) + \
                int(_flag(group.attrs, "time_varying", where))
            if lead:
                mask = mask.reshape((-1,) + mask.shape[lead:]).any(axis=0)
            boundaries.append({"type": _text(group.attrs["bc_type"]).upper(),
                               "dims": _texts(group.attrs.get("associated_dims", [])),
                               "fields": _texts(group.attrs.get("associated_fields", [])),
                               "mask": mask})
        metadata = None
        if METADATA in f:
            metadata = decode_json(f"'{path}': the dataset '{METADATA}'",
                                   text=_text(f[METADATA][()]), error=DatasetFileError,
                                   keys={"version": int, "attrs": dict, "coords": dict,
                                         "variables": dict}, fix=_REEXPORT)
        samples = None
        if SAMPLE_INDICES in f.attrs:
            samples = np.asarray(f.attrs[SAMPLE_INDICES], dtype=np.int64).reshape(-1)
        return _WellFile(path, _text(f.attrs["dataset_name"]), n, spatial_dims, time, coords,
                         fields, scalars, parameters, boundaries, metadata, samples)


def _trajectories(value: Any, path: pathlib.Path) -> int:
    """The ``n_trajectories`` attribute as a count, or an error naming the file."""
    raw = np.asarray(value)
    number = raw.reshape(()).item() if raw.size == 1 else None
    if isinstance(number, (bool, np.bool_)) or not isinstance(number, numbers.Real) \
            or not math.isfinite(number) or number < 0 or number != int(number):
        shown = _text(value) if raw.dtype.kind in "SUO" else repr(raw.tolist())
        raise DatasetFileError(f"'{path}': its n_trajectories attribute is {shown}, not a "
                               "number of trajectories (a whole number, 0 or more): the file "
                               "is damaged or was not written by The Well's tools; regenerate "
                               "or re-download it")
    return int(number)


def _check_sizes(h5py, f, path: pathlib.Path, n: int, spatial_dims: Sequence[str]) -> None:
    """Before anything is read: every sample-varying array holds ``n`` trajectories, and what
    opening reads whole (coordinates, scalars, masks, sample indices) fits in memory."""
    whole = [f["dimensions"][dim] for dim in (*spatial_dims, "time")]
    for group_name in (*_GROUPS, "scalars"):
        group = f[group_name]
        for name in _texts(group.attrs.get("field_names", [])):
            data = group.get(name)
            if not isinstance(data, h5py.Dataset):
                continue  # said by the reader, in its own words
            if group_name == "scalars":
                whole.append(data)
            flag = np.asarray(data.attrs.get("sample_varying", False)).reshape(-1)
            if flag.size and bool(flag[0]) and data.ndim and data.shape[0] != n:
                raise DatasetFileError(
                    f"'{path}': n_trajectories is {n}, but {group_name}/{name} holds "
                    f"{data.shape[0]} trajectories: the file is damaged; regenerate or "
                    "re-download it")
    for group in f["boundary_conditions"].values():
        if isinstance(group, h5py.Group) and isinstance(group.get("mask"), h5py.Dataset):
            whole.append(group["mask"])
    need = 16 * n + 8 * sum(int(data.size) for data in whole)
    check_declared_memory(path, f"{n} trajectories and {len(whole)} coordinates, scalars and "
                          "masks read whole", need)


def _check_axis(values: np.ndarray, where: str) -> None:
    """A coordinate of a Well file: finite and strictly increasing, or an error naming it."""
    values = np.asarray(values)
    if values.dtype.kind not in "iuf":
        raise DatasetFileError(f"{where} holds {values.dtype} values, not numbers: the file is "
                               "damaged or not The Well's; regenerate or re-download it")
    if values.size and not np.isfinite(values).all():
        raise DatasetFileError(f"{where} has values that are not finite (NaN or infinity): the "
                               "file is damaged; regenerate or re-download it")
    if values.ndim == 1 and values.size > 1 and not (np.diff(values) > 0).all():
        raise DatasetFileError(f"{where} is not strictly increasing: ssmpde reads coordinates "
                               "that grow along their axis; check the file")


def _files(root: pathlib.Path) -> list[pathlib.Path]:
    """The HDF5 files of a Well file, split directory or dataset directory, in reading order."""
    if not (root.exists() or root.is_symlink()):
        raise FileNotFoundError(f"no Well dataset at '{root}': no such file or directory "
                                "(check the path)")
    if root.is_file():
        return [root]

    def hdf5_in(folder: pathlib.Path) -> list[pathlib.Path]:
        return sorted(p for p in folder.iterdir()
                      if p.is_file() and p.suffix.lower() in HDF5_SUFFIXES)

    if (root / "data").is_dir():
        files = [p for split in SPLITS if (root / "data" / split).is_dir()
                 for p in hdf5_in(root / "data" / split)]
    else:
        files = hdf5_in(root)
    if not files:
        raise DatasetFileError(f"'{root}' holds no HDF5 files: a Well dataset directory has "
                               "data/train, data/valid, data/test with .hdf5 files in them "
                               "(or give one split directory or one file)")
    return files


def sniff(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file, split directory or dataset directory of The Well.

    Looks at the HDF5 signature and the root of one file (the attribute ``n_trajectories`` and
    the groups ``dimensions`` and ``t0_fields``); reads no data. Without h5py it answers False.
    """
    path = pathlib.Path(os.fspath(path)).expanduser()
    try:
        files = _files(path)
    except (OSError, ValueError):
        return False
    first = files[0]
    if not _is_hdf5(first):
        return False
    try:
        h5py = _h5py()
    except ImportError:
        return False
    try:
        with h5py.File(first, "r") as f:
            return "n_trajectories" in f.attrs and "dimensions" in f and "t0_fields" in f
    except OSError:
        # An HDF5 signature that HDF5 cannot open: in a Well directory layout, a damaged
        # file of The Well (open names it), not a directory of no known format.
        return path.is_dir()


_INTEGERS = (int, np.integer)


class _WellArray(BackendArray):
    """One variable of an opened Well dataset, read lazily from one or more files.

    Output axes are ``[sample?, time?, *space(ssmpde order)]``; ``axes[i]`` is the file axis
    (of ``[sample?, time?, *space(Well order)]``) of output axis ``i``; ``component`` indexes
    the trailing tensor axes. Along ``sample`` the files follow each other (``counts`` samples
    each); a file whose array has no sample axis (``file_sample=False``) repeats it for each of
    its samples.
    """

    def __init__(self, managers: list[CachingFileManager], dataset: str, *, counts: list[int],
                 axes: tuple[int, ...], component: tuple[int, ...], shape: tuple[int, ...],
                 dtype: np.dtype, sampled: bool, file_sample: bool):
        self.managers = managers
        self.dataset = dataset
        self.counts = counts
        self.axes = axes
        self.component = component
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.sampled = sampled
        self.file_sample = file_sample

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC,
                                                  self._read)

    def _piece(self, index: int, key: tuple) -> np.ndarray:
        with self.managers[index].acquire_context() as f:
            return np.asarray(f[self.dataset][key + self.component])

    def _read(self, key: tuple) -> np.ndarray:
        file_key: list[Any] = [slice(None)] * len(self.axes)
        for out_axis, k in enumerate(key):
            file_key[self.axes[out_axis]] = k
        if not self.sampled:
            result = self._piece(0, tuple(file_key))
        else:
            # the file axes after sample, as the files hold them
            rest = tuple(file_key[1:])
            wanted = file_key[0]
            starts = np.cumsum([0] + self.counts)
            rows = [wanted] if isinstance(wanted, _INTEGERS) else \
                list(range(*wanted.indices(int(starts[-1]))))
            blocks = []
            i = 0
            while i < len(rows):
                piece = int(np.searchsorted(starts, rows[i], side="right") - 1)
                j = i
                step = rows[i + 1] - rows[i] if i + 1 < len(rows) else 1
                if step > 0:
                    while j + 1 < len(rows) and rows[j + 1] - rows[j] == step and \
                            rows[j + 1] < starts[piece + 1]:
                        j += 1
                else:
                    step = 1
                local = slice(rows[i] - starts[piece], rows[j] - starts[piece] + 1, step)
                if self.file_sample:
                    blocks.append(self._piece(piece, (local,) + rest))
                else:
                    one = self._piece(piece, rest)
                    blocks.append(np.broadcast_to(one, (j - i + 1,) + one.shape))
                i = j + 1
            if isinstance(wanted, _INTEGERS):
                result = blocks[0][0]
            elif blocks:
                result = np.concatenate(blocks, axis=0)
            else:
                result = np.empty((0,) + self._shape_of(rest), dtype=self.dtype)
        kept_file = [a for a in range(len(self.axes)) if not isinstance(file_key[a], _INTEGERS)]
        kept_out = [self.axes[o] for o, k in enumerate(key) if not isinstance(k, _INTEGERS)]
        return np.ascontiguousarray(np.transpose(result, [kept_file.index(a) for a in kept_out]))

    def _shape_of(self, rest: tuple) -> tuple[int, ...]:
        inverse = {file_axis: out for out, file_axis in enumerate(self.axes)}
        shape = []
        for offset, k in enumerate(rest, start=1):
            if isinstance(k, _INTEGERS):
                continue
            shape.append(len(range(*k.indices(self.shape[inverse[offset]]))))
        return tuple(shape)


class _Reader:
    """Builds the variables of an ssmpde dataset from the files of one Well dataset."""

    def __init__(self, h5py, files: list[_WellFile]):
        self.files = files
        self.first = files[0]
        self.managers = [CachingFileManager(h5py.File, str(f.path), mode="r") for f in files]
        self.counts = [f.n for f in files]
        self.total = sum(self.counts)
        well = self.first.spatial_dims
        # The Well's dims in array order become x (and y): its first axis is x.
        self.names = dict(zip(well, _WELL_DIMS[len(well)]))
        self.ours = SPATIAL_DIMS[len(well)]

    def close(self) -> None:
        for manager in self.managers:
            manager.close()

    def field(self, name: str, component: tuple[int, ...], dims: Sequence[str] | None = None,
              *, broadcast: bool = True) -> xr.Variable:
        """A field (one component of it) as a lazily read variable, dims in ``dims`` order
        (default ``[sample?, time?, y?, x]``). A field without a sample axis read from several
        files gets one if ``broadcast`` (each file's array for each of its samples); without,
        it is read from the first file."""
        info = self.first.fields[name]
        file_dims = ([SAMPLE] if info.sample_varying else []) + \
            ([TIME] if info.time_varying else []) + \
            [self.names[d] for d, used in zip(self.first.spatial_dims, info.dim_varying) if used]
        sampled = info.sample_varying or (broadcast and len(self.files) > 1)
        if not info.sample_varying and sampled:
            file_dims = [SAMPLE] + file_dims
        if dims is None:
            dims = [d for d in (SAMPLE, TIME, *self.ours) if d in file_dims]
        axes = tuple(file_dims.index(d) for d in dims)
        sizes = {SAMPLE: self.total, TIME: len(self.first.time),
                 **{self.names[d]: len(v) for d, v in self.first.coords.items()}}
        shape = tuple(sizes[d] for d in dims)
        array = _WellArray(self.managers, f"{_GROUPS[info.order]}/{name}", counts=self.counts,
                           axes=axes, component=component, shape=shape, dtype=info.dtype,
                           sampled=sampled, file_sample=info.sample_varying)
        return xr.Variable(tuple(dims), indexing.LazilyIndexedArray(array))

    def scalar(self, name: str) -> tuple[tuple[str, ...], np.ndarray]:
        """A scalar's dims and values over all files (small: read eagerly)."""
        sample_varying, time_varying, _ = self.first.scalars[name]
        values = [f.scalars[name][2] for f in self.files]
        if sample_varying:
            return ((SAMPLE,) + ((TIME,) if time_varying else ()), np.concatenate(values))
        dims = (TIME,) if time_varying else ()
        if all(np.array_equal(v, values[0]) for v in values[1:]):
            return dims, values[0]
        return (SAMPLE, *dims), np.concatenate(
            [np.broadcast_to(v, (n,) + v.shape) for v, n in zip(values, self.counts)])


def _check_consistent(files: list[_WellFile]) -> None:
    first = files[0]
    for other in files[1:]:
        problems = []
        if other.spatial_dims != first.spatial_dims or any(
                not np.array_equal(other.coords[d], first.coords[d]) for d in first.spatial_dims):
            problems.append("different grids")
        if not np.array_equal(other.time, first.time):
            problems.append("different time axes")
        if {k: (v.order, v.sample_varying, v.time_varying, v.dim_varying, v.shape[-v.order:]
                if v.order else ()) for k, v in other.fields.items()} != \
                {k: (v.order, v.sample_varying, v.time_varying, v.dim_varying, v.shape[-v.order:]
                     if v.order else ()) for k, v in first.fields.items()}:
            problems.append("different fields")
        if set(other.scalars) != set(first.scalars):
            problems.append("different scalars")
        if (other.metadata is None) != (first.metadata is None) or (
                other.metadata is not None and other.metadata["variables"]
                != first.metadata["variables"]):
            problems.append("different ssmpde metadata")
        if problems:
            raise DatasetFileError(f"'{other.path}' and '{first.path}' have {' and '.join(problems)}"
                                   ": ssmpde opens files of one grid, time axis and set of fields "
                                   "together; open them one at a time")


def _open_ssmpde(reader: _Reader, metadata: dict) -> xr.Dataset:
    """Our own export: every name, attribute and coordinate as it was."""
    if metadata.get("version") != _METADATA_VERSION:
        raise DatasetFileError(f"'{reader.first.path}' was written by ssmpde "
                               f"{metadata.get('ssmpde_version')} with metadata version "
                               f"{metadata.get('version')}; this ssmpde reads version "
                               f"{_METADATA_VERSION}: open it with that version")
    coords = {}
    for name, entry in metadata["coords"].items():
        dtype = np.dtype(entry["dtype"])
        if name == SAMPLE:
            samples = [f.samples if f.samples is not None else np.arange(f.n)
                       for f in reader.files]
            values = np.concatenate(samples)
        elif name == TIME:
            values = reader.first.time
        elif name in reader.ours:
            well = {ours: well for well, ours in reader.names.items()}[name]
            values = reader.first.coords[well]
        else:
            values = _from_json_value(entry["values"])
        coords[name] = xr.Variable(tuple(entry["dims"]), np.asarray(values, dtype=dtype),
                                   _attrs_from_json(entry["attrs"]))
    variables = {}
    for name, entry in metadata["variables"].items():
        dims = tuple(entry["dims"])
        attrs = _attrs_from_json(entry["attrs"])
        if "field" in entry:
            component = () if entry["component"] is None else (entry["component"],)
            variables[name] = reader.field(entry["field"], component, dims, broadcast=False)
            variables[name].attrs.update(attrs)
            continue
        lead = tuple(d for d in (SAMPLE, TIME) if d in dims)
        extra = tuple(d for d in dims if d not in lead)
        parts = []
        for scalar in entry["scalars"]:
            scalar_dims, values = reader.scalar(scalar)
            if scalar_dims != lead:
                raise DatasetFileError(f"'{reader.first.path}': the scalar '{scalar}' has dims "
                                       f"{scalar_dims}, its ssmpde metadata says {lead}: the "
                                       "file was changed after ssmpde wrote it")
            parts.append(np.asarray(values))
        values = parts[0] if not extra else \
            np.stack(parts, axis=-1).reshape(parts[0].shape + tuple(entry["shape"]))
        variable = xr.Variable(lead + extra, values.astype(np.dtype(entry["dtype"]), copy=False),
                               attrs)
        variables[name] = variable.transpose(*dims)
    return xr.Dataset(variables, coords=coords, attrs=_attrs_from_json(metadata["attrs"]))


def _boundary_text(reader: _Reader, field: str, dims: Sequence[str]) -> str | None:
    """The ssmpde boundary_conditions text of a field of a Well file (The Well's default for
    a boundary it does not name is OPEN, i.e. outflow)."""
    info = reader.first.fields[field]
    used = [d for d, varies in zip(reader.first.spatial_dims, info.dim_varying) if varies]
    kinds = {d: ["outflow", "outflow"] for d in used}
    for boundary in reader.first.boundaries:
        if boundary["type"] not in _FROM_WELL_BC:
            continue
        if boundary["fields"] and field not in boundary["fields"]:
            continue
        kind = _FROM_WELL_BC[boundary["type"]]
        mask = boundary["mask"]
        aggregate = np.all if boundary["type"] == "WALL" else np.any
        for axis, dim in enumerate(boundary["dims"]):
            if dim not in kinds or mask.ndim != len(boundary["dims"]):
                continue
            for side, index in ((0, 0), (1, -1)):
                if mask.shape[axis] and aggregate(np.take(mask, index, axis=axis)):
                    kinds[dim][side] = kind
    conditions = {}
    for dim in dims:
        well = {ours: w for w, ours in reader.names.items()}.get(dim)
        if well in kinds:
            lower, upper = kinds[well]
            if "periodic" in (lower, upper):
                lower = upper = "periodic"  # periodicity belongs to the axis, both ends
            conditions[dim] = (lower, upper)
    return format_boundary_conditions(conditions) if conditions else None


def _open_well(reader: _Reader, source: pathlib.Path) -> xr.Dataset:
    """A genuine Well dataset: names from its field names, roles from its flags."""
    first = reader.first
    variables: dict[str, xr.Variable] = {}
    note = "units not recorded by The Well"
    for name, info in first.fields.items():
        role = "state" if info.sample_varying and info.time_varying else "forcing"
        well_dims = first.spatial_dims
        components = list(np.ndindex(*(len(well_dims),) * info.order))
        for component in components:
            suffix = "".join(reader.names[well_dims[c]] for c in component)
            label = f"{name}_{suffix}" if suffix else name
            if label in variables:
                raise DatasetFileError(f"'{first.path}': the field '{label}' appears twice")
            variable = reader.field(name, tuple(component))
            attrs = {"long_name": name if not suffix else f"{name} ({suffix} component)",
                     "units": "1", "comment": note, ROLE: role}
            if info.order == 1:
                attrs[VECTOR] = name
                attrs[VECTOR_COMPONENT] = reader.names[well_dims[component[0]]]
            text = _boundary_text(reader, name, variable.dims)
            if text is not None:
                attrs[BOUNDARY_CONDITIONS] = text
            variable.attrs.update(attrs)
            variables[label] = variable
    for name in first.scalars:
        if name in variables:
            raise DatasetFileError(f"'{first.path}': '{name}' is both a field and a scalar")
        dims, values = reader.scalar(name)
        role = "diagnostic" if TIME in dims else "parameter"
        variables[name] = xr.Variable(dims, values, {"long_name": name, "units": "1",
                                                     "comment": note, ROLE: role})
    parameters: dict[str, Any] = {}
    for name in first.parameters:
        values = [f.parameters.get(name) for f in reader.files]
        parameters[name] = [_json_value(np.asarray(v).reshape(-1)[0]) if np.asarray(v).size == 1
                            else _json_value(np.asarray(v)) for v in values]
        if name in variables or not all(np.asarray(v).size == 1 and np.asarray(v).dtype.kind
                                         in "iuf" for v in values):
            continue
        per_sample = np.concatenate([np.full(n, np.asarray(v).reshape(()))
                                     for v, n in zip(values, reader.counts)])
        variables[name] = xr.Variable((SAMPLE,), per_sample,
                                      {"long_name": f"simulation parameter {name}", "units": "1",
                                       "comment": note, ROLE: "parameter"})
    coords = {SAMPLE: sample_coordinate(reader.total),
              TIME: time_coordinate(first.time, units="1")}
    for well, values in first.coords.items():
        ours = reader.names[well]
        coords[ours] = xr.Variable((ours,), values,
                                   {"units": "1", "axis": ours.upper(),
                                    "long_name": f"{ours} coordinate (The Well's '{well}')",
                                    "comment": note})
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {"format": NAME, "dataset_name": first.name,
              "files": [str(f.path.relative_to(source)) if f.path != source else f.path.name
                        for f in reader.files],
              "simulation_parameters": parameters}
    attrs = {"Conventions": CONVENTIONS, "title": f"The Well: {first.name}",
             "source": f"The Well dataset '{first.name}', read by ssmpde {__version__}",
             "history": f"{stamp}: opened from The Well's files at {source} by ssmpde "
                        f"{__version__}",
             "ssmpde_equation": first.name,
             "ssmpde_config": json.dumps(config, sort_keys=True),
             "references": _REFERENCES}
    return xr.Dataset(variables, coords=coords, attrs=attrs)


def open(path: str | os.PathLike, chunks: Any = None) -> xr.Dataset:  # noqa: A001
    """Open a file or directory of The Well as an ssmpde dataset, lazily.

    Parameters
    ----------
    path : str or os.PathLike
        One ``.hdf5``/``.h5`` file, a split directory (``.../data/train``) or a dataset
        directory (its ``data/train``, ``data/valid`` and ``data/test`` files are read in that
        order, one after the other along ``sample``).
    chunks : optional
        None: lazily indexed arrays (values are read when used); ``{}``: dask arrays of one
        sample per chunk; anything else is passed to :meth:`xarray.Dataset.chunk`.

    Returns
    -------
    xarray.Dataset
        For a dataset ssmpde exported, the original dataset exactly (names, attributes, dtypes,
        coordinates, sample indices). For any other Well data: one variable per field and
        component (``velocity_x``, ``velocity_y`` with ``vector`` attributes; tensors as
        ``stress_xy`` ...), time-varying per-sample fields with role ``state``, other fields
        ``forcing``, per-sample scalars and the numeric simulation parameters ``parameter``,
        time series of scalars ``diagnostic``; the boundary groups as ``boundary_conditions``
        (PERIODIC → periodic, WALL → reflective, OPEN and unnamed boundaries → outflow); units
        ``"1"`` (The Well records none). The Well's first spatial dimension becomes ``x``, its
        second ``y``; arrays are ``[sample, time, y, x]``. Close it with ``ds.close()``.

    Raises
    ------
    FileNotFoundError
        If nothing exists at ``path``.
    DatasetFileError
        If it is not The Well's format, holds 3D grids, or its files do not fit together
        (different grids, time axes or fields).
    ImportError
        Without h5py.
    """
    source = pathlib.Path(os.fspath(path)).expanduser()
    h5py = _h5py()
    files = [_read_file(h5py, p) for p in _files(source)]
    _check_consistent(files)
    reader = _Reader(h5py, files)
    try:
        metadata = files[0].metadata
        ds = _open_ssmpde(reader, metadata) if metadata is not None else \
            _open_well(reader, source)
    except (KeyError, TypeError, AttributeError, IndexError) as error:
        reader.close()
        if files[0].metadata is None:
            raise
        # Our export's metadata, a JSON object of the right keys with damaged entries inside.
        raise DatasetFileError(f"'{files[0].path}': the dataset '{METADATA}' is damaged "
                               f"({type(error).__name__}: {error}): {_REEXPORT}") from None
    except BaseException:
        reader.close()
        raise
    if chunks is not None:
        ds = ds.chunk({SAMPLE: 1} if chunks == {} and SAMPLE in ds.dims else chunks)
    ds.set_close(reader.close)
    return ds



# --------------------------------------------------------------------------------------------
# The xarray engine
# --------------------------------------------------------------------------------------------

class TheWellBackendEntrypoint(FormatBackendEntrypoint):
    """``xr.open_dataset(path, engine="the-well")``: a file, split directory or dataset
    directory of The Well as :func:`open` reads it (needs h5py).

    ``xr.open_dataset(directory)`` finds this engine by itself: no engine of xarray's own
    claims a directory that holds no zarr store.
    """

    format_name = NAME
    description = DESCRIPTION
    url = "https://polymathic-ai.org/the_well/"
