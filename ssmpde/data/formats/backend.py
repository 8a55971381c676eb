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
from ..reading import check_path
from ..schema import SAMPLE
from . import format_named

__all__ = ["FormatBackendEntrypoint"]

#: xarray's decoding options that change nothing in these formats: accepted with any value.
NO_EFFECT = ("concat_characters", "decode_coords")
#: xarray's decoding options the engines cannot honour: accepted as False, refused as True.
NOT_TRUE = ("mask_and_scale", "decode_times", "decode_timedelta", "use_cftime")


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
    The engine takes ``drop_variables`` and xarray's decoding options as far as they apply:
    the formats hold plain numbers (no fill values, scale factors, character arrays or CF
    ``coordinates`` attributes), and times stay numbers with their ``units``, as
    :func:`ssmpde.data.open_dataset` gives them. So ``concat_characters`` and
    ``decode_coords`` change nothing and are accepted with any value; ``mask_and_scale``,
    ``decode_times``, ``decode_timedelta`` and ``use_cftime`` are accepted as False (what
    ``decode_cf=False`` passes) and refused as True, which they cannot honour; any other
    option is refused naming it. With ``chunks={}`` each variable is one sample per dask
    chunk. The path is checked as every ssmpde reader checks it
    (:func:`ssmpde.data.reading.check_path`): a FIFO is refused, never waited on.
    """

    format_name: ClassVar[str] = ""
    open_dataset_parameters: ClassVar[tuple[str, ...]] = (
        "filename_or_obj", "drop_variables", *NO_EFFECT, *NOT_TRUE)

    def open_dataset(self, filename_or_obj: str | os.PathLike, *,
                     drop_variables: str | Iterable[str] | None = None,
                     **options: Any) -> xr.Dataset:
        """Open a file or directory of this format lazily as an ssmpde dataset.

        Parameters
        ----------
        filename_or_obj : str or os.PathLike
            A local file or directory (``xr.open_dataset`` passes its first argument).
        drop_variables : str or iterable of str, optional
            Variables to leave out; names the file lacks are ignored.
        **options
            xarray's decoding options (see the class's Notes): ``concat_characters`` and
            ``decode_coords`` with any value; ``mask_and_scale``, ``decode_times``,
            ``decode_timedelta``, ``use_cftime`` as False.

        Returns
        -------
        xarray.Dataset
            What :func:`ssmpde.data.open_dataset` returns for the same path (before its schema
            validation); ``ds.close()`` closes the file.

        Raises
        ------
        TypeError
            For an open file object, a store or a URL (the formats are read by path), or an
            option the engine does not take.
        ValueError
            For a decoding option it cannot honour (``mask_and_scale=True``, ...).
        FileNotFoundError, DatasetFileError
            If nothing is at the path, it is no file or directory (a FIFO, a device, a link
            that leads nowhere), it is not in this format, or it cannot be read (the format's
            ``open`` says which).
        """
        path = _path_of(filename_or_obj)
        if path is None:
            raise TypeError(f"the {self.format_name!r} engine reads a local file or directory "
                            f"by its path, not {type(filename_or_obj).__name__} "
                            f"{filename_or_obj!r}: pass the path")
        self._check_options(options)
        check_path(path)
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

    def _check_options(self, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - {*NO_EFFECT, *NOT_TRUE})
        if unknown:
            raise TypeError(f"the {self.format_name!r} engine takes no option "
                            f"{', '.join(map(repr, unknown))}: it takes drop_variables, chunks "
                            f"and xarray's decoding options {', '.join((*NO_EFFECT, *NOT_TRUE))}")
        refused = [name for name in NOT_TRUE if options.get(name) not in (None, False)]
        if refused:
            raise ValueError(f"the {self.format_name!r} engine cannot honour "
                             f"{', '.join(f'{name}={options[name]!r}' for name in refused)}: "
                             "the format holds plain numbers, read as stored (no fill values "
                             "or scale factors), and times as numbers with their units, as "
                             "ssmpde.data.open_dataset reads them; leave it out or pass False")

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Whether ``filename_or_obj`` is a local path in this format (the format's ``sniff``:
        metadata only, never true for ssmpde's own netCDF files and zarr stores)."""
        path = _path_of(filename_or_obj)
        return path is not None and bool(format_named(self.format_name).sniff(path))
