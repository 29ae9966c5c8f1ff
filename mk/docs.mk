# Docs generated from the check registry (issue 9).
#
#   make docs        rewrite the marked sections of docs/policy.md, docs/probe.md and
#                    docs/report-format.md (<!-- BEGIN GENERATED: NAME --> ... END) from
#                    gpuaccept.checks.registry; tests/contracts/test_docs_drift.py fails until you do
#   make docs-check  only report stale docs (exit 1)

DOCS_PYTHON ?= .venv/bin/python

.PHONY: docs docs-check

docs: venv
	$(DOCS_PYTHON) -m gpuaccept.cli docs

docs-check: venv
	$(DOCS_PYTHON) -m gpuaccept.cli docs --check
