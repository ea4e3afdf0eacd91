# The README's two commands: `make run` and `make test`. Everything else is a helper.
VENV   := .venv
PYTHON := $(VENV)/bin/python

.PHONY: run test test-fast setup lint models compose-check clean

run: setup
	$(PYTHON) manage.py migrate --noinput
	$(PYTHON) manage.py bootstrap
	$(PYTHON) manage.py omni_up

# Test processes in parallel (pytest-xdist): one per core, at most 4 (tests/parallel_workers.py); TEST_WORKERS=0 runs one.
TEST_WORKERS ?= auto
test: setup
	$(PYTHON) -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist load $(PYTEST_ARGS)

# The inner loop: no live processes, no browser, nothing marked slow.
test-fast: setup
	$(PYTHON) -m pytest -m "not live and not browser and not slow" $(PYTEST_ARGS)

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh scripts/install.sh
	bash scripts/setup.sh

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/lint-imports

models: setup
	$(PYTHON) -m stages.tiny var/models

compose-check: setup
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yml

clean:
	rm -rf var/test.sqlite3 .pytest_cache
