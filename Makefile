# fp8-policy: `make run` serves the API with demo data on embedded SQLite; `make test` runs the suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000
export FP8_POLICY_DATA_DIR ?= $(CURDIR)/data

.PHONY: setup run test bench eval clean

setup: $(STAMP)

# Re-installs only when pyproject.toml changes; safe to run any number of times.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

run: setup
	$(BIN)/fp8-policy serve --demo --host $(HOST) --port $(PORT)

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m bench.run

eval: setup
	$(BIN)/python -m bench.eval

clean:
	rm -rf $(VENV) data .pytest_cache bench/out
