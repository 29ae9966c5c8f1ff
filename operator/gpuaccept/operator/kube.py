"""A thin, blocking adapter over the official ``kubernetes`` client.

Every call returns the raw object (a dict, as on the wire) so the cache can
take it as is. The controller runs these calls in a bounded thread pool,
never on the asyncio event loop.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kubernetes.client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import (
    ACCEPTANCE_PLURAL,
    GROUP,
    NODE_CONDITION_TYPE,
    POLICY_PLURAL,
    REMEDY_CONDITION_TYPE,
    VERSION,
)
from gpuaccept.operator.core.fencerules import FENCE_COMPONENT
from gpuaccept.operator.core.model import Taint
from gpuaccept.operator.core.podspec import COMPONENT_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE

log = logging.getLogger(__name__)
USER_AGENT = "gpuaccept-operator"

# Which of the operator's loops (and, for a node's reconcile, which step and phase)
# issues the requests made in this context: every request carries it in its
# User-Agent, ``gpuaccept-operator (ORIGIN)``, which kube-apiserver's audit log
# records, so the benchmark counts the requests per loop (docs/benchmarks.md).
# Threads start with the default: a function run in the API threads sets it there
# (:func:`request_origin`), as asyncio's run_in_executor does not carry it over.
ORIGIN_OTHER = "other"
ORIGIN_STARTUP = "startup"  # the checks before the loops start (the CRDs served)
ORIGIN_POLICY_STATUS = "policy-status"
ORIGIN_LEADER_ELECTION = "leader-election"
ORIGIN_INSTALLATION_LOCK = "installation-lock"
ORIGIN_RELIST_CHECK = "relist-check"
ORIGIN_REVERIFY_LIST = "reverify/list"
# A node's reconcile and the fabric loop's actions: ``LOOP/PHASE`` with one of these
# loops (core/accounting.py: which step of a node's life the plan belongs to).
NODE_LOOPS = ("reconcile", "in-service", "reverify", "fabric")
ORIGINS = (
    ORIGIN_STARTUP,
    ORIGIN_POLICY_STATUS,
    ORIGIN_LEADER_ELECTION,
    ORIGIN_INSTALLATION_LOCK,
    ORIGIN_RELIST_CHECK,
    ORIGIN_REVERIFY_LIST,
    *NODE_LOOPS,
    ORIGIN_OTHER,
)
_origin: ContextVar[str] = ContextVar("gpuaccept_request_origin", default=ORIGIN_OTHER)


@contextmanager
def request_origin(origin: str) -> Iterator[None]:
    """The requests made within (in this thread or task) are ``origin``'s."""
    token = _origin.set(origin)
    try:
        yield
    finally:
        _origin.reset(token)


def user_agent(origin: str | None = None) -> str:
    """The User-Agent of a request made now: the operator and the request's origin
    (``origin``, else the context's)."""
    return f"{USER_AGENT} ({origin or _origin.get()})"


# Events on cluster-scoped objects (Nodes, NodeAcceptances). The API server keeps such an
# Event (no involvedObject.namespace, an eventTime) to "default" or "kube-system"; tenants
# are given edit in "default", so they go to "kube-system" (issue 42, docs/security.md).
EVENT_NAMESPACE = "kube-system"
NA_PATH = f"/apis/{GROUP}/{VERSION}/{ACCEPTANCE_PLURAL}"
POLICY_PATH = f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}"
# The DRA drivers' ResourceSlices (resource.k8s.io/v1, GA since Kubernetes 1.34).
RESOURCE_SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
# gpuaccept's fences: DeviceTaintRules (resource.k8s.io/v1, KEP-5055; GA in 1.37).
RESOURCE_V1_PATH = "/apis/resource.k8s.io/v1"
DEVICE_TAINT_RULES_PATH = f"{RESOURCE_V1_PATH}/devicetaintrules"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
# The installation lock (leader.py): one Lease per cluster, in "default" (docs/security.md).
LOCK_NAMESPACE = "default"
LOCK_LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LOCK_NAMESPACE}/leases"
# A pod in any namespace (the drain of a quarantined node): cluster-wide in the RBAC.
EVICTION_PATH = "/api/v1/namespaces/{any_namespace}/pods/{name}/eviction"


@dataclass(frozen=True)
class EventRecord:
    """An Event about one object (``involvedObject``), as :meth:`Kube.create_event` posts it."""

    kind: str
    api_version: str
    name: str
    uid: str
    type: str  # Normal | Warning
    reason: str
    message: str


class ConflictError(ApiException):
    """409: the object changed since it was read (resourceVersion)."""


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


