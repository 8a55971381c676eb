# The whole set-up is `make demo` or `make test` on a fresh machine.
# torch is installed first with an exact pin: the local CPU wheel. A looser requirement
# would pull the newest CUDA build (gigabytes) from the registry.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-e2e test-slow test-mkl-paths bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The interop extra (The Well's own loaders, for tests/data/test_the_well.py) comes with the
# test environment: it pins fsspec==2024.10.0, which dask, zarr and xarray accept (their tests
# pass with it), so one environment runs the whole suite.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[dev,interop]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py --out demo_output

# Two workers. A cold run used to be half numba compiling, and both workers compiled the same
# kernels at once (a scan's forward and backward take 10-12 s): ssmpde.warmup compiles every
# kernel family once, on both cores, into numba's cache first, and the workers load them.
test: $(STAMP)
	$(BIN)/python -m ssmpde.warmup --processes 2
	$(BIN)/python -m pytest -q -n 2

# End-to-end runs kept out of the 4-minute default suite: every benchmark at its --quick
# sizes, the example scripts, the README's Quick start, the strict docs build, torch.compile
# against eager for every model, the warm-up in fresh processes. CI runs them after the
# default suite (the warm-up then finds every kernel cached).
test-e2e: $(STAMP)
	$(BIN)/python -m ssmpde.warmup --processes 2
	$(BIN)/python -m pytest -q -n 2 -m e2e

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m slow

# The golden pins in a fresh process under each MKL code path (Intel AVX2/AVX-512, and the
# compatible path AMD takes): ~16 s of CPU, so CI runs it beside the 4-minute default suite.
test-mkl-paths: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m mkl_paths tests/test_portability.py

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# The documentation site (docs/, mkdocs.yml) into site/; any warning fails the build. (The
# variable silences mkdocs-material's banner about its end of life, not a warning.)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) demo_output site .pytest_cache .hypothesis
