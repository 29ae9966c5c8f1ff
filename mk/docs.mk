# Docs generated from the check registry, by gpuaccept.checks.gen.docs (build time only:
# no image carries gpuaccept.checks.gen).
#
#   make docs        rewrite the marked sections (<!-- BEGIN GENERATED: NAME --> ... END) of
#                    docs/policy.md, probe.md, report-format.md and profile-format.md from the
#                    check registry (gpuaccept.checks.registry) and the shipped profiles;
#                    tests/contracts/test_docs_drift.py fails until you do
#   make docs-check  only report stale docs (exit 1)

DOCS_PYTHON ?= .venv/bin/python

.PHONY: docs docs-check

docs: venv
	$(DOCS_PYTHON) -m gpuaccept.cli docs

docs-check: venv
	$(DOCS_PYTHON) -m gpuaccept.cli docs --check
