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
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/$(BIN):$(PATH)

.PHONY: help venv lint typecheck unit test demo clean

help:
	@echo "make demo        run the operator against a simulated GPU fleet (real kube-apiserver)"
	@echo "make test        install everything and run every test"
	@echo "make lint        ruff + mypy --strict"
	@echo "make cluster-up  start kube-apiserver + etcd on 127.0.0.1 (.cluster/kubeconfig)"
	@echo "make bench-quick 100-node benchmark; make bench for the full run"

# The virtual environment: the project (editable) with every extra.
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --progress-bar off -e ".[probe,operator,dev]"
	@touch $@

lint: venv
	$(VENV)/bin/ruff check contracts probes operator testsupport tests bench
	$(VENV)/bin/ruff format --check contracts probes operator testsupport tests bench
	$(VENV)/bin/mypy -p gpuaccept

include $(wildcard mk/*.mk)
