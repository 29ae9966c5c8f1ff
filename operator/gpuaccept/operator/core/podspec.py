"""The operator's pods: deterministic names, and one manifest builder
(:func:`pod_manifest`) fed by a :class:`PodKind` per kind: the probe pod of an
attempt, a fabric pair's two pods, an accepted node's watch pod.

Image, command, runtime class, resources, tolerations, priority class and the
platform team's labels, annotations and env come from :class:`OperatorConfig`
(the operator's own flags), never from the policy: a policy author cannot run an
arbitrary image on every GPU node. The operator's own labels, annotations and env
are set after the platform team's, so they win (and the options refuse those keys).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import ACCEPTANCE_KIND, API_VERSION, GPU_RESOURCE, GROUP
from gpuaccept.contracts.policy_fields import CONTROL_PLANE_ROLE_LABELS
from gpuaccept.contracts.probe_invocation import (
    ENV_EXPECTED_GPU_UUIDS,
    ENV_EXPECTED_GPUS,
    ENV_FABRIC_NONCE,
    ENV_GFD_GPU_COUNT,
    ENV_GFD_GPU_REPLICAS,
    ENV_NODE_GPU_CAPACITY,
    ENV_NODE_NAME,
    ENV_POD_IP,
    ENV_POLICY,
    FABRIC_SUBCOMMAND,
    FLAG_ALLOW_SOCKET_TRANSPORT,
    FLAG_BURST_MERGE,
    FLAG_DEADLINE,
    FLAG_FATAL_XIDS,
    FLAG_MAX_MESSAGE_BYTES,
    FLAG_MIN_BUSBW,
    FLAG_NODE_RANK,
    FLAG_RENDEZVOUS_ADDRESS,
    FLAG_RENDEZVOUS_PORT,
    FLAG_RENDEZVOUS_TIMEOUT,
    FLAG_TERMINATION_LOG,
    FLAG_WINDOW,
    TERMINATION_LOG_PATH,
    WATCH_SUBCOMMAND,
)
from gpuaccept.operator.core.draclaim import CLAIM_COMPONENT, CLAIM_REQUEST, claim_manifest
from gpuaccept.operator.core.model import DraDevice, FabricPodLabels, NodeView, OperatorConfig

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
# The cluster autoscaler removes a node with this pod on it (else a bare pod with an
# emptyDir blocks its scale-down); a probe is simply tried again elsewhere in time.
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
MANAGED_BY_VALUE = "gpuaccept"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT_VALUE = "probe"
NODE_LABEL = f"{GROUP}/node"
ATTEMPT_LABEL = f"{GROUP}/attempt"
NODE_NAME_ANNOTATION = f"{GROUP}/node-name"
POLICY_ANNOTATION = f"{GROUP}/policy"
PROBE_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{COMPONENT_LABEL}={COMPONENT_VALUE}"
TERMINATION_LOG = TERMINATION_LOG_PATH
CONTAINER_NAME = "probe"
GFD_GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # set by GPU feature discovery
# GFD under time-slicing or MPS sharing (the device plugin advertises GPUs x replicas)
GFD_GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
FABRIC_PAIR_LABEL = f"{GROUP}/fabric-pair"
FABRIC_RANK_LABEL = f"{GROUP}/fabric-rank"
FABRIC_FIRST_ANNOTATION = f"{GROUP}/fabric-first"
FABRIC_SECOND_ANNOTATION = f"{GROUP}/fabric-second"
FABRIC_DEADLINE_MARGIN_SECONDS = 30
WATCH_LABEL = f"{GROUP}/watch"  # a watch pod's serial (policy inService)
WATCH_DEADLINE_MARGIN_SECONDS = 120  # past the window: the report is written, then the pod ends
"""The probe stops its run this long before the pod's activeDeadlineSeconds, so
that it still writes its report."""

MAX_NAME = 63
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL_UNSAFE = re.compile(r"[^a-z0-9-]+")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def probe_pod_name(prefix: str, node: str, serial: int) -> str:
    """``<prefix>-<node>-<serial>``, a DNS-1123 label of at most 63 characters.

    A node name that is too long or not label-safe (dots, upper case) is
    shortened and a hash of the full name keeps it unique.
    """
    suffix = f"-{serial}"
    plain = f"{prefix}-{node}{suffix}"
    if len(plain) <= MAX_NAME and _DNS_LABEL_UNSAFE.sub("", node) == node:
        return plain
    safe = _DNS_LABEL_UNSAFE.sub("-", node.lower()).strip("-")
    tail = f"-{_short_hash(node)}{suffix}"
    room = MAX_NAME - len(prefix) - 1 - len(tail)
    return f"{prefix}-{safe[: max(room, 0)].rstrip('-')}{tail}".replace("--", "-")


def node_label_value(node: str) -> str:
    """The node name as a label value (hashed when it does not fit one)."""
    if len(node) <= MAX_NAME and _LABEL_VALUE.match(node):
        return node
    return f"{node[:50].rstrip('.-_')}-{_short_hash(node)}"


@dataclass(frozen=True)
class ProbeAttempt:
    """One probe attempt on one node: the pod's name and serial, and what it checks.

    ``applied_taints``: owned keys recorded on the node, e.g. a quarantine key
    the policy has since renamed; the pod must tolerate those too (a NoExecute one
    would otherwise make the kubelet refuse it)."""

    name: str
    serial: int
    node: NodeView
    policy_name: str
    spec: NodeAcceptancePolicySpec
    applied_taints: Sequence[str] = ()
    owner_uid: str = ""  # the node's NodeAcceptance: the pod's controller (drain, GC)
    # A DRA node: the claim the pod gets its GPUs through (named as the pod), and the
    # GPUs of the node's complete pool (core/gpupublishing.py), what the probe expects.
    claim: str = ""
    dra_gpus: tuple[DraDevice, ...] = ()


def _node_gpu_env(node: NodeView) -> list[dict[str, Any]]:
    """What the node should have, for gpu_count: its capacity, and the GPU feature
    discovery label when it is a count."""
    env = [{"name": ENV_NODE_GPU_CAPACITY, "value": str(node.gpu_capacity)}]
    label = node.labels.get(GFD_GPU_COUNT_LABEL, "")
    if label.isascii() and label.isdigit():
        env.append({"name": ENV_GFD_GPU_COUNT, "value": str(int(label))})
    replicas = node.labels.get(GFD_GPU_REPLICAS_LABEL, "")
    if replicas.isascii() and replicas.isdigit():
        env.append({"name": ENV_GFD_GPU_REPLICAS, "value": str(int(replicas))})
    return env


def _platform_env(config: OperatorConfig) -> list[dict[str, Any]]:
    """The platform team's variables (``--probe-env``), first: the probe's own come
    after them and would win (the operator refuses those names anyway)."""
    return [{"name": name, "value": value} for name, value in config.probe_env]


NODE_NAME_FIELD = "metadata.name"


def node_affinity(
    config: OperatorConfig, *, include_control_plane: bool = False, pin: str = ""
) -> dict[str, Any] | None:
    """The required node affinity of every pod the operator creates (probe, fabric, any
    other kind): the operator's base selector (``--node-selector``: ``key=value`` as
    ``In``, ``key`` as ``Exists``), and no control-plane role label (``DoesNotExist``)
    unless the policy includes control-plane nodes *and* the operator allows it
    (``--allow-control-plane-nodes``). None when it requires nothing.

    The pods are pinned by ``spec.nodeName``, so no scheduler checks them; the node's
    kubelet does: its admission runs the scheduler's node-affinity filter on every
    pod (pkg/kubelet/lifecycle/predicate.go ``generalFilter`` ->
    pkg/scheduler ``AdmissionCheck``) and fails a pod that does not match with phase
    Failed, reason ``NodeAffinity``. The chart's admission rule requires exactly this
    affinity of the operator's pods (charts/gpuaccept/templates/admission.yaml, rule
    3), so a pod that the operator's token pins to a node outside its reach (a
    control-plane node, a CPU node) is refused by that node's kubelet.

    ``pin``: a pod the scheduler places (a DRA node's probe or fabric pod, whose claim
    the scheduler allocates) is pinned to its node as a DaemonSet's pod is: the same term
    also requires ``matchFields metadata.name In [pin]``."""
    expressions: list[dict[str, Any]] = [
        {"key": key, "operator": "Exists"}
        if value is None
        else {"key": key, "operator": "In", "values": [value]}
        for key, value in config.base_node_selector
    ]
    if not (include_control_plane and config.allow_control_plane):
        expressions += [
            {"key": label, "operator": "DoesNotExist"} for label in CONTROL_PLANE_ROLE_LABELS
        ]
    term: dict[str, Any] = {}
    if pin:
        term["matchFields"] = [{"key": NODE_NAME_FIELD, "operator": "In", "values": [pin]}]
    if expressions:
        term["matchExpressions"] = expressions
    if not term:
        return None
    required = {"nodeSelectorTerms": [term]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


# ------------------------------------------------------------------- one pod builder


@dataclass(frozen=True)
class PodKind:
    """What one kind of pod (probe, fabric, watch) sets; :func:`pod_manifest` builds
    the rest the same for every kind: pinned to the node by ``nodeName`` (a DRA node's
    probe or fabric pod by its node affinity: the scheduler places it), under the
    operator's node affinity, no API token, no host network, what Pod Security
    "restricted" asks, the platform team's labels and annotations first, the
    operator's own after them (so they win), the NodeAcceptance as controller."""

    name: str
    node: NodeView
    policy_name: str
    spec: NodeAcceptancePolicySpec
    owner_uid: str
    command: list[str]
    env: list[dict[str, Any]]
    resources: dict[str, dict[str, str]]
    active_deadline_seconds: int
    tolerations: list[dict[str, Any]]
    labels: dict[str, str]  # the kind's own, after the common ones
    annotations: dict[str, str]  # the kind's own, after the node name and the policy
    chart_annotations: Mapping[str, str] = field(default_factory=dict)  # after the platform's
    capabilities: tuple[str, ...] = ()  # added to the container's
    shm: bool = True  # a memory-backed /dev/shm (NCCL, the probe's workloads)
    # A DRA node's probe or fabric pod: the ResourceClaim its GPUs come through
    # (core/draclaim.py).
    # Such a pod is placed by the scheduler (which allocates the claim), pinned by node
    # affinity, not by spec.nodeName.
    claim: str = ""


