"""The kopf wiring: indexes (the cache) and event handlers that only enqueue.

On Nodes only ``@kopf.index`` and ``@kopf.on.event`` are used: kopf's
create/update/resume/delete handlers, timers and daemons write annotations or
finalizers onto the objects they watch, and nothing of kopf's may land on a
Node. The same goes for the other kinds here, so kopf writes nothing at all;
the operator's own state lives in NodeAcceptance status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import kopf

from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, GROUP, POLICY_PLURAL, VERSION
from gpuaccept.contracts.policy_fields import CONTROL_PLANE_ROLE_LABELS
from gpuaccept.operator.cache import (
    FENCE_RULES_INDEX,
    NAS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    POLICIES_INDEX,
    SLICES_INDEX,
    index_fence_rule,
    index_na,
    index_node,
    index_pod,
    index_policy,
    index_resource_slice,
)
from gpuaccept.operator.controller import Controller
from gpuaccept.operator.core.fencerules import FENCE_COMPONENT
from gpuaccept.operator.core.podidentity import pinned_node
from gpuaccept.operator.core.podspec import (
    COMPONENT_LABEL,
    COMPONENT_VALUE,
    FABRIC_PAIR_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
)
from gpuaccept.operator.views import fence_rule_view, resource_version

log = logging.getLogger(__name__)

# The DRA API whose ResourceSlices publish GPUs (GA since Kubernetes 1.34).
RESOURCE_GROUP, RESOURCE_VERSION, SLICES_PLURAL = "resource.k8s.io", "v1", "resourceslices"
RULES_PLURAL = "devicetaintrules"  # gpuaccept's fences (core/fencerules.py)


def node_watch_filters(
    selector: Iterable[tuple[str, str | None]], *, allow_control_plane: bool
) -> dict[str, Any]:
    """kopf label filters of the Nodes the operator watches: its base selector (value
    None: the label is present) and, unless control-plane nodes are allowed, neither
    control-plane role label. A node outside them is invisible to every policy."""
    filters: dict[str, Any] = {
        key: kopf.PRESENT if value is None else value for key, value in selector
    }
    if not allow_control_plane:
        filters.update(dict.fromkeys(CONTROL_PLANE_ROLE_LABELS, kopf.ABSENT))
    return filters


def build_registry(
    controller: Controller, node_selector: dict[str, Any] | None = None
) -> kopf.OperatorRegistry:
    """kopf handlers for the controller; ``node_selector`` limits the Nodes watched.

    Every handler is ``async def``: kopf runs a sync handler in a thread pool, and
    these touch the controller's asyncio work queue and cache, which belong to the
    event loop (an enqueue from another thread can be lost, or wait for the loop's
    next I/O). They do no I/O, so the loop is the right place."""
    registry = kopf.OperatorRegistry()
    probe_labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, COMPONENT_LABEL: COMPONENT_VALUE}
    node_labels = node_selector or None
    _add_indexes(registry, controller, node_labels, probe_labels)
    _add_event_handlers(registry, controller, node_labels, probe_labels)
    _watch_resource_slices(controller, registry)  # none without a DRA driver
    _watch_fence_rules(controller, registry)  # none where the API server serves none
    _add_lifecycle(registry, controller)
    return registry


def _add_indexes(
    registry: kopf.OperatorRegistry,
    controller: Controller,
    node_labels: dict[str, Any] | None,
    probe_labels: dict[str, str],
) -> None:
    """The cache's four kopf indexes: Nodes, NodeAcceptances, policies, probe pods."""

    # The function names are the index names (kopf passes them as kwargs).
    async def gpuaccept_nodes(body: kopf.Body, **_: Any) -> dict[str, Any]:
        return index_node(body)

    async def gpuaccept_nodeacceptances(body: kopf.Body, **_: Any) -> dict[str, Any]:
        # the watch event of our own status write: the entry made of the write's answer
        return index_na(body, controller.cache)

    async def gpuaccept_policies(body: kopf.Body, **_: Any) -> dict[str, Any]:
        return index_policy(body, controller.config.owned_key_prefixes)

    async def gpuaccept_probe_pods(body: kopf.Body, **_: Any) -> dict[str, Any]:
        return index_pod(body)

    assert gpuaccept_nodes.__name__ == NODES_INDEX
    assert gpuaccept_nodeacceptances.__name__ == NAS_INDEX
    assert gpuaccept_policies.__name__ == POLICIES_INDEX
    assert gpuaccept_probe_pods.__name__ == PODS_INDEX
    kopf.index("", "v1", "nodes", labels=node_labels, id=NODES_INDEX, registry=registry)(
        gpuaccept_nodes
    )
    kopf.index(GROUP, VERSION, ACCEPTANCE_PLURAL, id=NAS_INDEX, registry=registry)(
        gpuaccept_nodeacceptances
    )
    kopf.index(GROUP, VERSION, POLICY_PLURAL, id=POLICIES_INDEX, registry=registry)(
        gpuaccept_policies
    )
    kopf.index("", "v1", "pods", labels=probe_labels, id=PODS_INDEX, registry=registry)(
        gpuaccept_probe_pods
    )


