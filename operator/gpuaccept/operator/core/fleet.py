"""Fleet rules, pure: which policy governs a node, the quarantine limit, and
each policy's counts, conflicts, status and conditions.

Everything here is a function of a :class:`FleetSnapshot` (plain views, no
cache, no API); the runtime takes the snapshot from its cache and writes what
these functions return. In the style of cluster-api's
``isAllowedRemediation``: :func:`quarantine_allowed` is the one place the
``maxQuarantined`` limit is decided, for a node's verdict and for releasing
nodes the limit held back; each tally carries the fleet's counts too (every
policy's nodes), for the operator's fleet-wide ceiling.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import (
    Condition,
    ConditionStatus,
    NodeAcceptancePolicyStatus,
    Phase,
    PhaseCounts,
)
from gpuaccept.operator.core.capacity import (
    HELD_ACCEPT,
    HELD_QUARANTINE,
    REASON_QUARANTINE_LIMIT,
    counted_out,
    gated,
    gpus_out,
    lingering,
    node_gpu_count,
    out_of_service,
    take_out_allowed,
    window_gpus,
)
from gpuaccept.operator.core.model import NAView, NodeView, PolicyView, QuarantineLimitCounts


def phase_counts(counts: Mapping[Phase, int]) -> PhaseCounts:
    """The policy status's counts from a count per phase (a phase not in it: 0)."""
    return PhaseCounts(
        pending=counts.get(Phase.PENDING, 0),
        probing=counts.get(Phase.PROBING, 0),
        accepted=counts.get(Phase.ACCEPTED, 0),
        quarantined=counts.get(Phase.QUARANTINED, 0),
        held=counts.get(Phase.HELD, 0),
        stalled=counts.get(Phase.STALLED, 0),
        fabric=counts.get(Phase.FABRIC, 0),
        waiting=counts.get(Phase.WAITING, 0),
        released=counts.get(Phase.RELEASED, 0),
    )


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def matching_policies(
    policies: Iterable[PolicyView], labels: Mapping[str, str]
) -> tuple[PolicyView, ...]:
    """The valid policies whose selector matches ``labels`` (one governs; more conflict).

    A control-plane node is matched only by a policy that opts in
    (``includeControlPlane``), whatever its selector says.
    """
    return tuple(
        p
        for p in policies
        if p.spec is not None
        and selector_matches(p.spec.node_selector, labels)
        and p.spec.governs_role(labels)
    )


def quarantine_allowed(
    spec: NodeAcceptancePolicySpec,
    counts: QuarantineLimitCounts,
    *,
    already_quarantined: bool = False,
    ceiling: int | str = "100%",
    new_take_out: bool = True,
) -> bool:
    """May one more node be quarantined under ``spec``? ``counts`` exclude that node.

    A node already quarantined under this policy takes no new slot. The rule is
    :func:`~gpuaccept.operator.core.capacity.take_out_allowed`'s.
    """
    decision = take_out_allowed(
        spec, counts, ceiling=ceiling, already_out=already_quarantined, new_take_out=new_take_out
    )
    return decision.allowed


@dataclass(frozen=True)
class FleetSnapshot:
    policies: tuple[PolicyView, ...] = ()
    nodes: tuple[NodeView, ...] = ()
    acceptances: tuple[NAView, ...] = ()


