"""Run one pod on a node and record what the operator would see of it.

The operator reads probe pods through :func:`gpuaccept.operator.views.pod_view`
(phase, deletion, the probe container's terminated or waiting state, the pod's
reason and message). :func:`observe` creates a pod bound to a node, watches it,
and returns every distinct :class:`PodView` the watch delivered, in order, with
the fields that differ from run to run (names, times, IPs) blanked, so that two
runs of the same pod, one on the kubelet stand-in and one on the real kubelet,
can be compared field by field.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from gpuaccept.operator.core.model import PodView
from gpuaccept.operator.views import pod_view

CONTAINER = "probe"  # the name pod_view reads (the probe container's)
TIMEOUT_S = 120.0  # how long a watch waits for its condition; not a performance check


@dataclass(frozen=True)
class Observation:
    views: tuple[PodView, ...]  # distinct views, in the order the watch delivered them
    deleted: bool  # the pod object went away

    @property
    def final(self) -> PodView:
        return self.views[-1]

    @property
    def phases(self) -> tuple[str, ...]:
        out: list[str] = []
        for view in self.views:
            if not out or out[-1] != view.phase:
                out.append(view.phase)
        return tuple(out)


def comparable(view: PodView) -> PodView:
    """The view without what differs between two runs of the same pod: names, UIDs,
    times, IPs, and the node (the stand-in's or the real one; the pod's shape digest
    covers its ``nodeName``)."""
    return replace(
        view,
        name="",
        uid="",
        node_name="",
        shape="",
        created=None,
        finished=None,
        pod_ip="set" if view.pod_ip else None,
        run_seconds=None if view.run_seconds is None else 0,
    )


@dataclass(frozen=True)
class PodSpec:
    """The one-container pod a comparison runs (``image`` None: the node's busybox)."""

    command: tuple[str, ...]
    gpus: int = 0
    image: str | None = None
    pull_policy: str = "Never"
    deadline_s: int | None = None
    grace_s: int = 30
    message_policy: str = "File"
    # Labels the pod's node must not have: a required node affinity of DoesNotExist
    # requirements, which the node's kubelet checks at admission.
    absent_labels: tuple[str, ...] = ()

    def manifest(self, name: str, node: str, default_image: str) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": CONTAINER,
            "image": self.image or default_image,
            "imagePullPolicy": self.pull_policy,
            "command": list(self.command),
            "terminationMessagePolicy": self.message_policy,
        }
        if self.gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(self.gpus)}}
        spec: dict[str, Any] = {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": self.grace_s,
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
        }
        if self.deadline_s is not None:
            spec["activeDeadlineSeconds"] = self.deadline_s
        if self.absent_labels:
            absent = [{"key": key, "operator": "DoesNotExist"} for key in self.absent_labels]
            required = {"nodeSelectorTerms": [{"matchExpressions": absent}]}
            spec["affinity"] = {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            }
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def observe(
    api: k8s.CoreV1Api,
    namespace: str,
    manifest: Mapping[str, Any],
    *,
    until: Callable[[PodView], bool],
) -> Observation:
    """Create the pod and watch it until ``until(view)`` holds or it is deleted; the
    watch starts before the creation, so that no status the pod had is missed."""
    name = manifest["metadata"]["name"]
    listed = api.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}")
    api.create_namespaced_pod(namespace, dict(manifest))
    return watch_pod(
        api,
        namespace,
        name,
        until=until,
        resource_version=listed.metadata.resource_version,
    )


def watch_pod(
    api: k8s.CoreV1Api,
    namespace: str,
    name: str,
    *,
    until: Callable[[PodView], bool],
    resource_version: str | None = None,
) -> Observation:
    """Watch a pod (from ``resource_version``, else from now) until ``until(view)``
    holds or it is deleted."""
    views: list[PodView] = []
    deleted = False
    deadline = time.monotonic() + TIMEOUT_S
    stream: Any = watch.Watch()
    while not deleted and time.monotonic() < deadline:
        remaining = max(1, int(deadline - time.monotonic()))
        since = {"resource_version": resource_version} if resource_version and not views else {}
        for event in stream.stream(
            api.list_namespaced_pod,
            namespace,
            field_selector=f"metadata.name={name}",
            timeout_seconds=remaining,
            _request_timeout=remaining + 5,
            **since,
        ):
            body = api.api_client.sanitize_for_serialization(event["object"])
            view = comparable(pod_view(body))
            if not views or views[-1] != view:
                views.append(view)
            if event["type"] == "DELETED":
                deleted = True
                break
            if until(view):
                stream.stop()
                return Observation(tuple(views), deleted)
    if not views:
        raise AssertionError(f"pod {namespace}/{name}: no watch event in {TIMEOUT_S:.0f}s")
    if not deleted:
        raise AssertionError(f"pod {namespace}/{name}: condition not met; last {views[-1]}")
    return Observation(tuple(views), deleted)


def ended(view: PodView) -> bool:
    return view.phase in ("Succeeded", "Failed")
