"""The fence of a GPU, a DRA DeviceTaintRule (pure): the rules a node's status wants,
against the rules of gpuaccept's that exist, as actions.

A fenced GPU (``status.gpuVerdicts[].fenced``, recorded by core/record.py) is taken
out of service by one ``resource.k8s.io/v1`` DeviceTaintRule (KEP-5055) that selects
its device by driver, pool and device name, resolved from its UUID through the node's
ResourceSlices (the attribute ``uuid`` of a device of a complete pool: device names
are not hardware identity). Its taint is gpuaccept's (:data:`FENCE_TAINT_KEY`), its
value the fence's reason, its effect the policy's (``fencing.effect``, NoSchedule by
default). A fence held with the action :data:`HELD_FENCE` (dryRun, or the limit at the
door: phase Held) wants its rule with effect ``None``: the taint is shown on the
device and does nothing. A GPU fenced before the hold keeps the policy's effect: dryRun
and the limit change nothing already done, as a quarantined node keeps its taint.

:func:`fence_rule_actions` is level-triggered, as the Node's taints are: every pass
compares the rules wanted with those the watch shows for the node and plans the
difference, so that no rule outlives its reason:

==========================================  ======================================
what the node's status and facts say         the node's rules
==========================================  ======================================
fenced GPUs, each resolved in the pool       one rule each (created, or patched to
                                             the device the pool names now)
a fenced GPU cut into MIG devices (its       one rule per MIG device naming it its
own device gone, MIG devices naming it       parent (``parentUUID``); the GPU's own
their parent), every pool complete           rule deleted
a fenced GPU not resolved now (the pool      its rule kept as it is
being republished, incomplete; none
published)
a fenced GPU no complete pool publishes,     its rule deleted: its device name may
every pool complete (the GPU gone)           now be another GPU's
a new verdict without the GPU fenced (a      its rule deleted
passing probe, a quarantine of the node)
no NodeAcceptance, no Node                   every rule of the node deleted
==========================================  ======================================

The taint key is gpuaccept's alone: the chart's admission policy lets only the
operator's ServiceAccount create or change a DeviceTaintRule with it
(docs/security.md), so a rule with that key and the operator's labels is the
operator's, and deleting it is safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpuaccept.contracts.api import ACCEPTANCE_KIND, API_VERSION, FENCE_TAINT_KEY, GROUP
from gpuaccept.contracts.nodeacceptance import GpuVerdict, NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.gpupublishing import MIG_DEVICE_TYPE, DraPool, dra_pools
from gpuaccept.operator.core.model import (
    Action,
    DeleteFenceRule,
    FenceRuleView,
    NodeSnapshot,
    PatchNAStatus,
    Plan,
    WriteFenceRule,
)
from gpuaccept.operator.core.podspec import (
    COMPONENT_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NODE_LABEL,
    NODE_NAME_ANNOTATION,
    node_label_value,
)

__all__ = [
    "FENCE_COMPONENT",
    "GPU_UUID_ANNOTATION",
    "HELD_FENCE",
    "RULE_KIND",
    "fence_rule_actions",
    "fence_rule_manifest",
    "fence_targets",
    "gone_from_pools",
    "resolve_gpu",
    "rule_name",
    "wanted_fence_rules",
    "with_fence_rules",
]

RULE_KIND = "DeviceTaintRule"
RULE_API_VERSION = "resource.k8s.io/v1"
FENCE_COMPONENT = "gpu-fence"  # app.kubernetes.io/component of the operator's rules
GPU_UUID_ANNOTATION = f"{GROUP}/gpu-uuid"
HELD_FENCE = "Fence"  # status.heldAction of a fence held back (dryRun, the limit)
EFFECT_NONE = "None"  # KEP-5055: informational, what dryRun makes
MAX_NAME = 253  # a DeviceTaintRule's name is a DNS subdomain
REASON_VALUE_MAX = 63  # the taint's value is a label value


def rule_name(node: str, gpu_uuid: str) -> str:
    """The rule of ``gpu_uuid`` on ``node``: the node's name and a digest of both (the
    node may be renamed into another's; the digest keeps two nodes' rules apart)."""
    digest = hashlib.sha256(f"{node}/{gpu_uuid}".encode()).hexdigest()[:12]
    name = f"gpuaccept-fence-{node}-{digest}"
    return name if len(name) <= MAX_NAME else f"gpuaccept-fence-{digest}"


def resolve_gpu(gpu_uuid: str, pools: Iterable[DraPool]) -> tuple[str, str, str] | None:
    """(driver, pool, device name) of the GPU ``gpu_uuid`` in the node's complete pools;
    None when no complete pool publishes it (or more than one device claims it)."""
    found = [
        (pool.driver, pool.name, device.name)
        for pool in pools
        if pool.complete
        for device in pool.gpus
        if device.uuid and device.uuid == gpu_uuid
    ]
    return found[0] if len(found) == 1 else None


def mig_devices_of(
    gpu_uuid: str, pools: Sequence[DraPool]
) -> tuple[tuple[str, str, str, str], ...]:
    """(driver, pool, device name, MIG UUID) of each MIG device cut from the GPU
    ``gpu_uuid`` (attribute ``parentUUID``), once every pool of the node is complete
    (none while one is being republished)."""
    if not pools or not all(pool.complete for pool in pools):
        return ()
    return tuple(
        (pool.driver, pool.name, device.name, device.uuid)
        for pool in pools
        for device in pool.devices
        if device.kind == MIG_DEVICE_TYPE and device.parent_uuid == gpu_uuid and device.uuid
    )


def fence_targets(gpu_uuid: str, pools: Sequence[DraPool]) -> tuple[tuple[str, str, str, str], ...]:
    """(driver, pool, device name, device UUID) of each device a fence of the GPU
    ``gpu_uuid`` selects: the GPU's own device (:func:`resolve_gpu`), or, where the GPU
    is cut into MIG devices (its own device gone, MIG devices naming it their parent),
    each of those; () when neither resolves now."""
    where = resolve_gpu(gpu_uuid, pools)
    if where is not None:
        return ((*where, gpu_uuid),)
    return mig_devices_of(gpu_uuid, pools)


def gone_from_pools(gpu_uuid: str, pools: Sequence[DraPool]) -> bool:
    """The GPU ``gpu_uuid`` is gone from the node's pools: there is a pool, every one is
    complete, and no device of any carries that UUID nor names it its parent (a MIG
    device). Its rule must go, for its device name may now be another GPU's; health in
    service sees the GPU gone from the pool (``GPUsUnallocatable``). A pool incomplete
    or none published (being republished) is not a GPU gone."""
    return (
        bool(pools)
        and all(pool.complete for pool in pools)
        and not any(
            gpu_uuid in (device.uuid, device.parent_uuid)
            for pool in pools
            for device in pool.devices
        )
    )


def _reason_value(gpu: GpuVerdict) -> str:
    """The taint's value: the GPU's failed checks, as a label value."""
    text = "-".join(gpu.checks) or "failed"
    value = "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:REASON_VALUE_MAX]
    return value.strip("-_.") or "failed"


def wanted_effect(status: NodeAcceptanceStatus, gpu: GpuVerdict, policy_effect: str) -> str | None:
    """The effect ``gpu``'s fence wants: the policy's while it is fenced (the node
    accepted, re-probed, or its verdict held: dryRun and the limit change no fence made
    before them); ``None`` for a new fence held at the door (dryRun, the limit: phase
    Held); no rule (None) otherwise."""
    if gpu.fenced:
        return policy_effect
    if status.held_action == HELD_FENCE and status.phase == Phase.HELD and gpu.checks:
        return EFFECT_NONE
    return None


def wanted_fence_rules(
    node: str,
    status: NodeAcceptanceStatus | None,
    pools: Sequence[DraPool],
    policy_effect: str,
) -> tuple[tuple[FenceRuleView, ...], tuple[str, ...]]:
    """The rules ``status`` wants for ``node`` whose GPUs resolve in ``pools``, and the
    UUIDs of the fenced GPUs that do not resolve now but may again (their rules are kept
    as they are); a GPU gone from the pools (:func:`gone_from_pools`) is in neither, so
    its rule is deleted."""
    if status is None:
        return (), ()
    rules: list[FenceRuleView] = []
    unresolved: list[str] = []
    for gpu in status.gpu_verdicts:
        effect = wanted_effect(status, gpu, policy_effect)
        if effect is None:
            continue
        targets = fence_targets(gpu.uuid, pools) if gpu.uuid else ()
        if not targets:
            if not (gpu.uuid and gone_from_pools(gpu.uuid, pools)):
                unresolved.append(gpu.uuid or f"GPU {gpu.index}")
            continue
        rules.extend(
            FenceRuleView(
                name=rule_name(node, device_uuid),  # the GPU's UUID, or its MIG device's
                node=node,
                gpu_uuid=gpu.uuid or "",
                driver=driver,
                pool=pool,
                device=device,
                key=FENCE_TAINT_KEY,
                value=_reason_value(gpu),
                effect=effect,
            )
            for driver, pool, device, device_uuid in targets
        )
    return tuple(rules), tuple(unresolved)


def fence_rule_manifest(
    rule: FenceRuleView, labels: dict[str, str], owner: dict[str, Any] | None
) -> dict[str, Any]:
    """The DeviceTaintRule of ``rule``: the operator's ``labels``, the NodeAcceptance as
    its controller (``owner``: the garbage collector deletes it with it, besides the
    operator's own deletes)."""
    meta: dict[str, Any] = {
        "name": rule.name,
        "labels": labels,
        "annotations": {GPU_UUID_ANNOTATION: rule.gpu_uuid, NODE_NAME_ANNOTATION: rule.node},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": RULE_API_VERSION,
        "kind": RULE_KIND,
        "metadata": meta,
        "spec": {
            "deviceSelector": {"driver": rule.driver, "pool": rule.pool, "device": rule.device},
            "taint": {"key": rule.key, "value": rule.value, "effect": rule.effect},
        },
    }


def _same_spec(a: FenceRuleView, b: FenceRuleView) -> bool:
    return (a.driver, a.pool, a.device, a.key, a.value, a.effect) == (
        b.driver,
        b.pool,
        b.device,
        b.key,
        b.value,
        b.effect,
    )


def fence_rule_actions(
    wanted: Sequence[FenceRuleView],
    unresolved: Sequence[str],
    existing: Iterable[FenceRuleView],
    manifest: Callable[[FenceRuleView], dict[str, Any]],
) -> tuple[list[Action], list[Action]]:
    """(writes, deletes) that bring ``existing`` (the node's rules with gpuaccept's key)
    in line with ``wanted``: a missing rule created, one that differs patched, one
    wanted by none deleted, unless it is the rule of a GPU in ``unresolved``.
    ``manifest`` turns a wanted rule into its DeviceTaintRule."""
    have = {r.name: r for r in existing if r.key == FENCE_TAINT_KEY}
    keep = {r.name for r in have.values() if r.gpu_uuid in set(unresolved)}
    writes: list[Action] = []
    for rule in wanted:
        old = have.get(rule.name)
        if old is None or not _same_spec(old, rule):
            writes.append(WriteFenceRule(rule.name, manifest(rule), exists=old is not None))
    names = {r.name for r in wanted} | keep
    deletes: list[Action] = [DeleteFenceRule(name) for name in sorted(have) if name not in names]
    return writes, deletes


def _planned_status(observed: NodeSnapshot, plan: Plan) -> NodeAcceptanceStatus | None:
    """The node's status once ``plan`` ran: its last status write, else as read."""
    writes = [a.status for a in plan.actions if isinstance(a, PatchNAStatus)]
    if writes:
        return writes[-1]
    return observed.na.status if observed.na is not None else None


def with_fence_rules(observed: NodeSnapshot, plan: Plan, policy_effect: str | None) -> Plan:
    """``plan`` with the node's rules brought in line with the status it leaves: the
    rules to create or patch first (a fence stands before the node's pending taint comes
    off), the rules to delete last. ``policy_effect`` None (no single valid policy):
    the rules are left as they are, unless the Node or its NodeAcceptance is gone (then
    every rule of the node goes)."""
    gone = observed.node is None or observed.na is None
    if policy_effect is None and not gone:
        return plan
    node = observed.node_name
    status = None if gone else _planned_status(observed, plan)
    pools = dra_pools(observed.resource_slices, observed.config.dra_drivers)
    wanted, unresolved = wanted_fence_rules(node, status, pools, policy_effect or "")
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        COMPONENT_LABEL: FENCE_COMPONENT,
        NODE_LABEL: node_label_value(node),
    }
    na = observed.na
    owner = (
        {
            "apiVersion": API_VERSION,
            "kind": ACCEPTANCE_KIND,
            "name": na.name,
            "uid": na.uid,
            "controller": True,
        }
        if na is not None and na.uid
        else None
    )
    writes, deletes = fence_rule_actions(
        wanted, unresolved, observed.fence_rules, lambda r: fence_rule_manifest(r, labels, owner)
    )
    if not writes and not deletes:
        return plan
    note = f"{plan.note}; fence rules: {len(writes)} written, {len(deletes)} deleted"
    return Plan.ordered(
        (*writes, *plan.actions, *deletes),
        requeue_after=plan.requeue_after,
        needs_limit_lock=plan.needs_limit_lock,
        note=note,
    )
