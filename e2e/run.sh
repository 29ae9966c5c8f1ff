#!/usr/bin/env bash
# The whole end-to-end run: create a kind cluster, build and load the images,
# helm install, register a GPU node, wait for its verdict, tear down.
# KEEP=1 leaves the cluster running for a look around.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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

"${E2E_DIR}/kind-up.sh"
"${E2E_DIR}/build-load.sh"
"${E2E_DIR}/install.sh"
"${E2E_DIR}/register-node.sh"
"${E2E_DIR}/wait-decided.sh"
log "e2e passed"
