# Two entry points; both set up what is missing first (see scripts/setup).
# Another interpreter in its own environment: make test PYTHON=python3.10 VENV=.venv-py310
# Some tests only: make test PYTEST_ARGS="tests/test_sip_calls.py -x"
.PHONY: run test test-quick setup lint

VENV ?= .venv
export VENV
export PYTHON

setup:
	./scripts/setup

run: setup
	$(VENV)/bin/appliance run

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# SKIP_LINT=1: a second interpreter's leg in CI, where lint already ran (mypy checks for 3.10 anyway).
test: setup $(if $(SKIP_LINT),,lint)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# Before a commit: lint and the tests not marked slow (the whole suite is `make test`, and CI's).
test-quick: setup lint
	$(VENV)/bin/python -m pytest -m "not slow" $(PYTEST_ARGS)
