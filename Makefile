# Two entry points for a fresh machine with Python 3.11: `make demo` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= runs/demo

.PHONY: demo test install chromium lint bench sample docs clean

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or make PYTHON=python3 ...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install whenever pyproject.toml changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/pairsieve demo --out $(OUT)

# Headless Chromium renders the report in the tests; installed from Debian's packages when
# possible, otherwise the rendering test skips with a message.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  (command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	   apt-get update -qq >/dev/null 2>&1 && \
	   DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1) \
	  || echo "chromium not installed: the report rendering test will be skipped"; }

test: install chromium
	PREFECT_SERVER_ANALYTICS_ENABLED=false $(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check src tests benchmarks flows examples scripts

sample: install
	$(BIN)/pairsieve synth --out data/sample --products 550 --seed 0 --queries-per-product 10

docs: install
	$(BIN)/pairsieve config-docs > docs/configuration.md

clean:
	rm -rf $(VENV) runs .pytest_cache
