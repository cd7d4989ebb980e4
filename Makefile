# Kale — set-up and front-door targets. `make demo` and `make test` work on a fresh clone
# with only Python 3.11: they create .venv, install torch==2.13.0 first (a CPU wheel; any
# other torch request would pull a multi-GB CUDA build), then the project.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kale-installed

.PHONY: install demo test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	@$(BIN)/python -c "import torch, sys; v = torch.__version__.split('+')[0]; sys.exit(0 if v == '2.13.0' else 'torch %s installed, expected 2.13.0' % v)"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/kale demo

test: install
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(BIN)/ruff check .
	$(BIN)/python tools/check_layers.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info
