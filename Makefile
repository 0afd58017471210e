# fp8-policy: `make run` serves the API with demo data on embedded SQLite; `make test` runs the suite;
# `make lint` runs ruff (lint + format check) and mypy (strict on fp8_policy.policy, .client, .db and .service).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# `make run` needs only the server extra (FastAPI, SQLAlchemy, numba, ...; the demo runs are generated with
# numpy): no torch, Playwright or linters. The dev install (STAMP) includes it, so it also satisfies RUN_STAMP.
# It installs with uv (https://docs.astral.sh/uv/, from PyPI: `pip install uv`), which downloads, installs and
# byte-compiles the extra in parallel: 58 s (21 s of CPU) instead of pip's ~200 s on the loaded 2-core dev
# machine. --compile-bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set nothing else writes the .pyc
# files, and every start would compile FastAPI, SQLAlchemy, numba ... again (import 6.0 s of CPU instead of 1.8 s).
# uv reads no pip.conf: where the index is only reachable through pip's configuration, or uv fails for any other
# reason, pip installs as before.
RUN_STAMP := $(VENV)/.installed-server
HOST   ?= 127.0.0.1
PORT   ?= 8000
export FP8_POLICY_DATA_DIR ?= $(CURDIR)/data

.PHONY: setup setup-server bytecode run test lint system-deps typecheck-tree bench eval eval-outcomes gpu-check clean

setup: $(STAMP)
setup-server: $(RUN_STAMP)

# Re-installs only when pyproject.toml changes; safe to run any number of times.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	( $(BIN)/python -m pip install --quiet uv && $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ".[server]" ) \
		|| ( $(BIN)/python -m pip install --quiet --upgrade pip && $(BIN)/python -m pip install --quiet -e ".[server]" )
	touch $(RUN_STAMP)

# The project's own modules, byte-compiled as `pip install` does for a wheel. Where PYTHONDONTWRITEBYTECODE is set
# (this workplace's machines and many CI images set it), imports never write .pyc files, so every start of
# `fp8-policy serve` from this tree compiled its ~190 modules again: 0.3-0.5 s of CPU before /healthz's 200 on the
# 2-core dev machine. compileall writes them anyway and only rewrites what changed (timestamp-checked pycs:
# https://docs.python.org/3/library/compileall.html), so it runs before every `run`, `test` and `bench`.
bytecode:
	$(BIN)/python -m compileall -q fp8_policy client db policy service

# `exec`: the server is make's child itself, so a SIGTERM to `make run`'s process group stops it directly.
run: setup-server bytecode
	exec $(BIN)/fp8-policy serve --demo --host $(HOST) --port $(PORT)

# The suite runs on TEST_WORKERS pytest-xdist processes (most tests wait on sockets and subprocesses); which tests
# travel together is tests/support/distribute.py's business. TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 2
test: setup system-deps bytecode
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# Debian packages the suite drives: Chromium (tests/browser, via Playwright) and the PostgreSQL server
# (tests/support/pg_cluster.py). Installed with apt-get when missing and run as root (CI); otherwise one line says what
# to install. FP8_POLICY_CHROMIUM / FP8_POLICY_PG_BINDIR point at other installs.
system-deps:
	@missing=""; \
	[ -n "$$FP8_POLICY_CHROMIUM" ] || command -v chromium >/dev/null || missing="$$missing chromium"; \
	[ -n "$$FP8_POLICY_PG_BINDIR" ] || [ "$$FP8_POLICY_SKIP_POSTGRES" = 1 ] || command -v initdb >/dev/null \
		|| ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages for the test suite:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
		echo "make test needs Debian packages:$$missing -- install them first: sudo apt-get install$$missing" >&2; \
		exit 1; \
	fi

lint: setup typecheck-tree
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p fp8_policy.policy -p fp8_policy.client -p fp8_policy.db -p fp8_policy.service

# The editable install maps client/ db/ policy/ service/ alembic/ into `fp8_policy` with an import hook that
# mypy does not run, so mypy reads the same mapping (setup.py) from a tree of symlinks.
TYPECHECK := build/typecheck/fp8_policy
typecheck-tree:
	@rm -rf build/typecheck && mkdir -p $(TYPECHECK)
	@ln -s $(CURDIR)/fp8_policy/*.py $(TYPECHECK)/
	@for d in client db policy service; do ln -s $(CURDIR)/$$d $(TYPECHECK)/$$d; done
	@ln -s $(CURDIR)/alembic $(TYPECHECK)/migrations

bench: setup bytecode
	$(BIN)/python -m bench.run

eval: setup
	$(BIN)/python -m bench.eval

# Closed loops on CPU (bench/eval_outcomes.py): the recommendation against the rules of thumb in measured held-out
# loss, and the Spearman correlation of predicted risk and measured gap. QUICK=1: two tiny cases; OUT=FILE: JSON.
eval-outcomes: setup
	$(BIN)/python -m bench.eval_outcomes $(if $(QUICK),--quick) $(if $(REPLICATES),--replicates $(REPLICATES)) $(if $(OUT),--out $(OUT))

# TE verification kit (examples/gpu_check.py): the collector against TE's own LogFp8TensorStats, apply_policy's
# precision check, a short TE closed loop, the sensitivity feature and the te-recipe format under TE's
# CustomRecipe, on a CUDA machine with Transformer Engine (`pip install
# 'fp8-policy[te]'` in the venv); elsewhere it says what is missing and exits 0. GPU_CHECK_ARGS: e.g. --out DIR.
gpu-check: setup
	$(BIN)/python examples/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache bench/out build