@dataclass(frozen=True)
class PolicyTally:
    """One policy's share of the fleet."""

    matched: int = 0  # nodes its selector matches, conflicting ones included
    conflicts: tuple[str, ...] = ()  # matched nodes that another policy matches too
    counts: PhaseCounts = field(default_factory=PhaseCounts)
    quarantined: frozenset[str] = frozenset()
    held_by_limit: tuple[str, ...] = ()  # verdicts and new rounds the limit holds back
    limit: int = 0  # maxQuarantined as a node count; 0 for an invalid spec
    # Counted as a node out but not quarantined: out of service because of gpuaccept, or
    # with a GPU fenced (capacity.counted_out).
    out_of_service: frozenset[str] = frozenset()
    # When gpuaccept last took each node out of service, oldest first.
    taken_out: tuple[tuple[datetime, str], ...] = ()
    window_seconds: int = 300  # quarantineRate.windowSeconds
    # Nodes whose held action is Accept / Quarantine (a dry run's answer; the limit's).
    would_accept: int = 0
    would_quarantine: int = 0
    # The whole fleet, for the operator's ceiling: the nodes any policy matches (None:
    # this policy's are the fleet) and every node out of service because of gpuaccept
    # under any policy.
    fleet_matched: int | None = None
    fleet_unavailable: frozenset[str] = frozenset()
    # Lost capacity in GPUs (issue 40): the GPUs of its nodes (None: a node of unknown
    # size, capacity.node_gpu_count 0: the limit counts nodes), each NodeAcceptance's GPUs
    # out of service (capacity.gpus_out; nonzero ones) and the GPUs of each node in
    # ``taken_out``.
    matched_gpus: int | None = None
    gpus_out: Mapping[str, int] = field(default_factory=dict)
    taken_out_gpus: Mapping[str, int] = field(default_factory=dict)

    def limit_counts(self, node: str, now: datetime | None = None) -> QuarantineLimitCounts:
        """The limit's counts as seen by ``node`` (itself excluded) at ``now`` (None:
        the rate's window is not counted)."""
        recent = recent_gpus = 0
        if now is not None:
            since = now - timedelta(seconds=self.window_seconds)
            window = [name for t, name in self.taken_out if t >= since and name != node]
            recent = len(window)
            recent_gpus = sum(self.taken_out_gpus.get(name, 0) for name in window)
        gpus = (
            {}
            if self.matched_gpus is None
            else {
                "matched_gpus": self.matched_gpus,
                "unavailable_gpus": sum(self.gpus_out.values()) - self.gpus_out.get(node, 0),
                "taken_out_recently_gpus": recent_gpus,
            }
        )
        return QuarantineLimitCounts(
            quarantined=len(self.quarantined - {node}),
            matched=self.matched,
            out_of_service=len(self.out_of_service - {node}),
            taken_out_recently=recent,
            fleet_matched=self.fleet_matched,
            fleet_unavailable=(
                None
                if self.fleet_matched is None
                else len(self.fleet_unavailable) - (node in self.fleet_unavailable)
            ),
            **gpus,
        )


def _matched(
    snapshot: FleetSnapshot, policies: list[PolicyView]
) -> tuple[Counter[str], dict[str, list[str]], int]:
    """Per policy: the nodes it matches, and those another policy matches too; and
    the nodes any policy matches (the fleet)."""
    matched: Counter[str] = Counter()
    conflicts: dict[str, list[str]] = {p.name: [] for p in policies}
    fleet = 0
    for node in snapshot.nodes:
        matching = matching_policies(snapshot.policies, node.labels)
        fleet += bool(matching)
        for policy in matching:
            if policy.name in conflicts:
                matched[policy.name] += 1
                if len(matching) > 1:
                    conflicts[policy.name].append(node.name)
    return matched, conflicts, fleet


def fleet_unavailable(snapshot: FleetSnapshot) -> frozenset[str]:
    """Every node out of service because of gpuaccept, under any policy (a
    NodeAcceptance that names one): the operator's ceiling counts them all."""
    gates = {node.name for node in snapshot.nodes if gated(node)}
    return frozenset(
        na.name
        for na in snapshot.acceptances
        if na.status.policy
        and (na.status.phase == Phase.QUARANTINED or counted_out(na.status, na.name in gates))
    )


@dataclass
class _Decided:
    """Per policy: its NodeAcceptances by phase and their part in the limit."""

    phases: Counter[Phase] = field(default_factory=Counter)
    quarantined: set[str] = field(default_factory=set)
    held: list[str] = field(default_factory=list)
    out: set[str] = field(default_factory=set)
    taken_out: list[tuple[datetime, str]] = field(default_factory=list)
    held_actions: Counter[str] = field(default_factory=Counter)


def _decided(snapshot: FleetSnapshot, policies: list[PolicyView]) -> dict[str, _Decided]:
    """Per policy: its NodeAcceptances by phase, the quarantined ones, those held back
    by the limit, the others out of service, and when each was taken out."""
    out = {p.name: _Decided() for p in policies}
    gates = {node.name for node in snapshot.nodes if gated(node)}
    for na in snapshot.acceptances:
        st = na.status
        share = out.get(st.policy or "")
        if share is None:
            continue
        share.phases[st.phase] += 1
        if st.phase == Phase.QUARANTINED:
            share.quarantined.add(na.name)
        elif counted_out(st, na.name in gates):
            share.out.add(na.name)
        if st.reason == REASON_QUARANTINE_LIMIT:
            share.held.append(na.name)
        if st.taken_out_time is not None:
            share.taken_out.append((st.taken_out_time, na.name))
        if st.held_action:
            share.held_actions[st.held_action] += 1
    return out


