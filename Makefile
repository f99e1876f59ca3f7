# Device Lab: `make lab` to work through the course, `make test` to check all of it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Re-install whenever the dependency list changes: the course alone for `make lab` (a student's install), and
# everything (the grader, the hub, the book, the test tools) for `make test` and the instructor's commands.
STAMP  := $(VENV)/.installed-stamp
COURSE_STAMP := $(VENV)/.course-stamp
# pyproject.toml's [project] table alone (etc/install_inputs.py): a change elsewhere in it reinstalls nothing
INSTALL_INPUTS := build/install-inputs.toml
# Where `make lab` puts the student's own copies of the lessons and problem sets (never a tracked file)
MYWORK ?= mywork
# Test workers: two more than the cores, since the real-hub tests mostly wait for servers and time limits
# (two cores: 2026-12-03, 924 s with three workers against 1476 s with two; 2026-12-04, three workers left
# the cores 13% idle, four 5%; docs/measurements.md)
JOBS   ?= $(shell echo $$(( $$(nproc) + 2 )))
# Which PyTorch to install, as a pip requirement: empty lets pip choose (on Linux that is the CUDA build, 5.3 GiB
# with its libraries). On a machine without an NVIDIA GPU, PyTorch's CPU-only build runs the course in under 1 GiB:
# make venv TORCH='torch==2.13.0+cpu' PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu (README).
TORCH  ?=
# Which installer: pip by default; `make venv colab-env UV=uv` installs with uv (https://docs.astral.sh/uv/)
# instead: the same packages in a fraction of the time (downloads and unpacking in parallel, and torch unpacked
# once into uv's cache, then hard-linked into both environments). CI installs this way (.ci/run). uv reads
# its own settings, not pip's (README, where it says how to install).
UV     ?=
ifeq ($(strip $(UV)),)
new_venv      = $(PYTHON) -m venv $(1)
install_into  = $(1)/bin/python -m pip install
COMPILED      :=
UNCOMPILED    := --no-compile
REINSTALL     := --force-reinstall
QUIET         := --quiet --progress-bar off
PROGRESS      := --progress-bar on
UPGRADE_PIP    = $(PY) -m pip install --upgrade --progress-bar on pip
else
new_venv      = $(UV) venv --seed --quiet --python $(PYTHON) $(1)
install_into  = $(UV) pip install --python $(1)/bin/python
COMPILED      := --compile-bytecode
UNCOMPILED    :=
REINSTALL     := --reinstall
QUIET         := --quiet
PROGRESS      :=
UPGRADE_PIP    = @true
endif
# Whole test modules to each worker, the longest first (tests/schedule.py), so that none is left to run alone.
DIST   := --dist loadfile --no-loadscope-reorder
# An environment shaped like Google Colab's, for tests/lessons/test_colab.py: ipywidgets 7.7.1, ipykernel 6,
# no nbgrader, no JupyterLab, and the helper package installed without its dependencies. Only the test suite uses
# it (as the user who built it), so its modules are compiled when first imported, not all of torch's at install:
# its kernels keep what they compile even where PYTHONDONTWRITEBYTECODE is set, as Colab's own do.
COLAB_VENV  := .colab-venv
COLAB_STAMP := $(COLAB_VENV)/.installed-stamp
# jsonschema (through nbformat, jupyter_events, nbgrader) imports rfc3987_syntax when it is installed, which builds
# some 30 Lark parsers at import: 1.3 s of CPU in every Jupyter server, nbgrader command and grader, for an `iri`
# format no Jupyter schema uses (python-jsonschema/jsonschema#1428). Without it jsonschema skips that format.
SLOW_VALIDATOR_OFF = $(PY) -m pip uninstall --yes --quiet rfc3987-syntax
# `make lab` adds this Jupyter config folder: it switches off nbgrader's instructor tools (a student's view).
STUDENT_JUPYTER := $(CURDIR)/etc/jupyter/student
# JupyterLab refuses to run as root unless told (containers, cloud VMs).
# A comma inside a $(call ...) argument
, := ,
ROOT_FLAG := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)

.DEFAULT_GOAL := help
.PHONY: help venv colab-env lab lab-instructor test test-fast compile build tidy validate lint mywork book screenshots clean-venv

