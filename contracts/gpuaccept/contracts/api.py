"""Names on the Kubernetes API that both sides agree on."""

from typing import Final

GROUP: Final = "gpuaccept.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

REPORT_KIND: Final = "ProbeReport"
POLICY_KIND: Final = "NodeAcceptancePolicy"
POLICY_PLURAL: Final = "nodeacceptancepolicies"
ACCEPTANCE_KIND: Final = "NodeAcceptance"
ACCEPTANCE_PLURAL: Final = "nodeacceptances"

# Keys the operator owns on Nodes. It never removes a taint or label whose key
# it does not own.
PENDING_TAINT_KEY: Final = f"{GROUP}/pending"
QUARANTINE_TAINT_KEY: Final = f"{GROUP}/quarantined"
ACCEPTANCE_LABEL: Final = f"{GROUP}/acceptance"
REPROBE_ANNOTATION: Final = f"{GROUP}/reprobe"
# On a Node (any value): the operator leaves the node alone and says so in its status.
OPT_OUT_ANNOTATION: Final = f"{GROUP}/opt-out"
# On every object the operator creates for a node: the random nonce whose digest the
# node's status recorded before the create (NodeAcceptanceStatus.creation_intents).
CREATION_NONCE_ANNOTATION: Final = f"{GROUP}/creation-nonce"
# On a Node: the main reason of its quarantine (a label value), set and removed with
# the acceptance label, so that `kubectl get nodes -l gpuaccept.io/reason=...` finds them.
REASON_LABEL: Final = f"{GROUP}/reason"
# On a NodeAcceptance (`kubectl gpuaccept release NODE`): who asked for the release (the
# requester's username, from a SelfSubjectReview), when (RFC 3339), and why (free text).
# The operator records the request in status.release and leaves the node alone, released.
RELEASE_BY_ANNOTATION: Final = f"{GROUP}/release-by"
RELEASE_AT_ANNOTATION: Final = f"{GROUP}/release-at"
RELEASE_REASON_ANNOTATION: Final = f"{GROUP}/release-reason"
# The taint key of gpuaccept's DeviceTaintRules (one per fenced GPU of a DRA node;
# operator/core/fencerules.py); the value is the fence's reason.
FENCE_TAINT_KEY: Final = f"{GROUP}/fenced"
NODE_CONDITION_TYPE: Final = "GPUAcceptance"
# What a quarantined node needs (its reason: None, ResetGPU, RebootNode, NeedsPerson),
# and the same rung as a label for selectors (NodeHealthCheck): core/ladder.py.
REMEDY_CONDITION_TYPE: Final = "GPUAcceptanceRemedy"
REMEDY_LABEL: Final = f"{GROUP}/remedy"
# The NodeAcceptance's own condition: True once the node is accepted (kubectl wait
# --for=condition=Accepted), False when quarantined, held or released, Unknown until decided.
ACCEPTED_CONDITION_TYPE: Final = "Accepted"

# A Kubernetes termination message is capped at 4096 bytes by the kubelet.
TERMINATION_MESSAGE_MAX_BYTES: Final = 4096

# Well-known node facts.
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRESENT_LABEL: Final = "nvidia.com/gpu.present"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
