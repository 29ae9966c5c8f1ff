"""The real action interpreter: a plan's actions as API calls (in the API threads).

:class:`KubeExecutor` carries out one action through :func:`interpret` (the
same dispatch the unit tests' world uses) and writes what the API server
returned into the cache's overlay, so the next pass sees its own writes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import (
    API_VERSION,
    GPU_RESOURCE,
    REMEDY_CONDITION_TYPE,
    REPROBE_ANNOTATION,
)
from gpuaccept.contracts.nodeacceptance import OwnedPod
from gpuaccept.operator.cache import Cache
from gpuaccept.operator.core.draclaim import claim_is_intended
from gpuaccept.operator.core.fencing import FENCE_RULE_REFUSED_RETRY_SECONDS
from gpuaccept.operator.core.interpret import interpret
from gpuaccept.operator.core.model import (
    Action,
    CreatedPod,
    CreateNodeAcceptance,
    CreateProbePod,
    CreateResourceClaim,
    DeleteFenceRule,
    DeleteNodeAcceptance,
    DeleteProbePod,
    DeleteResourceClaim,
    DrainNode,
    DrainResult,
    EmitEvent,
    NodeSnapshot,
    PatchNAStatus,
    PatchNodeCondition,
    PatchNodeTaintsLabels,
    RemoveReprobeAnnotation,
    WriteFenceRule,
)
from gpuaccept.operator.core.phases.drain import evictable
from gpuaccept.operator.core.phases.startfailure import NODE_BUSY_PREFIX
from gpuaccept.operator.core.podidentity import shape_digest
from gpuaccept.operator.core.podspec import (
    FABRIC_PAIR_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    WATCH_LABEL,
)
from gpuaccept.operator.core.reconcile import STATUS_REFUSED_RETRY_SECONDS
from gpuaccept.operator.core.reverify_schedule import fresh
from gpuaccept.operator.kube import ConflictError, EventRecord, Kube, request_origin
from gpuaccept.operator.views import (
    cached_acceptance,
    node_pod,
    node_view,
    pod_view,
    resource_version,
)

log = logging.getLogger("gpuaccept.operator")

# How many of a node's creates are remembered until its status records them.
CREATED_MEMORY = 4

# The overlay's resourceVersion for an object this process deleted: newer than any.
DELETED_RV = 1 << 62


NEW = "New"  # a node without a NodeAcceptance yet, as its requests are counted


def node_origin(loop: str, observed: NodeSnapshot) -> str:
    """``LOOP/PHASE``, the origin a node's plan's requests are counted under (kube.py):
    the fabric loop's are ``fabric``; a node's reconcile's are ``reverify`` while a
    re-verification round is under way or a fresh list of its pods is to be
    recorded, ``in-service`` for a node in service (Accepted or Held) under a policy
    that watches it in service, else ``reconcile`` (the acceptance path and the
    rest); PHASE is the NodeAcceptance's (``New`` without one; the fabric loop's
    pass, whose snapshots carry none, is ``fabric/pass``)."""
    na = observed.na
    if na is None:
        return f"{loop}/{NEW if loop == 'reconcile' else 'pass'}"
    status = na.status
    phase = str(status.phase or NEW)
    if loop != "reconcile":
        return f"{loop}/{phase}"
    rv = status.reverify
    if (rv is not None and rv.round is not None) or fresh(observed.gpu_pod_sample, rv):
        return f"reverify/{phase}"
    spec = observed.policies[0].spec if len(observed.policies) == 1 else None
    in_service = spec is not None and spec.in_service.enabled
    if in_service and phase in ("Accepted", "Held"):
        return f"in-service/{phase}"
    return f"reconcile/{phase}"


class StaleCacheError(Exception):
    """The cache disagreed with the API server; the plan is dropped and re-made."""


class StatusRefusedError(Exception):
    """The API server refused a status write as invalid (400/422, not a conflict).

    Writing the same status again would fail the same way: the refusal is kept
    (:attr:`KubeExecutor.status_errors`) for the core, which ends the attempt
    instead, and the plan is dropped and re-made.
    """


def _known_rv(rv: str) -> int:
    """The resourceVersion a 404 showed gone, as the overlay's deletion mark: it hides
    that version and older ones (an entry a relist left behind), not a newer object."""
    return int(rv) if rv.isdigit() else DELETED_RV


def _requests_gpus(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            if str((resources.get(part) or {}).get(GPU_RESOURCE, "0")) not in ("0", ""):
                return True
    return False


def gpu_pods(pods: list[dict[str, Any]]) -> list[str]:
    """The pods (``namespace/name``) among ``pods`` that request GPUs, gpuaccept's own
    left out."""
    return [
        f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        for pod in pods
        if (meta := pod.get("metadata") or {})
        and (meta.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE
        and _requests_gpus(pod)
    ]


def api_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


class KubeExecutor:
    """Executes actions for the controller; remembers refused pod creations and status writes."""

    def __init__(
        self, kube: Kube, cache: Cache, *, namespace: str, identity: str, loop: str = "reconcile"
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.loop = loop  # which loop's plans these are (node_origin)
        # A node's reconcile passes over the node again after each write it makes
        # (Controller.reconcile_node: the next pass, or a retry after an error), reading
        # the write's answer from the cache: the write's watch event is only its echo.
        self.followed = loop == "reconcile"
        self.namespace = namespace
        self.identity = identity
        self.create_errors: dict[str, str] = {}  # node -> why its probe pod was refused
        # node -> {pod name: the create's answer}: the pods this process created, until
        # the status records them (core/podidentity.py); the newest few per node
        self.created: dict[str, dict[str, CreatedPod]] = {}
        # node -> pod names whose create got no answer (never sent again under the name)
        self.unanswered: dict[str, list[str]] = {}
        self.name_taken: dict[str, str] = {}  # node -> a pod name its create found taken
        self.drains: dict[str, DrainResult] = {}  # node -> its last drain (core/phases/drain.py)
        self.status_errors: dict[str, str] = {}  # node -> why its last status write was refused
        self.status_refused_at: dict[str, float] = {}  # node -> when (monotonic)
        # node -> why its last DeviceTaintRule write was refused, and when (monotonic)
        self.fence_rule_errors: dict[str, str] = {}
        self.fence_rule_refused_at: dict[str, float] = {}

    def fence_rule_error(self, node: str) -> str | None:
        """Why ``node``'s last DeviceTaintRule write was refused (fencing is unavailable
        there), for :data:`FENCE_RULE_REFUSED_RETRY_SECONDS`; then a fence tries again."""
        at = self.fence_rule_refused_at.get(node)
        if at is not None and time.monotonic() - at >= FENCE_RULE_REFUSED_RETRY_SECONDS:
            self.fence_rule_errors.pop(node, None)
            self.fence_rule_refused_at.pop(node, None)
        return self.fence_rule_errors.get(node)

    def status_error(self, node: str) -> str | None:
        """Why ``node``'s last status write was refused, for as long as the core holds
        off repeating it (then it is tried again once)."""
        at = self.status_refused_at.get(node)
        if at is not None and time.monotonic() - at >= STATUS_REFUSED_RETRY_SECONDS:
            self.status_errors.pop(node, None)
            self.status_refused_at.pop(node, None)
        return self.status_errors.get(node)

    def created_pods(self, node: str) -> dict[str, CreatedPod]:
        """The pods this process created on ``node`` (the create's answers)."""
        return dict(self.created.get(node, {}))

    def pod_creates_unanswered(self, node: str) -> frozenset[str]:
        """The pod names this process's creates on ``node`` got no answer for."""
        return frozenset(self.unanswered.get(node, ()))

    def on_record(self, node: str, owned: Iterable[OwnedPod]) -> None:
        """``owned``, the pods on record in a status of ``node`` just written: the
        answers of their creates are not needed any more (a record is what identifies a
        pod, core/podidentity.py), so they are not kept (else the newest few stay per
        node, one more each window in service)."""
        created = self.created.get(node)
        if not created:
            return
        recorded = {(entry.name, entry.uid) for entry in owned}
        for name in [name for name, pod in created.items() if (name, pod.uid) in recorded]:
            del created[name]
        if not created:
            self.created.pop(node, None)

    def forget(self, node: str) -> None:
        """Drop what is remembered about ``node`` (its NodeAcceptance is gone)."""
        memories: tuple[dict[str, Any], ...] = (
            self.create_errors,
            self.status_errors,
            self.status_refused_at,
            self.fence_rule_errors,
            self.fence_rule_refused_at,
            self.created,
            self.unanswered,
            self.name_taken,
            self.drains,
        )
        for memory in memories:
            memory.pop(node, None)

    def execute(self, observed: NodeSnapshot, action: Action) -> None:  # runs in a thread
        with request_origin(node_origin(self.loop, observed)):
            interpret(_NodeWrites(self, observed), action)

    def refresh(self, observed: NodeSnapshot, action: Action) -> None:  # runs in a thread
        """After a conflict: re-read the object ``action`` conflicted on."""
        with request_origin(node_origin(self.loop, observed)):
            self._refresh(observed.node_name, action)

    def _refresh(self, node: str, action: Action) -> None:
        if isinstance(action, PatchNAStatus):
            body = self.kube.get_na(action.name)
            if body is not None:
                self.cache.write("na", action.name, resource_version(body), cached_acceptance(body))
        else:
            body = self.kube.get_node(node)
            if body is not None:
                self.cache.write("node", node, resource_version(body), node_view(body))


@dataclass(frozen=True)
class _NodeWrites:
    """The :class:`~gpuaccept.operator.core.interpret.ActionInterpreter` for one node's plan."""

    executor: KubeExecutor
    observed: NodeSnapshot

    @property
    def kube(self) -> Kube:
        return self.executor.kube

    @property
    def cache(self) -> Cache:
        return self.executor.cache

    def create_node_acceptance(self, action: CreateNodeAcceptance) -> None:
        body = self.kube.create_na(action.name, action.policy)
        if body:
            self._write_na(action.name, body)

    def _write_na(self, name: str, body: dict[str, Any]) -> None:
        followed = self.executor.followed
        self.cache.write(
            "na", name, resource_version(body), cached_acceptance(body), followed=followed
        )

    def patch_na_status(self, action: PatchNAStatus) -> None:
        node, errors = self.observed.node_name, self.executor.status_errors
        try:
            wire = action.status.model_dump(mode="json", by_alias=True, exclude_none=True)
            body = self.kube.patch_na_status(action.name, action.resource_version, wire)
        except ConflictError:
            raise
        except ApiException as error:
            if error.status == 404:  # deleted meanwhile: the cache forgets it, the plan is re-made
                self.cache.write("na", action.name, _known_rv(action.resource_version), None)
                raise StaleCacheError(action.name) from error
            if error.status in (400, 422):  # invalid, not a hiccup: never the same write again
                errors[node] = f"{error.status} {api_message(error)}"[:500]
                self.executor.status_refused_at[node] = time.monotonic()
                raise StatusRefusedError(errors[node]) from error
            raise
        except ValueError as error:  # not even serialisable (e.g. NaN): refused before sending
            errors[node] = f"status cannot be sent: {error}"[:500]
            self.executor.status_refused_at[node] = time.monotonic()
            raise StatusRefusedError(errors[node]) from error
        errors.pop(node, None)
        self.executor.on_record(node, action.status.owned_pods)
        self._write_na(action.name, body)

    def _node_gone(self, node: str, error: ApiException) -> None:
        """A 404 on a Node write: it was deleted; the cache forgets the version it knew
        (one re-created under the name is newer and shows), the plan is re-made."""
        if error.status == 404:
            known = self.observed.node.resource_version if self.observed.node else ""
            self.cache.write("node", node, _known_rv(known), None)
            raise StaleCacheError(node) from error

    def patch_node_taints_labels(self, action: PatchNodeTaintsLabels) -> None:
        try:
            body = self.kube.patch_node(
                action.node, action.resource_version, action.taints, action.labels
            )
        except ApiException as error:
            self._node_gone(action.node, error)
            raise
        self.cache.write("node", action.node, resource_version(body), node_view(body))

    def patch_node_condition(self, action: PatchNodeCondition) -> None:
        try:
            patch = (
                self.kube.patch_node_remedy
                if action.condition_type == REMEDY_CONDITION_TYPE
                else self.kube.patch_node_condition
            )
            body = patch(action.node, action.status, action.reason, action.message, action.now)
        except ApiException as error:
            self._node_gone(action.node, error)
            raise
        self.cache.write("node", action.node, resource_version(body), node_view(body))

    def remove_reprobe_annotation(self, action: RemoveReprobeAnnotation) -> None:
        body = self.kube.remove_node_annotation(action.node, REPROBE_ANNOTATION)
        self.cache.write("node", action.node, resource_version(body), node_view(body))

    def create_probe_pod(self, action: CreateProbePod) -> None:
        node, errors = self.observed.node_name, self.executor.create_errors
        # Only this attempt's refusal counts: an older one must not turn a later
        # transient failure (a 5xx, a timeout) into a ProbePodError.
        errors.pop(node, None)
        labels = (action.manifest.get("metadata") or {}).get("labels") or {}
        # A fabric pod's partner may be in service: the pair pass handles a refusal.
        # A watch pod requests no GPU: it runs beside the node's jobs, unchecked.
        beside = FABRIC_PAIR_LABEL in labels or WATCH_LABEL in labels
        busy = [] if beside else self._gpu_pods_on_node(node)
        if busy:
            errors[node] = (NODE_BUSY_PREFIX + ", ".join(busy[:5]))[:500]
            return  # the next pass sees the refusal: the node waits (NodeBusy)
        created = self.executor.created.setdefault(node, {})
        # In flight (no UID yet): another loop's reconcile of the node that sees the pod
        # before the answer must not take it for a crash window's (core/creationintent.py)
        created[action.name] = CreatedPod(uid="", shape=shape_digest(action.manifest))
        try:
            pod = self.kube.create_pod(self.executor.namespace, action.manifest)
        except Exception as error:
            # no answer: not in flight any more (a pod made all the same, its answer
            # lost, is then the crash window's: deleted unread)
            created.pop(action.name, None)
            tried = self.executor.unanswered.setdefault(node, [])
            tried[:] = [*tried, action.name][-CREATED_MEMORY:]
            if isinstance(error, ApiException) and error.status in (400, 403, 404, 422):
                errors[node] = api_message(error)[:500]  # refused, not a hiccup
            raise
        if pod is None:  # AlreadyExists: a pod this process did not create holds the name
            created.pop(action.name, None)
            self.executor.name_taken[node] = action.name
            return
        self.executor.name_taken.pop(node, None)
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        created[action.name] = CreatedPod(uid=uid, shape=shape_digest(action.manifest))
        for old in list(created)[:-CREATED_MEMORY]:
            del created[old]
        followed = self.executor.followed
        self.cache.write_pod(
            node, action.name, resource_version(pod), pod_view(pod), followed=followed
        )

    def create_resource_claim(self, action: CreateResourceClaim) -> None:
        """A DRA node's probe claim, before its pod. A name already taken is the
        operator's own claim of an earlier create (its nonce on record: kept) or
        another creator's: then the pod is not created (the plan is dropped) and the
        node waits ``PodNameTaken`` (core/phases/probing.py), the claim left alone."""
        node, errors = self.observed.node_name, self.executor.create_errors
        errors.pop(node, None)
        namespace = self.executor.namespace
        try:
            created = self.kube.create_resource_claim(namespace, action.manifest)
        except ApiException as error:
            if error.status in (400, 403, 404, 422):
                errors[node] = api_message(error)[:500]  # refused, not a hiccup
            raise
        if created is not None:
            return
        found = self.kube.get_resource_claim(namespace, action.name)
        if found is not None and claim_is_intended(found, action.intents):
            return  # the operator's own, from a create whose pod did not follow
        self.executor.name_taken[node] = action.name
        raise StaleCacheError(f"claim {namespace}/{action.name} is another creator's")

    def delete_resource_claim(self, action: DeleteResourceClaim) -> None:
        """Delete the probe claim when it is the operator's own (its nonce on record)."""
        namespace = self.executor.namespace
        found = self.kube.get_resource_claim(namespace, action.name)
        if found is None:
            return
        if not claim_is_intended(found, action.intents):
            log.warning(
                "node=%s claim %s/%s was not created by gpuaccept: left in place",
                self.observed.node_name,
                namespace,
                action.name,
            )
            return
        uid = str((found.get("metadata") or {}).get("uid", ""))
        self.kube.delete_resource_claim(namespace, action.name, uid)

    def write_fence_rule(self, action: WriteFenceRule) -> None:
        """A fenced GPU's DeviceTaintRule (core/fencerules.py): created, or its spec set
        when it exists (a name taken is a rule with gpuaccept's key: only the operator
        may make one, the admission policy says so). A refusal (400/403/422: RBAC, an
        admission policy such as Kyverno's or Gatekeeper's) is remembered for the core,
        which then quarantines the node (FencingUnavailable), and raised: the plan, whose
        status write would record a fence that is not there, is dropped. A conflict or an
        outage is raised unremembered: a retry."""
        node, executor, manifest = self.observed.node_name, self.executor, action.manifest
        spec = manifest.get("spec") or {}
        try:
            created = None if action.exists else self.kube.create_device_taint_rule(manifest)
            if created is not None:
                executor.fence_rule_errors.pop(node, None)
                return
            self.kube.replace_device_taint_rule_spec(action.name, spec)
        except ApiException as error:
            if error.status in (400, 403, 422):
                executor.fence_rule_errors[node] = f"{error.status} {api_message(error)}"[:500]
                executor.fence_rule_refused_at[node] = time.monotonic()
            raise
        executor.fence_rule_errors.pop(node, None)

    def delete_fence_rule(self, action: DeleteFenceRule) -> None:
        self.kube.delete_device_taint_rule(action.name)

    def _gpu_pods_on_node(self, node: str) -> list[str]:
        """Other pods on ``node`` that hold GPUs (``namespace/name``): the kubelet
        would refuse the probe pod (``OutOfnvidia.com/gpu``) or the probe would share
        the GPUs. Unknown (no permission, an API error): none, the kubelet decides."""
        try:
            pods = self.kube.list_running_pods_on_node(node)
        except ApiException as error:
            log.warning(
                "node=%s cannot list its pods (%s): not checked for GPU pods", node, error.status
            )
            return []
        return gpu_pods(pods)

    def delete_probe_pod(self, action: DeleteProbePod) -> None:
        node = self.observed.node_name
        known = next((p for p in self.observed.pods if p.name == action.name), None)
        gone = self.kube.delete_pod(self.executor.namespace, action.name, force=action.force)
        if gone is not None:
            self.cache.write_pod(node, action.name, resource_version(gone), pod_view(gone))
        elif known is not None:
            self.cache.write_pod(node, action.name, DELETED_RV, None)

    def drain_node(self, action: DrainNode) -> None:
        """Evict the node's pods (core/phases/drain.py chooses them); what came of it is kept
        for the core: evicted, or refused for now (429: a PodDisruptionBudget allows no
        disruption; 403: not allowed). Other API errors are raised (retried)."""
        pods = [node_pod(p) for p in self.kube.list_running_pods_on_node(action.node)]
        evicted: list[str] = []
        blocked: list[str] = []
        for pod in evictable(pods, action.taint, namespace=action.namespace):
            name = f"{pod.namespace}/{pod.name}"
            try:
                self.kube.evict_pod(pod.namespace, pod.name)
            except ApiException as error:
                if error.status not in (403, 429):
                    raise
                blocked.append(f"{name}: {api_message(error)}"[:300])
            else:
                evicted.append(name)
        if evicted or blocked:
            log.info("node=%s drain: evicted %s; not yet %s", action.node, evicted, blocked)
        self.executor.drains[action.node] = DrainResult(
            action.started, datetime.now(UTC), tuple(evicted), tuple(blocked)
        )

    def delete_node_acceptance(self, action: DeleteNodeAcceptance) -> None:
        # The cache says the node is gone; make sure before deleting its record.
        node = self.kube.get_node(action.name)
        if node is not None:
            log.warning("node=%s is not in the cache but exists; keeping it", action.name)
            self.cache.write("node", action.name, resource_version(node), node_view(node))
            raise StaleCacheError(action.name)
        self.kube.delete_na(action.name)
        self.cache.write("na", action.name, DELETED_RV, None)
        self.executor.forget(action.name)

    def emit_event(self, action: EmitEvent) -> None:
        event = EventRecord(
            kind=action.kind,
            api_version="v1" if action.kind == "Node" else API_VERSION,
            name=action.name,
            uid=action.uid,
            type=action.type,
            reason=action.reason,
            message=action.message,
        )
        self.kube.create_event(
            event,
            now=datetime.now(UTC),
            reporting_instance=self.executor.identity,
        )
