#!/usr/bin/env bash
# Shared settings for the kind end-to-end scripts. Sourced, not run.
# Every value can be overridden from the environment.

# shellcheck disable=SC2034  # the variables are used by the scripts that source this file

set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${E2E_DIR}/.." && pwd)"

CLUSTER_NAME="${CLUSTER_NAME:-gpuaccept-e2e}"
NAMESPACE="${NAMESPACE:-gpuaccept-system}"
RELEASE="${RELEASE:-gpuaccept}"
IMAGE_REGISTRY="${IMAGE_REGISTRY:-ghcr.io/gpuaccept}"
IMAGE_TAG="${IMAGE_TAG:-e2e}"
OPERATOR_IMAGE="${IMAGE_REGISTRY}/operator:${IMAGE_TAG}"
PROBE_IMAGE="${IMAGE_REGISTRY}/probe:${IMAGE_TAG}"
# GPU=1: the kind nodes see NVIDIA GPUs (NVIDIA container toolkit on the host,
# see e2e/README.md). GPU=0: no GPU; the probe cannot measure anything, so the
# demo node is decided as failed (Held under the default dryRun policy).
GPU="${GPU:-0}"
# The worker that plays the new GPU node.
GPU_NODE="${GPU_NODE:-${CLUSTER_NAME}-worker}"
TIMEOUT_SECONDS="${TIMEOUT_SECONDS:-1200}"
POLL_SECONDS="${POLL_SECONDS:-10}"

KIND="${KIND:-kind}"
KUBECTL="${KUBECTL:-kubectl}"
HELM="${HELM:-helm}"
DOCKER="${DOCKER:-docker}"

log() {
  printf '[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
}

die() {
  log "ERROR: $*"
  exit 1
}

need() {
  local tool
  for tool in "$@"; do
    command -v "${tool}" >/dev/null 2>&1 || die "${tool} is not installed (see e2e/README.md)"
  done
}

kube() {
  "${KUBECTL}" --context "kind-${CLUSTER_NAME}" "$@"
}

# The chart's full name for RELEASE (the Deployment's name): the release name
# alone when it already contains "gpuaccept", as templates/_helpers.tpl does.
fullname() {
  if [[ "${RELEASE}" == *gpuaccept* ]]; then
    printf '%s\n' "${RELEASE}"
  else
    printf '%s-gpuaccept\n' "${RELEASE}"
  fi
}
