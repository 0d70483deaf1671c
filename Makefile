# The one dev loop: format, lint, types, import contracts and tests, in the venv you have.
# `make check` is what CI runs after installing; `make fix` rewrites what ruff can fix.

VENV ?= .venv
BIN := $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/,)

.PHONY: check lint test fix

check: lint test

lint:
	$(BIN)ruff format --check .
	$(BIN)ruff check .
	$(BIN)mypy
	$(BIN)lint-imports

test:
	$(BIN)python -m pytest -q

fix:
	$(BIN)ruff format .
	$(BIN)ruff check --fix .
