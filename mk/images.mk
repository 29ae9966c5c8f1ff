# Container images (issue 5). Needs a Docker engine (or set DOCKER=podman);
# there is none on the CI machine, where tests/images/test_dockerfiles.py checks
# the Dockerfiles' conventions instead.
#
#   make images                 build both images
#   make image-operator         the operator (slim, no CUDA)
#   make image-probe            the probe (CUDA + torch + NCCL + NVML)
#   make images IMAGE_REGISTRY=registry.example.com/gpuaccept IMAGE_TAG=dev
#   make image-probe PROBE_BUILD_ARGS="--build-arg CUDA_IMAGE=... --build-arg TORCH_VERSION=..."
#                               extra `docker build` arguments for the probe image:
#                               its CUDA base, torch and NCCL must match the fleet's
#                               driver (probes/Dockerfile, docs/install.md "Images")

DOCKER ?= docker
IMAGE_REGISTRY ?= ghcr.io/gpuaccept
IMAGE_TAG ?= $(shell awk -F'"' '/^version = /{print $$2; exit}' pyproject.toml)
OPERATOR_IMAGE ?= $(IMAGE_REGISTRY)/operator:$(IMAGE_TAG)
PROBE_IMAGE ?= $(IMAGE_REGISTRY)/probe:$(IMAGE_TAG)
PROBE_BUILD_ARGS ?=

.PHONY: images image-operator image-probe images-check

images: image-operator image-probe

image-operator:
	$(DOCKER) build -f operator/Dockerfile -t $(OPERATOR_IMAGE) .

image-probe:
	$(DOCKER) build -f probes/Dockerfile $(PROBE_BUILD_ARGS) -t $(PROBE_IMAGE) .

# Convention checks that run without Docker (also part of `make test`).
images-check: venv
	$(VENV)/bin/python -m pytest -q tests/images
