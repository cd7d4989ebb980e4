# Kale — set-up and front-door targets. `make demo` and `make test` work on a fresh clone
# with only Python 3.11: they create .venv, install torch==2.13.0 first (a CPU wheel; any
# other torch request would pull a multi-GB CUDA build), then the project.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kale-installed

.PHONY: install browser demo test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	@$(BIN)/python -c "import torch, sys; v = torch.__version__.split('+')[0]; sys.exit(0 if v == '2.13.0' else 'torch %s installed, expected 2.13.0' % v)"
	touch $(STAMP)

install: $(STAMP)

# Chromium for the dashboard's browser test: Debian's package, driven by playwright through
# its executable path (playwright never downloads a browser of its own here). Needs root and
# apt-get; elsewhere it says so and the browser test skips with the same reason.
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium (apt-get, about a minute)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "make browser: $(CHROMIUM) is missing and cannot be installed here (needs root and apt-get): the browser test will skip"; \
	fi

demo: install
	$(BIN)/kale demo

test: install browser
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/check_layers.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info