JSON = "application/json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def _failed_test_op(error: ApiException) -> bool:
    """A JSON patch whose ``test`` op failed: 422 with this bare message and no causes
    (a schema violation names its fields in ``details.causes``)."""
    try:
        status = json.loads(error.body or "{}")
    except ValueError:
        return False
    return bool(
        status.get("message") == "the server rejected our request due to an error in our request"
        and not (status.get("details") or {}).get("causes")
    )


class Kube:
    """The API calls the operator makes, and nothing else (see the chart's RBAC)."""

    def __init__(self, api: k8s.ApiClient) -> None:
        api.user_agent = USER_AGENT
        self.api = api
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.origin: str | None = None  # None: the context's (request_origin)

    def for_origin(self, origin: str) -> Kube:
        """This client for a loop whose every request is ``origin``'s (the same API
        client and call counts)."""
        tagged = copy.copy(self)
        tagged.origin = origin
        return tagged

    def _count(self, what: str) -> None:
        with self._lock:
            self.calls[what] += 1

    @staticmethod
    def _guard(error: ApiException) -> None:
        if error.status == 409:
            raise ConflictError(status=409, reason=error.reason) from error

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = JSON,
        query: list[tuple[str, str]] | None = None,
    ) -> dict[str, Any]:
        """One API call; the decoded JSON response. Raises ApiException (Conflict on 409)."""
        method_, url, headers, body_, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or None,
            header_params={"Content-Type": content_type, "Accept": JSON},
            body=body,
            auth_settings=["BearerToken"],
        )
        headers["User-Agent"] = user_agent(
            self.origin
        )  # after the client's defaults, which set it too
        response = self.api.call_api(method_, url, headers, body_, post, _request_timeout=60)
        data = response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            error = ApiException(http_resp=response)
            self._guard(error)
            raise error
        loaded = json.loads(data) if data else {}
        return loaded if isinstance(loaded, dict) else {}

    # ------------------------------------------------------------- NodeAcceptance
    def create_na(self, name: str, policy: str) -> dict[str, Any]:
        self._count("na.create")
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeAcceptance",
            "metadata": {"name": name, "labels": {f"{GROUP}/policy": policy[:63]}},
            "spec": {"nodeName": name},
        }
        try:
            return self.request("POST", f"{NA_PATH}", body)
        except ConflictError:  # AlreadyExists: fine, read it
            return self.get_na(name) or {}

    def get_na(self, name: str) -> dict[str, Any] | None:
        self._count("na.get")
        try:
            return self.request("GET", f"{NA_PATH}/{name}")
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def patch_na_status(
        self, name: str, resource_version: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Replace ``status`` whole (JSON patch), guarded by resourceVersion."""
        self._count("na.status.patch")
        ops: list[dict[str, Any]] = []
        if resource_version:
            ops.append(
                {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}
            )
        ops.append({"op": "add", "path": "/status", "value": dict(status)})
        try:
            return self.request("PATCH", f"{NA_PATH}/{name}/status", ops, content_type=JSON_PATCH)
        except ApiException as error:
            if error.status == 422 and _failed_test_op(error):
                raise ConflictError(status=409, reason="resourceVersion changed") from error
            raise

    def delete_na(self, name: str) -> None:
        self._count("na.delete")
        try:
            self.request("DELETE", f"{NA_PATH}/{name}")
        except ApiException as error:
            if error.status != 404:
                raise

    # ------------------------------------------------------------- policies
    def patch_policy_status(self, name: str, status: Mapping[str, Any]) -> None:
        self._count("policy.status.patch")
        try:
            self.request(
                "PATCH", f"{POLICY_PATH}/{name}/status", {"status": status}, content_type=MERGE
            )
        except ApiException as error:
            if error.status != 404:
                raise

    def list_policy_names(self) -> set[str]:
        """The names of the policies that exist (a relist's check, see cache.py)."""
        self._count("policy.list")
        body = self.request("GET", POLICY_PATH)
        return {str((i.get("metadata") or {}).get("name")) for i in body.get("items") or ()}

    def list_resource_slice_names(self, drivers: Iterable[str]) -> set[str]:
        """The names of the ResourceSlices of ``drivers`` that exist (a relist's check,
        see cache.py): one list per driver, by the field selector ``spec.driver``."""
        names: set[str] = set()
        for driver in drivers:
            self._count("resourceslice.list")
            body = self.request(
                "GET", RESOURCE_SLICES_PATH, query=[("fieldSelector", f"spec.driver={driver}")]
            )
            names |= {str((i.get("metadata") or {}).get("name")) for i in body.get("items") or ()}
        return names

    # ------------------------------------------------------- device taint rules
    def serves_device_taint_rules(self) -> bool:
        """Whether the API server serves ``resource.k8s.io/v1`` devicetaintrules (its
        discovery; a 404 or a list without them: not served)."""
        self._count("discovery.get")
        try:
            body = self.request("GET", RESOURCE_V1_PATH)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        names = {str(r.get("name")) for r in body.get("resources") or () if isinstance(r, dict)}
        return "devicetaintrules" in names

    def create_device_taint_rule(self, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
        """The created rule, or None when the name is taken."""
        self._count("devicetaintrule.create")
        try:
            return self.request("POST", DEVICE_TAINT_RULES_PATH, dict(manifest))
        except ConflictError:
            return None

    def replace_device_taint_rule_spec(self, name: str, spec: Mapping[str, Any]) -> None:
        """Set the rule's ``spec`` whole (JSON patch)."""
        self._count("devicetaintrule.patch")
        ops = [{"op": "add", "path": "/spec", "value": dict(spec)}]
        self.request("PATCH", f"{DEVICE_TAINT_RULES_PATH}/{name}", ops, content_type=JSON_PATCH)

    def list_fence_rule_names(self) -> set[str]:
        """The names of gpuaccept's fence rules that exist (a relist's check, see
        cache.py): one list by the operator's labels."""
        self._count("devicetaintrule.list")
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{COMPONENT_LABEL}={FENCE_COMPONENT}"
        body = self.request("GET", DEVICE_TAINT_RULES_PATH, query=[("labelSelector", selector)])
        return {str((i.get("metadata") or {}).get("name")) for i in body.get("items") or ()}

    def delete_device_taint_rule(self, name: str) -> None:
        """Delete the rule ``name`` (gone: done)."""
        self._count("devicetaintrule.delete")
        try:
            self.request("DELETE", f"{DEVICE_TAINT_RULES_PATH}/{name}")
        except ApiException as error:
            if error.status != 404:
                raise

    # ------------------------------------------------------------- nodes
    def get_node(self, name: str) -> dict[str, Any] | None:
        self._count("node.get")
        try:
            return self.request("GET", f"/api/v1/nodes/{name}")
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def patch_node(
        self,
        name: str,
        resource_version: str,
        taints: tuple[Taint, ...] | None,
        labels: Mapping[str, str | None],
    ) -> dict[str, Any]:
        """Merge patch; ``spec.taints`` is replaced whole, guarded by resourceVersion."""
        self._count("node.patch")
        metadata: dict[str, Any] = {"resourceVersion": resource_version}
        if labels:
            metadata["labels"] = dict(labels)
        body: dict[str, Any] = {"metadata": metadata}
        if taints is not None:
            body["spec"] = {"taints": [t.to_wire() for t in taints] or None}
        return self.request("PATCH", f"/api/v1/nodes/{name}", body, content_type=MERGE)

    def remove_node_annotation(self, name: str, key: str) -> dict[str, Any]:
        self._count("node.patch")
        body = {"metadata": {"annotations": {key: None}}}
        return self.request("PATCH", f"/api/v1/nodes/{name}", body, content_type=MERGE)

    def patch_node_condition(
        self, name: str, status: str, reason: str, message: str, now: datetime
    ) -> dict[str, Any]:
        """The ``GPUAcceptance`` condition: strategic merge on ``nodes/status``
        (conditions merge by ``type``)."""
        return self._patch_condition(
            name, _condition(NODE_CONDITION_TYPE, status, reason, message, now)
        )

    def patch_node_remedy(
        self, name: str, status: str, reason: str, message: str, now: datetime
    ) -> dict[str, Any]:
        """The ``GPUAcceptanceRemedy`` condition (what a quarantined node needs), as
        :meth:`patch_node_condition`."""
        return self._patch_condition(
            name, _condition(REMEDY_CONDITION_TYPE, status, reason, message, now)
        )

    def _patch_condition(self, name: str, condition: dict[str, str]) -> dict[str, Any]:
        self._count("node.status.patch")
        return self.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"conditions": [condition]}},
            content_type=STRATEGIC,
        )

    # ------------------------------------------------------------- pods
    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
        """The created pod, or None when it already exists (already started)."""
        self._count("pod.create")
        try:
            return self.request("POST", f"/api/v1/namespaces/{namespace}/pods", dict(manifest))
        except ConflictError:
            return None

    # ------------------------------------------------------- resource claims
    def create_resource_claim(
        self, namespace: str, manifest: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The created claim (a DRA node's probe claim), or None when the name is taken."""
        self._count("resourceclaim.create")
        try:
            return self.request("POST", CLAIMS_PATH.format(ns=namespace), dict(manifest))
        except ConflictError:
            return None

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._count("resourceclaim.get")
        try:
            return self.request("GET", f"{CLAIMS_PATH.format(ns=namespace)}/{name}")
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def delete_resource_claim(self, namespace: str, name: str, uid: str) -> None:
        """Delete the claim ``name`` if it is still the object ``uid`` (gone: done)."""
        self._count("resourceclaim.delete")
        body = {"preconditions": {"uid": uid}}
        try:
            self.request("DELETE", f"{CLAIMS_PATH.format(ns=namespace)}/{name}", body)
        except ApiException as error:
            if error.status not in (404, 409):  # 409: another object under the name now
                raise

    def list_probe_pod_names(self, namespace: str, selector: str) -> set[str]:
        """The names of the probe pods in ``namespace`` (a relist's check, see cache.py)."""
        self._count("pod.list")
        body = self.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods", query=[("labelSelector", selector)]
        )
        return {str((i.get("metadata") or {}).get("name")) for i in body.get("items") or ()}

    def list_running_pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to ``node`` that has not ended, in every namespace: one
        list with a field selector on ``spec.nodeName`` (an index the API server
        keeps), made once per probe attempt, never a watch on the cluster's pods."""
        self._count("pod.list_node")
        selector = f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        body = self.request("GET", "/api/v1/pods", query=[("fieldSelector", selector)])
        items = body.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def evict_pod(self, namespace: str, name: str) -> None:
        """A ``policy/v1`` Eviction of the pod: the API server refuses it (429) while a
        PodDisruptionBudget of the pod allows no disruption. A pod gone already: fine."""
        self._count("pod.evict")
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        try:
            self.request("POST", EVICTION_PATH.format(any_namespace=namespace, name=name), body)
        except ApiException as error:
            if error.status != 404:
                raise

    def delete_pod(self, namespace: str, name: str, *, force: bool) -> dict[str, Any] | None:
        """The pod as it is after the request (terminating), or None once it is gone."""
        self._count("pod.delete")
        query = [("gracePeriodSeconds", "0")] if force else None
        try:
            result = self.request(
                "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", query=query
            )
        except ApiException as error:
            if error.status != 404:
                raise
            return None
        meta = result.get("metadata") or {}
        if result.get("kind") == "Pod" and meta.get("deletionTimestamp") and not force:
            return result
        return None

    # ------------------------------------------------------------- leases
    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", f"{LEASE_PATH.format(ns=namespace)}/{name}")
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", LEASE_PATH.format(ns=namespace), dict(body))

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PUT", f"{LEASE_PATH.format(ns=namespace)}/{name}", dict(body))

    # ------------------------------------------------------------- the installation lock
    def get_lock_lease(self, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", f"{LOCK_LEASE_PATH}/{name}")
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def create_lock_lease(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", LOCK_LEASE_PATH, dict(body))

    def replace_lock_lease(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PUT", f"{LOCK_LEASE_PATH}/{name}", dict(body))

    # ------------------------------------------------------------- events
    def create_event(self, event: EventRecord, *, now: datetime, reporting_instance: str) -> None:
        self._count("event.create")
        body = self.event_body(event, now=now, reporting_instance=reporting_instance)
        try:
            self.request("POST", f"/api/v1/namespaces/{EVENT_NAMESPACE}/events", body)
        except ApiException as error:  # an Event is best effort
            log.warning(
                "event %s on %s/%s not recorded: %s",
                event.reason, event.kind, event.name, error.reason,
            )  # fmt: skip

    @staticmethod
    def event_body(event: EventRecord, *, now: datetime, reporting_instance: str) -> dict[str, Any]:
        """The Event :meth:`create_event` posts, in :data:`EVENT_NAMESPACE`."""
        involved: dict[str, str] = {
            "kind": event.kind, "apiVersion": event.api_version, "name": event.name
        }  # fmt: skip
        if event.uid:
            involved["uid"] = event.uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{event.name[:200]}.", "namespace": EVENT_NAMESPACE},
            "involvedObject": involved,
            "type": event.type,
            "reason": event.reason[:128],
            "message": event.message[:1024],
            "source": {"component": "gpuaccept-operator"},
            "reportingComponent": "gpuaccept.io/operator",
            "reportingInstance": reporting_instance[:128],
            "firstTimestamp": _iso(now),
            "lastTimestamp": _iso(now),
            "eventTime": _micro(now),
            "action": event.reason[:128],
            "count": 1,
        }


def _condition(kind: str, status: str, reason: str, message: str, now: datetime) -> dict[str, str]:
    stamp = _iso(now)
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp,
        "lastHeartbeatTime": stamp,
    }
