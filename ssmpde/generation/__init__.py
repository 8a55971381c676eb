"""Batched, seeded, resumable dataset generation with the registered solvers.

:func:`generate` runs a solver over ``num_samples`` samples in batches, sample *i* a pure
function of ``(seed, i)`` and the config, whatever the batch size or worker count:

* :mod:`ssmpde.generation.generate`: the driver, in this process (part files in a hidden
  folder beside the target, merged at the end; an interrupted run resumes from them);
* :mod:`ssmpde.generation.scale_out`: the same on a dask.distributed cluster (each batch a task
  writing its own region of one zarr store), on the clusters of :mod:`ssmpde.cluster`;
* ``ssmpde.generation._batches``: what both share (the per-batch computation, the config that
  pins a run, the bookkeeping of sample ranges, the duration probe).

Generation is orchestration over :mod:`ssmpde.solvers` (the numerics) and :mod:`ssmpde.data`
(the files); neither of them imports it.

>>> from ssmpde.generation import generate
>>> ds = generate("darcy", num_samples=2, resolution=9, simulation_resolution=17,
...               progress=False)
>>> ds.sizes["sample"]
2
"""

from ._batches import LongRunWarning
from .generate import generate, parts_directory

__all__ = ["LongRunWarning", "generate", "parts_directory"]
