"""The ``ds.ssmpde`` accessor: the schema and file helpers on any :class:`xarray.Dataset`.

Registered with xarray when :mod:`ssmpde.data` is imported.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import xarray as xr

from .errors import _schema_error
from .files import save
from .schema import config_of, validate
from .summary import describe

__all__ = ["SsmpdeAccessor"]


@xr.register_dataset_accessor("ssmpde")
class SsmpdeAccessor:
    """The ``ds.ssmpde`` namespace: schema helpers on any :class:`xarray.Dataset`.

    Examples
    --------
    >>> ds.ssmpde.equation  # doctest: +SKIP
    'navier_stokes'
    >>> ds.ssmpde.save("ns.nc", overwrite=True)  # doctest: +SKIP
    """

    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    @property
    def config(self) -> dict:
        """The generator config (see :func:`config_of`)."""
        return config_of(self._ds)

    @property
    def equation(self) -> str:
        """The PDE's name from ``ssmpde_equation``; :class:`SchemaError` if missing."""
        equation = self._ds.attrs.get("ssmpde_equation")
        if not isinstance(equation, str) or not equation.strip():
            raise _schema_error(["global attribute 'ssmpde_equation' is missing or empty: set "
                                 "it to the PDE's name (build_dataset() does)"])
        return equation

    def validate(self, **kwargs: Any) -> xr.Dataset:
        """Check the schema; see :func:`validate` for the keywords."""
        return validate(self._ds, **kwargs)

    def save(self, path: str | os.PathLike, **kwargs: Any) -> pathlib.Path:
        """Write the dataset; see :func:`save` for the keywords."""
        return save(self._ds, path, **kwargs)

    def describe(self) -> str:
        """Human-readable summary; see :func:`describe`."""
        return describe(self._ds)
