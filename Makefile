# gitpilot-jupyter: the two commands a newcomer needs are `make run` and `make test`.
# Everything lives in a project-local virtual environment (.venv), built on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888

.PHONY: run test test-core test-browser lab bench debug lint clean install

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,docker]"
	touch $(STAMP)

install: $(STAMP) ## create .venv and install the package with its test tools

run: $(STAMP) ## start Jupyter with the sandbox extension and the demo notebooks
	$(BIN)/jupyter server --ServerApp.root_dir=notebooks --port=$(PORT) $(if $(filter 0,$(shell id -u)),--allow-root,)

test: $(STAMP) lint test-core ## lint, type-check and run the whole test suite

test-core: $(STAMP)
	$(BIN)/python -m pytest tests -m "not browser"

lint: $(STAMP)
	$(BIN)/ruff check gitpilot_jupyter tests
	$(BIN)/ruff format --check gitpilot_jupyter tests
	$(BIN)/mypy

debug: $(STAMP) ## walk the whole sandbox path and say what breaks
	$(BIN)/jupyter-sandbox debug

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
