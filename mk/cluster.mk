# Local Kubernetes control plane (issue 3): etcd + kube-apiserver built from
# upstream Go modules, plus kubectl and helm. See docs/controlplane.md.
#
#   make cluster-tools   build .bin/controlplane, .bin/kubectl, .bin/helm
#   make cluster-up      start (or reuse) the control plane; kubeconfig in .cluster/kubeconfig
#   make cluster-down    stop what is attached to it (a KEEP=1 demo), then it; remove .cluster/
#   make cluster-status  is it running and ready?
#   make cluster-test    the control plane + kubelet stand-in integration tests

BIN := .bin
CLUSTER_DIR := .cluster

ifeq ($(origin GO),undefined)
GO := $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
endif
CLUSTER_PYTHON ?= .venv/bin/python

CONTROLPLANE_MOD := hack/controlplane
HELM_MOD := hack/helm
KUBE_VERSION := $(shell awk '$$1=="k8s.io/kubernetes"{print $$2; exit}' $(CONTROLPLANE_MOD)/go.mod)
KUBE_MINOR := $(word 2,$(subst ., ,$(KUBE_VERSION)))
HELM_VERSION := $(shell awk '$$1=="helm.sh/helm/v4"{print $$2; exit}' $(HELM_MOD)/go.mod)

# Version stamps that upstream's own builds set with -X (otherwise
# `kubectl version` and /version report v0.0.0-master).
KUBE_LDFLAGS := -s -w \
  -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
  -X k8s.io/component-base/version.gitMajor=1 \
  -X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR) \
  -X k8s.io/component-base/version.gitTreeState=clean \
  -X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION) \
  -X k8s.io/client-go/pkg/version.gitMajor=1 \
  -X k8s.io/client-go/pkg/version.gitMinor=$(KUBE_MINOR) \
  -X k8s.io/client-go/pkg/version.gitTreeState=clean
HELM_LDFLAGS := -s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION) \
  -X helm.sh/helm/v4/internal/version.gitTreeState=clean

# -trimpath: reproducible, cache-friendly. The Go build cache stays at its
# default place (speeds up warm builds; a cold build works without it).
# $(call cluster_gobuild,MODULE_DIR) -> go -C MODULE_DIR build ... (-C must come first)
cluster_gobuild = CGO_ENABLED=0 $(GO) -C $(1) build -trimpath -buildvcs=false

.PHONY: cluster-tools cluster-up cluster-down cluster-status cluster-test \
        bin/controlplane bin/kubectl bin/helm

cluster-tools: $(BIN)/controlplane $(BIN)/kubectl $(BIN)/helm
bin/controlplane: $(BIN)/controlplane
bin/kubectl: $(BIN)/kubectl
bin/helm: $(BIN)/helm

$(BIN)/controlplane: $(wildcard $(CONTROLPLANE_MOD)/*.go) $(CONTROLPLANE_MOD)/go.mod $(CONTROLPLANE_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call cluster_gobuild,$(CONTROLPLANE_MOD)) -ldflags '$(KUBE_LDFLAGS)' -o $(abspath $@) .

# kubectl from the same module (go.mod `tool` directive), same k8s version.
$(BIN)/kubectl: $(CONTROLPLANE_MOD)/go.mod $(CONTROLPLANE_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call cluster_gobuild,$(CONTROLPLANE_MOD)) -ldflags '$(KUBE_LDFLAGS)' -o $(abspath $@) k8s.io/kubernetes/cmd/kubectl

# helm v4 in its own module so its dependencies never move the control plane's.
$(BIN)/helm: $(HELM_MOD)/go.mod $(HELM_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call cluster_gobuild,$(HELM_MOD)) -ldflags '$(HELM_LDFLAGS)' -o $(abspath $@) helm.sh/helm/v4/cmd/helm

cluster-up: $(BIN)/controlplane $(BIN)/kubectl
	$(BIN)/controlplane up --dir $(CLUSTER_DIR)

cluster-down: $(BIN)/controlplane
	$(BIN)/controlplane down --dir $(CLUSTER_DIR)

cluster-status: $(BIN)/controlplane
	$(BIN)/controlplane status --dir $(CLUSTER_DIR)

cluster-test: $(BIN)/controlplane $(BIN)/kubectl
	$(CLUSTER_PYTHON) -m pytest -m integration tests/integration/test_controlplane.py tests/integration/test_kubelet_standin.py
