# The two commands of the README:  make demo  and  make test.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test bench lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

## demo: install, then run the crud scenario on the embedded stores (memory, sqlite)
demo: $(VENV)/.core
	$(BIN)/storebench run crud

## test: install with test extras, then run the whole test suite
test: $(VENV)/.test
	$(BIN)/python -m pytest

## bench: the harness's own ceiling (null store)
bench: $(VENV)/.core
	$(BIN)/python benchmarks/harness_ceiling.py

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src

format: $(VENV)/.dev
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

clean:
	rm -rf $(VENV) results .pytest_cache
