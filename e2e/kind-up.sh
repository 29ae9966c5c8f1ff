#!/usr/bin/env bash
# Create the kind cluster: one control-plane node and one worker that joins
# with gpuaccept's pending taint, as a new GPU node would.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need "${KIND}" "${KUBECTL}" "${DOCKER}"

if "${KIND}" get clusters 2>/dev/null | grep -qx "${CLUSTER_NAME}"; then
  log "kind cluster ${CLUSTER_NAME} exists; reusing it"
  exit 0
fi

config="$(mktemp)"
trap 'rm -f "${config}"' EXIT

# WORKER_GPU_LABEL=0: the worker joins without nvidia.com/gpu.present, which the
# NVIDIA GPU Operator then has to set (e2e/gpu-operator.sh).
gpu_label='  labels:
    nvidia.com/gpu.present: "true"'
if [[ "${WORKER_GPU_LABEL:-1}" != "1" ]]; then
  gpu_label=""
fi

gpu_mounts=""
if [[ "${GPU}" == "1" ]]; then
  # With the NVIDIA container toolkit configured for volume-mount device
  # selection (accept-nvidia-visible-devices-as-volume-mounts = true), this
  # mount hands every host GPU to the worker node.
  gpu_mounts='  extraMounts:
  - hostPath: /dev/null
    containerPath: /var/run/nvidia-container-devices/all'
fi

cat >"${config}" <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
- role: control-plane
- role: worker
${gpu_label}
  kubeadmConfigPatches:
  - |
    kind: JoinConfiguration
    nodeRegistration:
      taints:
      - key: gpuaccept.io/pending
        value: "true"
        effect: NoSchedule
${gpu_mounts}
YAML

log "creating kind cluster ${CLUSTER_NAME} (GPU=${GPU})"
"${KIND}" create cluster --name "${CLUSTER_NAME}" --config "${config}" --wait 180s
kube get nodes -o wide
