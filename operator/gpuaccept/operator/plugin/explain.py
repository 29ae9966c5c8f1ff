"""``kubectl gpuaccept explain NODE``: a NodeAcceptance as a person reads it.

The verdict, every reason with its message, and the stored report as the probe's
own table (:func:`gpuaccept.checks.report_table.table_lines`), re-judged under
the policy the node is governed by, so the thresholds shown are that policy's.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.checks.report_table import TABLE_WIDTH, table_lines
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import ProbeReport

EVICTION_CONDITION = "EvictionInProgress"  # DeviceTaintRuleStatus's one defined condition


def _report(status: Mapping[str, Any]) -> ProbeReport | None:
    raw = status.get("report")
    if not isinstance(raw, Mapping):
        return None
    try:
        return ProbeReport.model_validate(raw)
    except ValidationError:
        return None


def policy_spec(policy: Mapping[str, Any] | None) -> NodeAcceptancePolicySpec | None:
    """A NodeAcceptancePolicy object's spec as the model, or None (missing, invalid)."""
    if policy is None:
        return None
    try:
        return NodeAcceptancePolicySpec.model_validate(policy.get("spec") or {})
    except ValidationError:
        return None


def _summary(name: str, status: Mapping[str, Any], policy: Mapping[str, Any] | None) -> list[str]:
    phase = status.get("phase") or "Pending"
    reason = status.get("reason")
    line = f"{name}: {phase}" + (f" ({reason})" if reason else "")
    if status.get("heldAction"):
        line += f", held action {status['heldAction']}"
    out = [line]
    policy_name = status.get("policy")
    if policy_name:
        generation = status.get("policyGeneration")
        judged = f" (judged at generation {generation})" if generation is not None else ""
        out.append(f"policy {policy_name}{judged}")
        if policy is None:
            out.append(f"policy {policy_name} not found: the stored results are shown as judged")
    out += _publishing(status.get("gpuPublishing"))
    if status.get("message") and not status.get("reasons"):  # the reasons say it in full
        out.append(f"message: {status['message']}")
    out += _release(status)
    return out


PUBLISHING = {
    "DevicePlugin": "GPUs published by the device plugin (nvidia.com/gpu)",
    "DRA": "GPUs published through DRA (ResourceSlices of a configured driver)",
    "Both": "GPUs published by the device plugin and through DRA at once (not probed)",
}


def _publishing(mode: object) -> list[str]:
    """How the node publishes its GPUs (status.gpuPublishing) as last written; nothing
    when the status does not say (none published yet, or written by an older release:
    its reason says which)."""
    line = PUBLISHING.get(str(mode))
    return [line] if line else []


def _release(status: Mapping[str, Any]) -> list[str]:
    """The last release a person asked for (``kubectl gpuaccept release``)."""
    record = status.get("release")
    if not isinstance(record, Mapping):
        return []
    was = record.get("fromPhase", "?") + (
        f" ({record['fromReason']})" if record.get("fromReason") else ""
    )
    line = (
        f"released by {record.get('by', '?')} at {record.get('releasedTime', '?')} "
        f"(asked at {record.get('requestedAt', '?')}), was {was}"
    )
    if record.get("reason"):
        line += f": {record['reason']}"
    return [line]