def _container(kind: PodKind, config: OperatorConfig) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": config.probe_image,
        "imagePullPolicy": config.image_pull_policy,
        "command": kind.command,
        "env": kind.env,
        "resources": kind.resources,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
    }
    if kind.shm:
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if kind.claim:
        container["resources"] = {**kind.resources, "claims": [{"name": CLAIM_REQUEST}]}
    capabilities: dict[str, list[str]] = {"drop": ["ALL"]}
    if kind.capabilities:
        capabilities["add"] = list(kind.capabilities)
    # What Pod Security "restricted" asks; the probe needs no privilege
    # (probes/Dockerfile: a numeric non-root user, GPUs through the runtime).
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": capabilities,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return container


def _pod_spec(kind: PodKind, config: OperatorConfig) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {} if kind.claim else {"nodeName": kind.node.name}
    pod_spec |= {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "serviceAccountName": config.service_account,
        "hostNetwork": False,
        "enableServiceLinks": False,
        "activeDeadlineSeconds": kind.active_deadline_seconds,
        "terminationGracePeriodSeconds": 30,
        "tolerations": kind.tolerations,
        "containers": [_container(kind, config)],
    }
    if kind.shm:
        shm: dict[str, Any] = {"medium": "Memory"}
        if config.shm_size:
            shm["sizeLimit"] = config.shm_size
        pod_spec["volumes"] = [{"name": "dshm", "emptyDir": shm}]
    affinity = node_affinity(
        config,
        include_control_plane=kind.spec.include_control_plane,
        pin=kind.node.name if kind.claim else "",
    )
    if affinity is not None:
        pod_spec["affinity"] = affinity
    if kind.claim:
        pod_spec["resourceClaims"] = [{"name": CLAIM_REQUEST, "resourceClaimName": kind.claim}]
    if config.runtime_class:
        pod_spec["runtimeClassName"] = config.runtime_class
    if config.priority_class:
        pod_spec["priorityClassName"] = config.priority_class
    if config.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in config.image_pull_secrets]
    return pod_spec


