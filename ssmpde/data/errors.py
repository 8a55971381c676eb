"""The two errors of the dataset schema: :class:`SchemaError` (a dataset breaks the schema,
every problem listed with its fix) and :class:`DatasetFileError` (a file cannot be read at all)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DatasetFileError", "SchemaError"]


class SchemaError(ValueError):
    """A dataset breaks the ssmpde schema.

    The message lists every problem found, each with its fix; :attr:`problems` holds them as a
    tuple of strings.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()):
        super().__init__(message)
        self.problems = tuple(problems)

    def __reduce__(self):
        # Keep `problems` when the error crosses a process boundary (dask workers pickle it).
        return type(self), (str(self), self.problems)


class DatasetFileError(ValueError):
    """A dataset file or store cannot be read: truncated, corrupt, or not netCDF/zarr at all."""


def _schema_error(problems: Sequence[str], subject: str = "dataset") -> SchemaError:
    lines = "\n".join(f"  - {problem}" for problem in problems)
    return SchemaError(f"{subject} does not follow the ssmpde schema:\n{lines}", problems)