def _add_event_handlers(
    registry: kopf.OperatorRegistry,
    controller: Controller,
    node_labels: dict[str, Any] | None,
    probe_labels: dict[str, str],
) -> None:
    """kopf has updated its indexes when these run: each refreshes the fleet's counts
    for its object (O(1)), then enqueues."""

    @kopf.on.event("", "v1", "nodes", labels=node_labels, registry=registry)
    async def node_event(name: str, type: str | None, **kwargs: Any) -> None:
        controller.cache.attach(kwargs)
        controller.cache.saw("node", name, type, time.monotonic())
        controller.cache.refresh("node", name)
        controller.enqueue(name)

    if node_labels is not None:
        # A node relabelled out of the selector leaves kopf's index without an
        # event for node_event: this one (no filter, no enqueue) uncounts it.
        @kopf.on.event("", "v1", "nodes", registry=registry)
        async def node_count(name: str, type: str | None, **kwargs: Any) -> None:
            controller.cache.attach(kwargs)
            controller.cache.saw("node", name, type, time.monotonic())
            controller.cache.refresh("node", name)

    @kopf.on.event(GROUP, VERSION, ACCEPTANCE_PLURAL, registry=registry)
    async def na_event(
        name: str,
        spec: kopf.Spec,
        status: kopf.Status,
        type: str | None,
        body: kopf.Body,
        **kwargs: Any,
    ) -> None:
        controller.cache.attach(kwargs)
        echo = controller.cache.echo("na", name, resource_version(body))
        controller.cache.saw("na", name, type, time.monotonic())
        controller.cache.refresh("na", name)
        if not echo:  # an echo of the node's own write: its next pass read that version
            controller.enqueue(str(spec.get("nodeName") or name))
        if status.get("fabric"):  # a node in (or done with) a fabric test
            controller.fabric.poke()

    @kopf.on.event(GROUP, VERSION, POLICY_PLURAL, registry=registry)
    async def policy_event(name: str, type: str | None, **kwargs: Any) -> None:
        controller.cache.attach(kwargs)
        controller.cache.saw("policy", name, type, time.monotonic())
        controller.cache.refresh_policies()
        controller.policy_seen()

    _add_pod_event(registry, controller, probe_labels)


def _add_pod_event(
    registry: kopf.OperatorRegistry, controller: Controller, probe_labels: dict[str, str]
) -> None:
    """The operator's pods (probe, fabric, watch): each event re-queues its node, but
    the echo of the node's own create."""

    @kopf.on.event("", "v1", "pods", labels=probe_labels, registry=registry)
    async def pod_event(
        name: str,
        spec: kopf.Spec,
        labels: kopf.Labels,
        type: str | None,
        body: kopf.Body,
        **kwargs: Any,
    ) -> None:
        controller.cache.attach(kwargs)
        echo = controller.cache.echo("pod", name, resource_version(body))
        controller.cache.saw("pod", name, type, time.monotonic())
        if not echo:  # the echo of the node's own create: its next pass read that version
            controller.enqueue(pinned_node(spec))
        if FABRIC_PAIR_LABEL in labels:  # a fabric pair's pod: the pair pass reads it
            controller.fabric.poke()


def _add_lifecycle(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    """The controller starts with kopf (its settings configured) and stops with it."""

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)
        await controller.start()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await controller.stop()


