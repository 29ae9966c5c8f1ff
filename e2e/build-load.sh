#!/usr/bin/env bash
# Build the operator and probe images and load them into the kind nodes.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need "${DOCKER}" "${KIND}" make

log "building ${OPERATOR_IMAGE} and ${PROBE_IMAGE}"
make -C "${REPO_ROOT}" images DOCKER="${DOCKER}" \
  OPERATOR_IMAGE="${OPERATOR_IMAGE}" PROBE_IMAGE="${PROBE_IMAGE}"

log "loading the images into kind cluster ${CLUSTER_NAME}"
"${KIND}" load docker-image --name "${CLUSTER_NAME}" "${OPERATOR_IMAGE}" "${PROBE_IMAGE}"