def _owned_by(kind: PodKind) -> dict[str, Any]:
    """The NodeAcceptance as the pod's controller: ``kubectl drain`` evicts a pod
    with a controller ownerReference without ``--force`` (its unreplicated-pod
    filter looks for one), and the garbage collector deletes the pod with it.
    No ``blockOwnerDeletion`` (it would need update on nodeacceptances/finalizers)."""
    if not kind.owner_uid:
        return {}
    owner = {
        "apiVersion": API_VERSION,
        "kind": ACCEPTANCE_KIND,
        "name": kind.node.name,
        "uid": kind.owner_uid,
        "controller": True,
    }
    return {"ownerReferences": [owner]}


def pod_manifest(kind: PodKind, config: OperatorConfig) -> dict[str, Any]:
    """The pod ``kind`` describes, built from the operator's own ``config``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": kind.name,
            "namespace": config.namespace,
            "labels": {
                **config.pod_labels,
                MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                COMPONENT_LABEL: COMPONENT_VALUE,
                NODE_LABEL: node_label_value(kind.node.name),
                **kind.labels,
            },
            "annotations": {
                **config.pod_annotations,
                **kind.chart_annotations,
                NODE_NAME_ANNOTATION: kind.node.name,
                POLICY_ANNOTATION: kind.policy_name,
                **kind.annotations,
                SAFE_TO_EVICT_ANNOTATION: "true",
            },
            **_owned_by(kind),
        },
        "spec": _pod_spec(kind, config),
    }


# --------------------------------------------------------------------------- probe pods


def _tolerations(
    spec: NodeAcceptancePolicySpec, applied_taints: Sequence[str], config: OperatorConfig
) -> list[dict[str, Any]]:
    owned = [spec.pending_taint_key, spec.quarantine.taint_key]
    owned += sorted(set(applied_taints) - set(owned))
    return [
        *({"key": key, "operator": "Exists"} for key in owned),
        *(dict(t) for t in config.extra_tolerations),
    ]


def _gpu_resources(node: NodeView, config: OperatorConfig) -> dict[str, dict[str, str]]:
    """The platform team's requests and limits, and all of the node's GPUs."""
    limits: dict[str, str] = dict(config.resources.get("limits", {}))
    requests: dict[str, str] = dict(config.resources.get("requests", {}))
    if node.gpus > 0:
        limits[GPU_RESOURCE] = str(node.gpus)
        requests[GPU_RESOURCE] = str(node.gpus)
    return {"limits": limits, "requests": requests}


def _dra_env(attempt: ProbeAttempt) -> list[dict[str, Any]]:
    """What a DRA node should have, for gpu_count: its pool's GPUs (their count as the
    node's GPUs, as allocatable and capacity are on a device-plugin node; their UUIDs)."""
    count = str(len(attempt.dra_gpus))
    uuids = ",".join(d.uuid for d in attempt.dra_gpus)
    return [
        {"name": ENV_EXPECTED_GPUS, "value": count},
        {"name": ENV_NODE_GPU_CAPACITY, "value": count},
        {"name": ENV_EXPECTED_GPU_UUIDS, "value": uuids},
    ]


