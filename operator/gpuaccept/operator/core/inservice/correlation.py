"""Signature correlation across a policy's nodes (pure).

The same signature (a reason with its Xid or condition) with its onset on several
of the policy's nodes within ``correlation.windowSeconds`` of each other is a
common cause (a driver rollout, a job teardown, another tool's bad rule), not each
node's fault: those nodes are held, none quarantined. The bar is the larger of
``minNodes`` and ``fraction`` of the policy's matched nodes (rounded up).

What correlation can see is what the nodes have recorded. So that the first nodes
of a simultaneous event are not decided before the others report it, a verdict
waits ``correlation.settleSeconds`` after the onset of its evidence (recorded as
pending, which the other nodes see; ``rules.settles``); then correlation is
evaluated over the fleet and the verdict is applied or held. A common cause whose
nodes report further apart than that is still decided node by node until the bar
(the quarantine limit and its rate bound how many); from the bar on, every node
with the signature is held.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuaccept.contracts.inservice import Correlation, InServiceStatus
from gpuaccept.operator.core.model import NAView, SignatureSeen


def bar(policy: Correlation, matched: int) -> int:
    """How many nodes make a signature a common cause."""
    return max(policy.min_nodes, math.ceil(policy.fraction * max(matched, 0)))


def sharing(
    signature: str, onset: datetime, node: str, fleet: Iterable[SignatureSeen], window_seconds: int
) -> set[str]:
    """The nodes (this one included) whose ``signature`` began within the window of
    ``onset``."""
    window = timedelta(seconds=window_seconds)
    near = {
        seen.node
        for seen in fleet
        if seen.signature == signature and abs(seen.onset - onset) <= window and seen.node != node
    }
    return near | {node}


@dataclass(frozen=True)
class Fleet:
    """What correlation compares a node with: the other nodes' signatures, and how
    many nodes the policy matches."""

    seen: tuple[SignatureSeen, ...] = ()
    matched: int = 1


def common_cause(seen: SignatureSeen, fleet: Fleet, policy: Correlation) -> int | None:
    """How many nodes share ``seen``'s signature when that makes it a common cause
    (None: it does not, or correlation is off)."""
    if not policy.enabled:
        return None
    window = policy.window_seconds
    nodes = len(sharing(seen.signature, seen.onset, seen.node, fleet.seen, window))
    return nodes if nodes >= bar(policy, fleet.matched) else None


def signatures(node: str, ledger: InServiceStatus | None) -> list[SignatureSeen]:
    """What a node's ledger offers to correlation: its verdict's signature and its
    suspects' (an application-class Xid's)."""
    if ledger is None:
        return []
    seen = [SignatureSeen(node, suspect_signature(s.xid), s.since) for s in ledger.suspects]
    if ledger.verdict is not None:
        seen.append(SignatureSeen(node, ledger.verdict.signature, ledger.verdict.window_start))
    return seen


def view_signatures(view: NAView) -> tuple[SignatureSeen, ...]:
    """:func:`signatures` of a NodeAcceptance view: a slim one (the cache's, its ledger
    packed) carries them, taken when its entry was made; a whole one has its ledger."""
    if view.packed is not None:
        return view.packed.signatures
    return tuple(signatures(view.name, view.status.in_service))


def suspect_signature(xid: int) -> str:
    return f"XidApplication:{xid}"
