#!/usr/bin/env bash
# Wait until the demo node's NodeAcceptance reaches a final phase
# (Accepted, Quarantined or Held), then print it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need "${KUBECTL}"

deadline=$((SECONDS + TIMEOUT_SECONDS))
phase=""
while ((SECONDS < deadline)); do
  phase="$(kube get nodeacceptance "${GPU_NODE}" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
  case "${phase}" in
    Accepted | Quarantined | Held)
      log "${GPU_NODE} decided: ${phase}"
      kube get nodeacceptance
      kube get nodeacceptance "${GPU_NODE}" -o yaml
      exit 0
      ;;
    *)
      log "waiting for ${GPU_NODE} (phase: ${phase:-none})"
      sleep "${POLL_SECONDS}"
      ;;
  esac
done
kube get nodeacceptance -o wide || true
kube -n "${NAMESPACE}" get pods -o wide || true
kube -n "${NAMESPACE}" logs "deployment/$(fullname)" --tail=200 || true
die "${GPU_NODE} was not decided within ${TIMEOUT_SECONDS}s (last phase: ${phase:-none})"
