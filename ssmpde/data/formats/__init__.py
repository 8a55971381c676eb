"""Foreign dataset formats: the registry that lets every command read them and `convert` write them.

Our own formats are netCDF4 and zarr (:mod:`ssmpde.data.files`). Other tools keep PDE data in
their own layouts; each such format is a module (ssmpde's own: :mod:`ssmpde.data.formats.pdebench`,
:mod:`ssmpde.data.formats.the_well`) registered as an entry point of the group
:data:`ENTRY_POINT_GROUP` (``ssmpde.formats``), named as the format is, exposing at module level

``NAME`` : str
    The name users type (``ssmpde convert SOURCE TARGET --to NAME``), e.g. ``"pdebench"``.
``DESCRIPTION`` : str
    One line for help texts and error messages.
``sniff(path: pathlib.Path) -> bool``
    Whether ``path`` (a file or a directory) is in this format. Cheap (metadata only), and
    never true for our own netCDF files and zarr stores (those carry the global attribute
    ``ssmpde_equation``).
``open(path: pathlib.Path, chunks) -> xarray.Dataset``
    The file as an ssmpde-schema dataset, lazily: variables stay backed by the file (``chunks``
    as in :func:`xarray.open_dataset`: None for lazily indexed arrays, ``{}`` for dask).
``export(ds: xarray.Dataset, path: pathlib.Path) -> list[str]``
    Write ``ds`` in this format at ``path`` (a file or a directory, which does not exist yet:
    the caller writes through :func:`ssmpde.data.atomic_path`) and return human-readable notes
    of what the format could not carry (variable roles, attributes, ...). A PDE the format
    cannot hold raises :class:`ValueError` naming the reason.

and optionally

``is_export(path: pathlib.Path) -> bool``
    Whether ``path`` (sniffed as this format) was written by ssmpde's ``export``, so that
    ``overwrite`` may replace it (the output policy, :func:`ssmpde.data.check_output`, never
    replaces a directory ssmpde did not write). Without it, no directory in this format is
    ever replaced.
``conventional_name(ds: xarray.Dataset) -> str | None``
    The file name the format's own tools expect for ``ds`` (PDEBench's loaders find files by
    name); :func:`ssmpde.data.convert` notes it when the target is named otherwise.
``unwritten_chunks(path: pathlib.Path) -> (list[DamagedChunk], int, int) | None``
    The chunks the file's metadata promise and its writer never wrote (which its library
    would read as zeros: ``open`` refuses such a file), the number of chunks and of variables
    checked; None where it cannot tell. ``ssmpde info --check`` lists them
    (:func:`ssmpde.data.check_file`).
``export(..., dtype=None)``
    An ``export`` that takes ``dtype`` (``"float32"`` or ``"float64"``: the floating data
    variables are written in it) lets ``convert --dtype`` choose the precision.

A module reads a file's header before its data: :func:`check_declared_memory` refuses sizes
that memory cannot hold before anything is allocated. An export that writes values in a
narrower type than they have (PDEBench's float32, ``dtype="float32"``) calls
:func:`check_range` first: a value beyond the narrower type's range would be stored as inf.
:mod:`ssmpde.data.formats.hdf5` holds what HDF5-based formats share (the signature check, a
lazily read array in another axis order).

:func:`known_formats` lists them, :func:`format_named` looks one up by name and :func:`sniff`
finds the one a path is in.

**Adding a format** needs no edit of ssmpde: a package ships the module and names it in its own
``pyproject.toml``::

    [project.entry-points."ssmpde.formats"]
    my-format = "my_package.my_format"

Installed, ``ssmpde convert SOURCE TARGET --to my-format`` writes it and every command reads it.
ssmpde's own formats come first (in the order of their names), then the others by name: that is
the order the sniffers are tried in. An entry point that cannot be imported, lacks part of the
interface, is named otherwise than its ``NAME`` or takes a name already taken is left out with a
:class:`FormatPluginWarning` that names it and its package; every command goes on without it.
The registry is read once per process; :func:`clear_cache` reads it again.

Each format is an xarray backend engine too, named ``NAME``
(``xr.open_dataset(path, engine="pdebench")``): ssmpde's define a subclass of
:class:`~ssmpde.data.formats.backend.FormatBackendEntrypoint`, registered in ``pyproject.toml``
under ``[project.entry-points."xarray.backends"]``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import inspect
import pathlib
import types
import warnings
from typing import Any

from .hdf5 import HDF5_SUFFIXES

__all__ = ["ENTRY_POINT_GROUP", "HDF5_SUFFIXES", "OWN_FORMATS", "FormatPluginWarning",
           "check_declared_memory", "check_range", "clear_cache", "format_named", "is_export",
           "known_formats", "sniff", "takes_dtype", "taking_dtype"]

#: The entry-point group the formats are registered in, ssmpde's own and other packages'.
ENTRY_POINT_GROUP = "ssmpde.formats"
#: Our own formats, by the names ``convert(..., to=...)`` accepts.
OWN_FORMATS = ("netcdf", "zarr")
_REQUIRED = ("NAME", "DESCRIPTION", "sniff", "open", "export")
_OWN_DISTRIBUTION = "ssmpde"


class FormatPluginWarning(UserWarning):
    """A format registered under :data:`ENTRY_POINT_GROUP` is left out: it cannot be imported,
    lacks part of the interface, or its name is taken. The message names the entry point and
    the package that declares it."""


@dataclasses.dataclass(frozen=True)
class _Registry:
    formats: dict[str, Any]      # name -> module, in sniffing order
    refused: dict[str, str]      # entry-point name -> why it is left out


def _package(point: importlib.metadata.EntryPoint) -> str:
    """The package that declares ``point``, with its version."""
    dist = getattr(point, "dist", None)
    return "an unknown package" if dist is None else f"{dist.name} {dist.version}"


def _is_own(point: importlib.metadata.EntryPoint) -> bool:
    dist = getattr(point, "dist", None)
    return dist is not None and str(dist.name).lower().replace("_", "-") == _OWN_DISTRIBUTION


def _refusal(point: importlib.metadata.EntryPoint, taken: dict[str, Any]) -> tuple[Any, str]:
    """The format ``point`` names, or None and why it cannot be used."""
    if point.name in OWN_FORMATS:
        return None, f"'{point.name}' is the name of one of ssmpde's own formats"
    if point.name in taken:
        module = getattr(taken[point.name], "__name__", repr(taken[point.name]))
        return None, f"the format '{point.name}' is already registered (by {module})"
    try:
        module = point.load()
    except Exception as exc:  # a plugin's import may raise anything: report it, go on
        return None, f"importing {point.value} failed ({type(exc).__name__}: {exc})"
    missing = [attr for attr in _REQUIRED if not hasattr(module, attr)]
    if missing:
        return None, (f"{point.value} lacks {', '.join(missing)}: a format module defines "
                      f"{', '.join(_REQUIRED)}")
    if module.NAME != point.name:
        return None, (f"{point.value} has NAME {module.NAME!r}, but its entry point is named "
                      f"{point.name!r}: the two must be the same")
    return module, ""


@functools.lru_cache(maxsize=1)
def _registry() -> _Registry:
    points = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                    key=lambda p: (not _is_own(p), p.name, _package(p), p.value))
    formats: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for point in points:
        module, why = _refusal(point, formats)
        if module is not None:
            formats[point.name] = module
            continue
        detail = (f"{why}. It is the entry point '{point.name} = {point.value}' (group "
                  f"{ENTRY_POINT_GROUP}) of the package {_package(point)}: fix or uninstall "
                  "that package")
        refused.setdefault(point.name, detail)
        warnings.warn(f"the format '{point.name}' is left out: {detail}", FormatPluginWarning,
                      stacklevel=3)
    if not any(_is_own(point) for point in points):
        warnings.warn(f"ssmpde's own formats are not registered: its package metadata has no "
                      f"{ENTRY_POINT_GROUP} entry points (it was installed before they existed, "
                      "or ssmpde runs from a source tree it was not installed from). Reinstall "
                      "it: pip install -e . in a checkout", FormatPluginWarning, stacklevel=3)
    return _Registry(formats, refused)


def clear_cache() -> None:
    """Forget the formats found, so that the next call reads the entry points again (after a
    package that ships a format was installed or removed in a running process)."""
    _registry.cache_clear()


def known_formats() -> dict[str, types.ModuleType]:
    """The foreign formats by name, in registry order (sniffing order).

    Returns
    -------
    dict of str to module
        Each module exposes ``NAME``, ``DESCRIPTION``, ``sniff``, ``open`` and ``export``;
        ssmpde's own first, then those of other packages, each by name. Entry points that
        cannot be used are left out (with a :class:`FormatPluginWarning`, once per process).
    """
    return dict(_registry().formats)


def format_named(name: str) -> types.ModuleType:
    """The foreign format called ``name``.

    Raises
    ------
    ValueError
        For an unknown name (the message lists every format ``convert`` knows), or a format
        whose entry point cannot be used (the message says why, and names its package).
    """
    registry = _registry()
    if name in registry.formats:
        return registry.formats[name]
    if name in registry.refused:
        raise ValueError(f"the format {name!r} cannot be used: {registry.refused[name]}")
    known = ", ".join((*OWN_FORMATS, *registry.formats))
    raise ValueError(f"unknown format {name!r}: choose one of {known}")


def sniff(path: pathlib.Path) -> types.ModuleType | None:
    """The foreign format ``path`` is in, or None if no registered format claims it."""
    for module in known_formats().values():
        if module.sniff(path):
            return module
    return None


def is_export(module: types.ModuleType, path: pathlib.Path) -> bool:
    """Whether ``path``, in ``module``'s format, was exported by ssmpde (may be overwritten)."""
    check = getattr(module, "is_export", None)
    return bool(check(path)) if check is not None else False


