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

A fabric pod on a DRA node (core/fabric/policypass.py) gets its GPUs the same way:
a claim of the same shape, named as the pod, whose intent (kind
:data:`FABRIC_CLAIM`, so that it is never taken for a probe attempt's) the pass
writes with the pod's before both creates. The pass is the only creator of fabric
pods, so it deletes the fabric claims of its members whose pod is gone, being
deleted or was never made, unless it creates that pod now
(:func:`fabric_claims_to_delete`); a node's own reconcile deletes those of a node
that is no longer a member of its policy's pass (:func:`claims_to_delete`), as it
deletes such a node's fabric pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuaccept.contracts.api import CREATION_NONCE_ANNOTATION, FENCE_TAINT_KEY
from gpuaccept.contracts.nodeacceptance import CreationIntent, NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.creationintent import creation_nonce, intend, intended, with_nonce
from gpuaccept.operator.core.model import CreateResourceClaim, OperatorConfig, PodView

__all__ = [
    "CLAIM_COMPONENT",
    "CLAIM_REQUEST",
    "FABRIC_CLAIM",
    "RESOURCE_CLAIM",
    "claim_is_intended",
    "claim_manifest",
    "claims_to_delete",
    "fabric_claims_to_delete",
    "intended_claim",
    "without_claims",
]

RESOURCE_CLAIM = "ResourceClaim"  # the creation intent's kind (a probe attempt's claim)
FABRIC_CLAIM = "FabricResourceClaim"  # the creation intent's kind of a fabric pod's claim
CLAIM_KINDS = (RESOURCE_CLAIM, FABRIC_CLAIM)
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
    name = str(meta.get("name", ""))
    return any(intended(intents, kind, name, nonce) for kind in CLAIM_KINDS)


def claim_intents(status: NodeAcceptanceStatus, kind: str = RESOURCE_CLAIM) -> list[CreationIntent]:
    return [e for e in status.creation_intents if e.kind == kind]


def claims_to_delete(
    status: NodeAcceptanceStatus, pods: Iterable[PodView], *, fabric_member: bool = False
) -> list[str]:
    """The claims on record (their intents) that no attempt needs any more: all probe
    claims but the claim of the attempt running now (phase Probing, its pod live or
    not made yet: the pod's create may follow); and every fabric pod's claim of a node
    that is not a member of its policy's fabric pass (``fabric_member``: the pass
    deletes its members' own, :func:`fabric_claims_to_delete`)."""
    deleting = {pod.name for pod in pods if pod.deleting}
    keep = ""
    if status.phase == Phase.PROBING and status.probe_pod and status.probe_pod not in deleting:
        keep = status.probe_pod
    names = {e.name for e in claim_intents(status) if e.name != keep}
    if not fabric_member:
        names |= {e.name for e in claim_intents(status, FABRIC_CLAIM)}
    return sorted(names)


def fabric_claims_to_delete(
    status: NodeAcceptanceStatus, pods: Iterable[PodView], creating: Iterable[str]
) -> list[str]:
    """The fabric pods' claims on record (their intents) on a member of the fabric pass
    that no pod needs: its pod (among ``pods``, the operator's own on the node) is not
    there or is being deleted, and the pass does not create it now (``creating``: a
    partner pod created again after a crash keeps the claim of its first create)."""
    live = {pod.name for pod in pods if not pod.deleting} | set(creating)
    return sorted({e.name for e in claim_intents(status, FABRIC_CLAIM) if e.name not in live})


def intended_claim(
    status: NodeAcceptanceStatus, seed: str, manifest: Mapping[str, Any], *, fabric: bool
) -> tuple[NodeAcceptanceStatus, CreateResourceClaim]:
    """The claim ``manifest`` to create for a node whose status is ``status``: that
    status with the intent on record (kind :data:`FABRIC_CLAIM` for a fabric pod's,
    else :data:`RESOURCE_CLAIM`; to be written before the create), and the create
    carrying the nonce; a claim found under the name is the operator's own when its
    nonce matches any claim intent of the new status (an earlier create's)."""
    name = str((manifest.get("metadata") or {}).get("name", ""))
    kind = FABRIC_CLAIM if fabric else RESOURCE_CLAIM
    nonce = creation_nonce(seed, kind, name)
    new = intend(status, kind, name, nonce)
    return new, CreateResourceClaim(name, with_nonce(manifest, nonce), tuple(new.creation_intents))


def without_claims(status: NodeAcceptanceStatus, names: Sequence[str]) -> NodeAcceptanceStatus:
    """``status`` with the intents of the claims ``names`` dropped (they are deleted)."""
    gone = set(names)
    kept = [e for e in status.creation_intents if not (e.kind in CLAIM_KINDS and e.name in gone)]
    return status.model_copy(update={"creation_intents": kept})