def _no_gpu_resources(config: OperatorConfig) -> dict[str, dict[str, str]]:
    """The platform team's requests and limits, no ``nvidia.com/gpu`` (a watch pod; a
    DRA node's probe pod, whose GPUs come through its claim)."""
    return {
        kind: {k: v for k, v in dict(config.resources.get(kind, {})).items() if k != GPU_RESOURCE}
        for kind in ("limits", "requests")
    }


def _probe_kind(attempt: ProbeAttempt, config: OperatorConfig) -> PodKind:
    policy = json.dumps(attempt.spec.probe.to_wire(), separators=(",", ":"), sort_keys=True)
    gpu_env = (
        _dra_env(attempt)
        if attempt.claim
        else [
            {"name": ENV_EXPECTED_GPUS, "value": str(attempt.node.gpus)},
            *_node_gpu_env(attempt.node),
        ]
    )
    resources = (
        {
            kind: {
                k: v for k, v in dict(config.resources.get(kind, {})).items() if k != GPU_RESOURCE
            }
            for kind in ("limits", "requests")
        }
        if attempt.claim
        else _gpu_resources(attempt.node, config)
    )
    return PodKind(
        name=attempt.name,
        node=attempt.node,
        policy_name=attempt.policy_name,
        spec=attempt.spec,
        owner_uid=attempt.owner_uid,
        command=[*config.probe_command, FLAG_TERMINATION_LOG, TERMINATION_LOG],
        env=[
            *_platform_env(config),
            {"name": ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": ENV_POLICY, "value": policy},
            *gpu_env,
        ],
        resources=resources,
        active_deadline_seconds=config.timeout_for(attempt.spec),
        tolerations=_tolerations(attempt.spec, attempt.applied_taints, config),
        labels={ATTEMPT_LABEL: str(attempt.serial)},
        annotations={},
        claim=attempt.claim,
    )


def probe_pod_manifest(attempt: ProbeAttempt, config: OperatorConfig) -> dict[str, Any]:
    """The probe pod of ``attempt``, built from the operator's own ``config``."""
    return pod_manifest(_probe_kind(attempt, config), config)


def probe_claim_manifest(attempt: ProbeAttempt, config: OperatorConfig) -> dict[str, Any]:
    """The ResourceClaim of ``attempt`` on a DRA node (``attempt.claim``): the
    operator's labels, the NodeAcceptance as its controller (core/draclaim.py)."""
    kind = _probe_kind(attempt, config)
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        COMPONENT_LABEL: CLAIM_COMPONENT,
        NODE_LABEL: node_label_value(attempt.node.name),
        ATTEMPT_LABEL: str(attempt.serial),
    }
    owners = _owned_by(kind).get("ownerReferences") or [None]
    return claim_manifest(attempt.claim, labels=labels, owner=owners[0], config=config)