help:  ## List the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(INSTALL_INPUTS): pyproject.toml etc/install_inputs.py
	@$(PYTHON) etc/install_inputs.py pyproject.toml $(INSTALL_INPUTS)

# $(call install_course,<extra>,<what the message says>,<stamp>[,<more to install>]): the one recipe of both
# installs (the developer's also installs the grader and hub distribution, grader/, for its commands)
define install_course
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Device Lab needs Python 3.10 or newer; set PYTHON=python3.x")'
	@test -x $(PY) || { echo "Creating the virtual environment in $(VENV)/"; $(call new_venv,$(VENV)); }
	@echo "Installing $(2) (the first time takes a few minutes: torch is large)"
	$(UPGRADE_PIP)
	$(if $(TORCH),$(call install_into,$(VENV)) $(PROGRESS) $(COMPILED) "$(TORCH)")
	$(call install_into,$(VENV)) $(PROGRESS) $(COMPILED) -e ".[$(1)]" $(4)
	$(SLOW_VALIDATOR_OFF)
	@touch $(3)
endef

$(STAMP): $(INSTALL_INPUTS) grader/pyproject.toml
	$(call install_course,dev,the course and its tools,$(STAMP),-e "./grader[hub]")

venv: $(STAMP)  ## Create or update the virtual environment with everything (grader, hub, book, tests)

$(COURSE_STAMP): $(INSTALL_INPUTS)
	$(call install_course,course,the course: PyTorch$(,) JupyterLab and the course's helpers,$(COURSE_STAMP))

$(COLAB_STAMP): $(INSTALL_INPUTS) $(wildcard devicelab/*.py devicelab/*/*.py)
	@test -x $(COLAB_VENV)/bin/python || $(call new_venv,$(COLAB_VENV))
	$(call install_into,$(COLAB_VENV)) $(QUIET) $(UNCOMPILED) "$(or $(TORCH),torch)" numpy matplotlib tqdm "ipywidgets==7.7.1" "ipykernel>=6,<7" "notebook>=6.5,<7"
	rm -rf build/lib build/bdist.*  # setuptools reuses build/lib: a stale copy would slip old packages into the wheel
	$(call install_into,$(COLAB_VENV)) $(QUIET) --no-deps $(REINSTALL) .
	$(COLAB_VENV)/bin/python -m ipykernel install --prefix $(COLAB_VENV) --name colab-like --display-name "Colab-like"
	@touch $(COLAB_STAMP)

colab-env: $(COLAB_STAMP)  ## Build the Colab-shaped environment the Colab test runs notebooks in

lab: $(COURSE_STAMP)  ## Install the course only, copy it into mywork/ (new files only) and open your copies in JupyterLab
	@$(PY) -m devicelab workspace "$(MYWORK)" | tail -n 1
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" JUPYTER_CONFIG_PATH="$(STUDENT_JUPYTER)" $(VENV)/bin/jupyter lab --notebook-dir="$(CURDIR)/$(MYWORK)" $(ROOT_FLAG) $(LAB_ARGS)

lab-instructor: $(STAMP)  ## Open the course in JupyterLab with nbgrader's instructor tools (formgrader, Create Assignment, Validate)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/jupyter lab --notebook-dir="$(CURDIR)" $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP) $(COLAB_STAMP)  ## Lint, then run the whole test suite (notebooks, browser and the book included)
	$(VENV)/bin/ruff check devicelab autograder tests benchmarks book
	@$(MAKE) --no-print-directory compile
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -n $(JOBS) $(DIST) --durations=25

test-fast: $(STAMP)  ## Run the tests that do not execute notebooks
	@$(MAKE) --no-print-directory compile
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -m "not notebook and not bench" -n $(JOBS) $(DIST)

# The course's own packages are installed editable, so pip compiles none of them. Where PYTHONDONTWRITEBYTECODE is
# set, every grader, kernel and hub process of the test suite would compile them again (0.2 s of CPU each), so the
# tests compile them first (quick when nothing changed: Python checks each file's time and size).
compile: $(STAMP)  ## Compile the course's own packages, which an editable install leaves uncompiled (make test does)
	$(PY) -m compileall -q -j 0 devicelab autograder tests benchmarks book

build: $(STAMP)  ## Regenerate release/ from source/
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m autograder build

validate: $(STAMP)  ## Check every assignment both ways: solutions pass, stubs fail
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m autograder validate

tidy: $(STAMP)  ## Strip outputs and normalise every notebook in place
	$(PY) -m autograder tidy

lint: $(STAMP)  ## Lint the Python code
	$(VENV)/bin/ruff check devicelab autograder tests benchmarks book

book: $(STAMP)  ## Build the course as a website in build/book/html/ (lessons with their CPU and GPU outputs, guides)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m book build

mywork: $(COURSE_STAMP)  ## Copy lessons and assignments into mywork/ (never overwrites your copies; make lab does it)
	$(PY) -m devicelab workspace "$(MYWORK)"

.PHONY: diagrams

diagrams: $(STAMP)  ## Redraw the lessons' diagrams (docs/images/*.svg) from docs/images/diagrams.py
	$(PY) docs/images/diagrams.py

screenshots: $(STAMP)  ## Retake the README's screenshots (docs/images/*.png) from a student's JupyterLab
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) docs/images/screenshots.py

