"""The quarantine limit counts capacity, not labels (pure).

In the style of cluster-api's ``isAllowedRemediation``, :func:`take_out_allowed`
is the one place deciding whether gpuaccept may take one more node of a policy
out of service: a quarantine, a new round of an in-service node (a re-probe by
annotation, bootID, policy change), the fabric test of an accepted node. Three
bounds, the tightest wins:

* the standing limit, ``maxQuarantined``: every matched node out of service
  because of gpuaccept (:func:`out_of_service`), this one included after the
  action. An action on a node already counted (quarantining a node re-probed out of
  service) changes no capacity and is not held back: its taking out was checked;
* the rate, ``quarantineRate``: in-service nodes taken out within its sliding window
  (a new node's quarantine costs no capacity: it never was in service);
* the operator's ceiling (``--max-unavailable-ceiling``), the platform team's bound:
  it caps each policy's two bounds, and it bounds the whole fleet (every policy's
  nodes together, :func:`fleet_limit`), so that many small policies (one per node,
  where a percentage of one node rounds up to 1) cannot take out more than it allows.

Lost capacity is counted in GPUs where the counts carry them
(``QuarantineLimitCounts.matched_gpus``; issue 40): a node out of service as all of its
GPUs, a fenced GPU (``status.fenced``) as one. The standing limit and the rate are then
node limits turned into GPUs at the policy's average node (``limit * matched GPUs // matched
nodes``), so that on nodes of equal size they decide as the node counts do, and a
GPU fenced is a share of a node, not a node (:func:`gpus_out`, :func:`gpu_limit`). The
operator's ceiling stays a count of nodes.

A fence of a GPU in service is a take-out too (core/record.py): it counts in the rate's
window as the GPUs it took out (:func:`window_gpus`, ``status.takenOutGpus``), the node's
earlier fences within the window added, and where the limit counts nodes as one node
taken out (as :func:`counted_out` counts a fenced node as one node out). Its ask of the
rate is the GPUs it adds to its node's window (``asked_recent_gpus``), not the fences
that stand.

A brand-new node that registered under the pending taint is not in service: its
probe takes nothing out, so nothing here holds it back; once quarantined or held
it counts against the standing limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.contracts.policy_fields import OWNED_KEY_PREFIX, limit_count
from gpuaccept.operator.core.gpusharing import replicas
from gpuaccept.operator.core.model import NodeView, QuarantineLimitCounts

# The NodeAcceptance reason of a verdict or a new round the limit holds back.
REASON_QUARANTINE_LIMIT = "BreakerOpen"
REASON_DRY_RUN = "DryRun"
# The action a held verdict (dryRun, the limit) would take: its status.heldAction.
HELD_QUARANTINE = "Quarantine"
HELD_ACCEPT = "Accept"
HELD_FABRIC = "Fabric"  # an accepted node's fabric test, deferred by the limit
# Out of service while undecided when gpuaccept took it out of service (or it was
# out of service because of gpuaccept already, e.g. a quarantined node re-probed).
UNDECIDED_OUT = frozenset(
    {Phase.PENDING, Phase.PROBING, Phase.FABRIC, Phase.STALLED, Phase.WAITING}
)


@dataclass(frozen=True)
class TakeOutDecision:
    allowed: bool
    why: str = ""  # what held it back (empty when allowed)


def out_of_service(st: NodeAcceptanceStatus) -> bool:
    """Whether the node is out of service because of gpuaccept (it counts against
    ``maxQuarantined``)."""
    if st.phase == Phase.QUARANTINED:
        return True
    if st.phase == Phase.HELD:  # a dry run changes no taint; the limit holds it pending
        return st.reason != REASON_DRY_RUN and st.was_in_service
    return st.phase in UNDECIDED_OUT and st.was_in_service


FENCED_PATTERN = re.compile(r"^(\d+)/(\d+)$")


def fenced_gpus(st: NodeAcceptanceStatus) -> int:
    """The node's fenced GPUs (``status.fenced``, "1/8"); 0 when none."""
    match = FENCED_PATTERN.match(st.fenced or "")
    return int(match.group(1)) if match else 0