@dataclass
class _GpuShare:
    """Per policy, lost capacity in GPUs (see :class:`PolicyTally`)."""

    matched: int = 0
    unknown: int = 0  # matched nodes of unknown size
    out: dict[str, int] = field(default_factory=dict)
    taken_out: dict[str, int] = field(default_factory=dict)


def _gpu_shares(snapshot: FleetSnapshot, policies: list[PolicyView]) -> dict[str, _GpuShare]:
    """Per policy: its nodes' GPUs, and each NodeAcceptance's GPUs out of service."""
    shares = {p.name: _GpuShare() for p in policies}
    node_gpus = {node.name: node_gpu_count(node) for node in snapshot.nodes}
    for node in snapshot.nodes:
        for policy in matching_policies(snapshot.policies, node.labels):
            share = shares.get(policy.name)
            if share is not None:
                share.matched += node_gpus[node.name]
                share.unknown += node_gpus[node.name] == 0
    _gpus_out_of_service(snapshot, shares, node_gpus)
    return shares


def _gpus_out_of_service(
    snapshot: FleetSnapshot, shares: dict[str, _GpuShare], node_gpus: Mapping[str, int]
) -> None:
    """Each policy's NodeAcceptances' GPUs out of service, and those of the nodes taken out."""
    gates = {node.name for node in snapshot.nodes if gated(node)}
    for na in snapshot.acceptances:
        st, gpus = na.status, node_gpus.get(na.name, 0)
        share = shares.get(st.policy or "")
        if share is None:
            continue
        whole = (
            st.phase == Phase.QUARANTINED or out_of_service(st) or lingering(st, na.name in gates)
        )
        out = gpus if whole else gpus_out(st, gpus)
        if out:
            share.out[na.name] = out
        if st.taken_out_time is not None:
            share.taken_out[na.name] = window_gpus(st, gpus)


def tally(snapshot: FleetSnapshot, only: str | None = None) -> dict[str, PolicyTally]:
    """Every policy's (or just ``only``'s) tally, keyed by policy name."""
    policies = [p for p in snapshot.policies if only is None or p.name == only]
    matched, conflicts, fleet = _matched(snapshot, policies)
    decided = _decided(snapshot, policies)
    gpu_shares = _gpu_shares(snapshot, policies)
    unavailable = fleet_unavailable(snapshot)
    out: dict[str, PolicyTally] = {}
    for policy in policies:
        name, share = policy.name, decided[policy.name]
        spec = policy.spec
        out[name] = PolicyTally(
            matched=matched[name],
            conflicts=tuple(conflicts[name]),
            counts=phase_counts(share.phases),
            quarantined=frozenset(share.quarantined),
            held_by_limit=tuple(share.held),
            limit=spec.max_quarantined_count(matched[name]) if spec is not None else 0,
            out_of_service=frozenset(share.out),
            taken_out=tuple(sorted(share.taken_out)),
            window_seconds=spec.quarantine_rate.window_seconds if spec is not None else 300,
            would_accept=share.held_actions[HELD_ACCEPT],
            would_quarantine=share.held_actions[HELD_QUARANTINE],
            fleet_matched=fleet,
            fleet_unavailable=unavailable,
            matched_gpus=(
                gpu_shares[name].matched if matched[name] and not gpu_shares[name].unknown else None
            ),
            gpus_out=gpu_shares[name].out,
            taken_out_gpus=gpu_shares[name].taken_out,
        )
    return out


def unmatched_past_grace(
    candidates: Mapping[str, datetime | None], now: datetime, grace_seconds: float
) -> tuple[str, ...]:
    """The nodes under a pending taint that no policy matches (``candidates``: each
    with when it registered) that registered at least ``grace_seconds`` ago: a new
    node's labels (node-feature-discovery's, GPU feature discovery's) may still be
    on their way before that. A node without a registration time counts at once."""
    since = now - timedelta(seconds=grace_seconds)
    return tuple(
        sorted(name for name, created in candidates.items() if created is None or created <= since)
    )


def held_to_release(
    policy: PolicyView, share: PolicyTally, ceiling: int | str = "100%"
) -> tuple[str, ...]:
    """Nodes held by the limit that may now go through (each re-plans under the lock).
    ``ceiling``: the operator's; without it a node the fleet's ceiling holds is woken
    to re-plan, and stays held."""
    if policy.spec is None or not share.held_by_limit:
        return ()
    # As one of them sees it (itself excluded); each re-plans with its exact counts.
    room = share.limit_counts(share.held_by_limit[0])
    allowed = quarantine_allowed(policy.spec, room, ceiling=ceiling)
    return share.held_by_limit if allowed else ()


