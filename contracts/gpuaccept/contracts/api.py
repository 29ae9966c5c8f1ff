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
NODE_CONDITION_TYPE: Final = "GPUAcceptance"
# What a quarantined node needs (its reason: None, ResetGPU, RebootNode, NeedsPerson),
# and the same rung as a label for selectors (NodeHealthCheck): core/ladder.py.
REMEDY_CONDITION_TYPE: Final = "GPUAcceptanceRemedy"
REMEDY_LABEL: Final = f"{GROUP}/remedy"

# A Kubernetes termination message is capped at 4096 bytes by the kubelet.
TERMINATION_MESSAGE_MAX_BYTES: Final = 4096

# Well-known node facts.
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRESENT_LABEL: Final = "nvidia.com/gpu.present"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
