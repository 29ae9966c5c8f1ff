"""Which probe and fabric pods are the operator's own (pure; docs/security.md, "Pod identity").

A pod is trusted by what the API server says about it, never by its name or
labels: anyone who may create pods in the release namespace can create one under
the attempt's name, with the probe's labels, on the target node. So the operator
records each pod it creates in the node's NodeAcceptance status
(``status.ownedPods``: its name, the UID the create's answer carried, and a digest
of its identity fields as created), and a pod is the operator's own only when its
UID and its identity fields still match that record:

* only its own pods are read (a probe report, a fabric pair's result) and deleted;
* a pod under the attempt's name that it did not create (the create was answered
  ``AlreadyExists``, or the pod's UID is not the recorded one) is hostile: the node
  waits (``PodNameTaken``, never a verdict), the pod is left for a person, and the
  next attempt takes a new name;
* its own pod whose identity fields changed since the create (a mutating webhook,
  an update) is not read either (``ProbePodAltered``);
* a pod under a name whose create the status recorded as intended, carrying the
  intent's nonce, with no UID on record (the operator restarted between its create
  and the record, core/creationintent.py), is its own crash-window pod: deleted
  unread (:attr:`PodSplit.crashed`), never a squatter's.

The identity fields (:func:`pod_shape`): the node (``spec.nodeName``, or the node a
DRA node's probe pod is pinned to by its node affinity: the scheduler binds it), the
ResourceClaims it names, the ServiceAccount and whether
a token is mounted, the host namespaces, each container's name, image, command,
arguments, privilege and added capabilities, the kinds of the volumes, and the
controller ownerReference.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaccept.contracts.nodeacceptance import (
    MAX_OWNED_PODS,
    NodeAcceptanceStatus,
    OwnedPod,
)
from gpuaccept.operator.core.creationintent import POD, intended, settled
from gpuaccept.operator.core.model import CreatedPod, PodView

__all__ = ["CreatedPod", "ForeignPod", "PodSplit", "pod_shape", "shape_digest", "split_pods"]

REASON_POD_NAME_TAKEN = "PodNameTaken"
REASON_POD_ALTERED = "ProbePodAltered"
TOKEN_VOLUME_KINDS = frozenset({"projected", "secret"})


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _container(raw: Mapping[str, Any]) -> dict[str, Any]:
    context = _mapping(raw.get("securityContext"))
    caps = _mapping(context.get("capabilities"))
    return {
        "name": str(raw.get("name", "")),
        "image": str(raw.get("image", "")),
        "command": _strings(raw.get("command")),
        "args": _strings(raw.get("args")),
        "privileged": bool(context.get("privileged")),
        "add": sorted(_strings(caps.get("add"))),
    }


def _volume_kind(raw: Mapping[str, Any]) -> str:
    kinds = sorted(key for key in raw if key != "name")
    return kinds[0] if len(kinds) == 1 else ",".join(kinds)


def controller_uid(metadata: Mapping[str, Any]) -> str:
    """The UID of the pod's controller ownerReference ("" without one)."""
    for ref in metadata.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""


def mounts_token(spec: Mapping[str, Any]) -> bool:
    """Whether the pod gets API credentials: the token is not turned off, or a
    projected or Secret volume is mounted."""
    if spec.get("automountServiceAccountToken") is not False:
        return True
    volumes = [_mapping(v) for v in spec.get("volumes") or ()]
    return any(_volume_kind(v) in TOKEN_VOLUME_KINDS for v in volumes)


def _affinity_pin(spec: Mapping[str, Any]) -> str:
    """The node a pod's required node affinity pins it to: one term whose
    ``matchFields`` is exactly ``metadata.name In [node]`` ("" otherwise)."""
    affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms") or ()
    if not isinstance(terms, list | tuple) or len(terms) != 1:
        return ""
    fields = _mapping(terms[0]).get("matchFields") or ()
    if not isinstance(fields, list | tuple) or len(fields) != 1:
        return ""
    field = _mapping(fields[0])
    values = _strings(field.get("values"))
    if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
        return values[0]
    return ""


def pinned_node(spec: Mapping[str, Any]) -> str:
    """The node a pod is for: the one its node affinity pins it to (a DRA node's probe
    pod, which the scheduler places and binds), else its ``spec.nodeName``."""
    return _affinity_pin(spec) or str(spec.get("nodeName") or "")