# --------------------------------------------------------------------------- fabric pods


def fabric_pair_id(first: str, second: str, planned_at: str) -> str:
    """A pair's identity: its pods' label, and the key of its result in both statuses."""
    return hashlib.sha256(f"{first}/{second}/{planned_at}".encode()).hexdigest()[:12]


def fabric_pair_nonce(key: bytes, pair: str) -> str:
    """The pair's secret, in both its pods' environment (``GPUACCEPT_FABRIC_NONCE``):
    the ranks meet under it, so a peer without it never joins the pair (docs/fabric.md).
    Keyed by the operator process's random key: not derivable from the pair's labels."""
    return hashlib.blake2b(pair.encode(), key=key, digest_size=16).hexdigest() if key else ""


def fabric_pod_name(prefix: str, pair: str, rank: int) -> str:
    return f"{prefix}-fabric-{pair}-{rank}"


@dataclass(frozen=True)
class FabricPodRequest:
    """One pod of a fabric pair: rank 0 on ``pair.first`` (it listens on its own IP),
    rank 1 on ``pair.second`` with rank 0's IP as the rendezvous address."""

    labels: FabricPodLabels
    node: NodeView
    policy_name: str
    spec: NodeAcceptancePolicySpec
    rendezvous_address: str | None  # rank 1: rank 0's pod IP; rank 0: None (its own)
    applied_taints: Sequence[str] = ()
    owner_uid: str = ""  # the node's NodeAcceptance: the pod's controller (drain, GC)
    nonce: str = ""  # the pair's secret (fabric_pair_nonce; rank 1: rank 0's)
    # A DRA node: the claim the pod gets its GPUs through (named as the pod), and the
    # GPUs of the node's complete pool (core/gpupublishing.py), one rank each.
    claim: str = ""
    dra_gpus: tuple[DraDevice, ...] = ()


