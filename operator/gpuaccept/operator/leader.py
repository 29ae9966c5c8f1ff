"""Leader election with a ``coordination.k8s.io/v1`` Lease (client-go's algorithm).

Every replica watches and keeps its cache warm; only the holder of the Lease
writes. Acquiring and renewing are resourceVersion-guarded updates, so two
replicas can never both hold it: one of two concurrent updates gets 409.
A holder that stops renewing loses the Lease after ``lease_duration`` seconds
as measured on the *observer's* clock (from when it last saw the record
change), so clock skew between replicas does not matter.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from gpuaccept.operator import metrics
from gpuaccept.operator.faultlog import FailureLog, log_failure, log_recovery
from gpuaccept.operator.kube import LOCK_NAMESPACE, Kube

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseClient(Protocol):
    """The three Lease calls an election makes (:class:`Kube`'s, or the lock's)."""

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def replace_lease(
        self, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class LeaseSettings:
    """Which Lease, who this replica is, and how long a hold lasts."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_period: float = 2.0


class LeaderElector:
    def __init__(
        self,
        kube: LeaseClient,
        lease: LeaseSettings,
        *,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = lease.namespace
        self.name = lease.name
        self.identity = lease.identity
        self.lease_duration = lease.lease_duration
        self.renew_period = lease.renew_period
        self.on_change = on_change
        self.is_leader = False
        self._renewed_at = 0.0  # monotonic time of our last successful renewal
        self._observed_record: tuple[str, str] | None = None
        self.holder = ""  # who held the Lease at the last look
        # The Lease as this replica's last write of it returned it (None: not held, or
        # not known): a renewal updates it directly, guarded by its resourceVersion.
        self._written: dict[str, Any] | None = None
        self._observed_at = 0.0
        # Its own thread: renewals never queue behind the workers' API calls.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease")
        self.failures = FailureLog("leader election")  # one line per kind in an outage

    @property
    def leading(self) -> bool:
        """Leader, and the last renewal is recent enough to still be valid."""
        return self.is_leader and time.monotonic() - self._renewed_at < self.lease_duration * 0.8

    def _body(self, existing: dict[str, Any] | None, transitions: int) -> dict[str, Any]:
        now = _now_micro()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "renewTime": now,
            "acquireTime": now,
            "leaseTransitions": transitions,
        }
        if existing is not None:
            old = existing.get("spec") or {}
            if old.get("holderIdentity") == self.identity and old.get("acquireTime"):
                spec["acquireTime"] = old["acquireTime"]
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        if existing is not None:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        return body

    def try_acquire_or_renew(self) -> bool:
        """One round (blocking). True when this replica holds the Lease now.

        A holder renews with one request: the update of the Lease as its own last
        write returned it, guarded by that resourceVersion (a write by anyone since
        makes it 409). Without the read before it (client-go reads first), a renewal
        costs one request, not two (issue 41). After a 409, or when not holding, the
        round reads the Lease and goes on as client-go does."""
        if self._written is not None and self._renew(self._written):
            return True
        lease = self.kube.get_lease(self.namespace, self.name)
        now = time.monotonic()
        if lease is None:
            return self._write(
                lambda: self.kube.create_lease(self.namespace, self._body(None, 0)), now
            )
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self.holder = holder
        self._observe((holder, str(spec.get("renewTime") or "")), now)
        # A record's own duration is believed up to ours only: holders renew every
        # renew_period, so a live one changes its record long before; a record written
        # once with a duration of years (a tenant's, issue 42) stops us no longer.
        duration = min(
            float(spec.get("leaseDurationSeconds") or self.lease_duration), self.lease_duration
        )
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder and holder != self.identity and now - self._observed_at < duration:
            return False  # someone else holds a live lease
        if holder != self.identity:
            transitions += 1
        body = self._body(lease, transitions)
        return self._write(lambda: self.kube.replace_lease(self.namespace, self.name, body), now)

    def _observe(self, record: tuple[str, str], now: float) -> None:
        """When the Lease's (holder, renewTime) record was first seen as it is."""
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = now

    def _write(self, write: Callable[[], dict[str, Any]], now: float) -> bool:
        """Create or replace the Lease, keeping the API server's answer for the next
        renewal; False when another replica wrote it first (409)."""
        try:
            self._written = write()
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        self._renewed_at = now
        return True

    def _renew(self, written: dict[str, Any]) -> bool:
        """The update of the Lease this replica wrote last; False after a 409 (someone
        wrote it since: the caller reads it)."""
        self._written = None  # known again only through this write's answer
        now = time.monotonic()
        transitions = int((written.get("spec") or {}).get("leaseTransitions") or 0)
        try:
            answer = self.kube.replace_lease(
                self.namespace, self.name, self._body(written, transitions)
            )
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        self._written = answer
        self.holder = self.identity
        self._renewed_at = now
        return True

    def release(self) -> None:
        """Give the Lease up on a clean shutdown, so a standby takes over at once."""
        if not self.is_leader:
            return
        self.is_leader = False
        self._written = None
        lease = self.kube.get_lease(self.namespace, self.name)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        body = self._body(lease, int((lease.get("spec") or {}).get("leaseTransitions") or 0))
        body["spec"]["holderIdentity"] = ""
        body["spec"]["leaseDurationSeconds"] = 1
        try:
            self.kube.replace_lease(self.namespace, self.name, body)
            log.info("leader election: released lease %s/%s", self.namespace, self.name)
        except ApiException as error:
            log.warning("leader election: release failed: %s", error.reason)

    async def run(self) -> None:
        while True:
            last_renewal = self._renewed_at
            try:
                leader = await asyncio.get_running_loop().run_in_executor(
                    self._executor, self.try_acquire_or_renew
                )
            except Exception as error:  # API trouble: we cannot prove we lead
                log_failure(log, self.failures, error, str(error))
                leader = self.leading
            else:
                log_recovery(log, self.failures)
            lapsed = time.monotonic() - last_renewal >= self.lease_duration * 0.8
            if leader and lapsed and self.is_leader:
                # Renewed after a gap in which ``leading`` was False: the workers
                # dropped what they took meanwhile, so it is all leader work again.
                log.info("leader election: renewed %s/%s after a gap", self.namespace, self.name)
                if self.on_change is not None:
                    self.on_change(True)
            if leader != self.is_leader:
                self.is_leader = leader
                log.info(
                    "leader election: %s lease %s/%s as %s",
                    "acquired" if leader else "lost",
                    self.namespace,
                    self.name,
                    self.identity,
                )
                if self.on_change is not None:
                    self.on_change(leader)
            await asyncio.sleep(self.renew_period)