def _condition(
    ctype: str,
    state: tuple[bool, str, str],
    *,
    previous: Mapping[str, Any],
    now: datetime,
    generation: int,
) -> Condition:
    """A condition whose lastTransitionTime moves only when its status changes.

    ``state``: (ok, reason, message).
    """
    ok, reason, message = state
    status = ConditionStatus.TRUE if ok else ConditionStatus.FALSE
    stamp = now
    if previous.get("status") == status.value and previous.get("lastTransitionTime"):
        stamp = datetime.fromisoformat(str(previous["lastTransitionTime"]).replace("Z", "+00:00"))
    return Condition(
        type=ctype,
        status=status,
        reason=reason,
        message=message[:1000],
        last_transition_time=stamp,
        observed_generation=generation,
    )


CONTROL_PLANE_NOT_ALLOWED = (
    "; includeControlPlane has no effect: this operator leaves control-plane nodes "
    "alone (--allow-control-plane-nodes, chart operator.allowControlPlaneNodes, is off)"
)


def _ready(
    policy: PolicyView, share: PolicyTally, *, allow_control_plane: bool
) -> tuple[bool, str, str]:
    if policy.spec is None:
        return False, "InvalidSpec", policy.error or "invalid spec"
    if share.conflicts:
        return (
            False,
            "PolicyConflict",
            f"{len(share.conflicts)} node(s) match more than one policy and are left alone: "
            + ", ".join(sorted(share.conflicts)[:10]),
        )
    note = (
        CONTROL_PLANE_NOT_ALLOWED
        if policy.spec.include_control_plane and not allow_control_plane
        else ""
    )
    return True, "Reconciling", f"{share.matched} node(s) matched{note}"


def _limit_reached_condition(share: PolicyTally) -> tuple[bool, str, str]:
    held = share.held_by_limit
    if held:
        return (
            True,
            "QuarantineLimitReached",
            f"{len(held)} node(s) held back: taking them out of service would exceed "
            f"maxQuarantined (limit {share.limit}, "
            f"{len(share.quarantined) + len(share.out_of_service)} out of service), "
            "quarantineRate or the operator's fleet-wide ceiling (each node's message "
            "says which); raise them (or wait out the window) to let them through",
        )
    return False, "BelowLimit", f"quarantine limit {share.limit}"


def policy_status(
    policy: PolicyView,
    share: PolicyTally,
    old: Mapping[str, Any],
    now: datetime,
    *,
    allow_control_plane: bool = False,
) -> NodeAcceptancePolicyStatus:
    """The policy's status: counts, matched nodes, and its Ready and BreakerOpen conditions.

    ``old`` is the status as read (wire form), for the conditions' transition times.
    ``allow_control_plane``: the operator's --allow-control-plane-nodes (without it a
    policy's includeControlPlane reaches nothing, and Ready's message says so).
    """
    previous = {c.get("type"): c for c in old.get("conditions") or ()}
    conditions = []
    for ctype, state in (
        ("Ready", _ready(policy, share, allow_control_plane=allow_control_plane)),
        ("BreakerOpen", _limit_reached_condition(share)),
    ):
        conditions.append(
            _condition(
                ctype,
                state,
                previous=previous.get(ctype) or {},
                now=now,
                generation=policy.generation,
            )
        )
    return NodeAcceptancePolicyStatus(
        counts=share.counts,
        matched_nodes=share.matched,
        breaker_open=bool(share.held_by_limit),
        conditions=conditions,
        observed_generation=policy.generation,
        out_of_service=len(share.quarantined) + len(share.out_of_service),
        held_back=len(share.held_by_limit),
        would_accept=share.would_accept,
        would_quarantine=share.would_quarantine,
    )


def same_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Equal but for the conditions' transition times (no write needed)."""

    def strip(status: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(status)
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in status.get("conditions") or ()
        ]
        return out

    return strip(old) == strip(new)


def quarantine_limit_just_reached(old: Mapping[str, Any], new: NodeAcceptancePolicyStatus) -> bool:
    """The limit started holding nodes back: worth a Warning Event on the policy."""
    return new.breaker_open and not old.get("breakerOpen")
