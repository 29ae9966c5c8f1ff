# A real node on the local control plane (issue 27, docs/realnode.md): the
# kubelet, containerd + runc, the CNI bridge and a FAKE device plugin, plus
# kube-controller-manager and kube-scheduler, on a control plane of its own
# ($(NODE_CLUSTER_DIR)), so that the stand-in tests' cluster never sees it.
#
#   make node-packages   the Debian packages it needs (apt-get; root)
#   make node-tools      .bin/kubelet, .bin/kube-controller-manager, .bin/kube-scheduler,
#                        .bin/fakedeviceplugin, .bin/fakedraplugin (hack/node, same k8s.io/kubernetes
#                        as the apiserver),
#                        .bin/coredns (hack/coredns: CoreDNS with the plugins the node needs),
#                        .bin/containerd2, .bin/containerd2-shim-runc-v2, .bin/ctr2
#                        (hack/containerd: containerd 2 from its Go module, static)
#   make node-up         start (or reuse) the control plane, its controllers and the node
#   make node-down       stop the node (containers, mounts, cgroups, bridge, iptables) and its cluster
#   make node-images     the operator and probe images (hack/images/build_image.py, as images-check)
#   make node-test       the stand-in vs kubelet comparison and the end-to-end test (root, minutes)
#
#   NODE_GPUS=8 NODE_PROFILE=profiles/h100-sxm-8gpu-healthy.yaml make node-up
#   NODE_DRA=1 make node-up   the GPUs published by the FAKE DRA driver instead (gpu.nvidia.com
#                             ResourceSlices, claims prepared through CDI; no nvidia.com/gpu)
#
# Not part of `make test`: it needs root, Debian packages and the images
# (debootstrap + PyPI, 6.7 GB for the probe). Its last run is in docs/realnode.md.

NODE_DIR ?= .node
NODE_CLUSTER_DIR ?= .cluster-node
NODE_NAME ?= gpuaccept-node
NODE_GPUS ?= 8
NODE_PROFILE ?= profiles/h100-sxm-8gpu-healthy.yaml
NODE_DRA ?=
NODE_MOD := hack/node
COREDNS_MOD := hack/coredns
CONTAINERD_MOD := hack/containerd
# containerd 2 (CDI always on, the RuntimeConfig RPC that kubelet 1.38 requires), built
# from its Go module as upstream's static release is (CGO_ENABLED=0: no btrfs snapshotter),
# under names of its own so that Debian's containerd 1.6 on PATH is never taken for it.
CONTAINERD_VERSION := $(shell awk '$$1=="github.com/containerd/containerd/v2"{print $$2; exit}' $(CONTAINERD_MOD)/go.mod)
CONTAINERD_LDFLAGS := -s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)
CONTAINERD_BINARIES := $(BIN)/containerd2 $(BIN)/containerd2-shim-runc-v2 $(BIN)/ctr2
NODE_BINARIES := $(BIN)/kubelet $(BIN)/kube-controller-manager $(BIN)/kube-scheduler \
  $(BIN)/fakedeviceplugin $(BIN)/fakedraplugin $(BIN)/coredns $(CONTAINERD_BINARIES)
# runc stays Debian's (it needs cgo and libseccomp); containerd 2 runs it by path.
NODE_DEBIAN_PACKAGES := runc containernetworking-plugins iptables busybox-static gcc libc6-dev
NODE_PYTHON ?= $(CLUSTER_PYTHON)

.PHONY: node-packages node-tools node-up node-down node-images node-test