def takes_dtype(name: str) -> bool:
    """Whether ``convert(..., to=name, dtype=...)`` can choose the precision of the values:
    ssmpde's own formats and a foreign format whose ``export`` takes ``dtype``."""
    if name in OWN_FORMATS:
        return True
    return "dtype" in inspect.signature(format_named(name).export).parameters


def taking_dtype() -> list[str]:
    """The names of the formats :func:`takes_dtype` accepts, own formats first."""
    return [*OWN_FORMATS, *(name for name in known_formats() if takes_dtype(name))]


def check_declared_memory(path: pathlib.Path, what: str, nbytes: int) -> None:
    """Refuse a file whose header declares more than memory holds, before allocating it.

    A reader calls this with what the header declares (``"1000000000 samples"``) and the bytes
    opening the file would allocate for it (coordinates, sample indices): a tiny damaged or
    hand-made file can declare sizes no machine holds.

    Raises
    ------
    DatasetFileError
        If ``nbytes`` exceeds :func:`ssmpde.core.memory_limit` (80 % of the memory available,
        or ``SSMPDE_MAX_MEMORY``); the message names the file and both sizes.
    """
    from ssmpde.core import format_bytes, memory_limit

    from ..schema import DatasetFileError

    limit = memory_limit()
    if nbytes <= limit:
        return
    try:
        size = f" (the file holds {path.stat().st_size} bytes)"
    except OSError:
        size = ""
    raise DatasetFileError(f"'{path}' declares {what}: opening it needs "
                           f"{format_bytes(nbytes)} of memory, more than the "
                           f"{format_bytes(limit)} that may be used (80% of the memory "
                           f"available, or SSMPDE_MAX_MEMORY){size}. Its header is damaged or "
                           "wrong: check the file, or open it where that much memory is free")


