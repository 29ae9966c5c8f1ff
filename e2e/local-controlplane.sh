#!/usr/bin/env bash
# The chart on the local control plane (make cluster-up), no Docker needed:
#   1. helm install the chart (operator.replicas=0: the operator's image is
#      swapped for a local process);
#   2. a TokenRequest kubeconfig for the chart's operator ServiceAccount;
#   3. the kubelet stand-in registers demo GPU nodes under the pending taint
#      (one healthy, one with a failing CPU governor) and runs probe pods as
#      local processes with simulated hardware;
#   4. `gpuaccept operator` runs locally, as that ServiceAccount, with the
#      arguments the chart renders;
#   5. waits until both demo nodes are decided and shows `kubectl get na`.
# ENFORCE=1 installs with dryRun off (default: the chart's dryRun-first policy,
# where both nodes end Held with the action they would get). KEEP=1 leaves the
# release and the demo nodes in place. See docs/install.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

RELEASE="${RELEASE:-gpuaccept}"
NAMESPACE="${NAMESPACE:-gpuaccept-system}"
# Default: the control plane of `make cluster-up` (started if needed).
ADMIN_KUBECONFIG="${ADMIN_KUBECONFIG:-}"
TIMEOUT_SECONDS="${TIMEOUT_SECONDS:-300}"
PY="${ROOT}/.venv/bin/python"
HELM="${ROOT}/.bin/helm"
KUBECTL="${ROOT}/.bin/kubectl"
WORK="$(mktemp -d)"
PIDS=()

log() {
  printf '[local %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
}

# shellcheck disable=SC2329  # invoked by the EXIT trap
cleanup() {
  local status=$? pid
  for pid in "${PIDS[@]}"; do
    kill "${pid}" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "${pid}" 2>/dev/null || true
  done
  if [[ "${KEEP:-0}" != "1" ]]; then
    "${KUBECTL}" --kubeconfig "${ADMIN_KUBECONFIG}" delete nodeacceptance demo-gpu-good demo-gpu-bad \
      --ignore-not-found >/dev/null 2>&1 || true
    "${HELM}" uninstall "${RELEASE}" -n "${NAMESPACE}" --kubeconfig "${ADMIN_KUBECONFIG}" \
      >/dev/null 2>&1 || true
  fi
  rm -rf "${WORK}"
  exit "${status}"
}
trap cleanup EXIT

if [[ -z "${ADMIN_KUBECONFIG}" ]]; then
  make --no-print-directory venv cluster-tools cluster-up >&2
  ADMIN_KUBECONFIG="${ROOT}/.cluster/kubeconfig"
else
  make --no-print-directory venv cluster-tools >&2
fi

# The same values for the install and for the operator's local command line.
values=(
  --set "operator.replicas=0"
  --set "probe.runtimeClassName="
  --set "defaultPolicy.maxQuarantined=1"
)
if [[ "${ENFORCE:-0}" == "1" ]]; then
  values+=(--set "defaultPolicy.dryRun=false")
fi

log "helm install ${RELEASE} into ${NAMESPACE}"
"${HELM}" upgrade --install "${RELEASE}" charts/gpuaccept -n "${NAMESPACE}" --create-namespace \
  --kubeconfig "${ADMIN_KUBECONFIG}" "${values[@]}"
# The Pod Security level docs/install.md tells you to enforce on the release namespace.
"${KUBECTL}" --kubeconfig "${ADMIN_KUBECONFIG}" label namespace "${NAMESPACE}" --overwrite \
  pod-security.kubernetes.io/enforce=restricted >/dev/null

log "TokenRequest kubeconfig for the chart's operator ServiceAccount"
"${PY}" -m gpuaccept.testsupport.chart_rbac kubeconfig --release "${RELEASE}" \
  --namespace "${NAMESPACE}" "${values[@]}" \
  --kubeconfig "${ADMIN_KUBECONFIG}" --out "${WORK}/operator.kubeconfig" >/dev/null
mapfile -t ARGS < <("${PY}" -m gpuaccept.testsupport.chart_rbac args --release "${RELEASE}" \
  --namespace "${NAMESPACE}" "${values[@]}")

cat >"${WORK}/fleet.yaml" <<YAML
nodes:
  - name: demo-gpu-good
    profile: ${ROOT}/profiles/h100-sxm-8gpu-healthy.yaml
    taints: [{key: gpuaccept.io/pending, value: "true", effect: NoSchedule}]
  - name: demo-gpu-bad
    profile: ${ROOT}/profiles/faults/governor-powersave.yaml
    taints: [{key: gpuaccept.io/pending, value: "true", effect: NoSchedule}]
YAML

log "kubelet stand-in: demo-gpu-good, demo-gpu-bad"
stand_in_args=(--kubeconfig "${ADMIN_KUBECONFIG}" --nodes-file "${WORK}/fleet.yaml")
if [[ "${KEEP:-0}" != "1" ]]; then
  stand_in_args+=(--delete-nodes-on-exit)
fi
"${PY}" -m gpuaccept.testsupport.kubelet_standin "${stand_in_args[@]}" >"${WORK}/standin.log" 2>&1 &
PIDS+=("$!")

log "gpuaccept ${ARGS[*]} (as the chart's ServiceAccount)"
"${PY}" -m gpuaccept.cli "${ARGS[@]}" --kubeconfig "${WORK}/operator.kubeconfig" \
  --health-port 0 --metrics-port 0 --log-format text >"${WORK}/operator.log" 2>&1 &
PIDS+=("$!")

deadline=$((SECONDS + TIMEOUT_SECONDS))
while ((SECONDS < deadline)); do
  phases="$("${KUBECTL}" --kubeconfig "${ADMIN_KUBECONFIG}" get nodeacceptance demo-gpu-good demo-gpu-bad \
    -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' 2>/dev/null || true)"
  decided="$(grep -cE '^(Accepted|Quarantined|Held)$' <<<"${phases}" || true)"
  if [[ "${decided}" == "2" ]]; then
    "${KUBECTL}" --kubeconfig "${ADMIN_KUBECONFIG}" get nodeacceptance demo-gpu-good demo-gpu-bad -o wide
    if grep -q 'Forbidden' "${WORK}/operator.log"; then
      log "the operator was refused an API call:"
      grep 'Forbidden' "${WORK}/operator.log" >&2
      exit 1
    fi
    log "both demo nodes decided"
    exit 0
  fi
  sleep 2
done
tail -n 50 "${WORK}/operator.log" >&2
log "the demo nodes were not decided within ${TIMEOUT_SECONDS}s"
exit 1
