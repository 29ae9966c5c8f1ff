# Chart and alert validators, built from Go modules the way helm is (hack/<tool>
# holds a go.mod whose `tool` directive pins the tool; a fresh clone needs only Go
# and the module proxy, no root and no package manager, as CI has):
#
#   make bin/promtool      .bin/promtool (Prometheus): `check rules`, `test rules`
#   make bin/kubeconform   .bin/kubeconform: rendered manifests against the API
#                          server's own OpenAPI schemas (tests/chart/test_kubeconform.py)
#
# `make test` and `make unit` build both first (tests/chart/test_alerts.py and
# test_kubeconform.py use them).

BIN ?= .bin
ifeq ($(origin GO),undefined)
GO := $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
endif
PROMTOOL_MOD := hack/promtool
KUBECONFORM_MOD := hack/kubeconform
tools_gobuild = CGO_ENABLED=0 $(GO) -C $(1) build -trimpath -buildvcs=false -ldflags '-s -w'

.PHONY: bin/promtool bin/kubeconform
bin/promtool: $(BIN)/promtool
bin/kubeconform: $(BIN)/kubeconform

$(BIN)/promtool: $(PROMTOOL_MOD)/go.mod $(PROMTOOL_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call tools_gobuild,$(PROMTOOL_MOD)) -o $(abspath $@) github.com/prometheus/prometheus/cmd/promtool

$(BIN)/kubeconform: $(KUBECONFORM_MOD)/go.mod $(KUBECONFORM_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call tools_gobuild,$(KUBECONFORM_MOD)) -o $(abspath $@) github.com/yannh/kubeconform/cmd/kubeconform

# Prerequisites added to the top-level targets (a rule without a recipe adds them).
cluster-tools: $(BIN)/promtool $(BIN)/kubeconform
unit: $(BIN)/promtool $(BIN)/kubeconform
