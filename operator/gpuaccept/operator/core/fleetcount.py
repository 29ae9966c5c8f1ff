"""The fleet tally kept incrementally, pure: :func:`~.fleet.tally` without a snapshot.

:class:`FleetCount` is told every change of a node's labels, a NodeAcceptance's
status and the policy list, and answers what :func:`~.fleet.tally` answers
for a snapshot of the same objects (``tests/operator/core/test_fleetcount.py``
checks the two against each other). A node or NodeAcceptance change costs
O(number of policies); the quarantine limit's counts for one node are O(1),
with no copy of the quarantined set. A change of the policy list re-matches
only the nodes the changed policies match, before or after (an index of the
nodes by label finds them): a policy that selects no node costs no node's
matching (issue 42 item 10: 2,000 empty policies re-matched every node per
policy, O(policies squared times nodes)).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuaccept.contracts.api import PENDING_TAINT_KEY
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.operator.core.capacity import (
    HELD_ACCEPT,
    HELD_QUARANTINE,
    REASON_QUARANTINE_LIMIT,
    counted_out,
    gpus_out,
    lingering,
    out_of_service,
    window_gpus,
)
from gpuaccept.operator.core.fleet import (
    PolicyTally,
    matching_policies,
    phase_counts,
)
from gpuaccept.operator.core.model import PolicyView, QuarantineLimitCounts


@dataclass(frozen=True)
class _Counted:
    """What a NodeAcceptance adds to its policy's counts."""

    policy: str
    phase: Phase
    held_by_limit: bool
    out: bool  # counted as a node out (capacity.counted_out), not quarantined
    taken_out: datetime | None
    held_action: str | None = None
    gpus_out: int = 0  # of its GPUs, out of service because of gpuaccept (capacity.gpus_out)
    window_gpus: int = 0  # of its GPUs, what its last take-out counts (capacity.window_gpus)


def _counted(status: NodeAcceptanceStatus, node_gated: bool, node_gpus: int = 0) -> _Counted | None:
    if not status.policy:
        return None
    held = status.reason == REASON_QUARANTINE_LIMIT
    whole = status.phase == Phase.QUARANTINED or (
        out_of_service(status) or lingering(status, node_gated)
    )
    return _Counted(
        status.policy,
        status.phase,
        held,
        counted_out(status, node_gated),
        status.taken_out_time,
        status.held_action,
        node_gpus if whole else gpus_out(status, node_gpus),
        window_gpus(status, node_gpus),
    )


