# The two set-up commands of the README: `make demo` (main job) and `make test` (whole suite).
# Both create .venv and install what they need: torch==2.13.0 first (the CPU wheel), then
# the project, so pip never resolves a different torch build. `make test` runs
# scripts/test.sh, which also sets up the system parts (C compiler, Chromium, PostgreSQL).

PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install demo test lint typecheck pytest bench bench-peers clean

$(STAMP): pyproject.toml
	bash -c 'source scripts/setup_test_env.sh && gw_need_venv $(PY) $(VENV)'
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev,server,integrations]"
	rm -f $(VENV)/.installed-* && touch $(STAMP)

# plotly.js's cartesian bundle from the npm registry, integrity-checked (the dashboard's Plotly)
PLOTLY_BUNDLE := dashboard/gradwatch_dashboard/vendor/VERSION

$(PLOTLY_BUNDLE): scripts/fetch_plotly_bundle.py
	$(BIN)/python scripts/fetch_plotly_bundle.py

install: $(STAMP) $(PLOTLY_BUNDLE)

demo: install
	$(BIN)/gradwatch demo

lint: install
	$(BIN)/ruff check collector server dashboard tests benchmarks examples
	$(BIN)/ruff format --check collector server dashboard tests benchmarks examples

typecheck: install
	MYPY=$(BIN)/mypy scripts/typecheck.sh

pytest: install
	$(BIN)/python -m pytest

test: install
	scripts/test.sh

bench: install
	$(BIN)/python benchmarks/collector_overhead.py
	$(BIN)/python benchmarks/row_checks.py
	$(BIN)/python benchmarks/host_norms.py
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/dashboard.py

# Peers (wandb, TensorBoard, MLflow, aim) are installed only here, in a venv of their own;
# the constraint keeps pip from replacing torch.
PEERS_VENV ?= .venv-peers
PEERS_BIN := $(PEERS_VENV)/bin
PEERS_STAMP := $(PEERS_VENV)/.installed-$(shell cat pyproject.toml benchmarks/requirements-peers.txt | cksum | cut -d' ' -f1)

$(PEERS_STAMP): pyproject.toml benchmarks/requirements-peers.txt
	test -x $(PEERS_BIN)/python || $(PY) -m venv $(PEERS_VENV)
	$(PEERS_BIN)/python -m pip install -q --upgrade pip
	$(PEERS_BIN)/python -m pip install -q "torch==2.13.0"
	$(PEERS_BIN)/python -m pip install -q -e ".[server]"
	echo "torch==2.13.0" > $(PEERS_VENV)/constraints.txt
	$(PEERS_BIN)/python -m pip install -q -r benchmarks/requirements-peers.txt -c $(PEERS_VENV)/constraints.txt
	rm -f $(PEERS_VENV)/.installed-* && touch $(PEERS_STAMP)

bench-peers: $(PEERS_STAMP)
	$(PEERS_BIN)/python benchmarks/peers.py
	$(PEERS_BIN)/python benchmarks/ingest_peers.py

clean:
	rm -rf $(VENV) $(PEERS_VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
