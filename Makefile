# The two commands of the quick start: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev

.PHONY: demo test lint fmt bench clean chain-tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the server extra too, so that `fiduciary serve` works after `make demo`
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server]'
	touch $@

$(DEVSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(STAMP)

# `make demo ARGS=--chain`: the demo on a local anvil needs the chain extra and anvil (npm ci)
CHAINSTAMP := $(VENV)/.installed-chain
$(CHAINSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server,chain]'
	touch $@ $(STAMP)

demo: $(STAMP) $(if $(findstring --chain,$(ARGS)),$(CHAINSTAMP) chain-tools)
	$(BIN)/fiduciary demo $(ARGS)
	@echo "Next: $(BIN)/fiduciary serve  (the console and API), $(BIN)/fiduciary --help"

# the chain backend's real parts (anvil, solc-js, OpenZeppelin, Uniswap V2), pinned by
# package-lock.json; the chain tests skip without them (and fail under CI=true)
NODE_STAMP := node_modules/.installed

$(NODE_STAMP): package.json package-lock.json
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "npm not found: the chain tests will skip (fail under CI=true); see docs/chain.md"; \
	elif npm ci --no-audit --no-fund --loglevel=error; then touch $@; \
	else echo "npm ci failed: the chain tests will skip (fail under CI=true); see docs/chain.md"; fi

chain-tools: $(NODE_STAMP)

# The suite on PYTEST_WORKERS processes (pytest-xdist; 0: in this one process), the tests thought
# longest handed out first (tests/conftest.py), one or two at a time (--maxschedchunk=1: not in
# chunks of hundreds, which gave one worker every long test), so that no long test starts last.
PYTEST_WORKERS ?= 2
test: $(DEVSTAMP)
	@$(MAKE) --no-print-directory chain-tools
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --maxschedchunk=1 $(PYTEST_ARGS)

lint: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(DEVSTAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/loop.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist
