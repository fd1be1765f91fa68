# gitpilot-jupyter: the two commands a newcomer needs are `make run` and `make test`.
# Everything lives in a project-local virtual environment (.venv), built on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# `make run` installs what running needs (the package, JupyterLab, the kernel, the Docker SDK for the
# MatrixLab lifecycle); everything else (`make test`, lint, docs, install) adds the test and docs tools.
RUN_STAMP := $(VENV)/.installed-run
STAMP  := $(VENV)/.installed
PORT   ?= 8888
# The JupyterLab extension: rebuilt when its sources change, linked into the venv so lab sees it.
LABEXT     := gitpilot_jupyter/labextension/package.json
LABEXT_SRC := $(wildcard labextension/src/*.ts labextension/style/* labextension/schema/*) labextension/package.json
JLPM       := PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/jlpm
# Every lab extension build copies labextension/install.json into its output, which the wheel
# maps on its own: removed before each editable install, or the two copies clash.
STRAY_INSTALL_JSON := gitpilot_jupyter/labextension/install.json
# The lab extension's node packages (the build and the TypeScript linters need them).
JSDEPS     := labextension/node_modules/.yarn-state.yml
# The test targets end with the slowest tests and their times (docs/dev/testing.md, "Runtime").
DURATIONS ?= --durations=25
# make test-core's pytest processes (pytest-xdist): the suite mostly waits on servers, kernels and
# runs (one process kept ~0.4 of a core busy), so TEST_WORKERS=3 shares two cores well (7.5 min
# against 24); 0, the default until the tests that fail under that load are mended, runs it in one.
TEST_WORKERS ?= 0

.PHONY: help run test test-core test-js test-browser lab bench debug lint docs clean install

.DEFAULT_GOAL := help

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	rm -f $(STRAY_INSTALL_JSON)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[lab,docker]"
	touch $@

$(STAMP): $(RUN_STAMP)
	rm -f $(STRAY_INSTALL_JSON)
	$(BIN)/python -m pip install --quiet -e ".[lab,docker,test,docs]"
	touch $@

$(JSDEPS): labextension/package.json labextension/yarn.lock | $(RUN_STAMP)
	cd labextension && $(JLPM) install
	touch $@

$(LABEXT): $(LABEXT_SRC) $(JSDEPS) | $(RUN_STAMP)
	cd labextension && $(JLPM) build
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/jupyter labextension develop --overwrite .
	touch $@

install: $(STAMP) ## create .venv and install the package with its test and docs tools

run: $(RUN_STAMP) $(LABEXT) ## start JupyterLab with the sandbox on the getting-started notebook (PORT=8888; Ctrl-C stops)
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks --port=$(PORT) \
		--LabApp.default_url=/lab/tree/01-getting-started.ipynb $(if $(filter 0,$(shell id -u)),--allow-root,)

test: $(STAMP) lint docs test-core test-js test-browser ## lint, type-check and run the whole test suite

test-core: $(STAMP) ## the Python tests without a browser (unit, server, kernel, widgets, docker, ...)
	$(BIN)/python -m pytest tests -m "not browser" -n $(TEST_WORKERS) --dist loadgroup $(DURATIONS)

test-js: $(LABEXT) ## the lab extension's unit tests (jest)
	cd labextension && $(JLPM) test

test-browser: $(STAMP) $(LABEXT) ## JupyterLab in a real browser, in its own pytest process
	$(BIN)/python -m pytest tests/browser -m browser $(DURATIONS)

lint: $(STAMP) $(JSDEPS) ## ruff, mypy, codespell, shellcheck, and the lab extension's prettier + eslint (`cd labextension && jlpm lint` fixes)
	$(BIN)/ruff check gitpilot_jupyter tests docs/conf.py docs/_ext
	$(BIN)/ruff format --check gitpilot_jupyter tests docs/conf.py docs/_ext
	$(BIN)/mypy
	$(BIN)/codespell
	$(BIN)/lint-imports
	shellcheck gitpilot_jupyter/sandbox/local/chain/*.sh scripts/*.sh
	cd labextension && $(JLPM) lint:check

bench: $(STAMP) ## measure what users feel; writes benchmarks/results/latest.{json,md}
	rm -f $(STRAY_INSTALL_JSON)
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# Sphinx + MyST, offline; nitpicky (-n) and warnings as errors (-W), every problem listed (--keep-going).
docs: $(STAMP) ## build the documentation site into docs/_build/html (warnings are errors)
	$(BIN)/sphinx-build -b html -n -W --keep-going -q docs docs/_build/html

help: ## list the targets with what they do
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

debug: $(RUN_STAMP) ## walk the whole sandbox path and say what breaks
	$(BIN)/jupyter-sandbox debug

clean: ## remove .venv and every build, cache and docs output
	rm -rf $(VENV) build dist docs/_build *.egg-info .mypy_cache .ruff_cache .pytest_cache