def check_range(ds: Any, dtype: Any, *, advice: str) -> None:
    """Refuse to narrow a floating data variable of ``ds`` whose values ``dtype`` cannot hold.

    A cast from float64 to float32 turns every finite value beyond float32's range (about
    3.4e38) into inf, silently but for numpy's warning: an export checks its data variables
    before it writes anything. NaN and inf already in the data are left to the caller (they
    stay what they are).

    Parameters
    ----------
    ds : xarray.Dataset
        The dataset to write; its floating data variables wider than ``dtype`` are read once
        (one dask chunk at a time when ``ds`` is chunked).
    dtype : numpy dtype or str
        The floating type the values will be written in.
    advice : str
        What the user can do instead (keep the precision, another format), ending the message.

    Raises
    ------
    ValueError
        Naming the first variable with a finite value ``dtype`` cannot hold, its largest
        magnitude and ``dtype``'s largest value.
    """
    import numpy as np

    narrow = np.dtype(dtype)
    largest = float(np.finfo(narrow).max)
    for name, var in ds.data_vars.items():
        if var.dtype.kind != "f" or var.dtype.itemsize <= narrow.itemsize or var.size == 0:
            continue
        value = float(abs(var).where(np.isfinite(var)).max().values)  # NaN: nothing finite
        with np.errstate(over="ignore", invalid="ignore"):
            overflows = np.isinf(np.asarray(value).astype(narrow))
        if overflows:
            raise ValueError(f"'{name}' holds values up to {value:.6g} in magnitude, beyond "
                             f"the range of {narrow} (largest {largest:.6g}): written as "
                             f"{narrow} they would become inf. {advice}")
