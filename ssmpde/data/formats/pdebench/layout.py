"""PDEBench's names: the format's, its file attribute and its layouts (shared by reading and
writing)."""

from __future__ import annotations

NAME = "pdebench"
DESCRIPTION = "PDEBench HDF5: tensor/nu, density/pressure/Vx/Vy, or per-sample groups"
#: File attribute holding everything ssmpde needs to read its export back exactly (JSON).
METADATA_ATTR = "ssmpde_metadata"
#: Group of a stacked file holding the variables PDEBench has no dataset for.
EXTRAS_GROUP = "ssmpde"
REFERENCE = ("Takamoto et al., PDEBench: An Extensive Benchmark for Scientific Machine "
             "Learning, NeurIPS 2022 Datasets and Benchmarks")
#: The layouts of PDEBench files ssmpde reads and writes.
_STACKED_1D, _DARCY, _CFD, _GROUPS = "tensor-1d", "darcy", "cfd", "sample-groups"
# A `tensor` of a shape no PDEBench layout has: claimed, so that the refusal says the shapes.
_ODD_TENSOR = "odd-tensor"
