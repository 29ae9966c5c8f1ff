# Container images (issues 5 and 16).
#
#   make images                 build both images with a Docker engine (or DOCKER=podman)
#   make image-operator         the operator (Debian slim, no CUDA)
#   make image-probe            the probe (Debian slim + torch's CUDA 12 wheels + NVML)
#   make images IMAGE_REGISTRY=registry.example.com/gpuaccept IMAGE_TAG=dev
#   make image-probe PROBE_BUILD_ARGS="--build-arg PROBE_LOCK=requirements/probe-torch2.5.1.txt"
#                               (after make probe-lock-torch TORCH_VERSION=2.5.1) the probe's torch must
#                               suit the fleet's driver (probes/Dockerfile,
#                               docs/install.md "Images")
#
#   make images-check           without Docker or a registry: build both Dockerfiles
#                               into OCI images (hack/images/build_image.py: debootstrap
#                               + umoci, as root), run their entrypoints in the
#                               unpacked images, and record the sizes in
#                               $(IMAGES_BUILD_DIR)/<image>.json. Needs root, the
#                               debootstrap and umoci packages, Debian's mirror and
#                               PyPI; the probe's root filesystem is 6.7 GB, so
#                               this is not part of `make test` or CI, where
#                               tests/images checks the Dockerfiles' conventions and
#                               that build_image.py supports what they use.
#   make images-check-operator / images-check-probe   one image

DOCKER ?= docker
IMAGE_REGISTRY ?= ghcr.io/gpuaccept
IMAGE_TAG ?= $(shell awk -F'"' '/^version = /{print $$2; exit}' pyproject.toml)
OPERATOR_IMAGE ?= $(IMAGE_REGISTRY)/operator:$(IMAGE_TAG)
PROBE_IMAGE ?= $(IMAGE_REGISTRY)/probe:$(IMAGE_TAG)
PROBE_BUILD_ARGS ?=

IMAGES_BUILD_DIR ?= /var/tmp/gpuaccept-images
IMAGES_PROFILE ?= profiles/h100-sxm-8gpu-healthy.yaml
IMAGES_FAULT_PROFILE ?= profiles/faults/driver-cuda11.yaml
BUILD_IMAGE := python3 hack/images/build_image.py
CHECK_IMAGE = $(BUILD_IMAGE) check --work $(IMAGES_BUILD_DIR) --tag

.PHONY: images image-operator image-probe images-check images-check-operator images-check-probe \
  images-check-tools

images: image-operator image-probe

image-operator:
	$(DOCKER) build -f operator/Dockerfile -t $(OPERATOR_IMAGE) .

image-probe:
	$(DOCKER) build -f probes/Dockerfile $(PROBE_BUILD_ARGS) -t $(PROBE_IMAGE) .

images-check: images-check-operator images-check-probe

images-check-tools:
	@test "$$(id -u)" = 0 || { echo "images-check needs root (debootstrap, chroot, mounts)"; exit 1; }
	@command -v debootstrap >/dev/null && command -v umoci >/dev/null || \
	  { echo "images-check needs Debian's debootstrap and umoci: apt-get install -y debootstrap umoci"; exit 1; }

images-check-operator: images-check-tools
	$(BUILD_IMAGE) build --dockerfile operator/Dockerfile --work $(IMAGES_BUILD_DIR) --tag operator
	$(CHECK_IMAGE) operator -- operator --help
	$(CHECK_IMAGE) operator --entrypoint python -- -c \
	  "import importlib.util as u, kopf, kubernetes, prometheus_client; assert u.find_spec('torch') is None"
	rm -rf $(IMAGES_BUILD_DIR)/operator-check-bundle

# The probe on a shipped profile (simulated backend): exit 0 and every check
# passing in the JSON report; a fault profile exits 1. torch, NCCL and NVML load.
images-check-probe: images-check-tools
	$(BUILD_IMAGE) build --dockerfile probes/Dockerfile --work $(IMAGES_BUILD_DIR) --tag probe
	rm -rf $(IMAGES_BUILD_DIR)/probe-files && mkdir -p $(IMAGES_BUILD_DIR)/probe-files/opt
	cp $(IMAGES_PROFILE) $(IMAGES_BUILD_DIR)/probe-files/opt/profile.yaml
	cp $(IMAGES_FAULT_PROFILE) $(IMAGES_BUILD_DIR)/probe-files/opt/fault.yaml
	$(CHECK_IMAGE) probe -- probe --profile /opt/profile.yaml --output json \
	  --termination-log /tmp/termination-log > $(IMAGES_BUILD_DIR)/probe-report.json
	python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
	  assert r['kind'] == 'ProbeReport' and r['results'], r; \
	  assert all(c['status'] == 'pass' for c in r['results']), r['results']" \
	  $(IMAGES_BUILD_DIR)/probe-report.json
	$(CHECK_IMAGE) probe -- probe --profile /opt/fault.yaml; test $$? -eq 1
	$(CHECK_IMAGE) probe --entrypoint python -- -c \
	  "import os, torch, torch.distributed as d, pynvml; assert 'NVIDIA_REQUIRE_CUDA' not in os.environ; \
	  assert d.is_nccl_available(); print('torch', torch.__version__, 'cuda', torch.version.cuda, \
	  'nccl', '.'.join(map(str, torch.cuda.nccl.version())))"
	rm -rf $(IMAGES_BUILD_DIR)/probe-check-bundle
