"""Foreign dataset formats: the registry that lets every command read them and `convert` write them.

Our own formats are netCDF4 and zarr (:mod:`ssmpde.data.files`). Other tools keep PDE data in
their own layouts; each such format is one module of this package
(:mod:`ssmpde.data.formats.pdebench`, :mod:`ssmpde.data.formats.the_well`) named in
:data:`_MODULES`, exposing at module level

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
that memory cannot hold before anything is allocated.

:func:`known_formats` lists them, :func:`format_named` looks one up by name and :func:`sniff`
finds the one a path is in.

Each format is an xarray backend engine too, named ``NAME``
(``xr.open_dataset(path, engine="pdebench")``): its module defines a subclass of
:class:`~ssmpde.data.formats.backend.FormatBackendEntrypoint`, registered in ``pyproject.toml``
under ``[project.entry-points."xarray.backends"]``. A new format is its module, a line in
:data:`_MODULES` and a line there.
"""

from __future__ import annotations

import importlib
import pathlib
import types

__all__ = ["HDF5_SUFFIXES", "OWN_FORMATS", "check_declared_memory", "format_named", "is_export",
           "known_formats", "sniff"]

#: The modules of the foreign formats, in the order their sniffers are tried.
_MODULES: tuple[str, ...] = ("pdebench", "the_well")
#: Our own formats, by the names ``convert(..., to=...)`` accepts.
OWN_FORMATS = ("netcdf", "zarr")
#: Suffixes of HDF5 files that are not netCDF by name: the foreign sniffers get the first look.
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
_REQUIRED = ("NAME", "DESCRIPTION", "sniff", "open", "export")


def known_formats() -> dict[str, types.ModuleType]:
    """The foreign formats by name, in registry order (sniffing order).

    Returns
    -------
    dict of str to module
        Each module exposes ``NAME``, ``DESCRIPTION``, ``sniff``, ``open`` and ``export``.

    Raises
    ------
    TypeError
        If a registered module lacks one of them (a programming error, caught by the tests).
    """
    formats = {}
    for module_name in _MODULES:
        module = importlib.import_module(f"{__package__}.{module_name}")
        missing = [attr for attr in _REQUIRED if not hasattr(module, attr)]
        if missing:
            raise TypeError(f"format module {module.__name__} lacks {missing}: every module in "
                            f"ssmpde.data.formats._MODULES must define {', '.join(_REQUIRED)}")
        formats[module.NAME] = module
    return formats


def format_named(name: str) -> types.ModuleType:
    """The foreign format called ``name``.

    Raises
    ------
    ValueError
        For an unknown name; the message lists every format ``convert`` knows.
    """
    formats = known_formats()
    if name not in formats:
        known = ", ".join((*OWN_FORMATS, *formats))
        raise ValueError(f"unknown format {name!r}: choose one of {known}")
    return formats[name]


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
