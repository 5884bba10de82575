# Two commands do all set-up on a fresh clone:
#   make demo   install into .venv, then watch recall work on the embedded default
#   make test   install into .venv (with test tools) and PostgreSQL's binaries if missing,
#               then lint, type-check and run every test tier (scripts/test-tiers prints
#               each tier's time)
#   make unit   the fast offline tier alone (tests/unit, within 2 minutes on 2 cores)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint unit install clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/semantic-recall demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	bash scripts/ensure-postgres
	PYTEST=$(BIN)/pytest bash scripts/test-tiers

unit: $(BIN)/.installed
	PYTEST=$(BIN)/pytest bash scripts/test-tiers unit

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
