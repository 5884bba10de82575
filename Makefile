# Two commands do all set-up on a fresh clone:
#   make demo   install the package alone into .venv, then watch recall work on the
#               embedded default (SQLite, embedded Chroma, the local model)
#   make test   add the test tools (and PostgreSQL's binaries if missing), then lint,
#               type-check and run every test
#               (scripts/test-tiers prints each tier's time)
#   make unit   the fast offline tier alone (tests/unit, within 2 minutes on 2 cores)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# pip installs without compiling, one package at a time; this compiles them all at once,
# on every core (~30 s with the test tools). Python would write the bytecode on first
# import, unless PYTHONDONTWRITEBYTECODE is set (as on CI machines): then every process
# re-reads its imports' source, ~3 s more to start the CLI or a test's interpreter.
COMPILE = $(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

.PHONY: demo test lint unit install install-test clean

$(BIN)/python:
	@echo "==> creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

# The demo needs the package and its runtime dependencies only (no test extras).
$(BIN)/.installed: pyproject.toml | $(BIN)/python
	@echo "==> installing langchain-semantic-recall (runtime dependencies only; pip shows each package)"
	$(BIN)/python -m pip install --progress-bar on --no-compile -e .
	@echo "==> compiling the installed packages to bytecode"
	$(COMPILE)
	touch $@

$(BIN)/.installed-test: pyproject.toml $(BIN)/.installed
	@echo "==> installing the test tools (pytest, ruff, mypy, PostgreSQL drivers, LangGraph server, notebooks)"
	$(BIN)/python -m pip install --progress-bar on --no-compile -e '.[test]'
	@echo "==> compiling the test tools to bytecode"
	$(COMPILE)
	touch $@

install: $(BIN)/.installed

install-test: $(BIN)/.installed-test

demo: $(BIN)/.installed
	@echo "==> running the demo (the first run loads the local model)"
	$(BIN)/semantic-recall demo

lint: $(BIN)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	bash scripts/ensure-postgres
	PYTEST=$(BIN)/pytest bash scripts/test-tiers

unit: $(BIN)/.installed-test
	PYTEST=$(BIN)/pytest bash scripts/test-tiers unit

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