def gpus_out(st: NodeAcceptanceStatus, node_gpus: int) -> int:
    """The GPUs of a node of ``node_gpus`` GPUs that gpuaccept holds out of service: all
    of them while the node is (:func:`out_of_service`), else its fenced ones."""
    if out_of_service(st):
        return node_gpus
    return min(fenced_gpus(st), node_gpus)


def window_gpus(st: NodeAcceptanceStatus, node_gpus: int) -> int:
    """The GPUs of a node of ``node_gpus`` GPUs that its last take-out (``takenOutTime``)
    counts in the rate's window: all of them for a node taken out, the GPUs its fences
    took out (``takenOutGpus``) where only fences did, never more than it has; 0 when
    it was never taken out."""
    if st.taken_out_time is None:
        return 0
    if st.taken_out_gpus is None:
        return node_gpus
    return min(st.taken_out_gpus, node_gpus)


def node_gpu_count(node: NodeView) -> int:
    """The node's physical GPUs as its Node shows them: the device plugin's capacity
    divided by its replicas (GPU sharing); 0 where the Node does not say (a DRA node:
    its pool is not on the Node), and then its policy's limit counts nodes."""
    return -(-node.gpu_capacity // replicas(node)) if node.gpu_capacity > 0 else 0


def gpu_limit(node_limit: int, matched: int, matched_gpus: int) -> int:
    """A limit of ``node_limit`` nodes in GPUs, at the average node of ``matched`` nodes
    with ``matched_gpus`` GPUs (exact on nodes of equal size)."""
    return node_limit * matched_gpus // matched if matched else 0


def gated(node: NodeView) -> bool:
    """The Node carries a NoSchedule or NoExecute taint under gpuaccept's own prefix."""
    return any(
        t.key.startswith(OWNED_KEY_PREFIX) and t.effect in ("NoSchedule", "NoExecute")
        for t in node.taints
    )


def lingering(st: NodeAcceptanceStatus, node_gated: bool) -> bool:
    """Accepted in its status while its Node still carries gpuaccept's taint: the
    status is written before the Node is patched, so until the patch lands the node
    is still out of service, and counts as such (else the limit could let one more
    out in that gap)."""
    return node_gated and st.phase == Phase.ACCEPTED


def counted_out(st: NodeAcceptanceStatus, node_gated: bool) -> bool:
    """Whether a node that is not quarantined counts as one node out in the limit's node
    counts (``QuarantineLimitCounts.out_of_service`` and the operator's ceiling): out of
    service (:func:`out_of_service`, :func:`lingering`), or with a GPU fenced. A fenced
    node stays Accepted; counted in nodes, its fences take the node's slot, else where
    a policy's limit counts nodes (a node of unknown size) each new fence or quarantine
    would ask for one more node against a count without the earlier fences (issue 40)."""
    return st.phase != Phase.QUARANTINED and (
        out_of_service(st) or lingering(st, node_gated) or fenced_gpus(st) > 0
    )


def in_service(st: NodeAcceptanceStatus) -> bool:
    """A decided node that takes workloads: accepted, released by a person, or held by a
    dry run (untouched)."""
    return st.phase in (Phase.ACCEPTED, Phase.RELEASED) or (
        st.phase == Phase.HELD and st.reason == REASON_DRY_RUN
    )


def adopting(st: NodeAcceptanceStatus, node: NodeView, pending_taint_key: str) -> bool:
    """A node the policy has just taken on that is in service (it did not register
    under the pending taint: an already running fleet, a policy created or widened
    over it) and that gpuaccept has not taken out yet: its pending taint waits for
    the limit."""
    return (
        st.phase == Phase.PENDING
        and st.attempts == 0
        and st.probed_boot_id is None
        and not st.was_in_service
        and all(t.key != pending_taint_key for t in node.taints)
    )


def standing_limit(spec: NodeAcceptancePolicySpec, matched: int, ceiling: int | str) -> int:
    return min(spec.max_quarantined_count(matched), limit_count(ceiling, matched))


def rate_limit(spec: NodeAcceptancePolicySpec, matched: int, ceiling: int | str) -> int:
    return min(spec.rate_count(matched), limit_count(ceiling, matched))


def fleet_limit(counts: QuarantineLimitCounts, ceiling: int | str) -> int:
    """The most nodes gpuaccept may hold out of service at once over every policy."""
    return limit_count(ceiling, counts.fleet_nodes)


def take_out_allowed(
    spec: NodeAcceptancePolicySpec,
    counts: QuarantineLimitCounts,
    *,
    ceiling: int | str = "100%",
    already_out: bool = False,
    new_take_out: bool = True,
) -> TakeOutDecision:
    """May gpuaccept take one more node out of service under ``spec``? ``counts``
    exclude that node. ``already_out``: it is quarantined under this policy already
    (no new slot). ``new_take_out``: the action takes an in-service node out, so it
    counts against the rate; a new node, or one already out (re-probed after a
    quarantine, taken out for this round), costs no capacity now."""
    if already_out:
        return TakeOutDecision(True)
    matched = counts.matched
    standing = standing_limit(spec, matched, ceiling)
    if counts.asked_gpus and counts.matched_gpus is not None:
        return _take_out_gpus(spec, counts, ceiling, new_take_out=new_take_out)
    if counts.unavailable + 1 > standing:
        return TakeOutDecision(
            False,
            f"maxQuarantined={spec.max_quarantined}: {counts.unavailable} of limit {standing} "
            "out of service",
        )
    fleet = _fleet_ceiling(counts, ceiling)
    if not fleet.allowed:
        return fleet
    if new_take_out:
        rate = rate_limit(spec, matched, ceiling)
        if counts.taken_out_recently + 1 > rate:
            window = spec.quarantine_rate.window_seconds
            return TakeOutDecision(
                False,
                f"quarantineRate={spec.quarantine_rate.max_per_window}/{window}s: "
                f"{counts.taken_out_recently} of limit {rate} taken out in the last {window}s",
            )
    return TakeOutDecision(True)


def _fleet_ceiling(counts: QuarantineLimitCounts, ceiling: int | str) -> TakeOutDecision:
    fleet = fleet_limit(counts, ceiling)
    if counts.fleet_out + 1 > fleet:
        return TakeOutDecision(
            False,
            f"--max-unavailable-ceiling={ceiling}: {counts.fleet_out} of fleet limit {fleet} "
            f"out of service (over every policy's {counts.fleet_nodes} node(s))",
        )
    return TakeOutDecision(True)


def _fits(out: int, gpus: int, limit: int, node_limit: int) -> bool:
    """``gpus`` more fit under ``limit`` GPUs with ``out`` out; a limit of one node or more
    always admits the first take-out, whatever its size (a node larger than the average
    would else be held by a one-node limit for ever)."""
    return out + gpus <= limit or (out == 0 and node_limit >= 1)


def _take_out_gpus(
    spec: NodeAcceptancePolicySpec,
    counts: QuarantineLimitCounts,
    ceiling: int | str,
    *,
    new_take_out: bool,
) -> TakeOutDecision:
    """:func:`take_out_allowed` in GPUs: the standing limit and the rate turned into GPUs
    (:func:`gpu_limit`); the operator's ceiling in nodes."""
    matched, matched_gpus, gpus = counts.matched, counts.matched_gpus or 0, counts.asked_gpus or 0
    nodes = standing_limit(spec, matched, ceiling)
    standing = gpu_limit(nodes, matched, matched_gpus)
    out = counts.unavailable_gpus or 0
    if not _fits(out, gpus, standing, nodes):
        return TakeOutDecision(
            False,
            f"maxQuarantined={spec.max_quarantined}: {out} GPU(s) of limit {standing} out of "
            f"service, {gpus} more asked",
        )
    fleet = _fleet_ceiling(counts, ceiling)
    if not fleet.allowed:
        return fleet
    if new_take_out:
        rate_nodes = rate_limit(spec, matched, ceiling)
        rate = gpu_limit(rate_nodes, matched, matched_gpus)
        recent = counts.taken_out_recently_gpus or 0
        asked = gpus if counts.asked_recent_gpus is None else counts.asked_recent_gpus
        if not _fits(recent, asked, rate, rate_nodes):
            window = spec.quarantine_rate.window_seconds
            return TakeOutDecision(
                False,
                f"quarantineRate={spec.quarantine_rate.max_per_window}/{window}s: {recent} "
                f"GPU(s) of limit {rate} taken out in the last {window}s, {asked} more asked",
            )
    return TakeOutDecision(True)
