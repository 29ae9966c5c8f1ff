"""The fabric loop (runtime): for each policy with ``fabric.enabled``, one pass of
:func:`~gpuaccept.operator.core.fabric.policypass.plan_fabric_pass` over the nodes
that take part in its fabric tests, then its writes in order (docs/fabric.md).

A pass runs when something it reads changed (a fabric pod or a NodeAcceptance
with a fabric test: :meth:`FabricLoop.poke`, O(1) per event), at most every
:data:`MIN_GAP_SECONDS`, and at the latest when its plan asks to be woken (a
deadline) or every ``interval`` seconds. It reads the policy's NodeAcceptances
that have a fabric test, which the cache keeps as it counts (O(members) per
pass). Its verdicts are handed to the nodes' own reconciles
(:meth:`FabricLoop.verdict`), which record them under dryRun and the quarantine
limit like any verdict. Everything a pass reads is in the API server
(pair results in the statuses, running pairs as pods), so a restarted operator
picks up where the last one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial

from gpuaccept.operator.actionrunner import ActionRunner, RunResult
from gpuaccept.operator.backgroundloop import run_loop
from gpuaccept.operator.cache import Cache
from gpuaccept.operator.core.fabric.membership import is_member
from gpuaccept.operator.core.fabric.policypass import (
    FabricMember,
    FabricSnapshot,
    plan_fabric_pass,
)
from gpuaccept.operator.core.gpupublishing import node_gpus
from gpuaccept.operator.core.model import (
    Action,
    CreateProbePod,
    DeleteProbePod,
    FabricVerdict,
    NodeSnapshot,
    OperatorConfig,
    PatchNAStatus,
    PolicyView,
)
from gpuaccept.operator.executor import api_message
from gpuaccept.operator.faultlog import FailureLog, log_failure, log_recovery
from gpuaccept.operator.views import PACKED_FIELDS

log = logging.getLogger("gpuaccept.operator")

MIN_GAP_SECONDS = 0.5


@dataclass(frozen=True)
class _Given:
    verdict: FabricVerdict
    waiting_since: datetime | None  # the wait it was given for: a new wait gets a new one


class FabricLoop:
    def __init__(
        self,
        cache: Cache,
        runner: ActionRunner,
        config: OperatorConfig,
        *,
        wake: Callable[[str], None],
    ) -> None:
        self.cache = cache
        self.runner = runner  # on an executor of its own (see Controller)
        self.config = config
        self.wake = wake
        self.leading = runner.leading
        self._verdicts: dict[str, _Given] = {}
        self._pair_key = secrets.token_bytes(32)  # each new pair's nonce is derived from it
        self._nonce_seed = secrets.token_hex(32)  # one a process: core/creationintent.py
        self._poked = asyncio.Event()
        # A pass created pods: the next pass runs at once and records their UIDs, so
        # a crash in between (which would leave pods it cannot tell from a squatter's)
        # has the shortest window.
        self._created = False
        self._timeout = 0.0  # seconds the next turn waits for a poke at most
        self.failures = FailureLog("fabric pass")
        self._policy_failures: dict[str, FailureLog] = {}

    # ------------------------------------------------------------------ for the controller
    def poke(self) -> None:
        """Something a pass reads changed (O(1): the pass itself runs later)."""
        self._poked.set()

    def verdict(self, node: str, waiting_since: datetime | None) -> FabricVerdict | None:
        """The fabric verdict of ``node`` for its current wait, if a pass gave one."""
        given = self._verdicts.get(node)
        if given is None or given.waiting_since != waiting_since:
            return None
        return given.verdict

    # ------------------------------------------------------------------ loop
    async def run(self, interval: float) -> None:
        self._timeout = interval
        await run_loop(
            self.cache.synced,
            self.failures,
            self.run_once,
            self._pause,
            wait_turn=partial(self._turn, interval),
        )

    async def _turn(self, interval: float) -> bool:
        """A poke, or ``interval`` seconds (less when a plan asked to be woken
        sooner); then a pass if this replica leads."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._poked.wait(), timeout=self._timeout)
        self._poked.clear()
        self._timeout = interval
        return self.leading()

    async def _pause(self, wake: float | None) -> None:
        if wake is not None:  # the pass's plan asks to be woken by then
            self._timeout = max(min(self._timeout, wake), MIN_GAP_SECONDS)
        if self._created:  # record the new pods' UIDs at once (core/podidentity.py)
            self._created = False
            self._poked.set()
            return
        await asyncio.sleep(MIN_GAP_SECONDS)

    def _fabric_policies(self) -> list[PolicyView]:
        return [
            entry.view
            for entry in self.cache.policies()
            if entry.view.spec is not None and entry.view.spec.fabric.enabled
        ]

    def observe(self, policy: PolicyView, now: datetime) -> FabricSnapshot:
        """The nodes of ``policy`` that take part: waiting (phase Fabric), and decided
        ones that have fabric results; with ``idleAcceptedPartners`` every decided
        one (the only case that walks the policy's NodeAcceptances); each with how it
        publishes its GPUs (its ResourceSlices)."""
        spec = policy.spec
        assert spec is not None
        self.cache.settle()
        names: list[str] = self.cache.fabric_names(policy.name)
        if spec.fabric.idle_accepted_partners:
            names = sorted(na.name for na in self.cache.acceptances())
        members: list[FabricMember] = []
        for name in names:
            na = self.cache.na(name)
            if na is None or na.status.policy != policy.name:
                continue
            node = self.cache.node(name)
            # The slim view (its packed fields not parsed: views.PACKED_FIELDS): a pass
            # reads none of them and changes none; the few statuses it writes get them
            # back, as stored, in :meth:`with_evidence`.
            if node is not None and is_member(na.status, policy.name, spec, node.labels):
                slices = self.cache.resource_slices(name)
                gpus = node_gpus(node, slices, self.config.dra_drivers)
                members.append(FabricMember(node, na, self.cache.pods(name), gpus))
        actions = self.runner.actions
        names = [m.node.name for m in members]
        return FabricSnapshot(
            policy,
            spec,
            tuple(members),
            now,
            self.config,
            created_pods={n: actions.created_pods(n) for n in names if n in actions.created},
            names_taken={n: actions.name_taken[n] for n in names if n in actions.name_taken},
            nonce_seed=self._nonce_seed,  # never stored: core/creationintent.py
            pair_key=self._pair_key,
        )

    def with_evidence(self, writes: tuple[tuple[str, Action], ...]) -> list[tuple[str, Action]]:
        """The pass's writes, each status write carrying the node's stored packed fields
        (the evidence, figures, conditions and in-service ledger: a status write replaces
        the status whole; the pass changed only its ``fabric``, pods on record and
        creation intents): they are parsed for the statuses written only, not per member."""
        out: list[tuple[str, Action]] = []
        for node, action in writes:
            whole = (
                self.cache.na_with_evidence(action.name)
                if isinstance(action, PatchNAStatus)
                else None
            )
            if isinstance(action, PatchNAStatus) and whole is not None:
                packed = {name: getattr(whole.status, name) for name in PACKED_FIELDS}
                status = action.status.model_copy(update=packed)
                out.append((node, replace(action, status=status)))
            else:
                out.append((node, action))
        return out

    async def run_once(self) -> float | None:
        """One pass over every fabric policy; seconds until the next one is due."""
        now = datetime.now(UTC)
        wake: float | None = None
        given: dict[str, _Given] = {}
        for policy in self._fabric_policies():
            # One policy's pass at a time: a failure (a bug, an odd object) is logged
            # and the other policies' verdicts and pairs go on.
            failures = self._policy_failures.setdefault(
                policy.name, FailureLog(f"fabric pass of policy {policy.name}")
            )
            try:
                policy_wake = await self._policy_pass(policy, now, given)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log_failure(log, failures, error, f"policy={policy.name}: {error}")
                continue
            log_recovery(log, failures)
            if policy_wake is not None:
                wake = policy_wake if wake is None else min(wake, policy_wake)
        changed = {n for n, g in given.items() if self._verdicts.get(n) != g}
        self._verdicts = given
        for node in sorted(changed):
            self.wake(node)
        return wake

    async def _policy_pass(
        self, policy: PolicyView, now: datetime, given: dict[str, _Given]
    ) -> float | None:
        observed = self.observe(policy, now)
        step = plan_fabric_pass(observed)
        waits = {m.node.name: m.na.status.fabric for m in observed.members}
        for node, verdict in step.verdicts.items():
            fabric = waits.get(node)
            given[node] = _Given(verdict, fabric.waiting_since if fabric else None)
        await self._execute(observed, self.with_evidence(step.writes))
        return step.wake_in

    async def _execute(
        self, observed: FabricSnapshot, writes: Sequence[tuple[str, Action]]
    ) -> None:
        """The pass's writes in order; a conflict or an outage ends them (the next pass
        starts again from what the API server then holds). A status the API server
        refuses (it would refuse it again) is skipped, and so are the pod deletions
        after it, which would lose a result not recorded; the pairs still start."""
        refused = False
        for node, action in writes:
            if refused and isinstance(action, DeleteProbePod):
                continue
            context = NodeSnapshot(
                node_name=node,
                now=observed.now,
                node=self.cache.node(node),
                pods=self.cache.pods(node),
                config=self.config,
            )
            ran = await self.runner.run(context, action)
            kind = type(action).__name__
            if ran.result is RunResult.DONE:
                log.info("fabric: node=%s %s", node, kind)
                self._created = self._created or isinstance(action, CreateProbePod)
            elif ran.result is RunResult.STATUS_REFUSED:
                refused = True
            elif ran.result in (RunResult.CONFLICT, RunResult.STALE_CACHE):
                self.poke()  # the next pass starts from what the API server holds
                return
            else:  # not leading; an API error (e.g. a pod refused): the next pass retries
                if ran.error is not None:
                    log.warning("fabric: node=%s %s failed: %s", node, kind, api_message(ran.error))
                return
