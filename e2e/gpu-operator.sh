#!/usr/bin/env bash
# The GPU Operator scenario (issue 25): a kind cluster whose worker joins with
# gpuaccept's pending taint and WITHOUT nvidia.com/gpu.present, the NVIDIA GPU
# Operator installed with charts/gpuaccept/examples/gpu-operator-values.yaml, then
# gpuaccept. Without those values node-feature-discovery's worker and the GPU
# Operator's DaemonSets do not run on a node under the pending taint, and the
# label the default policy selects never comes.
#
# It checks, in order: NFD's worker runs on the tainted worker, and the taint is
# still there (nobody else removed it); then
#   GPU=1: the GPU Operator labels the worker nvidia.com/gpu.present=true and its
#          device plugin advertises nvidia.com/gpu under the taint; gpuaccept
#          decides the node (wait-decided.sh);
#   GPU=0: kind's worker has no NVIDIA PCI device, so the label never comes:
#          gpuaccept, watching every node, reports the node as one no policy
#          matches (its log line), as it would a node whose NFD never ran.
# KEEP=1 leaves the cluster running. Not run in this repository's CI (no Docker).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GPU_OPERATOR_VERSION="${GPU_OPERATOR_VERSION:-v24.6.2}"
GPU_OPERATOR_NAMESPACE="${GPU_OPERATOR_NAMESPACE:-gpu-operator}"
GPU_OPERATOR_REPO="${GPU_OPERATOR_REPO:-https://helm.ngc.nvidia.com/nvidia}"
VALUES="${REPO_ROOT}/charts/gpuaccept/examples/gpu-operator-values.yaml"

need "${HELM}" "${KUBECTL}"

teardown() {
  local status=$?
  if [[ "${KEEP:-0}" == "1" ]]; then
    log "KEEP=1: leaving kind cluster ${CLUSTER_NAME} running"
  else
    "${E2E_DIR}/kind-down.sh" || true
  fi
  exit "${status}"
}
trap teardown EXIT

# wait_until DESCRIPTION COMMAND...: run COMMAND every POLL_SECONDS until it succeeds.
wait_until() {
  local what="$1"
  shift
  local deadline=$((SECONDS + TIMEOUT_SECONDS))
  until "$@"; do
    if ((SECONDS >= deadline)); then
      kube get nodes -o wide || true
      kube -n "${GPU_OPERATOR_NAMESPACE}" get pods -o wide || true
      die "timed out waiting for ${what}"
    fi
    log "waiting for ${what}"
    sleep "${POLL_SECONDS}"
  done
  log "${what}: yes"
}

nfd_worker_running() {
  kube -n "${GPU_OPERATOR_NAMESPACE}" get pods --field-selector "spec.nodeName=${GPU_NODE}" \
    -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}' |
    grep -q 'node-feature-discovery-worker.*=Running'
}

still_pending() {
  kube get node "${GPU_NODE}" -o jsonpath='{.spec.taints[*].key}' | grep -qw 'gpuaccept.io/pending'
}

gpu_present() {
  [[ "$(kube get node "${GPU_NODE}" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.present}')" == "true" ]]
}

gpus_advertised() {
  local count
  count="$(kube get node "${GPU_NODE}" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')"
  [[ -n "${count}" && "${count}" != "0" ]]
}

reported_unmatched() {
  kube -n "${NAMESPACE}" logs "deployment/$(fullname)" --tail=500 |
    grep -q "node ${GPU_NODE} carries a pending taint and no policy matches it"
}

WORKER_GPU_LABEL=0 "${E2E_DIR}/kind-up.sh"

log "installing the NVIDIA GPU Operator ${GPU_OPERATOR_VERSION} with ${VALUES}"
"${HELM}" repo add nvidia "${GPU_OPERATOR_REPO}" --force-update
# kind: the host's driver and container toolkit serve the nodes (e2e/README.md).
"${HELM}" upgrade --install gpu-operator nvidia/gpu-operator \
  --kube-context "kind-${CLUSTER_NAME}" \
  --namespace "${GPU_OPERATOR_NAMESPACE}" --create-namespace \
  --version "${GPU_OPERATOR_VERSION}" \
  --values "${VALUES}" \
  --set driver.enabled=false --set toolkit.enabled=false

wait_until "node-feature-discovery's worker running on ${GPU_NODE} (under the pending taint)" nfd_worker_running
still_pending || die "${GPU_NODE} lost the pending taint before gpuaccept ran"

"${E2E_DIR}/build-load.sh"
if [[ "${GPU}" == "1" ]]; then
  wait_until "nvidia.com/gpu.present=true on ${GPU_NODE}" gpu_present
  wait_until "nvidia.com/gpu advertised by ${GPU_NODE}" gpus_advertised
  "${E2E_DIR}/install.sh"
  "${E2E_DIR}/wait-decided.sh"
else
  "${E2E_DIR}/install.sh" --set operator.watchNodeSelector= --set operator.unmatchedGraceSeconds=30
  wait_until "gpuaccept to report ${GPU_NODE} as a pending node no policy matches" reported_unmatched
fi
log "gpu-operator scenario passed"
