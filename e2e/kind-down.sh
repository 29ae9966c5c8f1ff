#!/usr/bin/env bash
# Delete the kind cluster.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need "${KIND}"
log "deleting kind cluster ${CLUSTER_NAME}"
"${KIND}" delete cluster --name "${CLUSTER_NAME}"