def _watch_resource_slices(controller: Controller, registry: kopf.OperatorRegistry) -> None:
    """ResourceSlices of the configured DRA drivers, kept by node (kopf's index; the
    other drivers' slices are not kept), and a slice change re-queues its node. kopf
    lists and watches every slice (it sets no field selector) and filters here."""
    drivers = frozenset(controller.config.dra_drivers)
    if not drivers:
        return

    async def gpuaccept_resource_slices(body: kopf.Body, **_: Any) -> dict[str, Any]:
        return index_resource_slice(body, drivers)

    assert gpuaccept_resource_slices.__name__ == SLICES_INDEX
    kopf.index(RESOURCE_GROUP, RESOURCE_VERSION, SLICES_PLURAL, id=SLICES_INDEX, registry=registry)(
        gpuaccept_resource_slices
    )

    @kopf.on.event(RESOURCE_GROUP, RESOURCE_VERSION, SLICES_PLURAL, registry=registry)
    async def resource_slice_event(
        body: kopf.Body, name: str, type: str | None, **kwargs: Any
    ) -> None:
        controller.cache.attach(kwargs)
        for node in index_resource_slice(body, drivers):  # a deletion: its last state
            controller.cache.saw("slice", name, type, time.monotonic())
            controller.cache.refresh("node", node)  # a DRA node's size (its pools' GPUs)
            controller.enqueue(node)


def _watch_fence_rules(controller: Controller, registry: kopf.OperatorRegistry) -> None:
    """gpuaccept's fence DeviceTaintRules (core/fencerules.py), kept by node (kopf's
    index, by the operator's labels, checked after each relist like the slices), and a
    rule change re-queues its node: a rule someone deleted or changed is made again.
    Not watched where the API server does not serve them (the runtime asked its
    discovery: OperatorConfig.device_taint_rules)."""
    if not controller.config.device_taint_rules or not controller.config.dra_drivers:
        return  # no rules served, or no DRA node to fence a GPU of
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, COMPONENT_LABEL: FENCE_COMPONENT}

    async def gpuaccept_fence_rules(body: kopf.Body, **_: Any) -> dict[str, Any]:
        return index_fence_rule(body)

    assert gpuaccept_fence_rules.__name__ == FENCE_RULES_INDEX
    kopf.index(
        RESOURCE_GROUP,
        RESOURCE_VERSION,
        RULES_PLURAL,
        labels=labels,
        id=FENCE_RULES_INDEX,
        registry=registry,
    )(gpuaccept_fence_rules)

    @kopf.on.event(RESOURCE_GROUP, RESOURCE_VERSION, RULES_PLURAL, labels=labels, registry=registry)
    async def fence_rule_event(body: kopf.Body, name: str, type: str | None, **kwargs: Any) -> None:
        controller.cache.attach(kwargs)
        view = fence_rule_view(body)
        if view is not None:  # a deletion: its last state
            controller.cache.saw("rule", name, type, time.monotonic())
            controller.enqueue(view.node)


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """No "last handled state": only change handlers use it, and there are none.

    kopf would otherwise deep-copy every watched object on every event to build
    a diff nobody reads (the top cost in a 1000-node profile), and its default
    storage keeps that state in an annotation on the object.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


class NoProgressStorage(kopf.ProgressStorage):
    """No handler progress: event and index handlers keep none. Never writes anything."""

    def fetch(self, *, key: Any, body: kopf.Body) -> None:
        return None

    def store(self, *, key: Any, record: Any, body: kopf.Body, patch: kopf.Patch) -> None:
        return None

    def purge(self, *, key: Any, body: kopf.Body, patch: kopf.Patch) -> None:
        return None

    def touch(self, *, body: kopf.Body, patch: kopf.Patch, value: str | None) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


LIST_PAGE = 500
"""Objects per page of kopf's lists (the start of each watch, and each relist)."""


def configure(settings: kopf.OperatorSettings) -> None:
    """kopf settings: nothing persisted on objects, no Events of its own, no CRD scanning."""
    settings.persistence.diffbase_storage = NoDiffBaseStorage()
    settings.persistence.progress_storage = NoProgressStorage()
    settings.posting.enabled = False
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.queueing.worker_limit = None
    # kopf keeps a worker per object until it has idled this long, and the
    # worker keeps that object's last raw event (the whole decoded body) alive
    # while it waits: with the fleet joining at once, that is every object's
    # body for 5 s by default (peak RSS).
    settings.queueing.idle_timeout = 0.5
    # A watch that ends in 410 Gone lists its kind again. Unpaged, the list is one
    # response: 5,000 NodeAcceptances are ~50 MB of JSON, decoded at once into some
    # four times that (the operator's peak RSS). Pages of LIST_PAGE objects bound
    # the transient at a page (kopf keeps one page at a time) for a request per page.
    settings.watching.chunk_size = LIST_PAGE
    settings.networking.connect_timeout = 10