def claim_names(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The ResourceClaims a pod names (``spec.resourceClaims[].resourceClaimName``)."""
    return tuple(
        str(_mapping(c).get("resourceClaimName") or "") for c in spec.get("resourceClaims") or ()
    )


def pod_shape(body: Mapping[str, Any]) -> dict[str, Any]:
    """The identity fields of a pod (a manifest or the API server's object)."""
    meta, spec = _mapping(body.get("metadata")), _mapping(body.get("spec"))
    claims = {"claims": list(claim_names(spec))} if spec.get("resourceClaims") else {}
    return {
        **claims,
        "node": pinned_node(spec),
        "serviceAccount": str(spec.get("serviceAccountName") or ""),
        "token": mounts_token(spec),
        "host": [bool(spec.get(k)) for k in ("hostNetwork", "hostPID", "hostIPC")],
        "containers": [_container(_mapping(c)) for c in spec.get("containers") or ()],
        "initContainers": [_container(_mapping(c)) for c in spec.get("initContainers") or ()],
        "volumes": sorted(_volume_kind(_mapping(v)) for v in spec.get("volumes") or ()),
        "controller": controller_uid(meta),
    }


def shape_digest(body: Mapping[str, Any]) -> str:
    """A short digest of :func:`pod_shape` (what ``status.ownedPods`` keeps)."""
    text = json.dumps(pod_shape(body), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ForeignPod:
    """A pod on the node that is not the operator's own, and why."""

    pod: PodView
    reason: str  # REASON_POD_NAME_TAKEN or REASON_POD_ALTERED
    why: str


@dataclass(frozen=True)
class PodSplit:
    ours: tuple[PodView, ...]
    foreign: tuple[ForeignPod, ...]
    to_record: tuple[OwnedPod, ...]  # ours by the create's answer, not in status yet
    # ours by the intent on record, created just before a restart, UID never recorded:
    # never read, deleted (core/creationintent.py)
    crashed: tuple[PodView, ...] = ()


def _why_not_ours(
    pod: PodView, owned: OwnedPod | None, created: CreatedPod | None, *, node: str, owner: str
) -> ForeignPod | None:
    """None when ``pod`` is the operator's own pod on ``node`` (controller ``owner``)."""
    record = owned or (
        OwnedPod(name=pod.name, uid=created.uid, shape=created.shape) if created else None
    )
    if record is None:
        why = (
            "the operator has no record of creating it (another creator, or an operator "
            "restart between its create and the record of its UID)"
        )
        return ForeignPod(pod, REASON_POD_NAME_TAKEN, why)
    if record.uid != pod.uid:
        why = f"it is not the pod the operator created (UID {record.uid} on record)"
        return ForeignPod(pod, REASON_POD_NAME_TAKEN, why)
    problems = [
        *(
            ["its identity fields changed since it was created"]
            if pod.shape != record.shape
            else []
        ),
        *(["it mounts API credentials"] if pod.token else []),
        # a DRA node's pod is bound by the scheduler: unbound ("") until then
        *([f"it is bound to {pod.node_name!r}"] if pod.node_name not in ("", node) else []),
        *(["its controller is not the node's NodeAcceptance"] if pod.owner_uid != owner else []),
    ]
    if problems:
        return ForeignPod(pod, REASON_POD_ALTERED, "; ".join(problems))
    return None


def split_pods(
    pods: Iterable[PodView],
    status: NodeAcceptanceStatus,
    created: Mapping[str, CreatedPod],
    *,
    node: str,
    owner: str,
) -> PodSplit:
    """``pods`` (the probe-labelled pods bound to ``node``) split into the operator's
    own, recorded in ``status.ownedPods`` or just created (``created``, the create's
    answer), its crash-window pods (intended in ``status.creationIntents``, nonce
    matching, no UID on record), and the others; with the records to add for pods only
    the create's answer vouches for."""
    by_name = {entry.name: entry for entry in status.owned_pods}
    intents = status.creation_intents
    ours: list[PodView] = []
    foreign: list[ForeignPod] = []
    to_record: list[OwnedPod] = []
    crashed: list[PodView] = []
    for pod in pods:
        entry, answer = by_name.get(pod.name), created.get(pod.name)
        if entry is None and answer is None and intended(intents, POD, pod.name, pod.nonce):
            crashed.append(pod)
            continue
        problem = _why_not_ours(pod, entry, answer, node=node, owner=owner)
        if problem is not None:
            foreign.append(problem)
            continue
        ours.append(pod)
        if entry is None and answer is not None:
            to_record.append(OwnedPod(name=pod.name, uid=answer.uid, shape=answer.shape))
    return PodSplit(tuple(ours), tuple(foreign), tuple(to_record), tuple(crashed))


def recorded(
    owned: Sequence[OwnedPod], new: Iterable[OwnedPod], present: Iterable[str]
) -> list[OwnedPod]:
    """``owned`` with ``new`` added, records of pods no longer ``present`` dropped
    (the newest kept within :data:`MAX_OWNED_PODS`)."""
    names = set(present)
    kept = [entry for entry in owned if entry.name in names]
    fresh = [entry for entry in new if entry.name not in {e.name for e in kept}]
    return [*kept, *fresh][-MAX_OWNED_PODS:]


def with_recorded(
    status: NodeAcceptanceStatus, new: Iterable[OwnedPod], present: Iterable[str]
) -> NodeAcceptanceStatus:
    """``status`` with ``new`` pods on record (:func:`recorded`), and the creation
    intents they served dropped."""
    owned = recorded(status.owned_pods, new, present)
    intents = settled(status.creation_intents, POD, [entry.name for entry in owned])
    return status.model_copy(update={"owned_pods": owned, "creation_intents": intents})


def foreign_pod_message(namespace: str, name: str, reason: str, why: str) -> str:
    """The Waiting message and Event of a probe attempt whose pod is not the operator's."""
    what = (
        f"the probe pod {namespace}/{name} is not as the operator created it"
        if reason == REASON_POD_ALTERED
        else f"a pod {namespace}/{name} that gpuaccept did not create holds the probe "
        "attempt's name"
    )
    return (
        f"{what}: {why}. It is not read as this node's evidence and is left in place for "
        "a person to inspect and delete; the next attempt takes a new name"
    )
