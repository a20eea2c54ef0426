# Two entry points for users: `make demo` and `make test`. Both bootstrap first (idempotent).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: bootstrap demo test test-fast test-coll lint doctor clean

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	@bash scripts/demo.sh

test: bootstrap lint
	$(PY) -m pytest tests

test-fast: bootstrap
	$(PY) -m pytest -m unit tests

lint: bootstrap
	$(VENV)/bin/ruff check hw p4 emu sw tests scripts examples

doctor: bootstrap
	$(VENV)/bin/starpulse doctor

clean:
	rm -rf build sim_build .pytest_cache

test-coll: bootstrap
	$(PY) -m pytest tests/sw/collectives -q
