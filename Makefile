# The two set-up commands of the README: `make demo` (main job) and `make test` (whole suite).
# Both create .venv and install what they need: torch==2.13.0 first (the CPU wheel), then
# the project, so pip never resolves a different torch build.

PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev,server,integrations]"
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/gradwatch demo

lint: install
	$(BIN)/ruff check collector server dashboard tests benchmarks examples
	$(BIN)/ruff format --check collector server dashboard tests benchmarks examples

typecheck: install
	MYPY=$(BIN)/mypy scripts/typecheck.sh

pytest: install
	$(BIN)/python -m pytest

test: lint typecheck pytest

bench: install
	$(BIN)/python benchmarks/collector_overhead.py
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/dashboard.py

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
