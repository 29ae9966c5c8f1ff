# CRDs generated from the contract models, and the Helm chart (issue 5).
#
#   make crds        regenerate crds/, charts/gpuaccept/crds/ and charts/gpuaccept-crds/files/
#                    from the pydantic models (gpuaccept.checks.gen.crds, build time only)
#   make chart-lint  helm lint + helm template (default and example values)
#   make chart-test  the chart, CRD and image-convention tests (integration ones included)
#   make chart-docs  regenerate values.schema.json's defaultPolicy (from the CRD) and the
#                    values table of charts/gpuaccept/README.md (from values.yaml)

CHART_DIR := charts/gpuaccept
CHART_PYTHON ?= .venv/bin/python

.PHONY: crds crds-check chart-lint chart-test

CRD_OUT := --out crds --out $(CHART_DIR)/crds --out charts/gpuaccept-crds/files
crds: venv
	$(CHART_PYTHON) -m gpuaccept.cli crds $(CRD_OUT)

crds-check: venv
	$(CHART_PYTHON) -m gpuaccept.cli crds $(CRD_OUT) --check

chart-lint: $(BIN)/helm
	$(BIN)/helm lint --strict charts/gpuaccept-crds
	$(BIN)/helm lint $(CHART_DIR)
	$(BIN)/helm lint $(CHART_DIR) -f $(CHART_DIR)/ci/ha-values.yaml
	$(BIN)/helm template gpuaccept $(CHART_DIR) --namespace gpuaccept-system >/dev/null
	$(BIN)/helm template gpuaccept $(CHART_DIR) --namespace gpuaccept-system \
	  -f $(CHART_DIR)/ci/ha-values.yaml >/dev/null

chart-test: venv $(BIN)/helm $(BIN)/controlplane $(BIN)/kubectl $(BIN)/promtool $(BIN)/kubeconform
	$(CHART_PYTHON) -m pytest tests/contracts tests/chart tests/images \
	  tests/integration/test_crds.py $(wildcard tests/integration/test_chart*.py) \
	  tests/integration/test_crd_chart_upgrade.py tests/integration/test_kubeconform.py

# The chart's generated parts (issue 26): the defaultPolicy part of
# values.schema.json from the NodeAcceptancePolicy CRD (hack/chart/values_schema.py)
# and the values table of charts/gpuaccept/README.md from values.yaml's comments
# (hack/chart/values_docs.py). tests/chart/test_chart_platform.py fails until you do.
.PHONY: chart-docs chart-docs-check
chart-docs: venv
	$(CHART_PYTHON) hack/chart/values_schema.py
	$(CHART_PYTHON) hack/chart/values_docs.py

chart-docs-check: venv
	$(CHART_PYTHON) hack/chart/values_schema.py --check
	$(CHART_PYTHON) hack/chart/values_docs.py --check
