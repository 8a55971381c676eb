"""The GPU session's scripts: run on a CUDA machine, from the repository root, by ``session.sh``."""