def _fabric_args(request: FabricPodRequest, config: OperatorConfig) -> list[str]:
    fabric, section = config.fabric, request.spec.fabric
    address = request.rendezvous_address or f"$({ENV_POD_IP})"  # rank 0: its own pod IP
    args = [
        FABRIC_SUBCOMMAND,
        FLAG_TERMINATION_LOG,
        TERMINATION_LOG,
        FLAG_NODE_RANK,
        str(request.labels.rank),
        FLAG_RENDEZVOUS_ADDRESS,
        address,
        FLAG_RENDEZVOUS_PORT,
        str(fabric.rendezvous_port),
        FLAG_RENDEZVOUS_TIMEOUT,
        str(fabric.rendezvous_timeout_seconds),
        FLAG_DEADLINE,
        str(max(fabric.timeout_seconds - FABRIC_DEADLINE_MARGIN_SECONDS, 1)),
        FLAG_MAX_MESSAGE_BYTES,
        str(section.max_message_bytes),
    ]
    if section.min_busbw_gbps is not None:
        args += [FLAG_MIN_BUSBW, f"{section.min_busbw_gbps:g}"]
    if not section.require_rdma:
        args.append(FLAG_ALLOW_SOCKET_TRANSPORT)
    return args


def _fabric_kind(request: FabricPodRequest, config: OperatorConfig) -> PodKind:
    labels, node, fabric = request.labels, request.node, config.fabric
    # On a DRA node its GPUs come through its claim, as the probe pod's do.
    resources = _no_gpu_resources(config) if request.claim else _gpu_resources(node, config)
    gpus = len(request.dra_gpus) if request.claim else node.gpus
    for name, quantity in fabric.resources.items():
        resources["limits"][name] = quantity
        resources["requests"][name] = quantity
    fabric_env = dict(fabric.env)  # the fabric's own win over --probe-env's
    return PodKind(
        name=fabric_pod_name(config.pod_prefix, labels.pair, labels.rank),
        node=node,
        policy_name=request.policy_name,
        spec=request.spec,
        owner_uid=request.owner_uid,
        command=[*config.probe_command, *_fabric_args(request, config)],
        env=[
            *(e for e in _platform_env(config) if e["name"] not in fabric_env),
            *({"name": name, "value": value} for name, value in fabric.env),
            {"name": ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": ENV_POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": ENV_EXPECTED_GPUS, "value": str(gpus)},
            *([{"name": ENV_FABRIC_NONCE, "value": request.nonce}] if request.nonce else []),
        ],
        resources=resources,
        active_deadline_seconds=fabric.timeout_seconds,
        tolerations=_tolerations(request.spec, request.applied_taints, config),
        labels={FABRIC_PAIR_LABEL: labels.pair, FABRIC_RANK_LABEL: str(labels.rank)},
        annotations={
            FABRIC_FIRST_ANNOTATION: labels.first,
            FABRIC_SECOND_ANNOTATION: labels.second,
        },
        chart_annotations=fabric.annotations,
        capabilities=fabric.capabilities,
        claim=request.claim,
    )


