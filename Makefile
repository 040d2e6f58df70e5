# Two entry points; both set up what is missing first (see scripts/setup).
.PHONY: run test setup lint

setup:
	./scripts/setup

run: setup
	.venv/bin/appliance run

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

test: setup lint
	.venv/bin/python -m pytest
