#!/usr/bin/env bash
# Make sure the demo worker looks like a new GPU node: the GPU label (matched by
# the default policy) and the pending taint (kind-up.sh registers it with both;
# this also works on a node that joined without them).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need "${KUBECTL}"

log "registering ${GPU_NODE} as a new GPU node"
kube label node "${GPU_NODE}" nvidia.com/gpu.present=true --overwrite
if ! kube get node "${GPU_NODE}" -o jsonpath='{.spec.taints[*].key}' | grep -qw 'gpuaccept.io/pending'; then
  kube taint node "${GPU_NODE}" gpuaccept.io/pending=true:NoSchedule
fi
kube get node "${GPU_NODE}" -o jsonpath='{.metadata.labels}{"\n"}{.spec.taints}{"\n"}'