def fabric_pod_manifest(request: FabricPodRequest, config: OperatorConfig) -> dict[str, Any]:
    """One pod of a fabric pair, built from the operator's own ``config`` (the chart's
    RDMA settings included): all of the node's GPUs (a DRA node's through its claim),
    the pending taint tolerated, pinned to the node, no API credentials, the pod IP
    from the downward API."""
    return pod_manifest(_fabric_kind(request, config), config)


def fabric_claim_manifest(request: FabricPodRequest, config: OperatorConfig) -> dict[str, Any]:
    """The ResourceClaim of a fabric pod on a DRA node (``request.claim``, named as the
    pod): the probe claim's shape (core/draclaim.py), the operator's labels and the
    pair's, the NodeAcceptance as its controller."""
    kind = _fabric_kind(request, config)
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        COMPONENT_LABEL: CLAIM_COMPONENT,
        NODE_LABEL: node_label_value(request.node.name),
        FABRIC_PAIR_LABEL: request.labels.pair,
        FABRIC_RANK_LABEL: str(request.labels.rank),
    }
    owners = _owned_by(kind).get("ownerReferences") or [None]
    return claim_manifest(request.claim, labels=labels, owner=owners[0], config=config)


# --------------------------------------------------------------------------- watch pods


def watch_pod_name(prefix: str, node: str, serial: int) -> str:
    """``<prefix>-watch-<node>-<serial>``: the probe pods' naming under a watch prefix."""
    return probe_pod_name(f"{prefix}-watch", node, serial)


@dataclass(frozen=True)
class WatchPodRequest:
    """One watch window on one accepted node (policy inService)."""

    name: str
    serial: int
    node: NodeView
    policy_name: str
    spec: NodeAcceptancePolicySpec
    fatal_xids: Sequence[int] = ()
    owner_uid: str = ""


def _watch_kind(request: WatchPodRequest, config: OperatorConfig) -> PodKind:
    in_service = request.spec.in_service
    args = [
        WATCH_SUBCOMMAND,
        FLAG_TERMINATION_LOG,
        TERMINATION_LOG,
        FLAG_WINDOW,
        str(in_service.window_seconds),
        # the ledger's merge gap (core/inservice/xids.py), so that the watch does not
        # merge events the policy counts apart
        FLAG_BURST_MERGE,
        str(in_service.xid.burst_merge_seconds),
    ]
    if request.fatal_xids:
        args += [FLAG_FATAL_XIDS, ",".join(str(x) for x in request.fatal_xids)]
    return PodKind(
        name=request.name,
        node=request.node,
        policy_name=request.policy_name,
        spec=request.spec,
        owner_uid=request.owner_uid,
        command=[*config.probe_command, *args],
        env=[
            *_platform_env(config),
            {"name": ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            # No GPU requested (it runs beside the node's jobs): the container runtime
            # shows it every GPU for NVML's events and state (docs/operator.md).
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            *_node_gpu_env(request.node),
        ],
        resources=_no_gpu_resources(config),
        active_deadline_seconds=in_service.window_seconds + WATCH_DEADLINE_MARGIN_SECONDS,
        tolerations=[dict(t) for t in config.extra_tolerations],
        labels={WATCH_LABEL: str(request.serial)},
        annotations={},
        shm=False,
    )


def watch_pod_manifest(request: WatchPodRequest, config: OperatorConfig) -> dict[str, Any]:
    """The watch pod of ``request``: the probe image running ``gpuaccept probe watch``,
    pinned to the node, under the operator's node affinity, no API token, no GPU
    requested, no toleration of gpuaccept's own taints (a node it taints is no longer
    watched), the NodeAcceptance as its controller."""
    return pod_manifest(_watch_kind(request, config), config)
