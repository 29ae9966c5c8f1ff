"""Raw Kubernetes objects (dicts, as watched) → the core's compact views.

These are what the operator keeps in memory per object (its cache), so they
hold only what the core reads.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import (
    CREATION_NONCE_ANNOTATION,
    GPU_RESOURCE,
    NODE_CONDITION_TYPE,
    REMEDY_CONDITION_TYPE,
)
from gpuaccept.contracts.forward import read_forward
from gpuaccept.contracts.inservice import InServiceStatus
from gpuaccept.contracts.nodeacceptance import (
    MAX_CREATION_INTENTS,
    MAX_OWNED_PODS,
    NodeAcceptanceStatus,
    Phase,
)
from gpuaccept.contracts.policy_fields import OWNED_KEY_PREFIX
from gpuaccept.contracts.probe_invocation import ENV_FABRIC_NONCE
from gpuaccept.operator.core.fencerules import FENCE_COMPONENT, GPU_UUID_ANNOTATION
from gpuaccept.operator.core.gpusharing import SHARED_GPU_RESOURCE
from gpuaccept.operator.core.inservice.correlation import signatures
from gpuaccept.operator.core.model import (
    PUBLISHED_FIGURES,
    ConditionSeen,
    DeviceTaintView,
    DraDevice,
    FabricPodLabels,
    FenceRuleView,
    NAView,
    NodeCondition,
    NodePod,
    NodeView,
    PackedReadings,
    PodView,
    PolicyView,
    ResourceSliceView,
    SignatureSeen,
    Taint,
)
from gpuaccept.operator.core.podidentity import (
    claim_names,
    controller_uid,
    mounts_token,
    shape_digest,
)
from gpuaccept.operator.core.podspec import (
    ATTEMPT_LABEL,
    COMPONENT_LABEL,
    CONTAINER_NAME,
    FABRIC_FIRST_ANNOTATION,
    FABRIC_PAIR_LABEL,
    FABRIC_RANK_LABEL,
    FABRIC_SECOND_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NODE_LABEL,
    NODE_NAME_ANNOTATION,
    WATCH_LABEL,
)

log = logging.getLogger(__name__)


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata") or {}
    return meta if isinstance(meta, Mapping) else {}


def resource_version(body: Mapping[str, Any]) -> int:
    try:
        return int(_meta(body).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _quantity(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _owned_annotations(meta: Mapping[str, Any]) -> dict[str, str]:
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        return {}
    return {
        str(key): str(value)
        for key, value in annotations.items()
        if str(key).startswith(OWNED_KEY_PREFIX)
    }


def _shared_labels(labels: object) -> dict[str, str]:
    """A Node's labels with their keys and values interned: every node's copy of
    ``kubernetes.io/hostname`` or ``nvidia.com/gpu.product`` and most values
    (``true``, a product name, a driver version) is then one string, not one per
    node and watch event (the cache keeps every node's labels)."""
    if not isinstance(labels, Mapping):
        return {}
    return {sys.intern(str(key)): sys.intern(str(value)) for key, value in labels.items()}


def node_view(body: Mapping[str, Any]) -> NodeView:
    meta = _meta(body)
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    conditions: dict[str, NodeCondition] = {}
    others: list[ConditionSeen] = []
    for cond in status.get("conditions") or ():
        if cond.get("type") in (NODE_CONDITION_TYPE, REMEDY_CONDITION_TYPE):
            conditions[str(cond.get("type"))] = NodeCondition(
                str(cond.get("status", "")),
                str(cond.get("reason", "")),
                str(cond.get("message", "")),
            )
        elif cond.get("type"):
            # Type and status are a handful of interned words; no message is kept.
            others.append(
                ConditionSeen(
                    sys.intern(str(cond.get("type"))),
                    sys.intern(str(cond.get("status", ""))),
                    _timestamp(cond.get("lastTransitionTime")),
                )
            )
    capacity = status.get("capacity") or {}
    allocatable = status.get("allocatable") or capacity
    return NodeView(
        name=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        uid=str(meta.get("uid", "")),
        labels=_shared_labels(meta.get("labels")),
        # Only our own: the core reads the reprobe annotation, and a real node
        # carries kilobytes of others' (kubeadm, CNI, CSI) that the cache would keep.
        annotations=_owned_annotations(meta),
        taints=tuple(Taint.from_wire(t) for t in spec.get("taints") or ()),
        boot_id=str((status.get("nodeInfo") or {}).get("bootID", "")),
        gpus=_quantity(allocatable.get(GPU_RESOURCE, 0)),
        gpu_capacity=_quantity(capacity.get(GPU_RESOURCE, 0)),
        shared_gpus=_quantity(allocatable.get(SHARED_GPU_RESOURCE, 0)),
        unschedulable=bool(spec.get("unschedulable", False)),
        condition=conditions.get(NODE_CONDITION_TYPE),
        remedy=conditions.get(REMEDY_CONDITION_TYPE),
        created=_timestamp(meta.get("creationTimestamp")),
        conditions=tuple(others),
    )


def _attribute(attributes: Mapping[str, Any], name: str) -> object:
    """A device attribute's value (``string``, ``int``, ``bool`` or ``version``), by its
    bare name or qualified by the driver's domain; None when absent or not a mapping."""
    raw = attributes.get(name)
    if not isinstance(raw, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in raw:
            return raw[kind]
    return None


def _device_taint(raw: object) -> DeviceTaintView | None:
    if not isinstance(raw, Mapping) or not raw.get("key"):
        return None
    return DeviceTaintView(
        key=str(raw["key"]),
        value=str(raw.get("value") or ""),
        effect=str(raw.get("effect") or ""),
        added=_timestamp(raw.get("timeAdded")),
    )


def _dra_device(raw: object) -> DraDevice | None:
    if not isinstance(raw, Mapping) or not raw.get("name"):
        return None
    attributes = raw.get("attributes")
    if not isinstance(attributes, Mapping):
        attributes = {}
    index = _attribute(attributes, "index")
    raw_taints = raw.get("taints")
    taints = raw_taints if isinstance(raw_taints, list) else []
    return DraDevice(
        name=str(raw["name"]),
        uuid=str(_attribute(attributes, "uuid") or ""),
        product_name=str(_attribute(attributes, "productName") or ""),
        index=index if isinstance(index, int) and not isinstance(index, bool) else None,
        kind=str(_attribute(attributes, "type") or ""),
        taints=tuple(t for t in map(_device_taint, taints) if t is not None),
        parent_uuid=str(_attribute(attributes, "parentUUID") or ""),
    )


def resource_slice_view(body: Mapping[str, Any]) -> ResourceSliceView:
    """A ``resource.k8s.io/v1`` ResourceSlice as the core reads it. A field of the
    wrong shape reads as absent (the API server validates slices; this never raises)."""
    meta = _meta(body)
    spec = body.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    pool = spec.get("pool")
    pool = pool if isinstance(pool, Mapping) else {}
    raw_devices = spec.get("devices")
    devices = raw_devices if isinstance(raw_devices, list) else []
    return ResourceSliceView(
        name=str(meta.get("name", "")),
        driver=str(spec.get("driver") or ""),
        pool=str(pool.get("name") or ""),
        generation=_quantity(pool.get("generation", 0)),
        slice_count=_quantity(pool.get("resourceSliceCount", 0)),
        node_name=str(spec.get("nodeName") or ""),
        devices=tuple(d for d in map(_dra_device, devices) if d is not None),
        resource_version=str(meta.get("resourceVersion", "")),
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def fence_rule_view(body: Mapping[str, Any]) -> FenceRuleView | None:
    """One of gpuaccept's fence DeviceTaintRules (core/fencerules.py) as the core reads
    it; None for any other rule (not the operator's labels, or no node). A field of the
    wrong shape reads as absent."""
    meta = _meta(body)
    labels = _mapping(meta.get("labels"))
    if (
        labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE
        or labels.get(COMPONENT_LABEL) != FENCE_COMPONENT
        or not labels.get(NODE_LABEL)
    ):
        return None
    spec = _mapping(body.get("spec"))
    selector, taint = _mapping(spec.get("deviceSelector")), _mapping(spec.get("taint"))
    return FenceRuleView(
        name=str(meta.get("name", "")),
        node=str(_mapping(meta.get("annotations")).get(NODE_NAME_ANNOTATION) or labels[NODE_LABEL]),
        gpu_uuid=str(_mapping(meta.get("annotations")).get(GPU_UUID_ANNOTATION, "")),
        driver=str(selector.get("driver") or ""),
        pool=str(selector.get("pool") or ""),
        device=str(selector.get("device") or ""),
        key=str(taint.get("key") or ""),
        value=str(taint.get("value") or ""),
        effect=str(taint.get("effect") or ""),
    )


PACKED_FIELDS = (
    "report",
    "checks",
    "baseline",
    "probed_sections",
    "figures",
    "conditions",
    "in_service",
)
"""The status fields a NodeAcceptance's cache entry keeps packed, as compressed JSON:
the evidence (the stored probe report, the per-check summaries, the baseline, the
digests of the policy sections the report was measured under) and the records no
reader of the slim view needs whole (the key figures, the conditions, the in-service
ledger: each parses into 1.3 to 2.6 KB of models). A decision reads them (re-judging,
releasing a held verdict, the in-service phase) and writes them back; the slim
view's readers take what they need of them from :class:`PackedReadings`."""

_PACKED_WIRE = tuple(
    NodeAcceptanceStatus.model_fields[name].alias or name for name in PACKED_FIELDS
)
"""The same fields as the status's JSON names them."""

_FIGURES_WIRE, _IN_SERVICE_WIRE = "figures", "inService"


@dataclass(frozen=True)
class CachedAcceptance:
    """A NodeAcceptance as the cache keeps it (memory per node).

    ``view`` holds the status without its packed fields (:data:`PACKED_FIELDS`),
    with :class:`PackedReadings` (``view.packed``): what the counts, the metrics,
    the correlation index, the fabric pass and the status loop read. The packed
    fields (the probe's results with their observed values: ~7 KB of JSON that parses
    into some 130 objects; the section digests; the figures, conditions and in-service
    ledger) stay as their compact wire JSON, compressed (:class:`Packing`), parsed by
    :meth:`with_evidence` only for a decision, which reads them and writes them back
    with every status (a status write replaces the status whole).
    """

    view: NAView
    # {"report": …, "inService": …, …} as PACKING.pack compressed it; None: none
    packed_json: bytes | None = None

    def with_evidence(self) -> NAView:
        """The view with its packed fields parsed into the status: the status whole,
        as the core reads it.

        Unreadable packed fields make the whole status unreadable, as when the
        status is parsed at once: the node starts over (never an acceptance).
        """
        if self.packed_json is None:
            return replace(self.view, packed=None)
        update = PARSED_PACKED.get(self.packed_json)
        if update is None:
            try:
                raw = json.loads(PACKING.unpack(self.packed_json))
                packed = read_forward(NodeAcceptanceStatus, raw)
            except (ValidationError, zlib.error, ValueError) as error:
                _unreadable(self.view.name, error)
                salvaged = _salvaged(self.view.status.to_wire())
                return replace(self.view, status=salvaged, packed=None)
            update = {name: getattr(packed, name) for name in PACKED_FIELDS}
            PARSED_PACKED.put(self.packed_json, update)
        status = self.view.status.model_copy(update=update)
        return replace(self.view, status=status, packed=None)


class Packing:
    """The compression of the packed fields: zlib against a preset dictionary (zlib's
    ``zdict``), the first packed JSON with a report this process packs, fixed from then
    on. The nodes' reports name the same checks, observed fields and messages, so
    against another node's a status packs into a fraction of what it packs into
    alone. A blob's first byte says how it was packed: 0 alone (before any report
    was seen), 1 against the dictionary."""

    ALONE, AGAINST = b"\x00", b"\x01"

    def __init__(self) -> None:
        self._dictionary: bytes | None = None
        self._lock = threading.Lock()  # entries are made on the event loop and the API threads

    def pack(self, text: bytes, has_report: bool) -> bytes:
        dictionary = self._dictionary
        if dictionary is None and has_report:
            with self._lock:
                if self._dictionary is None:
                    self._dictionary = text[-ZLIB_WINDOW:]
                dictionary = self._dictionary
        if dictionary is None:
            return self.ALONE + zlib.compress(text, 1)
        packer = zlib.compressobj(1, zdict=dictionary)
        return self.AGAINST + packer.compress(text) + packer.flush()

    def unpack(self, blob: bytes) -> bytes:
        """The JSON ``blob`` was packed from; :class:`zlib.error` if it is not whole."""
        kind, data = blob[:1], blob[1:]
        if kind == self.ALONE:
            return zlib.decompress(data)
        if kind != self.AGAINST or self._dictionary is None:
            raise zlib.error(f"not a packed blob (kind {kind!r})")
        unpacker = zlib.decompressobj(zdict=self._dictionary)
        text = unpacker.decompress(data)
        if not unpacker.eof:
            raise zlib.error("packed blob cut short")
        return text


ZLIB_WINDOW = 32768  # zlib reads at most the dictionary's last 32 KB
PACKING = Packing()


class ParsedPacked:
    """The packed fields parsed lately, by their compressed JSON: a node's passes come
    in a run (the verdict's watch events, the Node's, its pods'), each reading the same
    fields, which parse in about 2 ms. The parsed fields are frozen models, shared
    by the views that read them. At most ``size`` entries (~60 KB each), the oldest
    read dropped first; unreadable fields are never kept (they are judged each time)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()  # read on the event loop and the API threads

    def get(self, key: bytes) -> dict[str, Any] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: bytes, update: dict[str, Any]) -> None:
        with self._lock:
            self._entries[key] = update
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


PARSED_PACKED = ParsedPacked(32)


def _unreadable(name: object, error: Exception) -> None:
    # Fail safe: an unreadable status starts over (the node goes back under
    # the pending taint and is probed again); never an acceptance.
    log.error("NodeAcceptance %s: unreadable status, starting over: %s", name, error)


SALVAGED_FIELDS = ("nodeUID", "release")
"""Fields an unreadable status keeps when each reads on its own (besides the applied
keys, the pod serial, the owned pods and the creation intents, read item by item): the
Node's UID (a node re-created under its name is still found out), and the record of
the last release a person asked for (without it, the release request still annotated
on the NodeAcceptance would be applied again: the node taken out of quarantine once more)."""


def _readable(wire: str, value: object) -> dict[str, Any]:
    """``{name: value}`` of the one status field ``wire``, if it reads on its own."""
    try:
        alone = read_forward(NodeAcceptanceStatus, {wire: value})
    except ValidationError:
        return {}
    return {name: getattr(alone, name) for name in alone.model_fields_set}


def _readable_items(wire: str, name: str, items: list[Any]) -> list[Any]:
    """The items of the list field ``wire`` that read one by one (field ``name``)."""
    read = [_readable(wire, [item]).get(name, []) for item in items]
    return [item for one in read for item in one]


def _salvaged(raw: object) -> NodeAcceptanceStatus:
    """A status that cannot be read starts over, but keeps what it must never lose:
    the taint and label keys the operator applied (read raw; else an owned
    quarantine taint would be orphaned), the pod serial (pod names stay unique), the
    pods it owns (each one that reads: else its running probe pod would be stranded,
    never read, never deleted) and :data:`SALVAGED_FIELDS`. Not the drain: the node
    starts over under the pending taint, which its own pods tolerate."""
    raw = raw if isinstance(raw, Mapping) else {}
    keep: dict[str, Any] = {}
    for wire, name in (("appliedTaints", "applied_taints"), ("appliedLabels", "applied_labels")):
        value = raw.get(wire)
        if isinstance(value, list):
            keep[name] = [str(key) for key in value if isinstance(key, str)]
    serial = raw.get("podSerial")
    if isinstance(serial, int) and not isinstance(serial, bool) and serial >= 0:
        keep["pod_serial"] = serial
    for wire, name, bound in (
        ("ownedPods", "owned_pods", MAX_OWNED_PODS),
        ("creationIntents", "creation_intents", MAX_CREATION_INTENTS),
    ):
        items = raw.get(wire)
        if isinstance(items, list):
            keep[name] = _readable_items(wire, name, items)[:bound]
    for wire in SALVAGED_FIELDS:
        if wire in raw:
            keep.update(_readable(wire, raw[wire]))
    return NodeAcceptanceStatus(**keep)


class SharedFieldSets:
    """One set object per distinct set of fields that are set, shared by the cache's
    models: pydantic keeps, on every model, the names of the fields its input had
    (``model_fields_set``) in a set of its own; a slim status has some 20 (a set of
    2.2 KB), each pod on record and creation intent 3. A frozen model never changes
    that set (``model_copy`` changes a copy), so the models whose sets are equal can
    hold one. At most ``size`` distinct sets are kept; a model with another keeps its
    own."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._sets: dict[frozenset[str], set[str]] = {}
        self._lock = threading.Lock()  # entries are made on the event loop and the API threads

    def share(self, model: BaseModel) -> None:
        """Give ``model`` and the models in its fields (and in their lists) the shared
        set equal to theirs."""
        if not model.model_config.get("frozen"):
            return  # a model that can change would change its set in place
        own = model.__pydantic_fields_set__
        key = frozenset(own)
        with self._lock:
            shared = self._sets.get(key)
            if shared is None and len(self._sets) < self.size:
                shared = self._sets[key] = own
        if shared is not None and shared is not own:
            object.__setattr__(model, "__pydantic_fields_set__", shared)
        for value in model.__dict__.values():
            if isinstance(value, BaseModel):
                self.share(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, BaseModel):
                        self.share(item)

    def __len__(self) -> int:
        return len(self._sets)


SHARED_FIELD_SETS = SharedFieldSets(4096)


def cached_acceptance(body: Mapping[str, Any]) -> CachedAcceptance:
    """The cache entry of a NodeAcceptance body: its status parsed but for the packed
    fields, which are kept as compressed JSON (checked when they are parsed)."""
    meta = _meta(body)
    name = str(meta.get("name", ""))
    raw = body.get("status") or {}
    packed_json, readings = None, PackedReadings()
    if isinstance(raw, Mapping) and any(raw.get(wire) for wire in _PACKED_WIRE):
        packed = {wire: raw[wire] for wire in _PACKED_WIRE if raw.get(wire)}
        raw = {key: value for key, value in raw.items() if key not in _PACKED_WIRE}
        try:
            text = json.dumps(packed, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as error:  # no status could carry it
            _unreadable(name, error)
            raw = {}
        else:
            packed_json = PACKING.pack(text.encode(), bool(packed.get("report")))
            readings = _readings(name, packed)
    unknown = _unknown_phase(name, raw)
    if unknown is not None and isinstance(raw, Mapping):
        raw = {**raw, "phase": Phase.PENDING.value}  # the rest read as it is
    try:
        status = read_forward(NodeAcceptanceStatus, raw)
    except ValidationError as error:
        _unreadable(name, error)
        status, packed_json, readings = _salvaged(raw), None, PackedReadings()
    SHARED_FIELD_SETS.share(status)
    view = NAView(
        name=name,
        status=status,
        resource_version=str(meta.get("resourceVersion", "")),
        uid=str(meta.get("uid", "")),
        annotations=_owned_annotations(meta),
        unknown_phase=unknown,
        packed=readings,
    )
    return CachedAcceptance(view, packed_json)


def _readings(name: str, packed: Mapping[str, Any]) -> PackedReadings:
    """What the slim view's readers take of the packed fields (wire JSON, unchecked):
    the published figures that are scalars, and the in-service signatures of a ledger
    with a suspect or a verdict (parsed only then: most ledgers have neither). What
    does not read is left out here; a decision finds the status unreadable."""
    figures = packed.get(_FIGURES_WIRE)
    found: tuple[tuple[str, object], ...] = ()
    if isinstance(figures, Mapping):
        found = tuple(
            (figure, value)
            for figure in PUBLISHED_FIGURES
            if isinstance(value := figures.get(figure), int | float | str)
        )
    ledger = packed.get(_IN_SERVICE_WIRE)
    seen: tuple[SignatureSeen, ...] = ()
    if isinstance(ledger, Mapping) and (ledger.get("suspects") or ledger.get("verdict")):
        try:
            seen = tuple(signatures(name, read_forward(InServiceStatus, ledger)))
        except ValidationError:
            seen = ()
    return PackedReadings(found, seen) if found or seen else _NO_READINGS


_NO_READINGS = PackedReadings()


def _unknown_phase(name: object, raw: object) -> str | None:
    """The stored phase when this release does not know it (core/phases/unknown.py)."""
    phase = raw.get("phase") if isinstance(raw, Mapping) else None
    if not isinstance(phase, str) or phase in {p.value for p in Phase}:
        return None
    log.warning(
        "NodeAcceptance %s: phase %r is unknown to this release (a newer release wrote it?): "
        "a node in service is left as it is, one out of service starts a new round",
        name,
        phase,
    )
    return phase


def _fabric_nonce(spec: Mapping[str, Any]) -> str:
    """The pair's secret in a fabric pod's environment (``GPUACCEPT_FABRIC_NONCE``)."""
    for container in spec.get("containers") or ():
        for variable in (container or {}).get("env") or ():
            if (variable or {}).get("name") == ENV_FABRIC_NONCE:
                return str(variable.get("value") or "")
    return ""


def _fabric_labels(meta: Mapping[str, Any]) -> FabricPodLabels | None:
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    pair, rank = labels.get(FABRIC_PAIR_LABEL), labels.get(FABRIC_RANK_LABEL)
    first, second = (
        annotations.get(FABRIC_FIRST_ANNOTATION),
        annotations.get(FABRIC_SECOND_ANNOTATION),
    )
    if not (pair and rank in ("0", "1") and first and second) or first == second:
        return None  # not a fabric pod this operator made (a node never pairs with itself)
    return FabricPodLabels(pair=str(pair), rank=int(rank), first=str(first), second=str(second))


def _timestamp(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _watch_serial(meta: Mapping[str, Any]) -> int | None:
    """A watch pod's serial (its gpuaccept.io/watch label), else None."""
    value = str((meta.get("labels") or {}).get(WATCH_LABEL, ""))
    return int(value) if value.isascii() and value.isdigit() else None


def _attempt_serial(meta: Mapping[str, Any]) -> int | None:
    """A probe pod's attempt (its gpuaccept.io/attempt label), else None."""
    try:
        return int((meta.get("labels") or {}).get(ATTEMPT_LABEL, ""))
    except ValueError:
        return None


def _probe_container_state(
    status: Mapping[str, Any],
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any]]:
    """The probe container's terminated state (None: not terminated) and its waiting
    state ({}: not waiting)."""
    terminated: Mapping[str, Any] | None = None
    waiting: Mapping[str, Any] = {}
    for cs in status.get("containerStatuses") or ():
        if cs.get("name") != CONTAINER_NAME:
            continue
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting") or {}
    return terminated, waiting


def _exit_code(terminated: Mapping[str, Any] | None) -> int | None:
    return int(terminated["exitCode"]) if terminated and "exitCode" in terminated else None


def pod_view(body: Mapping[str, Any]) -> PodView:
    meta = _meta(body)
    status = body.get("status") or {}
    terminated, waiting = _probe_container_state(status)
    ended: Mapping[str, Any] = terminated or {}
    spec = body.get("spec") or {}
    return PodView(
        name=str(meta.get("name", "")),
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        serial=_attempt_serial(meta),
        terminated=terminated is not None,
        exit_code=_exit_code(terminated),
        # The pod-level reason (DeadlineExceeded, Evicted) says more than the
        # container's (Error).
        reason=status.get("reason") or ended.get("reason"),
        message=ended.get("message"),
        pod_message=status.get("message"),
        pod_reason=status.get("reason"),
        container_reason=ended.get("reason"),
        waiting_reason=waiting.get("reason"),
        waiting_message=waiting.get("message"),
        run_seconds=container_run_seconds(terminated),
        pod_ip=status.get("podIP") or None,
        fabric_nonce=_fabric_nonce(body.get("spec") or {}),
        created=_timestamp(meta.get("creationTimestamp")),
        finished=_timestamp(ended.get("finishedAt")),
        fabric=_fabric_labels(meta),
        watch=_watch_serial(meta),
        uid=str(meta.get("uid", "")),
        node_name=str(spec.get("nodeName") or ""),
        owner_uid=controller_uid(meta),
        token=mounts_token(spec),
        shape=shape_digest(body),
        nonce=str((meta.get("annotations") or {}).get(CREATION_NONCE_ANNOTATION) or "")[:64],
        claims=claim_names(body.get("spec") or {}),
    )


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def node_pod(body: Mapping[str, Any]) -> NodePod:
    """A pod bound to a node, as a drain reads it."""
    meta, spec = _meta(body), body.get("spec") or {}
    owners = meta.get("ownerReferences") or ()
    return NodePod(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        phase=str((body.get("status") or {}).get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        owner_kinds=tuple(str(o.get("kind", "")) for o in owners if isinstance(o, Mapping)),
        mirror=MIRROR_ANNOTATION in (meta.get("annotations") or {}),
        managed_by=str((meta.get("labels") or {}).get(MANAGED_BY_LABEL, "")),
        tolerations=tuple(t for t in spec.get("tolerations") or () if isinstance(t, Mapping)),
    )


def container_run_seconds(terminated: Mapping[str, Any] | None) -> int | None:
    """A terminated container's ``startedAt`` to ``finishedAt`` (RFC 3339, whole
    seconds); None when either is missing, unreadable, or the runtime never started
    it (``startedAt`` at the epoch, as a StartError reports)."""
    if not terminated:
        return None
    try:
        started = datetime.fromisoformat(str(terminated["startedAt"]))
        finished = datetime.fromisoformat(str(terminated["finishedAt"]))
    except (KeyError, ValueError):
        return None
    if started.timestamp() <= 0 or finished < started:
        return None
    return round((finished - started).total_seconds())


@dataclass(frozen=True)
class PolicyEntry:
    view: PolicyView
    uid: str = ""
    status: Mapping[str, Any] = field(default_factory=dict)


def policy_entry(
    body: Mapping[str, Any], owned_prefixes: tuple[str, ...] = (OWNED_KEY_PREFIX,)
) -> PolicyEntry:
    """The policy as the core sees it; ``spec`` None (and ``error`` why) when it is
    invalid: the model refuses it, or it names a taint or label key under none of
    the ``owned_prefixes`` (another owner's key, which the operator would remove)."""
    meta = _meta(body)
    name = str(meta.get("name", ""))
    generation = int(meta.get("generation") or 1)
    try:
        spec: NodeAcceptancePolicySpec | None = NodeAcceptancePolicySpec.model_validate(
            body.get("spec") or {}
        )
        error = None
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        spec, error = None, f"spec.{loc}: {first.get('msg', '')}"
    if spec is not None:
        foreign = spec.keys_not_owned(owned_prefixes)
        if foreign:
            spec, error = (
                None,
                f"spec names {', '.join(foreign)}: taint and label keys must be under "
                f"{', '.join(owned_prefixes)} (the operator removes the keys a policy "
                "names; another owner's key is not its to remove)",
            )
    return PolicyEntry(
        view=PolicyView(
            name=name, generation=generation, spec=spec, error=error, uid=str(meta.get("uid", ""))
        ),
        uid=str(meta.get("uid", "")),
        status=dict(body.get("status") or {}),
    )
