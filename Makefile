# Device Lab: `make lab` to work through the course, `make test` to check all of it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Re-install whenever the dependency list changes.
STAMP  := $(VENV)/.installed-stamp
JOBS   ?= auto
# JupyterLab refuses to run as root unless told (containers, cloud VMs).
ROOT_FLAG := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)

.DEFAULT_GOAL := help
.PHONY: help venv lab test test-fast build tidy tidy-check validate lint clean-venv

help:  ## List the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Device Lab needs Python 3.10 or newer; set PYTHON=python3.x")'
	@test -x $(PY) || { echo "Creating the virtual environment in $(VENV)/"; $(PYTHON) -m venv $(VENV); }
	@echo "Installing the course and its tools (torch is large: the first time takes a few minutes)"
	$(PY) -m pip install --upgrade --progress-bar on pip
	$(PY) -m pip install --progress-bar on -e ".[dev]"
	@touch $(STAMP)

venv: $(STAMP)  ## Create or update the virtual environment

lab: $(STAMP)  ## Open the course in JupyterLab (with nbgrader's extensions)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/jupyter lab --notebook-dir="$(CURDIR)" $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP)  ## Run the whole test suite (notebooks included)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -n $(JOBS)

test-fast: $(STAMP)  ## Run the tests that do not execute notebooks
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -m "not notebook and not bench" -n $(JOBS)

build: $(STAMP)  ## Regenerate release/ from source/
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m autograder build

validate: $(STAMP)  ## Check every assignment both ways: solutions pass, stubs fail
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m autograder validate

tidy: $(STAMP)  ## Strip outputs and normalise every notebook in place
	$(PY) -m autograder tidy

lint: $(STAMP)  ## Lint the Python code
	$(VENV)/bin/ruff check devicelab autograder tests

clean-venv:  ## Remove the virtual environment
	rm -rf $(VENV)
