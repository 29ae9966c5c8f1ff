"""The ResourceClaim a DRA node's probe pod gets its GPUs through (pure;
docs/architecture.md, "The probe on a DRA node").

On a node whose GPUs a DRA driver publishes there is no ``nvidia.com/gpu`` to
request: a pod gets devices through a ResourceClaim, which the scheduler allocates
(``resource.k8s.io/v1``; the kubelet runs a pod only once each of its claims is
allocated and reserved for it). So for each attempt on such a node the operator
creates one claim, named as the attempt's pod, in its own namespace, before the pod:

* one request (:data:`CLAIM_REQUEST`), ``exactly`` every device of the configured
  DeviceClass (``allocationMode: All``; NVIDIA's chart installs ``gpu.nvidia.com``,
  whose selector is its driver's whole GPUs): the scheduler allocates all of them on
  the node the pod is placed on, or none (the pod stays unschedulable); it tolerates
  gpuaccept's fence taint (``gpuaccept.io/fenced``, any effect), so that a fenced GPU
  is tested again (core/fencerules.py);
* the operator's labels (managed-by, component :data:`CLAIM_COMPONENT`, the node),
  the creation nonce (core/creationintent.py, kind :data:`RESOURCE_CLAIM`) and the
  NodeAcceptance as its controller (the garbage collector deletes it with it).

Its lifecycle: the intent is on record before the create; the claim's intent stays
in the status for as long as the claim may exist, and a pass deletes (through
:class:`~gpuaccept.operator.core.model.DeleteResourceClaim`, which checks the nonce)
every claim on record that no attempt needs any more (:func:`claims_to_delete`),
then drops its intent: a verdict, a lost or abandoned attempt, a crash between the
claim's create and the pod's, all end there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuaccept.contracts.api import CREATION_NONCE_ANNOTATION, FENCE_TAINT_KEY
from gpuaccept.contracts.nodeacceptance import CreationIntent, NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.creationintent import intended
from gpuaccept.operator.core.model import OperatorConfig, PodView

__all__ = [
    "CLAIM_COMPONENT",
    "CLAIM_REQUEST",
    "RESOURCE_CLAIM",
    "claim_is_intended",
    "claim_manifest",
    "claims_to_delete",
    "without_claims",
]

RESOURCE_CLAIM = "ResourceClaim"  # the creation intent's kind
CLAIM_REQUEST = "gpus"  # the request's name, and the pod's resourceClaims entry
CLAIM_COMPONENT = "probe-claim"  # app.kubernetes.io/component of the operator's claims
API_VERSION = "resource.k8s.io/v1"


def claim_manifest(
    name: str,
    *,
    labels: dict[str, str],
    owner: dict[str, Any] | None,
    config: OperatorConfig,
) -> dict[str, Any]:
    """The claim ``name`` in the operator's namespace: every device of
    ``config.dra_device_class`` (the node is the pod's; the scheduler allocates on it)."""
    meta: dict[str, Any] = {"name": name, "namespace": config.namespace, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    request = {
        "name": CLAIM_REQUEST,
        "exactly": {
            "deviceClassName": config.dra_device_class,
            "allocationMode": "All",
            # A fenced GPU is re-tested: the probe gets it despite gpuaccept's own taint
            # (core/fencerules.py); only a passing probe lifts the fence.
            "tolerations": [{"key": FENCE_TAINT_KEY, "operator": "Exists"}],
        },
    }
    return {
        "apiVersion": API_VERSION,
        "kind": RESOURCE_CLAIM,
        "metadata": meta,
        "spec": {"devices": {"requests": [request]}},
    }


def claim_is_intended(body: Mapping[str, Any], intents: Sequence[CreationIntent]) -> bool:
    """Whether the claim ``body`` (as the API server gives it) is one the operator
    recorded the intent to create: its name and its nonce match an intent."""
    meta = body.get("metadata") or {}
    nonce = str((meta.get("annotations") or {}).get(CREATION_NONCE_ANNOTATION) or "")
    return intended(intents, RESOURCE_CLAIM, str(meta.get("name", "")), nonce)


def claim_intents(status: NodeAcceptanceStatus) -> list[CreationIntent]:
    return [e for e in status.creation_intents if e.kind == RESOURCE_CLAIM]


def claims_to_delete(status: NodeAcceptanceStatus, pods: Iterable[PodView]) -> list[str]:
    """The claims on record (their intents) that no attempt needs any more: all but
    the claim of the attempt running now (phase Probing, its pod live or not made
    yet: the pod's create may follow)."""
    deleting = {pod.name for pod in pods if pod.deleting}
    keep = ""
    if status.phase == Phase.PROBING and status.probe_pod and status.probe_pod not in deleting:
        keep = status.probe_pod
    return sorted({e.name for e in claim_intents(status) if e.name != keep})


def without_claims(status: NodeAcceptanceStatus, names: Sequence[str]) -> NodeAcceptanceStatus:
    """``status`` with the intents of the claims ``names`` dropped (they are deleted)."""
    gone = set(names)
    kept = [e for e in status.creation_intents if not (e.kind == RESOURCE_CLAIM and e.name in gone)]
    return status.model_copy(update={"creation_intents": kept})
