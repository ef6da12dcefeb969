# The two commands of the README: `make run` and `make test`. Everything else is a step of them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck pytest test-db bench-queue bench-ingest bench-api screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)  ## Set up and run the demo on an embedded PostgreSQL (or DATABASE_URL).
	$(BIN)/pgenough demo

test: lint typecheck pytest  ## Set up and run the whole suite, linters included.

lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest

test-db: $(STAMP)  ## Only the database tests (CI runs them again against DATABASE_URL).
	$(BIN)/pytest -m db

bench-queue: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench.queue

bench-ingest: $(STAMP)  ## As a module: as a script, bench/queue.py shadows the stdlib's queue.
	$(BIN)/python -m bench.ingest

bench-api: $(STAMP)  ## Needs wrk (apt-get install -y wrk).
	$(BIN)/python -m bench.api

screenshots: $(STAMP)  ## docs/img/dashboard-*.png from real ingestions; needs /usr/bin/chromium.
	$(BIN)/python -m tests.ui.screenshots

clean:
	rm -rf $(VENV) .pgenough-test .mypy_cache .ruff_cache .pytest_cache
