# The two commands of the README: `make run` and `make test`. Everything else is a step of them
# (and `make docs`, the documentation site).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two installs, one stamp each: `make run` needs both distributions (the library, pgenough,
# at the root; the plan service built on it, in plan-service/), `make test` the test tools
# too. The test install holds the demo's, so it stamps both: `make run` after `make test`
# installs nothing, and `make test` after `make run` adds what is missing.
SERVICE_STAMP := $(VENV)/.installed-service
TEST_STAMP    := $(VENV)/.installed-test
DOCS_STAMP    := $(VENV)/.installed-docs

.PHONY: run test lint docs typecheck pytest test-db dist bench-ab bench-instructions bench-queue bench-ingest bench-api bench-replica bench-failover screenshots clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(SERVICE_STAMP): pyproject.toml plan-service/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e . -e ./plan-service
	touch $(SERVICE_STAMP)

$(TEST_STAMP): pyproject.toml plan-service/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]' -e ./plan-service
	touch $(TEST_STAMP) $(SERVICE_STAMP) $(DOCS_STAMP)

$(DOCS_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

run: $(SERVICE_STAMP)  ## Set up and run the demo on an embedded PostgreSQL (or DATABASE_URL).
	$(BIN)/pgenough-plans demo

test: lint typecheck pytest  ## Set up and run the whole suite, linters included.

lint: $(TEST_STAMP)  ## lint-imports: the layers declared in pyproject.toml's [tool.importlinter].
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/lint-imports
	$(MKDOCS_BUILD)

# The documentation site, into site/ (gitignored): Material for MkDocs, built offline (no fonts
# or scripts fetched: mkdocs.yml), strict, so a broken link or anchor fails the build and
# `make lint` with it. Open site/index.html. NO_MKDOCS_2_WARNING: Material's banner about its
# successor, printed on every build.
MKDOCS_BUILD = NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs: $(DOCS_STAMP)  ## The documentation site into site/ (mkdocs.yml).
	$(MKDOCS_BUILD)

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

# The suite in two passes: on PYTEST_WORKERS xdist processes, a database each (tests/conftest.py),
# then alone the tests marked `serial` (they restart the server, load the machine for minutes,
# or assert a wall-clock bound). The serial pass runs even when the parallel one failed; the status is the first's.
# Each prints its 25 slowest steps. A bare `pytest`, as a developer runs it, is one serial pass.
PYTEST_WORKERS ?= 2
PYTEST_OPTS    ?= --durations=25
PYTEST_PARALLEL = $(BIN)/pytest $(PYTEST_OPTS) -n $(PYTEST_WORKERS)
# The serial pass collects only the modules that mark a test `serial` (-m still selects).
PYTEST_SERIAL   = $(BIN)/pytest $(PYTEST_OPTS) $$(grep -rl --include='*.py' 'mark.serial' tests)

pytest: $(TEST_STAMP)
	parallel=0; serial=0; \
	$(PYTEST_PARALLEL) -m "not serial" || parallel=$$?; \
	$(PYTEST_SERIAL) -m serial || serial=$$?; \
	if [ $$parallel -ne 0 ]; then exit $$parallel; fi; exit $$serial

test-db: $(TEST_STAMP)  ## Only the database tests (CI runs them again against DATABASE_URL).
	parallel=0; serial=0; \
	$(PYTEST_PARALLEL) -m "db and not serial" || parallel=$$?; \
	$(PYTEST_SERIAL) -m "db and serial" || serial=$$?; \
	if [ $$parallel -ne 0 ]; then exit $$parallel; fi; exit $$serial

# The release into dist/: the sdist, then the wheel built from it (what tests/test_packaging.py
# checks). Without build isolation: the test install holds the hatchling [build-system] names,
# so nothing is downloaded.
dist: $(TEST_STAMP)  ## dist/pgenough-VERSION.tar.gz and dist/pgenough-VERSION-py3-none-any.whl
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist .

# Commits compared in one sitting: the headline benchmarks (queue, ingest) for BASE and HEAD
# interleaved, with the ratios (bench/ab.py; ROUNDS=2 by default).
bench-ab: $(TEST_STAMP)  ## make bench-ab BASE=<commit> [ROUNDS=n]
	@test -n "$(BASE)" || { echo "usage: make bench-ab BASE=<commit> [ROUNDS=n]"; exit 2; }
	$(BIN)/python -m bench.ab --base $(BASE) $(if $(ROUNDS),--rounds $(ROUNDS))

# Instructions per unit of the client's hot paths against bench/instructions.json (callgrind;
# the gate `make test` runs in tests/test_instructions.py). REASON="..." writes a new baseline.
bench-instructions: $(TEST_STAMP)  ## Needs valgrind.
	$(BIN)/python -m bench.instructions $(if $(REASON),--update "$(REASON)")

bench-queue: $(TEST_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench.queue

bench-ingest: $(TEST_STAMP)  ## As a module: as a script, bench/queue/ shadows the stdlib's queue.
	$(BIN)/python -m bench.ingest

bench-api: $(TEST_STAMP)  ## Needs wrk (apt-get install -y wrk).
	$(BIN)/python -m bench.api --plot-search docs/img/boundary-search.png

bench-replica: $(TEST_STAMP)  ## Needs wrk and the PostgreSQL 15 binaries (initdb, pg_basebackup).
	$(BIN)/python -m bench.replica

bench-failover: $(TEST_STAMP)  ## Needs the PostgreSQL 15 binaries (initdb, pg_basebackup, pg_waldump).
	$(BIN)/python -m bench.failover

screenshots: $(TEST_STAMP)  ## docs/img/dashboard-*.png from real jobs and ingestions; needs /usr/bin/chromium.
	$(BIN)/python -m tests.dashboard.screenshots
	$(BIN)/python -m tests.plan_service.ui.screenshots

clean:
	rm -rf $(VENV) .pgenough-test dist site .mypy_cache .ruff_cache .pytest_cache
