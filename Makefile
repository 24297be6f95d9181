# The two commands of the README:  make demo  and  make test.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo setup test bench lint format clean

# All set-up lives in tools/setup.py: it installs only what is missing and
# prints one line per component (what, how long). STOREBENCH_EMBEDDED_ONLY=1
# leaves out the managed server engines (and their tests).

## demo: install storebench (with usearch), then run the crud scenario on two exact stores
## (memory, sqlite) and an HNSW one (usearch), 200 operations per task (sqlite's exhaustive
## search scans the 10,000 documents per query); usearch over two builds (m 16 and 32,
## ef_construct 64), each searched at ef 10 (= k), 64 and 256: recall from about 0.7-0.8 to 1.0
demo:
	$(PYTHON) tools/setup.py --core --venv $(VENV)
	$(BIN)/storebench run crud --store memory,sqlite,usearch --set ops=200 \
		--set 'grid.index.ef_construct=[64]' --set 'grid.search.ef=[10,64,256]'

## setup: everything the tests need (system packages, extras, engine distributions, agdb)
setup:
	$(PYTHON) tools/setup.py --venv $(VENV)

## test: set up, then run the whole test suite, a worker per core (TEST_WORKERS=0: in this process)
TEST_WORKERS ?= auto
test: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

$(VENV)/.dev: pyproject.toml
	$(PYTHON) tools/setup.py --core --venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

## bench: the harness's own ceiling (null store), with the compiled closed loop
bench:
	$(PYTHON) tools/setup.py --core --native-client --venv $(VENV)
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
