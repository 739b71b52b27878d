# The two commands of the README: `make demo` and `make test`. Both set everything up themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= out

.PHONY: install demo test test-slow test-all tutorials benchmarks clean

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python tutorials/demo.py --out $(OUT)

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m "slow or not slow"

tutorials: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_tutorials.py

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/placements.py

clean:
	rm -rf $(VENV) $(OUT) *.egg-info
