#!/usr/bin/env bash
# helm install the chart with the images built by build-load.sh.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need "${HELM}" "${KUBECTL}"

args=(
  --namespace "${NAMESPACE}" --create-namespace
  --set "image.repository=${IMAGE_REGISTRY}/operator"
  --set "image.tag=${IMAGE_TAG}"
  --set "image.pullPolicy=Never"
  --set "probe.image.repository=${IMAGE_REGISTRY}/probe"
  --set "probe.image.tag=${IMAGE_TAG}"
  --set "probe.image.pullPolicy=Never"
  # The operator must not run on the node it is judging.
  --set "operator.nodeSelector.node-role\.kubernetes\.io/control-plane="
  --set "operator.tolerations[0].key=node-role.kubernetes.io/control-plane"
  --set "operator.tolerations[0].operator=Exists"
  --set "operator.tolerations[0].effect=NoSchedule"
  # kind nodes are small.
  --set "probe.resources.requests.cpu=100m"
  --set "probe.resources.requests.memory=256Mi"
  --set "probe.shmSize=256Mi"
)
if [[ "${GPU}" != "1" ]]; then
  # No NVIDIA runtime in a CPU-only kind cluster.
  args+=(--set "probe.runtimeClassName=")
fi

log "helm install ${RELEASE} into ${NAMESPACE}"
"${HELM}" upgrade --install "${RELEASE}" "${REPO_ROOT}/charts/gpuaccept" \
  --kube-context "kind-${CLUSTER_NAME}" "${args[@]}" "$@"
kube -n "${NAMESPACE}" rollout status "deployment/$(fullname)" --timeout=180s