# --------------------------------------------------------------------------- one per cluster


class _LockLeases:
    """The installation lock's Lease calls: its Lease lives in :data:`LOCK_NAMESPACE`."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.kube.get_lock_lease(name)

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.kube.create_lock_lease(body)

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.kube.replace_lock_lease(name, body)


class InstallationLock:
    """Only one installation of gpuaccept acts on a cluster.

    NodeAcceptances, policies and Nodes are cluster-scoped, so two installations
    (a canary release, a leftover one) would both act on the same nodes. Each
    installation elects its leader on its own Lease; its leader must also hold this
    cluster-wide Lease (``default/<name>``), whose holder is the *installation*
    (``<namespace>/<lease>``), not the replica: a failover inside an installation
    renews it at once, and another installation waits until it is released or
    expires. While another installation holds it, this one stands by: it keeps its
    cache warm, writes nothing, logs why (once per holder) and exports
    ``gpuaccept_installation_standby 1``.
    """

    def __init__(
        self,
        kube: Kube,
        settings: LeaseSettings,
        *,
        leads_installation: Callable[[], bool],
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.elector = LeaderElector(_LockLeases(kube), settings)
        self.leads_installation = leads_installation
        self.on_change = on_change
        self.standing_by_for: str | None = None

    @property
    def held(self) -> bool:
        return self.elector.leading

    def _step(self, held: bool) -> None:
        elector = self.elector
        if held != elector.is_leader:
            elector.is_leader = held
            if held:
                log.info(
                    "installation lock %s/%s acquired by installation %s",
                    LOCK_NAMESPACE, elector.name, elector.identity,
                )  # fmt: skip
            if self.on_change is not None:
                self.on_change(held)
        holder = elector.holder if not held and self.leads_installation() else None
        if holder and holder != self.standing_by_for:
            log.warning(
                "standing by: the installation lock %s/%s is held by the installation %s; "
                "this installation (%s) acts on nothing while it does (one installation "
                "per cluster: uninstall one, docs/operator.md)",
                LOCK_NAMESPACE, elector.name, holder, elector.identity,
            )  # fmt: skip
        self.standing_by_for = holder or None
        metrics.INSTALLATION_STANDBY.set(1 if self.standing_by_for else 0)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            held = False
            if self.leads_installation():
                try:
                    held = await loop.run_in_executor(
                        self.elector._executor, self.elector.try_acquire_or_renew
                    )
                except Exception as error:  # API trouble: we cannot prove we hold it
                    log_failure(log, self.elector.failures, error, str(error))
                    held = self.held
                else:
                    log_recovery(log, self.elector.failures)
            self._step(held)
            await asyncio.sleep(self.elector.renew_period)

    def release(self) -> None:
        """Given up on a clean shutdown, so another installation's wait ends at once."""
        self.elector.release()
