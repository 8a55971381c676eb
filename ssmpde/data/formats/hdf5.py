"""What the HDF5-based formats share: recognising an HDF5 file, and a lazily read array.

PDEBench (:mod:`ssmpde.data.formats.pdebench`, read through netCDF4) and The Well
(:mod:`ssmpde.data.formats.the_well`, read through h5py) both keep their arrays in another axis
order than ssmpde's (``x`` before ``y``, channels or components last) and split a dataset's
samples over several HDF5 objects (one group per sample, one file per split).
:class:`LazyArray` is that view, once: the reading library is a function it is given.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

__all__ = ["HDF5_SIGNATURE", "HDF5_SUFFIXES", "LazyArray", "is_hdf5"]

#: The first eight bytes of every HDF5 file (and so of every netCDF4 file).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Suffixes of HDF5 files that are not netCDF by name: the foreign sniffers get the first look,
#: ``convert`` asks which format is meant, The Well's directories are searched for them.
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")

_INTEGERS = (int, np.integer)


def is_hdf5(path: pathlib.Path) -> bool:
    """Whether ``path`` is a readable file that starts with the HDF5 signature."""
    try:
        with path.open("rb") as stream:
            return stream.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE
    except OSError:
        return False


class LazyArray(BackendArray):
    """A file array seen in ssmpde's axis order, read only where it is indexed.

    The *file array* is what ``read`` indexes: ``len(axes) + len(fixed)`` axes. Axis ``i`` of
    this array is file axis ``axes[i]``; the file axes in ``fixed`` are always read at one
    index (a channel, a vector component, Darcy's time axis of length 1).

    With ``counts``, axis 0 is ``sample`` and file axis ``axes[0]`` is 0: the samples are spread
    over pieces (files, or per-sample groups), ``counts[p]`` samples in piece ``p``, one after
    the other. A piece's array has that sample axis if ``piece_sample``; without it, a piece
    holds one array repeated for each of its samples (a per-sample group holds one sample;
    a field that does not vary by sample holds it once per file).

    Parameters
    ----------
    read : callable
        ``read(piece, key) -> numpy.ndarray``: piece ``piece`` (0 without ``counts``) at ``key``,
        a tuple of ints and slices over the piece's axes (less the sample axis if the piece
        has none). Any lock the library needs is the function's business.
    shape : tuple of int
        This array's shape.
    dtype : numpy.dtype
        Its dtype (what the file holds).
    axes : sequence of int
        The file axis of each axis of this array.
    fixed : mapping of int to int, optional
        File axis to the one index it is read at.
    counts : sequence of int, optional
        Samples per piece (see above); None: one piece, no sample stacking.
    piece_sample : bool
        Whether a piece's array has the sample axis (only with ``counts``).
    """

    def __init__(self, read: Callable[[int, tuple], np.ndarray], *, shape: Sequence[int],
                 dtype: Any, axes: Sequence[int], fixed: Mapping[int, int] | None = None,
                 counts: Sequence[int] | None = None, piece_sample: bool = True):
        self.read = read
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.axes = tuple(int(a) for a in axes)
        self.fixed = {int(k): int(v) for k, v in (fixed or {}).items()}
        self.counts = None if counts is None else [int(n) for n in counts]
        self.piece_sample = piece_sample

    def variable(self, dims: Sequence[str], attrs: Mapping | None = None) -> xr.Variable:
        """An :class:`xarray.Variable` of this array, nothing read yet."""
        return xr.Variable(tuple(dims), indexing.LazilyIndexedArray(self), dict(attrs or {}))

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC,
                                                  self._read)

    def _piece(self, index: int, key: tuple) -> np.ndarray:
        return np.asarray(self.read(index, key))

    def _read(self, key: tuple) -> np.ndarray:
        ndim = len(self.axes) + len(self.fixed)
        file_key: list[Any] = [slice(None)] * ndim
        for axis, index in self.fixed.items():
            file_key[axis] = index
        for out_axis, k in enumerate(key):
            file_key[self.axes[out_axis]] = k
        result = self._piece(0, tuple(file_key)) if self.counts is None else \
            self._stacked(file_key)
        kept_file = [a for a in range(ndim) if not isinstance(file_key[a], _INTEGERS)]
        kept_out = [self.axes[o] for o, k in enumerate(key) if not isinstance(k, _INTEGERS)]
        result = np.transpose(result, [kept_file.index(a) for a in kept_out])
        return np.ascontiguousarray(result).astype(self.dtype, copy=False)

    def _stacked(self, file_key: list) -> np.ndarray:
        """The samples ``file_key[0]`` picks, read piece by piece: one read per run of samples
        with one stride inside one piece."""
        rest = tuple(file_key[1:])  # the file axes after sample, as the pieces hold them
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
            if self.piece_sample:
                blocks.append(self._piece(piece, (local,) + rest))
            else:
                one = self._piece(piece, rest)
                blocks.append(np.broadcast_to(one, (j - i + 1,) + one.shape))
            i = j + 1
        if isinstance(wanted, _INTEGERS):
            return blocks[0][0]
        if blocks:
            return np.concatenate(blocks, axis=0)
        return np.empty((0,) + self._shape_of(rest), dtype=self.dtype)

    def _shape_of(self, rest: tuple) -> tuple[int, ...]:
        """The shape a read of ``rest`` (the file key after sample) gives, in file order."""
        inverse = {file_axis: out for out, file_axis in enumerate(self.axes)}
        return tuple(len(range(*k.indices(self.shape[inverse[offset]])))
                     for offset, k in enumerate(rest, start=1) if not isinstance(k, _INTEGERS))