clean-venv:  ## Remove the virtual environments
	rm -rf $(VENV) $(COLAB_VENV)

.PHONY: grade demo gpu-record gpu-notes

gpu-record: $(STAMP)  ## On a machine with a GPU: run the lessons, write each GPU cell's real output under it
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/gpu_smoke.py record $(NOTEBOOKS)

gpu-notes: $(STAMP)  ## Lay the recorded GPU notes out again (those that answer a prediction folded); runs no cell
	$(PY) benchmarks/gpu_smoke.py refold $(NOTEBOOKS)

grade: $(STAMP)  ## Grade a class: make grade ASSIGNMENT=<id> SUBMISSIONS=<folder or .zip> [GRADE_ARGS=...]
	@test -n "$(ASSIGNMENT)" -a -n "$(SUBMISSIONS)" || { echo "usage: make grade ASSIGNMENT=<id> SUBMISSIONS=<folder or .zip> [GRADE_ARGS='--jobs 4 --timeout 300']"; exit 2; }
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m autograder grade "$(ASSIGNMENT)" "$(SUBMISSIONS)" $(GRADE_ARGS)

demo: $(STAMP)  ## Build a small realistic class from the assignments and grade it (graded/demo/)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m autograder demo $(DEMO_ARGS)

.PHONY: hub-proxy hub-setup hub-start hub-test hub-latency

# A class on one JupyterHub (README, "Run a class on a hub"). The hub's folder; hub-setup and hub-start need root.
HUB_ROOT  ?= /srv/devicelab-hub
HUB_PROXY := .hub/node_modules/.bin/configurable-http-proxy

$(HUB_PROXY):
	@command -v npm >/dev/null 2>&1 || { echo "npm is needed for JupyterHub's proxy (Debian: apt-get install npm)"; exit 2; }
	@mkdir -p .hub && printf '*\n' > .hub/.gitignore
	npm install --prefix .hub --no-audit --no-fund --loglevel=error configurable-http-proxy@5

hub-proxy: $(HUB_PROXY)  ## Install JupyterHub's proxy (configurable-http-proxy, npm) into .hub/

hub-setup: $(STAMP) $(HUB_PROXY)  ## Set a class up on a JupyterHub (root): make hub-setup ROSTER=roster.csv [HUB_ARGS=...]
	@test -n "$(ROSTER)" || { echo "usage: sudo make hub-setup ROSTER=roster.csv [HUB_ROOT=$(HUB_ROOT)] [HUB_ARGS='--prefix dl- --python /opt/devicelab/bin/python']"; exit 2; }
	$(PY) -m autograder hub setup --roster "$(ROSTER)" --root "$(HUB_ROOT)" $(HUB_ARGS)

hub-start: $(STAMP)  ## Run the class's JupyterHub in the foreground (root; Ctrl-C stops it)
	$(PY) -m autograder hub start --root "$(HUB_ROOT)"

hub-test: $(STAMP) $(HUB_PROXY)  ## Run the hub tests (root: makes and removes Unix accounts, starts a hub on loopback)
	DEVICELAB_HUB_TESTS=1 PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -p no:xdist -m hub

hub-latency: $(STAMP) $(HUB_PROXY)  ## Benchmark submit-to-feedback latency of autograde on submit (root; 1 and 20 students)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/hub_latency.py