def _reasons(status: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for title, key in (("reasons", "reasons"), ("warnings", "warnings")):
        items = [r for r in status.get(key) or [] if isinstance(r, Mapping)]
        if items:
            out.append(f"{title}:")
            out += [
                f"  {r.get('reason', '?')} ({r.get('check', '?')}): {r.get('message', '')}"
                for r in items
            ]
    return out


def _gpu_verdicts(status: Mapping[str, Any]) -> list[str]:
    """Which GPUs failed which checks (status.gpuVerdicts: the failures that belong to
    one GPU, docs/policy.md "Per-GPU verdicts"), and how many are fenced."""
    items = [g for g in status.get("gpuVerdicts") or [] if isinstance(g, Mapping)]
    if not items:
        return []
    fenced = f", fenced {status['fenced']}" if status.get("fenced") else ""
    out = [f"per-GPU verdicts{fenced}:"]
    for gpu in items:
        uuid = f" ({gpu['uuid']})" if gpu.get("uuid") else ""
        checks = ", ".join(str(c) for c in gpu.get("checks") or [])
        state = "fenced" if gpu.get("fenced") else "not fenced"
        out.append(f"  GPU {gpu.get('index', '?')}{uuid}: {checks} ({state})")
    return out


def _fence_history(status: Mapping[str, Any]) -> list[str]:
    """The GPUs fenced before, each with how many times and when last
    (status.reverify.gpuFences: the repeat-offender rule counts them per GPU), and
    what the quarantine rate counts for this node (status.takenOutTime, takenOutGpus)."""
    out: list[str] = []
    reverify = status.get("reverify")
    raw = reverify.get("gpuFences") if isinstance(reverify, Mapping) else None
    fences = [f for f in raw or [] if isinstance(f, Mapping) and f.get("uuid")]
    if fences:
        times: dict[str, list[str]] = {}
        for fence in fences:
            times.setdefault(str(fence["uuid"]), []).append(str(fence.get("time", "?")))
        out.append("fences on record (repeatOffenders counts them per GPU):")
        out += [
            f"  {uuid}: {len(at)} time(s), last at {max(at)}" for uuid, at in sorted(times.items())
        ]
    taken = status.get("takenOutTime")
    if taken:
        gpus = status.get("takenOutGpus")
        what = f"{gpus} GPU(s) fenced" if gpus else "the whole node"
        out.append(f"last taken out of service at {taken}: {what} (the quarantine rate counts it)")
    return out


def _fence_rules(rules: Sequence[Mapping[str, Any]] | str | None) -> list[str]:
    """The node's fence DeviceTaintRules as the API server has them: each with the
    device it taints and its effect, and the eviction feedback the API server's device
    taint controller writes in its status (condition ``EvictionInProgress``: for effect
    ``None``, a dryRun fence, what ``NoExecute`` would evict; ``k8s.io/api``
    ``resource/v1`` ``DeviceTaintRuleStatus``). ``rules`` a string: why they could not
    be read; None: not asked (the node has no per-GPU verdict)."""
    if rules is None:
        return []
    if isinstance(rules, str):
        return [f"fence rules: not shown ({rules})"]
    if not rules:
        return ["fence rules: none"]
    out = ["fence rules:"]
    for rule in sorted(rules, key=lambda r: str((r.get("metadata") or {}).get("name", ""))):
        spec = rule.get("spec") or {}
        selector, taint = spec.get("deviceSelector") or {}, spec.get("taint") or {}
        out.append(
            f"  {(rule.get('metadata') or {}).get('name', '?')}: {selector.get('pool', '?')}/"
            f"{selector.get('device', '?')} effect {taint.get('effect', '?')}"
        )
        for condition in (rule.get("status") or {}).get("conditions") or []:
            if isinstance(condition, Mapping) and condition.get("type") == EVICTION_CONDITION:
                out.append(
                    f"    {EVICTION_CONDITION}={condition.get('status', '?')}: "
                    f"{condition.get('message', '')}"
                )
    return out


def _fabric(status: Mapping[str, Any]) -> list[str]:
    fabric = status.get("fabric")
    if not isinstance(fabric, Mapping) or not fabric:
        return []
    parts = [f"{k} {fabric[k]}" for k in ("state", "reason", "message") if fabric.get(k)]
    return [f"fabric: {', '.join(parts)}"] if parts else []


def _in_service(status: Mapping[str, Any]) -> list[str]:
    """Health in service (policy inService): the verdict and its evidence window, the
    signal timers running, the DRA pool and driver taints, the suspects, the latest
    events (what, when, which GPU)."""
    ledger = status.get("inService")
    if not isinstance(ledger, Mapping):
        return []
    out = [
        f"in service (boot {ledger.get('bootID', '?')}):",
        *_in_service_verdict(ledger.get("verdict")),
    ]
    if ledger.get("unallocatableSince"):
        out.append(f"  GPUs unallocatable since {ledger['unallocatableSince']}")
    if ledger.get("draDevices"):
        out.append(f"  held to its DRA pool of {len(ledger['draDevices'])} GPUs (as accepted)")
    for taint in ledger.get("driverTaints") or []:
        if not isinstance(taint, Mapping):
            continue
        value = f"={taint['value']}" if taint.get("value") else ""
        out.append(
            f"  DRA driver taint {taint.get('key')}{value} ({taint.get('effect', '?')}) on "
            f"GPU {taint.get('gpu')} since {taint.get('since')}"
        )
    for timer in ledger.get("conditions") or []:
        out.append(
            f"  condition {timer.get('type')}={timer.get('status')} since {timer.get('since')}"
        )
    out += _in_service_suspects(ledger.get("suspects") or [])
    out += _in_service_events(ledger.get("events") or [])
    return out if len(out) > 1 else []


def _in_service_verdict(verdict: object) -> list[str]:
    """The in-service verdict (held, or pending), and its evidence window."""
    if not isinstance(verdict, Mapping):
        return []
    held = ", held: a common cause" if verdict.get("commonCause") else ""
    held = ", pending: settling (not applied yet)" if verdict.get("pending") else held
    return [
        f"  verdict {verdict.get('reason', '?')}{held}, evidence "
        f"{verdict.get('windowStart', '?')} .. {verdict.get('windowEnd', '?')}: "
        f"{verdict.get('message', '')}"
    ]


def _in_service_suspects(suspects: list[Mapping[str, Any]]) -> list[str]:
    out = []
    for suspect in suspects:
        cause = " (a common cause)" if suspect.get("commonCause") else ""
        out.append(
            f"  suspect: Xid {suspect.get('xid')} x{suspect.get('count')} on GPU "
            f"{suspect.get('gpu')} since {suspect.get('since')}{cause}"
        )
    return out


def _in_service_events(events: list[object]) -> list[str]:
    """The latest events: what, when, which GPU."""
    out = []
    for event in [e for e in events if isinstance(e, Mapping)][-EVENTS_SHOWN:]:
        gpu = f" on GPU {event['gpu']}" if event.get("gpu") else ""
        out.append(
            f"  {event.get('time', '?')} {event.get('what', '?')}{gpu} ({event.get('kind')})"
        )
    return out


EVENTS_SHOWN = 10


def explain_lines(
    acceptance: Mapping[str, Any],
    policy: Mapping[str, Any] | None,
    *,
    rules: Sequence[Mapping[str, Any]] | str | None = None,
    width: int = TABLE_WIDTH,
) -> list[str]:
    """What ``explain`` prints for one NodeAcceptance (and its policy, when found; its
    fence rules, when read: :func:`_fence_rules`)."""
    name = str((acceptance.get("metadata") or {}).get("name", "?"))
    status: Mapping[str, Any] = acceptance.get("status") or {}
    head = [
        *_summary(name, status, policy),
        *_reasons(status),
        *_gpu_verdicts(status),
        *_fence_history(status),
        *_fence_rules(rules),
        *_fabric(status),
        *_in_service(status),
    ]
    lines = [
        wrapped
        for line in head
        for wrapped in textwrap.wrap(line, width, subsequent_indent="    ") or [""]
    ]
    report = _report(status)
    if report is None:
        return [*lines, "", "no probe report stored yet (the node has not been probed)"]
    spec = policy_spec(policy)
    verdict = evaluate(report, spec.probe) if spec is not None else None
    return [*lines, "", *table_lines(report, verdict, width=width)]
