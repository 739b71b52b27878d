# The two commands of the README: `make demo` and `make test`. Both set everything up themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the test targets add PyTorch (the `.pt2` frontend's tests; a 190 MB CPU wheel, ~20 s), which
# `make install` and `make demo` do not need
TEST_STAMP := $(VENV)/.installed-torch
OUT ?= out
# the tests run on this many worker processes (one per core of the 2-core CI machine); the
# tests marked `serial` (their assertions read wall-clock behaviour) then run alone
TEST_WORKERS ?= 2
# the torch tests fail instead of skipping where PyTorch is missing
PYTEST := TVM_HETERO_TEST_TORCH=1 $(BIN)/python -m pytest -q
PARALLEL := -n $(TEST_WORKERS) --dist loadfile

.PHONY: install demo test test-slow test-all tutorials benchmarks gpu-bundle clean

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,torch]'
	touch $(TEST_STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python tutorials/demo.py --out $(OUT)

test: $(TEST_STAMP)
	$(PYTEST) $(PARALLEL) -m "not slow and not serial"
	$(PYTEST) -m "serial and not slow"

test-slow: $(TEST_STAMP)
	$(PYTEST) $(PARALLEL) -m "slow and not serial"
	$(PYTEST) -m "slow and serial" || [ $$? -eq 5 ]  # 5: none selected

test-all: $(TEST_STAMP)
	$(PYTEST) $(PARALLEL) -m "not serial"
	$(PYTEST) -m serial

# what a call to a lent GPU machine carries: out/gpu_bundle/carry (~32 MiB; minutes to build)
gpu-bundle: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py build --bundle out/gpu_bundle

tutorials: $(STAMP)
	$(PYTEST) tests/test_tutorials.py

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/placements.py

clean:
	rm -rf $(VENV) $(OUT) *.egg-info
