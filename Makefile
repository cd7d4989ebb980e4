# Kale — set-up and front-door targets. `make demo` and `make test` work on a fresh clone
# with only Python 3.11: they create .venv, install torch==2.13.0 first (a CPU wheel; any
# other torch request would pull a multi-GB CUDA build), then the project.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kale-installed

.PHONY: install browser promtool demo test test-fast typecheck lint lint-images images release dist dist-check clean

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

# promtool (Debian's prometheus package) checks the /metrics exposition and the alert rules
# in tests. Needs root and apt-get, like `make browser`; elsewhere it says so and those
# checks skip with the same reason.
promtool:
	@if command -v promtool >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing promtool (apt-get install prometheus)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	else \
	  echo "make promtool: promtool is missing and cannot be installed here (needs root and apt-get): the promtool checks will skip"; \
	fi

# Container images (images/*.Dockerfile) with docker (a running daemon) or podman.
IMAGE_REPO ?= ghcr.io/kale-dev
# The version is written once, in common/version.py (the wheel, `kale --version`, the
# kale_build_info metric, these tags and the images' version label all read it).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' common/version.py)
CONTAINER_TOOL ?= $(shell if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo docker; elif command -v podman >/dev/null 2>&1; then echo podman; fi)
images:
	@if [ -z "$(CONTAINER_TOOL)" ]; then \
	  echo "make images: no container tool: docker (with a running daemon) or podman is needed; set CONTAINER_TOOL=... to choose one" >&2; \
	  exit 2; \
	fi
	$(CONTAINER_TOOL) build -f images/controller.Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE_REPO)/kale:$(VERSION) .
	$(CONTAINER_TOOL) build -f images/trainer.Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE_REPO)/kale-trainer:$(VERSION) .

lint-images: install
	$(BIN)/hadolint images/controller.Dockerfile images/trainer.Dockerfile

# manifests/release.yaml = `kubectl kustomize manifests` (a test checks they are equal).
release:
	$(BIN)/python -m tools.gen_release

# The wheel and the sdist in dist/ (python -m build; `build` is in the dev extra). The build
# runs in an isolated environment that pip fills with setuptools from the configured index or
# mirror: nothing else is needed. dist-check installs the wheel into a fresh venv (the core
# dependencies only: no torch) and runs `kale --version` there.
dist: install
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	@ls -l dist

dist-check: dist
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install -q --disable-pip-version-check dist/kale_autoscaler-$(VERSION)-py3-none-any.whl; \
	shown=$$("$$tmp/venv/bin/kale" --version); echo "$$shown"; \
	test "$$shown" = "kale, version $(VERSION)" || { echo "dist-check: expected kale, version $(VERSION)" >&2; exit 1; }; \
	if "$$tmp/venv/bin/python" -c "import torch" 2>/dev/null; then echo "dist-check: the core install pulled torch" >&2; exit 1; fi

# Every package mypy checks (config: [tool.mypy] in pyproject.toml).
TYPED := kale scheduler trainer autoscaler kube forecasting throughput placement common tools

demo: install
	$(BIN)/kale demo

# The quick gates first (lint, format, import contracts, types), then every test; the 20
# slowest are listed at the end.
test: install browser promtool
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy $(TYPED)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=20

# The same gates, then the tests that need no broker, no browser and no training and are
# not slow (the markers in pyproject.toml): under two minutes on two cores.
FAST := not kafka and not browser and not training and not slow
test-fast: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy $(TYPED)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "$(FAST)"

typecheck: install
	$(BIN)/mypy $(TYPED)

lint: install lint-images
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) build dist *.egg-info
