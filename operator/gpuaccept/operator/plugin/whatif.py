"""``kubectl gpuaccept what-if POLICY_FILE``: every stored report judged again
under a candidate policy, and what would change; nothing is written.

Pure: the NodeAcceptances as read from the API server and the candidate's spec
in, the changes and the count against the quarantine limit out. Only the
single-node checks are judged again; a fabric result is the pair's and is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import ProbeReport

ACCEPT = "Accept"
QUARANTINE = "Quarantine"
UNKNOWN = "-"


@dataclass(frozen=True)
class NodeWhatIf:
    """One node: what it is now, what the candidate would make of its report."""

    node: str
    now: str  # Accept | Quarantine | - (no verdict yet)
    then: str  # Accept | Quarantine | - (no stored report: a probe is needed)
    reason: str | None  # the candidate's first reason
    message: str

    @property
    def changes(self) -> bool:
        return self.then not in (UNKNOWN, self.now)


@dataclass(frozen=True)
class WhatIf:
    nodes: tuple[NodeWhatIf, ...]
    limit: int  # the candidate's quarantine limit for this many matched nodes
    max_quarantined: str

    @property
    def would_quarantine(self) -> int:
        return sum(1 for n in self.nodes if n.then == QUARANTINE)

    @property
    def changed(self) -> tuple[NodeWhatIf, ...]:
        return tuple(n for n in self.nodes if n.changes)


def current_action(status: Mapping[str, Any]) -> str:
    """The verdict a node has now: its phase, or the action held back."""
    phase = status.get("phase")
    if phase == "Accepted":
        return ACCEPT
    if phase == "Quarantined":
        return QUARANTINE
    held = status.get("heldAction")
    if phase == "Held" and held in (ACCEPT, QUARANTINE):
        return str(held)
    return UNKNOWN


def _judge(name: str, status: Mapping[str, Any], spec: NodeAcceptancePolicySpec) -> NodeWhatIf:
    now = current_action(status)
    raw = status.get("report")
    try:
        report = ProbeReport.model_validate(raw) if isinstance(raw, Mapping) else None
    except ValidationError as error:
        message = f"stored report unreadable: {error.error_count()} error(s)"
        return NodeWhatIf(name, now, UNKNOWN, None, message)
    if report is None:
        return NodeWhatIf(name, now, UNKNOWN, None, "no stored report: a probe is needed")
    verdict = evaluate(report, spec.probe)
    then = ACCEPT if verdict.accepted else QUARANTINE
    return NodeWhatIf(name, now, then, verdict.reason, verdict.message)


def what_if(
    acceptances: Sequence[Mapping[str, Any]],
    spec: NodeAcceptancePolicySpec,
    *,
    policy_name: str | None,
) -> WhatIf:
    """Judge the stored report of every NodeAcceptance the candidate would govern
    (those of the policy named ``policy_name``; every one when None) under ``spec``."""
    chosen = [
        a
        for a in acceptances
        if policy_name is None or (a.get("status") or {}).get("policy") == policy_name
    ]
    nodes = tuple(
        sorted(
            (_judge(str(a["metadata"]["name"]), a.get("status") or {}, spec) for a in chosen),
            key=lambda n: n.node,
        )
    )
    return WhatIf(
        nodes=nodes,
        limit=spec.max_quarantined_count(len(nodes)),
        max_quarantined=str(spec.max_quarantined),
    )


def what_if_lines(result: WhatIf, *, policy_name: str | None) -> list[str]:
    """The report: one line per node whose verdict would change, then the count."""
    scope = f"policy {policy_name}" if policy_name else "every NodeAcceptance"
    lines = [f"{len(result.nodes)} node(s) of {scope} judged again; nothing written"]
    if result.changed:
        lines.append("would change:")
        for n in result.changed:
            why = f" {n.reason}: {n.message}" if n.then == QUARANTINE else ""
            lines.append(f"  {n.node}: {n.now} -> {n.then}{why}")
    else:
        lines.append("no verdict would change")
    unknown = [n for n in result.nodes if n.then == UNKNOWN]
    for n in unknown:
        lines.append(f"  {n.node}: not judged ({n.message})")
    over = result.would_quarantine > result.limit
    lines.append(
        f"would quarantine {result.would_quarantine} of {len(result.nodes)} node(s); "
        f"limit {result.limit} (maxQuarantined {result.max_quarantined}): "
        + ("OVER the limit, the breaker would hold the rest" if over else "within the limit")
    )
    return lines
