"""The progress record of a zarr store that parallel writers are still filling.

A store laid out by :func:`ssmpde.data.create_store` carries its :class:`StoreProgress` as JSON
in the root attribute :data:`PROGRESS_ATTR` until :func:`ssmpde.data.finish_store` removes it.
Readers look for that record (:func:`store_progress`) to refuse, or describe, an unfinished
store; the driver of the parallel writers (:mod:`ssmpde.data.store`) updates it as batches
finish.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

from ssmpde.core import JSONFileError, decode_json

from .schema import DatasetFileError

__all__ = ["PROGRESS_ATTR", "StoreProgress", "store_progress"]

#: Root attribute of a zarr store that is still being written: its :class:`StoreProgress` as
#: JSON. Present exactly while samples are missing, so every zarr reader can see it;
#: :func:`finish_store` removes it.
PROGRESS_ATTR = "ssmpde_progress"


@dataclasses.dataclass(frozen=True)
class StoreProgress:
    """What a zarr store still being written records about itself.

    Parameters
    ----------
    config : dict
        The generator config of the run (``ssmpde_config``); a rerun resumes only with the same.
    history : str
        The run's ``history`` attribute (kept across resumes).
    run_id : str
        Random identifier of the store's layout: a batch computed for another layout (a run
        discarded with ``--overwrite`` whose tasks still run on a cluster) is never written.
    num_samples, batch_size : int
        Samples of the dataset, and samples per batch of the latest run.
    complete : tuple of (int, int)
        Sorted, disjoint, non-adjacent sample ranges ``[start, stop)`` whose values are written.
    """

    config: dict
    history: str
    run_id: str
    num_samples: int
    batch_size: int
    complete: tuple[tuple[int, int], ...] = ()

    @property
    def samples_complete(self) -> int:
        """Number of samples written."""
        return sum(stop - start for start, stop in self.complete)

    @property
    def is_complete(self) -> bool:
        """Whether every sample is written."""
        return self.complete == ((0, self.num_samples),)

    def batch_counts(self) -> tuple[int, int]:
        """``(complete, total)`` batches of :attr:`batch_size`: what is written, plus the
        batches still needed for the gaps. O(number of ranges), whatever ``num_samples``."""
        size = self.batch_size
        done = sum(-(-(stop - start) // size) for start, stop in self.complete)
        missing, position = 0, 0
        for start, stop in (*self.complete, (self.num_samples, self.num_samples)):
            missing += -(-max(0, start - position) // size)
            position = max(position, stop)
        return done, done + missing

    def summary(self) -> str:
        """E.g. ``"3 of 10 batches complete (24 of 80 samples, batches of 8)"``."""
        done, total = self.batch_counts()
        return (f"{done} of {total} batches complete ({self.samples_complete:_} of "
                f"{self.num_samples:_} samples, batches of {self.batch_size})")

    def with_complete(self, start: int, stop: int) -> StoreProgress:
        """A new record with samples ``[start, stop)`` written too (ranges merged)."""
        if not 0 <= start < stop <= self.num_samples:
            raise ValueError(f"sample range [{start}, {stop}) is outside 0..{self.num_samples}")
        merged: list[tuple[int, int]] = []
        for first, last in sorted((*self.complete, (start, stop))):
            if merged and first <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        return dataclasses.replace(self, complete=tuple(merged))

    def to_json(self) -> str:
        record = dataclasses.asdict(self)
        record["complete"] = [list(piece) for piece in self.complete]
        return json.dumps(record, sort_keys=True)

    @classmethod
    def from_json(cls, text: Any, source: str | os.PathLike = "store") -> StoreProgress:
        """Parse a record; :class:`DatasetFileError` naming ``source`` if it is not one."""
        fix = (f"'{source}' cannot be resumed: delete it, or regenerate it with --overwrite "
               "(overwrite=True)")
        try:
            record = decode_json(f"the progress record ('{PROGRESS_ATTR}' attribute) of "
                                 f"'{source}'", text=text, error=DatasetFileError, fix=fix)
            complete = tuple((int(a), int(b)) for a, b in record.pop("complete"))
            progress = cls(complete=complete, **record)
        except DatasetFileError:
            raise
        except (TypeError, ValueError, KeyError) as exc:
            raise DatasetFileError(f"the progress record ('{PROGRESS_ATTR}' attribute) of "
                                   f"'{source}' is unreadable ({exc}): {fix}") from None
        position = 0
        for start, stop in progress.complete:
            if not position <= start < stop <= progress.num_samples:
                raise DatasetFileError(f"the progress record of '{source}' lists the sample "
                                       f"ranges {list(progress.complete)}, which are not "
                                       f"sorted, disjoint ranges of 0..{progress.num_samples}: "
                                       f"{fix}")
            position = stop
        return progress


def _root_attributes(path: pathlib.Path) -> dict | None:
    """The root group's attributes of a zarr format 2 store, None where there are none."""
    try:
        return decode_json(path / ".zattrs")
    except (OSError, JSONFileError):
        return None


def store_progress(path: str | os.PathLike) -> StoreProgress | None:
    """The progress record of a zarr store still being written, None for anything else.

    Parameters
    ----------
    path : str or os.PathLike
        Any path: a finished store, a netCDF file or nothing at all give None.

    Returns
    -------
    StoreProgress or None

    Raises
    ------
    DatasetFileError
        If the store has a progress attribute that cannot be parsed.

    Examples
    --------
    >>> store_progress("ns.zarr").summary()  # doctest: +SKIP
    '3 of 10 batches complete (24 of 80 samples, batches of 8)'
    """
    path = pathlib.Path(os.fspath(path)).expanduser()
    if not (path.is_dir() and (path / ".zgroup").is_file()):
        return None
    attrs = _root_attributes(path)
    if attrs is None or PROGRESS_ATTR not in attrs:
        return None
    return StoreProgress.from_json(attrs[PROGRESS_ATTR], path)
