# gpuaccept — the two commands a newcomer needs:
#   make demo   the operator on an embedded control plane with a simulated GPU fleet
#   make test   every test (unit, torch.distributed, integration, chart)
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := .bin
CLUSTER_DIR := .cluster
PACKAGE_DIRS := contracts/gpuaccept checks/gpuaccept probes/gpuaccept operator/gpuaccept testsupport/gpuaccept
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/$(BIN):$(PATH)

.PHONY: help venv lint unit test demo generate generate-check

help:
	@echo "make demo        run the operator against a simulated GPU fleet (real kube-apiserver)"
	@echo "make test        install everything and run every test"
	@echo "make unit        the tests that need no control plane (under a minute)"
	@echo "make lint        ruff + mypy --strict"
	@echo "make generate    every generated file (CRDs, default policy, docs, chart, goldens)"
	@echo "make cluster-up  start kube-apiserver + etcd on 127.0.0.1 (.cluster/kubeconfig)"
	@echo "make bench-quick 100-node benchmark; make bench for the full run; make bench-5k at 5,000 nodes"

# The virtual environment: exactly the versions of requirements/dev.txt (every
# extra; mk/lock.mk), then the project itself, editable. uv comes first, pinned
# with hashes (requirements/uv.txt); `uv pip sync` removes whatever the lock does
# not list, so a venv made before a lock change ends up as a fresh one would.
UV := $(VENV)/bin/uv
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml requirements/dev.txt $(UV)
	$(UV) pip sync --quiet --python $(PY) --require-hashes requirements/dev.txt
	$(UV) pip install --quiet --python $(PY) --no-deps -e .
	@touch $@
$(UV): requirements/uv.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
	  -r requirements/uv.txt
	@touch $@

lint: venv
	$(VENV)/bin/ruff check contracts checks probes operator testsupport tests bench scripts hack/images hack/chart hack/generate.py
	$(VENV)/bin/ruff format --check contracts checks probes operator testsupport tests bench scripts hack/images hack/chart hack/generate.py
	$(VENV)/bin/mypy $(PACKAGE_DIRS) bench scripts/demo.py scripts/lint_functions.py hack/images/build_image.py hack/chart/values_schema.py hack/chart/values_docs.py hack/generate.py
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/python scripts/lint_functions.py contracts checks probes operator

# The fast tier: every test that needs no control plane (pure core, checks,
# probe, chart templates, torch.distributed with gloo), on both cores.
unit: venv $(BIN)/helm
	$(VENV)/bin/pytest -q -n 2 -m "not device and not integration" tests

# Every test: unit, torch.distributed (gloo, real processes), integration tests
# on the real kube-apiserver + etcd (started by the session fixture), chart and
# RBAC tests, and the benchmark's correctness check. Tests marked `device` need
# a GPU host and run through scripts/device-check.sh instead.
# TEST_WORKERS pytest-xdist workers, each with its own control plane
# (gpuaccept.testsupport.pytest_plugin). An integration test mostly waits on the
# operator, so 4 workers on 2 cores; the simulated fabric pairs measure real gloo
# over the loopback, so a starved CPU can fail a healthy pair: TEST_WORKERS=2 if
# the fabric or demo tests fail that way. worksteal: the long tests (the fleet
# trial, the benchmark and demo runs) do not leave one worker with a queue while
# the others idle. --durations: the slowest tests, every run.
TEST_WORKERS ?= 4
test: venv cluster-tools
	$(MAKE) --no-print-directory lint
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist worksteal --durations=30 -m "not device" tests

# Every generator, in the order their inputs need (hack/generate.py: the CRDs, the
# default policy from each check's CheckSpec.shipped, the docs' generated sections,
# the chart's values schema and table, the capture table, the golden pod renders).
# tests/test_generated.py fails while any generated file is stale.
generate: venv
	$(PY) hack/generate.py

generate-check: venv
	$(PY) hack/generate.py --check

include $(wildcard mk/*.mk)