class FleetCount:
    """Every policy's :class:`~.fleet.PolicyTally`, kept in step with each change."""

    def __init__(self) -> None:
        self._policies: tuple[PolicyView, ...] = ()
        self._labels: dict[str, Mapping[str, str]] = {}
        self._matching: dict[str, tuple[str, ...]] = {}  # node -> the policies it matches
        self._members: defaultdict[str, set[str]] = defaultdict(set)  # policy -> its nodes
        self._by_label: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        self._affected: set[str] = set()  # nodes a policy change touched, not yet taken
        self.nodes_matched = 0  # work: each node matched against the policies, all told
        self._matched: Counter[str] = Counter()
        self._conflicts: defaultdict[str, set[str]] = defaultdict(set)
        self._counted: dict[str, _Counted] = {}  # NodeAcceptance name -> its contribution
        self._statuses: dict[str, NodeAcceptanceStatus] = {}  # to count again on a taint
        self._gated: set[str] = set()  # nodes with a gpuaccept NoSchedule/NoExecute taint
        self._phases: defaultdict[str, Counter[Phase]] = defaultdict(Counter)
        self._held_actions: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._quarantined: defaultdict[str, set[str]] = defaultdict(set)
        self._held: defaultdict[str, set[str]] = defaultdict(set)
        self._out: defaultdict[str, set[str]] = defaultdict(set)
        # The fleet, for the operator's ceiling: how many nodes some policy matches, and
        # every NodeAcceptance out of service because of gpuaccept, under any policy.
        self._fleet_matched = 0
        self._unavailable: set[str] = set()
        # Per policy, (when taken out of service, name), sorted: the rate's window.
        self._taken_out: defaultdict[str, list[tuple[datetime, str]]] = defaultdict(list)
        # Nodes that carry a taint (its keys) and when each registered; the pending keys
        # of the policies; the nodes under a pending key that no policy matches.
        self._taints: dict[str, tuple[frozenset[str], datetime | None]] = {}
        self._pending_keys: frozenset[str] = frozenset({PENDING_TAINT_KEY})
        self._unmatched: dict[str, datetime | None] = {}
        # Lost capacity in GPUs (issue 40): each node's GPUs (capacity.node_gpu_count; 0:
        # unknown), those counted in its policies' sums, per policy the GPUs of its nodes,
        # how many of them are of unknown size (then its limit counts nodes), and per
        # policy the GPUs out of service by NodeAcceptance.
        self._node_gpus: dict[str, int] = {}
        self._added_gpus: dict[str, int] = {}
        self._matched_gpus: Counter[str] = Counter()
        self._unknown_gpus: Counter[str] = Counter()
        self._gpus_out: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self._gpus_out_total: Counter[str] = Counter()

    # ------------------------------------------------------------------ changes
    def set_policies(self, policies: Iterable[PolicyView]) -> None:
        """The current policies; only the nodes a changed policy matches (before or
        after the change) are matched again, and kept for :meth:`take_affected`."""
        policies = tuple(policies)
        if policies == self._policies:
            return
        old = {p.name: p for p in self._policies}
        new = {p.name: p for p in policies}
        affected: set[str] = set()
        for name in old.keys() | new.keys():
            before, after = old.get(name), new.get(name)
            if before is after or before == after:
                continue
            affected |= self._members.get(name, set())
            affected |= self._quarantined.get(name, set()) | self._held.get(name, set())
            affected |= self._out.get(name, set())
            if after is not None:
                affected |= self._candidates(after)
        self._policies = policies
        pending_keys = frozenset(
            {PENDING_TAINT_KEY, *(p.spec.pending_taint_key for p in policies if p.spec)}
        )
        if pending_keys != self._pending_keys:
            self._pending_keys = pending_keys
            for name in self._labels:
                self._note_unmatched(name)
        for name in affected:
            labels = self._labels.get(name)
            if labels is not None:
                self._unmatch(name)
                self._add_node(name, labels)
        for gone in old.keys() - new.keys():
            self._members.pop(gone, None)
        self._affected |= affected

    def take_affected(self) -> set[str]:
        """The nodes (and NodeAcceptances) a policy change touched since the last call:
        the ones to reconcile again."""
        affected, self._affected = self._affected, set()
        return affected

    def _candidates(self, policy: PolicyView) -> set[str]:
        """The nodes ``policy``'s selector may match: those with its rarest label."""
        if policy.spec is None:
            return set()
        holders = sorted(
            (len(nodes), pair)
            for pair in policy.spec.node_selector.items()
            for nodes in [self._by_label.get(pair, set())]
        )
        return set(self._by_label.get(holders[0][1], ())) if holders else set(self._labels)

    def set_node(
        self,
        name: str,
        labels: Mapping[str, str] | None,
        *,
        node_gated: bool = False,
        taint_keys: frozenset[str] = frozenset(),
        created: datetime | None = None,
    ) -> None:
        """A node's labels now (None: the node is gone), whether it carries a
        gpuaccept NoSchedule/NoExecute taint (capacity.gated), the keys of its taints
        and when it registered (for :meth:`unmatched_pending`)."""
        self._set_taints(name, taint_keys if labels is not None else frozenset(), created)
        was_gated = name in self._gated
        if node_gated and labels is not None:
            self._gated.add(name)
        else:
            self._gated.discard(name)
        if was_gated != (name in self._gated) and name in self._statuses:
            self.set_acceptance(name, self._statuses[name])
        old = self._labels.get(name)
        if old is not None and labels is not None and old == labels:
            self._labels[name] = labels  # the newest view's dict: the old one can go
            return
        if old is not None:
            self._remove_node(name)
        if labels is None:
            return
        self._labels[name] = labels
        for pair in labels.items():
            self._by_label[pair].add(name)
        self._add_node(name, labels)

    def set_node_gpus(self, name: str, gpus: int) -> None:
        """A node's GPUs now (capacity.node_gpu_count; 0: unknown or gone): its policies'
        GPU sums and its NodeAcceptance's GPUs out follow. Told before :meth:`set_node`."""
        if self._node_gpus.get(name, 0) == gpus:
            return
        if gpus:
            self._node_gpus[name] = gpus
        else:
            self._node_gpus.pop(name, None)
        labels = self._labels.get(name)
        if labels is not None:
            self._unmatch(name)
            self._add_node(name, labels)
        if name in self._statuses:
            self.set_acceptance(name, self._statuses[name])

    def set_acceptance(self, name: str, status: NodeAcceptanceStatus | None) -> None:
        """A NodeAcceptance's status now (None: it is gone)."""
        if status is None:
            self._statuses.pop(name, None)
        else:
            self._statuses[name] = status
        new = (
            _counted(status, name in self._gated, self._node_gpus.get(name, 0))
            if status is not None
            else None
        )
        old = self._counted.get(name)
        if old == new:
            return
        if old is not None:
            del self._counted[name]
            self._count(name, old, -1)
        if new is not None:
            self._counted[name] = new
            self._count(name, new, +1)

    def _set_taints(self, name: str, keys: frozenset[str], created: datetime | None) -> None:
        if keys:
            self._taints[name] = (keys, created)
        else:
            self._taints.pop(name, None)
        if name in self._matching:
            self._note_unmatched(name)

    def _note_unmatched(self, name: str) -> None:
        keys, created = self._taints.get(name, (frozenset(), None))
        if not self._matching.get(name) and keys & self._pending_keys:
            self._unmatched[name] = created
        else:
            self._unmatched.pop(name, None)

    def _add_node(self, name: str, labels: Mapping[str, str]) -> None:
        self.nodes_matched += 1
        matching = tuple(p.name for p in matching_policies(self._policies, labels))
        self._matching[name] = matching
        self._fleet_matched += bool(matching)
        self._note_unmatched(name)
        gpus = self._added_gpus[name] = self._node_gpus.get(name, 0)
        for policy in matching:
            self._matched_gpus[policy] += gpus
            self._unknown_gpus[policy] += gpus == 0
            self._matched[policy] += 1
            self._members[policy].add(name)
            if len(matching) > 1:
                self._conflicts[policy].add(name)

    def _unmatch(self, name: str) -> None:
        matching = self._matching.pop(name, ())
        self._fleet_matched -= bool(matching)
        gpus = self._added_gpus.pop(name, 0)
        for policy in matching:
            self._matched_gpus[policy] -= gpus
            self._unknown_gpus[policy] -= gpus == 0
            self._matched[policy] -= 1
            self._members[policy].discard(name)
            self._conflicts[policy].discard(name)

    def _remove_node(self, name: str) -> None:
        labels = self._labels.pop(name)
        for pair in labels.items():
            self._by_label[pair].discard(name)
            if not self._by_label[pair]:
                del self._by_label[pair]
        self._unmatch(name)
        self._unmatched.pop(name, None)

    def _count(self, name: str, counted: _Counted, step: int) -> None:
        policy = counted.policy
        self._phases[policy][counted.phase] += step
        if counted.held_action:
            self._held_actions[policy][counted.held_action] += step
        self._gpus_out_total[policy] += step * counted.gpus_out
        if counted.gpus_out and step > 0:
            self._gpus_out[policy][name] = counted.gpus_out
        elif counted.gpus_out:
            self._gpus_out[policy].pop(name, None)
        for members, member in (
            (self._quarantined[policy], counted.phase == Phase.QUARANTINED),
            (self._held[policy], counted.held_by_limit),
            (self._out[policy], counted.out),
            (self._unavailable, counted.out or counted.phase == Phase.QUARANTINED),
        ):
            if not member:
                continue
            if step > 0:
                members.add(name)
            else:
                members.discard(name)
        if counted.taken_out is not None:
            times, entry = self._taken_out[policy], (counted.taken_out, name)
            if step > 0:
                insort(times, entry)
            else:
                at = bisect_left(times, entry)
                if at < len(times) and times[at] == entry:
                    del times[at]

    # ------------------------------------------------------------------ answers
    def unmatched_pending(self) -> dict[str, datetime | None]:
        """The nodes that carry a pending taint key (the default's or a policy's) and
        that no policy matches, with when each registered; O(such nodes)."""
        return dict(self._unmatched)

    def limit_counts(
        self, policy: str, node: str, now: datetime | None = None
    ) -> QuarantineLimitCounts:
        """The quarantine limit's counts for ``node`` under ``policy`` (itself excluded)
        at ``now`` (None: the rate's window is not counted); O(log n)."""
        quarantined = self._quarantined.get(policy, set())
        out = self._out.get(policy, set())
        recent = 0
        times = self._taken_out.get(policy)
        if now is not None and times:
            since = now - timedelta(seconds=self._window(policy))
            recent = len(times) - bisect_left(times, (since, ""))
            mine = self._counted.get(node)
            if mine is not None and mine.policy == policy and mine.taken_out is not None:
                recent -= mine.taken_out >= since
        return QuarantineLimitCounts(
            quarantined=len(quarantined) - (node in quarantined),
            matched=self._matched.get(policy, 0),
            out_of_service=len(out) - (node in out),
            taken_out_recently=recent,
            fleet_matched=self._fleet_matched,
            fleet_unavailable=len(self._unavailable) - (node in self._unavailable),
            **self._gpu_counts(policy, node, now),
        )

    def _gpu_counts(self, policy: str, node: str, now: datetime | None) -> dict[str, int]:
        """The limit's counts in GPUs for ``node`` (itself excluded): none where a node of
        the policy is of unknown size (its limit counts nodes); O(nodes taken out within
        the window)."""
        if not self._matched.get(policy, 0) or self._unknown_gpus.get(policy, 0):
            return {}
        out = self._gpus_out.get(policy, {})
        recent = 0
        times = self._taken_out.get(policy)
        if now is not None and times:
            since = now - timedelta(seconds=self._window(policy))
            at = bisect_left(times, (since, ""))
            recent = sum(self._counted[n].window_gpus for _, n in times[at:] if n != node)
        return {
            "matched_gpus": self._matched_gpus[policy],
            "unavailable_gpus": self._gpus_out_total[policy] - out.get(node, 0),
            "taken_out_recently_gpus": recent,
        }

    def _window(self, policy: str) -> int:
        spec = next((p.spec for p in self._policies if p.name == policy), None)
        return spec.quarantine_rate.window_seconds if spec is not None else 300

    def tally(self) -> dict[str, PolicyTally]:
        """What :func:`~.fleet.tally` gives for a snapshot of the objects told so far
        (conflicts and held nodes sorted by name)."""
        out: dict[str, PolicyTally] = {}
        unavailable = frozenset(self._unavailable)
        for policy in self._policies:
            name, spec = policy.name, policy.spec
            counts = self._phases.get(name, Counter())
            matched = self._matched.get(name, 0)
            out[name] = PolicyTally(
                matched=matched,
                conflicts=tuple(sorted(self._conflicts.get(name, ()))),
                counts=phase_counts(counts),
                quarantined=frozenset(self._quarantined.get(name, ())),
                held_by_limit=tuple(sorted(self._held.get(name, ()))),
                limit=spec.max_quarantined_count(matched) if spec is not None else 0,
                out_of_service=frozenset(self._out.get(name, ())),
                taken_out=tuple(self._taken_out.get(name, ())),
                window_seconds=self._window(name),
                would_accept=self._held_actions[name][HELD_ACCEPT],
                would_quarantine=self._held_actions[name][HELD_QUARANTINE],
                fleet_matched=self._fleet_matched,
                fleet_unavailable=unavailable,
                matched_gpus=(
                    self._matched_gpus[name]
                    if matched and not self._unknown_gpus.get(name, 0)
                    else None
                ),
                gpus_out=dict(self._gpus_out.get(name, {})),
                taken_out_gpus={
                    n: self._counted[n].window_gpus for _, n in self._taken_out.get(name, ())
                },
            )
        return out