node-packages:
	@test "$$(id -u)" = 0 || { echo "a real node needs root (mounts, cgroups, iptables)"; exit 1; }
	@missing=$$(for p in $(NODE_DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

node-tools: $(NODE_BINARIES)

# The integration tests that need claim allocation (tests/integration/test_dra_gate.py)
# run the real kube-scheduler against the stand-in's control plane
# (testsupport/scheduler.py): `make test` builds it with the other cluster tools.
cluster-tools: $(BIN)/kube-scheduler

$(BIN)/kubelet $(BIN)/kube-controller-manager $(BIN)/kube-scheduler: $(NODE_MOD)/go.mod $(NODE_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call cluster_gobuild,$(NODE_MOD)) -ldflags '$(KUBE_LDFLAGS)' -o $(abspath $@) k8s.io/kubernetes/cmd/$(notdir $@)

$(BIN)/fakedeviceplugin: $(wildcard $(NODE_MOD)/fakedeviceplugin/*.go) $(NODE_MOD)/go.mod $(NODE_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call cluster_gobuild,$(NODE_MOD)) -ldflags '-s -w' -o $(abspath $@) ./fakedeviceplugin

$(BIN)/fakedraplugin: $(wildcard $(NODE_MOD)/fakedraplugin/*.go) $(NODE_MOD)/go.mod $(NODE_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call cluster_gobuild,$(NODE_MOD)) -ldflags '-s -w' -o $(abspath $@) ./fakedraplugin

$(BIN)/coredns: $(wildcard $(COREDNS_MOD)/*.go) $(COREDNS_MOD)/go.mod $(COREDNS_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call cluster_gobuild,$(COREDNS_MOD)) -ldflags '-s -w' -o $(abspath $@) .

# .bin/containerd2 <- cmd/containerd, .bin/containerd2-shim-runc-v2 <- cmd/containerd-shim-runc-v2,
# .bin/ctr2 <- cmd/ctr
$(CONTAINERD_BINARIES): $(CONTAINERD_MOD)/go.mod $(CONTAINERD_MOD)/go.sum
	@mkdir -p $(BIN)
	$(call cluster_gobuild,$(CONTAINERD_MOD)) -ldflags '$(CONTAINERD_LDFLAGS)' -o $(abspath $@) \
	  github.com/containerd/containerd/v2/cmd/$(subst containerd2,containerd,$(subst ctr2,ctr,$(notdir $@)))

node-up: node-packages node-tools $(BIN)/controlplane $(BIN)/kubectl
	$(NODE_PYTHON) -m gpuaccept.testsupport.realnode up --node-dir $(NODE_DIR) \
	  --cluster-dir $(NODE_CLUSTER_DIR) --name $(NODE_NAME) --gpus $(NODE_GPUS) \
	  $(if $(NODE_PROFILE),--profile $(NODE_PROFILE)) $(if $(NODE_DRA),--dra)

node-down:
	$(NODE_PYTHON) -m gpuaccept.testsupport.realnode down --node-dir $(NODE_DIR) \
	  --cluster-dir $(NODE_CLUSTER_DIR)

# Rebuilt only when what goes into them changed (build_image.py always builds afresh).
NODE_IMAGE_SOURCES := pyproject.toml README.md $(shell find contracts checks operator -name '*.py' -not -path '*/__pycache__/*')
node-images: $(IMAGES_BUILD_DIR)/operator.json $(IMAGES_BUILD_DIR)/probe.json
$(IMAGES_BUILD_DIR)/operator.json: operator/Dockerfile requirements/operator.txt $(NODE_IMAGE_SOURCES)
	$(MAKE) --no-print-directory images-check-tools
	$(BUILD_IMAGE) build --dockerfile operator/Dockerfile --work $(IMAGES_BUILD_DIR) --tag operator
$(IMAGES_BUILD_DIR)/probe.json: probes/Dockerfile requirements/probe.txt $(NODE_IMAGE_SOURCES) \
    $(shell find probes policies -type f -not -path '*/__pycache__/*')
	$(MAKE) --no-print-directory images-check-tools
	$(BUILD_IMAGE) build --dockerfile probes/Dockerfile --work $(IMAGES_BUILD_DIR) --tag probe

node-test: node-packages node-tools node-images $(BIN)/controlplane $(BIN)/kubectl $(BIN)/helm
	$(GO) -C $(NODE_MOD) vet ./fakedeviceplugin ./fakedraplugin
	$(GO) -C $(NODE_MOD) test ./fakedeviceplugin ./fakedraplugin
	GPUACCEPT_REALNODE=1 GPUACCEPT_IMAGES_DIR=$(abspath $(IMAGES_BUILD_DIR)) \
	  $(NODE_PYTHON) -m pytest -m realnode tests/realnode
