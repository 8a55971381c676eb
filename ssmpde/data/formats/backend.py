"""The foreign formats as xarray backend engines: ``xr.open_dataset(path, engine="pdebench")``.

Each format module of :mod:`ssmpde.data.formats` defines one subclass of
:class:`FormatBackendEntrypoint` that names the format, and ``pyproject.toml`` registers it under
``[project.entry-points."xarray.backends"]`` with the format's ``NAME`` as the engine name
(``pdebench``, ``the-well``). The engine opens a file exactly as :func:`ssmpde.data.open_dataset`
opens it, lazily, through the same reader and the same read guards (errors name the file, the
variable and the sample; data variables in the schema's dimension order), without the schema
validation.

Example
-------
>>> import xarray as xr
>>> ds = xr.open_dataset("1D_Burgers_Sols_Nu0.01.hdf5", engine="pdebench")  # doctest: +SKIP
>>> ds = xr.open_dataset("ns_well", engine="the-well", chunks={})  # doctest: +SKIP
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable
from typing import Any, ClassVar

import xarray as xr
from xarray.backends import BackendEntrypoint

from ..integrity import guard
from ..schema import SAMPLE
from . import format_named

__all__ = ["FormatBackendEntrypoint"]


def _path_of(filename_or_obj: Any) -> pathlib.Path | None:
    """The local path xarray was given, or None for anything else (open files, stores, URLs)."""
    if not isinstance(filename_or_obj, str | os.PathLike):
        return None
    path = os.fspath(filename_or_obj)
    if isinstance(path, bytes) or "://" in path:
        return None
    return pathlib.Path(path).expanduser()


class FormatBackendEntrypoint(BackendEntrypoint):
    """An xarray engine reading one foreign format of :mod:`ssmpde.data.formats`.

    A subclass sets ``format_name`` (the format's ``NAME``, which is also the engine's name),
    ``description`` and ``url`` (where the format itself is documented).

    Notes
    -----
    The engine takes ``drop_variables`` and no decoding options: the formats hold plain
    numbers, and times stay numbers with their ``units``, as :func:`ssmpde.data.open_dataset`
    gives them. With ``chunks={}`` each variable is one sample per dask chunk.
    """

    format_name: ClassVar[str] = ""
    open_dataset_parameters: ClassVar[tuple[str, ...]] = ("filename_or_obj", "drop_variables")

    def open_dataset(self, filename_or_obj: str | os.PathLike, *,
                     drop_variables: str | Iterable[str] | None = None) -> xr.Dataset:
        """Open a file or directory of this format lazily as an ssmpde dataset.

        Parameters
        ----------
        filename_or_obj : str or os.PathLike
            A local file or directory (``xr.open_dataset`` passes its first argument).
        drop_variables : str or iterable of str, optional
            Variables to leave out; names the file lacks are ignored.

        Returns
        -------
        xarray.Dataset
            What :func:`ssmpde.data.open_dataset` returns for the same path (before its schema
            validation); ``ds.close()`` closes the file.

        Raises
        ------
        TypeError
            For an open file object, a store or a URL: the formats are read by path.
        DatasetFileError
            If the file is not in this format, or cannot be read (the format's ``open`` says
            which).
        """
        path = _path_of(filename_or_obj)
        if path is None:
            raise TypeError(f"the {self.format_name!r} engine reads a local file or directory "
                            f"by its path, not {type(filename_or_obj).__name__} "
                            f"{filename_or_obj!r}: pass the path")
        module = format_named(self.format_name)
        ds = guard(module.open(path, None), str(path), kind=f"{module.NAME} file")
        if drop_variables is not None:
            names = [drop_variables] if isinstance(drop_variables, str) else list(drop_variables)
            close, ds = ds.close, ds.drop_vars(names, errors="ignore")
            ds.set_close(close)
        for var in ds.variables.values():
            if SAMPLE in var.dims:
                var.encoding["preferred_chunks"] = {SAMPLE: 1}
        return ds

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Whether ``filename_or_obj`` is a local path in this format (the format's ``sniff``:
        metadata only, never true for ssmpde's own netCDF files and zarr stores)."""
        path = _path_of(filename_or_obj)
        return path is not None and bool(format_named(self.format_name).sniff(path))
