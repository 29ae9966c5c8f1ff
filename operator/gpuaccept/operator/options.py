"""The operator's command-line options: the parser, and the checks of its values
(ranges, the JSON flags for probe resources and tolerations). Every error is one
line, ``--flag: field: reason``; ``cli.main`` exits 2 on it."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
from typing import Any, NoReturn

from gpuaccept.contracts.cli_help import DefaultsHelpFormatter
from gpuaccept.contracts.policy_fields import (
    CONTROL_PLANE_ROLE_LABELS,
    OWNED_KEY_PREFIX,
    OWNED_PREFIX_PATTERN,
    RESERVED_KEY_PATTERN,
)
from gpuaccept.contracts.probe_invocation import (
    DEFAULT_RENDEZVOUS_PORT,
    RESERVED_ENV,
    RESERVED_ENV_PREFIX,
    reserved_env,
)
from gpuaccept.operator.core.model import FabricPodConfig

# The chart's defaults (charts/gpuaccept/values.yaml; the images' EXPOSE), so that
# the operator run by hand listens and elects as the installed one does.
DEFAULT_HEALTH_PORT = 8080
DEFAULT_METRICS_PORT = 9090
DEFAULT_LEASE_NAME = "gpuaccept"


class OptionError(Exception):
    """Bad configuration; the message is one line: ``--flag: field: reason``."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage block); ``main`` exits 2 on them;
    ``--help`` shows every default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise OptionError(" ".join(message.split()))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names = {dict: "object", list: "array", str: "string", int: "integer", float: "number"}
    return names.get(type(value), type(value).__name__)


def _json_flag(text: str, flag: str, default: Any) -> Any:
    if not text.strip():
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(f"{flag}: not valid JSON: {error.msg} at char {error.pos}") from None


# A Kubernetes resource quantity: "4", "500m", "16Gi", "1.5", "1e3".
_QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$")
_RESOURCE_SECTIONS = ("requests", "limits")


def _quantity(value: Any, where: str) -> str:
    # A number is a quantity too (Helm renders an unquoted `cpu: 2` as one).
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise OptionError(
            f'{where}: expected a quantity such as "4" or "16Gi", got {_json_type(value)}'
        )
    if not _QUANTITY.match(value):
        raise OptionError(f"{where}: not a Kubernetes quantity (got {value!r})")
    return value


def probe_resources(text: str) -> dict[str, dict[str, str]]:
    """``--probe-resources``: ``{"requests": {name: quantity}, "limits": {...}}``."""
    flag = "--probe-resources"
    data = _json_flag(text, flag, {})
    if not isinstance(data, dict):
        raise OptionError(
            f"{flag}: expected a JSON object with requests and/or limits, got {_json_type(data)}"
        )
    resources: dict[str, dict[str, str]] = {}
    for section, quantities in data.items():
        if section not in _RESOURCE_SECTIONS:
            raise OptionError(f"{flag}: {section}: unknown field (allowed: requests, limits)")
        if not isinstance(quantities, dict):
            raise OptionError(
                f"{flag}: {section}: expected an object of resource name to quantity, "
                f"got {_json_type(quantities)}"
            )
        resources[section] = {
            name: _quantity(quantity, f"{flag}: {section}.{name}")
            for name, quantity in quantities.items()
        }
    return resources


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MAX_SUBDOMAIN = 253

_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _toleration(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise OptionError(f"{where}: expected a toleration object, got {_json_type(item)}")
    _toleration_fields(item, where)
    operator = item.get("operator", "Equal")  # the API server's default
    if operator not in _TOLERATION_OPERATORS:
        raise OptionError(f"{where}.operator: must be Exists or Equal (got {operator!r})")
    if "effect" in item and item["effect"] not in _TAINT_EFFECTS:
        raise OptionError(
            f"{where}.effect: must be NoSchedule, PreferNoSchedule or NoExecute "
            f"(got {item['effect']!r})"
        )
    if "tolerationSeconds" in item:
        _toleration_seconds(item, where)
    if operator == "Exists" and item.get("value"):
        raise OptionError(f"{where}.value: must be empty when operator is Exists")
    if not item.get("key"):
        # Kubernetes allows an empty key with Exists (tolerate every taint); a probe
        # pod that tolerated every taint would run on nodes others fenced off.
        raise OptionError(f"{where}.key: required (a toleration without one tolerates every taint)")
    return dict(item)


def _toleration_fields(item: dict[str, Any], where: str) -> None:
    """Only a toleration's fields, its key and value strings."""
    for name in item:
        if name not in _TOLERATION_FIELDS:
            raise OptionError(
                f"{where}.{name}: unknown field (allowed: {', '.join(_TOLERATION_FIELDS)})"
            )
    for name in ("key", "value"):
        if name in item and not isinstance(item[name], str):
            raise OptionError(f"{where}.{name}: expected a string, got {_json_type(item[name])}")


def _toleration_seconds(item: dict[str, Any], where: str) -> None:
    """tolerationSeconds: an integer, and only with effect NoExecute."""
    seconds = item["tolerationSeconds"]
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise OptionError(
            f"{where}.tolerationSeconds: expected an integer, got {_json_type(seconds)}"
        )
    if item.get("effect") != "NoExecute":
        raise OptionError(f"{where}.tolerationSeconds: only valid with effect NoExecute")


def probe_tolerations(text: str) -> tuple[dict[str, Any], ...]:
    """``--probe-tolerations``: a JSON array of Kubernetes tolerations."""
    flag = "--probe-tolerations"
    data = _json_flag(text, flag, [])
    if not isinstance(data, list):
        raise OptionError(f"{flag}: expected a JSON array of tolerations, got {_json_type(data)}")
    return tuple(_toleration(item, f"{flag}: [{i}]") for i, item in enumerate(data))


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CAPABILITY = re.compile(r"^[A-Z][A-Z0-9_]*$")
_FABRIC_FIELDS = {
    "resources": "object",
    "annotations": "object",
    "capabilities": "array",
    "env": "object",
    "rendezvousPort": "integer",
    "rendezvousTimeoutSeconds": "integer",
    "timeoutSeconds": "integer",
}
_FABRIC_RANGES = {
    "rendezvousPort": (1, 65535),
    "rendezvousTimeoutSeconds": (10, 86400),
    "timeoutSeconds": (60, 86400),
}


def _string_map(value: dict[str, Any], where: str) -> dict[str, str]:
    for key, item in value.items():
        if not isinstance(item, str):
            raise OptionError(f"{where}: {key}: expected a string, got {_json_type(item)}")
    return dict(value)


# The probe pods' labels and annotations the platform team adds (--probe-pod-labels,
# --probe-pod-annotations; the chart's probe.podLabels and probe.podAnnotations). By
# default the service-mesh sidecar injection opt-outs: a sidecar injected into a probe
# pod keeps it Running after the probe ends, until ProbeTimeout (Istio reads the label
# and, as older releases do, the annotation; Linkerd the annotation).
DEFAULT_PROBE_POD_LABELS = {"sidecar.istio.io/inject": "false"}
DEFAULT_PROBE_POD_ANNOTATIONS = {
    "sidecar.istio.io/inject": "false",
    "linkerd.io/inject": "disabled",
}
# Keys the operator's own selectors and records use: its probe-pod selector, the
# chart's operator selector labels, and everything under gpuaccept.io/ (the node, the
# attempt, the fabric pair and its nodes, read back from the pods).
RESERVED_POD_LABELS = frozenset(
    {
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/component",
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
    }
)
_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(
    rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME_PART}$"
)
_LABEL_VALUE = re.compile(rf"^({_NAME_PART})?$")


def _pod_key(key: str, where: str, kind: str) -> None:
    prefix = key.partition("/")[0] if "/" in key else ""
    if not _QUALIFIED_NAME.match(key) or len(prefix) > _MAX_SUBDOMAIN:
        raise OptionError(f"{where}: {key!r} is not a {kind} key ([prefix/]name)")
    if key.startswith(OWNED_KEY_PREFIX) or (kind == "label" and key in RESERVED_POD_LABELS):
        own = [*sorted(RESERVED_POD_LABELS), f"{OWNED_KEY_PREFIX}*"] if kind == "label" else []
        own = own or [f"{OWNED_KEY_PREFIX}*"]
        raise OptionError(
            f"{where}: {key} is the operator's own (its selectors and records use {', '.join(own)})"
        )


def pod_labels(text: str) -> dict[str, str]:
    """``--probe-pod-labels``: a JSON object of label key to value, none the operator's."""
    flag = "--probe-pod-labels"
    data = _json_flag(text, flag, dict(DEFAULT_PROBE_POD_LABELS))
    if not isinstance(data, dict):
        raise OptionError(
            f"{flag}: expected a JSON object of label to value, got {_json_type(data)}"
        )
    labels = _string_map(data, flag)
    for key, value in labels.items():
        _pod_key(key, flag, "label")
        if not _LABEL_VALUE.match(value):
            raise OptionError(f"{flag}: {key}: {value!r} is not a label value")
    return labels


def pod_annotations(text: str) -> dict[str, str]:
    """``--probe-pod-annotations``: a JSON object of annotation key to value."""
    flag = "--probe-pod-annotations"
    data = _json_flag(text, flag, dict(DEFAULT_PROBE_POD_ANNOTATIONS))
    if not isinstance(data, dict):
        raise OptionError(
            f"{flag}: expected a JSON object of annotation to value, got {_json_type(data)}"
        )
    annotations = _string_map(data, flag)
    for key in annotations:
        _pod_key(key, flag, "annotation")
    return annotations


def _env(data: object, where: str) -> dict[str, str]:
    """An env object (NAME: value), none of the probe's own (probe_invocation.RESERVED_ENV)."""
    if not isinstance(data, dict):
        raise OptionError(
            f"{where}: expected a JSON object of NAME to value, got {_json_type(data)}"
        )
    env = _string_map(data, where)
    for name in env:
        if not _ENV_NAME.match(name):
            raise OptionError(f"{where}: {name!r} is not an environment variable name")
        if reserved_env(name):
            raise OptionError(
                f"{where}: {name} is the probe's own (its node, its run, its GPUs, its "
                f"programs: {RESERVED_ENV_PREFIX}* and {', '.join(sorted(RESERVED_ENV))})"
            )
    return env


def probe_env(text: str) -> tuple[tuple[str, str], ...]:
    """``--probe-env``: a JSON object of environment variable to value for probe and
    fabric pods (e.g. a proxy, ``HF_HUB_OFFLINE``), none the probe's own."""
    return tuple(sorted(_env(_json_flag(text, "--probe-env", {}), "--probe-env").items()))


def fabric_pods(text: str) -> FabricPodConfig:
    """``--fabric-pods``: the fabric pods' RDMA settings, the chart's ``fabric`` values:
    ``{"resources": {name: quantity}, "annotations": {...}, "capabilities": [...],
    "env": {NAME: value}, "rendezvousPort", "rendezvousTimeoutSeconds", "timeoutSeconds"}``."""
    flag = "--fabric-pods"
    data = _json_flag(text, flag, {})
    if not isinstance(data, dict):
        raise OptionError(f"{flag}: expected a JSON object, got {_json_type(data)}")
    for key, value in data.items():
        kind = _FABRIC_FIELDS.get(key)
        if kind is None:
            raise OptionError(
                f"{flag}: {key}: unknown field (allowed: {', '.join(_FABRIC_FIELDS)})"
            )
        if _json_type(value) != kind:
            raise OptionError(f"{flag}: {key}: expected {kind}, got {_json_type(value)}")
        if key in _FABRIC_RANGES:
            low, high = _FABRIC_RANGES[key]
            if not low <= value <= high:
                raise OptionError(f"{flag}: {key}: must be between {low} and {high} (got {value})")
    resources = {
        name: _quantity(q, f"{flag}: resources: {name}")
        for name, q in (data.get("resources") or {}).items()
    }
    env = _env(data.get("env") or {}, f"{flag}: env")
    capabilities = data.get("capabilities") or []
    for capability in capabilities:
        if not isinstance(capability, str) or not _CAPABILITY.match(capability):
            raise OptionError(f"{flag}: capabilities: {capability!r} is not a capability name")
    return FabricPodConfig(
        resources=resources,
        annotations=_string_map(data.get("annotations") or {}, f"{flag}: annotations"),
        capabilities=tuple(capabilities),
        env=tuple(sorted(env.items())),
        rendezvous_port=int(data.get("rendezvousPort", DEFAULT_RENDEZVOUS_PORT)),
        rendezvous_timeout_seconds=int(data.get("rendezvousTimeoutSeconds", 300)),
        timeout_seconds=int(data.get("timeoutSeconds", 900)),
    )


_CEILING = re.compile(r"^(100|[1-9]?[0-9])%$|^[0-9]{1,6}$")


def max_unavailable_ceiling(text: str) -> int | str:
    """``--max-unavailable-ceiling``: a count (``5``) or a percentage (``"50%"``)."""
    value = text.strip()
    if not _CEILING.match(value):
        raise OptionError(
            f"--max-unavailable-ceiling: {text!r} is neither a count nor a percentage (0-100%)"
        )
    return value if value.endswith("%") else int(value)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="gpuaccept operator",
        description="Probe new GPU nodes and accept or quarantine them (NodeAcceptancePolicy).",
    )
    _cluster_options(p)
    _gpu_publishing_options(p)
    _limit_options(p)
    _high_availability_options(p.add_argument_group("high availability"))
    _owned_key_options(p)
    probe = p.add_argument_group("probe pods (never taken from a policy)")
    _probe_pod_options(probe)
    _probe_pod_extra_options(probe)
    _observability_options(p.add_argument_group("observability"))
    return p


def _cluster_options(p: argparse.ArgumentParser) -> None:
    """The cluster, the nodes watched and the work done on them."""
    env = os.environ.get
    p.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG"),
        help="kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)",
    )
    p.add_argument(
        "--namespace",
        default=env("POD_NAMESPACE", "gpuaccept-system"),
        help="namespace of probe pods and the leader Lease",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=int(env("GPUACCEPT_WORKERS", "16")),
        help="concurrent reconciles (and API threads)",
    )
    p.add_argument(
        "--status-interval", type=float, default=5.0, help="seconds between policy status updates"
    )
    p.add_argument(
        "--node-selector",
        default=env("GPUACCEPT_NODE_SELECTOR", ""),
        help="only watch Nodes with these labels: key=value or key (present), comma-separated "
        "(default: all Nodes; policies select among them); every pod the operator creates "
        "requires them (its node affinity)",
    )
    p.add_argument(
        "--allow-control-plane-nodes",
        action="store_true",
        default=env("GPUACCEPT_ALLOW_CONTROL_PLANE_NODES", "") == "true",
        help="let policies with includeControlPlane govern control-plane nodes "
        "(node-role.kubernetes.io/control-plane or master); off: they are not watched, "
        "and every pod the operator creates requires a node without those labels",
    )


def _gpu_publishing_options(p: argparse.ArgumentParser) -> None:
    """How a node's GPUs are published (the device plugin, DRA) and watched in service."""
    env = os.environ.get
    p.add_argument(
        "--dra-driver",
        default=env("GPUACCEPT_DRA_DRIVERS", DEFAULT_DRA_DRIVER),
        help="the DRA drivers whose ResourceSlices publish GPUs, comma-separated: a node "
        "with a slice of one of them is DRA-published and waits for a complete pool "
        "(docs/architecture.md); empty: ResourceSlices are not watched, only the device "
        "plugin's nvidia.com/gpu counts",
    )
    p.add_argument(
        "--no-watch-pods",
        action="store_true",
        default=env("GPUACCEPT_NO_WATCH_PODS", "") == "true",
        help="never run in-service watch pods, whatever a policy's inService.watchPods "
        "says: for a container runtime that gives no GPU to an unprivileged pod through "
        "NVIDIA_VISIBLE_DEVICES (docs/security.md, GPUs a pod did not request)",
    )
    p.add_argument(
        "--dra-device-class",
        default=env("GPUACCEPT_DRA_DEVICE_CLASS", DEFAULT_DRA_DEVICE_CLASS),
        help="the DeviceClass a DRA node's probe claim asks every device of (NVIDIA's "
        "chart installs gpu.nvidia.com: its driver's whole GPUs; docs/architecture.md)",
    )


def _limit_options(p: argparse.ArgumentParser) -> None:
    """Waits and limits: unmatched nodes, the CRDs at start, simulated reports, the ceiling."""
    env = os.environ.get
    p.add_argument(
        "--unmatched-grace",
        type=float,
        default=float(env("GPUACCEPT_UNMATCHED_GRACE", "900")),
        help="seconds after its registration before a node that carries a pending taint "
        "and that no policy matches is reported (metric gpuaccept_node_unmatched_pending, "
        "a log line): its labels may still be on their way before that",
    )
    p.add_argument(
        "--crd-wait",
        type=float,
        default=30.0,
        help="seconds to wait at start for the CRDs to be served, and for the API "
        "server's discovery to say whether it serves DeviceTaintRules, then exit 1",
    )
    p.add_argument(
        "--accept-simulated-reports",
        action="store_true",
        help="judge probe reports from simulated hardware (the demo and the tests only); "
        "by default such a report is an attempt error and never accepts a node",
    )
    p.add_argument(
        "--max-unavailable-ceiling",
        type=max_unavailable_ceiling,
        default=max_unavailable_ceiling(env("GPUACCEPT_MAX_UNAVAILABLE_CEILING", "100%")),
        help="the most nodes gpuaccept may hold out of service at once, a count or a "
        "percentage of the whole fleet (every policy's nodes) and of each policy's "
        "matched nodes (no policy's maxQuarantined or quarantineRate, nor all policies "
        "together, go above it; default 100%%: none; the chart sets 50%%)",
    )


def _high_availability_options(ha: argparse._ArgumentGroup) -> None:
    """Leader election and the installation lock."""
    env = os.environ.get
    ha.add_argument(
        "--peering",
        "--lease-name",
        dest="lease_name",
        default=DEFAULT_LEASE_NAME,
        help="name of the leader-election Lease (one per installation; the chart's: the "
        "release's full name, gpuaccept for the release gpuaccept)",
    )
    ha.add_argument(
        "--standalone",
        action="store_true",
        help="no leader election: this process always acts (one replica only!)",
    )
    ha.add_argument(
        "--identity",
        default=env("POD_NAME") or socket.gethostname(),
        help="this replica's identity in the Lease (default: $POD_NAME or hostname)",
    )
    ha.add_argument("--lease-duration", type=float, default=15.0)
    ha.add_argument(
        "--installation-lock",
        default=env("GPUACCEPT_INSTALLATION_LOCK", ""),
        help="name of the cluster-wide Lease (in namespace default) that only one "
        "installation may hold; another one stands by while it is held (default: none; "
        "the chart's: gpuaccept-installation)",
    )
    ha.add_argument("--priority", type=int, default=0, help=argparse.SUPPRESS)  # kopf-compat


def _owned_key_options(p: argparse.ArgumentParser) -> None:
    """The taint and label key prefixes a policy may name."""
    p.add_argument(
        "--owned-key-prefix",
        dest="owned_key_prefixes",
        action="append",
        default=[],
        metavar="PREFIX",
        help=f"a taint and label key prefix policies may name, besides {OWNED_KEY_PREFIX} "
        "(repeatable; e.g. example.com/gpu-): a policy naming any other key is invalid",
    )


def _probe_pod_options(probe: argparse._ArgumentGroup) -> None:
    """The probe pods' image, command, account, classes and timeout."""
    env = os.environ.get
    probe.add_argument(
        "--probe-image", default=env("GPUACCEPT_PROBE_IMAGE", "ghcr.io/gpuaccept/probe:0.1.0")
    )
    probe.add_argument(
        "--probe-image-pull-policy",
        default="IfNotPresent",
        choices=["Always", "IfNotPresent", "Never"],
    )
    probe.add_argument(
        "--probe-image-pull-secret",
        dest="probe_image_pull_secrets",
        action="append",
        default=[],
        metavar="SECRET",
        help="a Secret in --namespace to pull the probe image with (repeatable)",
    )
    probe.add_argument(
        "--probe-command",
        default=env("GPUACCEPT_PROBE_COMMAND", "gpuaccept probe"),
        help="the probe's command, before --termination-log",
    )
    probe.add_argument("--probe-service-account", default="gpuaccept-probe")
    probe.add_argument("--probe-runtime-class", default=env("GPUACCEPT_PROBE_RUNTIME_CLASS", ""))
    probe.add_argument("--probe-priority-class", default="")
    probe.add_argument(
        "--probe-timeout",
        type=int,
        default=None,
        help="probe timeout (s) for policies that do not set probeRun.timeoutSeconds",
    )
    probe.add_argument("--probe-shm-size", default="16Gi")


def _probe_pod_extra_options(probe: argparse._ArgumentGroup) -> None:
    """What is added to the probe and fabric pods: resources, tolerations, labels,
    annotations, environment, and the fabric pods' RDMA settings."""
    env = os.environ.get
    probe.add_argument(
        "--probe-resources",
        default=env("GPUACCEPT_PROBE_RESOURCES", "{}"),
        help='JSON: {"requests": {...}, "limits": {...}} (GPUs are added)',
    )
    probe.add_argument(
        "--probe-tolerations",
        default=env("GPUACCEPT_PROBE_TOLERATIONS", "[]"),
        help="JSON list of extra tolerations",
    )
    probe.add_argument("--probe-pod-prefix", default="gpuaccept-probe")
    probe.add_argument(
        "--probe-pod-labels",
        default=env("GPUACCEPT_PROBE_POD_LABELS", json.dumps(DEFAULT_PROBE_POD_LABELS)),
        help="JSON object: labels added to probe and fabric pods (not the operator's own: "
        "app.kubernetes.io/managed-by, component, name, instance, gpuaccept.io/*)",
    )
    probe.add_argument(
        "--probe-pod-annotations",
        default=env("GPUACCEPT_PROBE_POD_ANNOTATIONS", json.dumps(DEFAULT_PROBE_POD_ANNOTATIONS)),
        help="JSON object: annotations added to probe and fabric pods (not gpuaccept.io/*)",
    )
    probe.add_argument(
        "--probe-env",
        default=env("GPUACCEPT_PROBE_ENV", "{}"),
        help="JSON object: environment variables added to probe and fabric pods (not the "
        f"probe's own: {RESERVED_ENV_PREFIX}*, NODE_NAME, the GPU selection, PATH, ...)",
    )
    probe.add_argument(
        "--fabric-pods",
        default=env("GPUACCEPT_FABRIC_PODS", "{}"),
        help="JSON: the fabric test pods' RDMA settings (resources, annotations, "
        "capabilities, env, rendezvousPort, rendezvousTimeoutSeconds, timeoutSeconds)",
    )


def _observability_options(obs: argparse._ArgumentGroup) -> None:
    """Metrics, health endpoints and logs."""
    obs.add_argument(
        "--metrics-port", type=int, default=DEFAULT_METRICS_PORT, help="/metrics (0: off)"
    )
    obs.add_argument(
        "--health-port", type=int, default=DEFAULT_HEALTH_PORT, help="/healthz, /readyz (0: off)"
    )
    obs.add_argument("--log-format", choices=["text", "json"], default="text")
    obs.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "debug", "info", "warning", "error"],
    )


def check_ranges(args: argparse.Namespace) -> None:
    _check_numbers(args)
    if args.probe_priority_class.startswith("system-"):
        raise OptionError(
            f"--probe-priority-class: {args.probe_priority_class} is a system class; the kubelet "
            "would evict running pods to admit the probe (critical-pod admission)"
        )
    owned_key_prefixes(args.owned_key_prefixes)
    for secret in args.probe_image_pull_secrets:
        if not _DNS_SUBDOMAIN.match(secret) or len(secret) > _MAX_SUBDOMAIN:
            raise OptionError(
                f"--probe-image-pull-secret: {secret!r} is not a Secret name (a DNS subdomain)"
            )
    if not args.probe_command.split():
        raise OptionError("--probe-command: must not be empty")
    if args.kubeconfig and not os.path.exists(args.kubeconfig):
        raise OptionError(f"--kubeconfig: {args.kubeconfig} does not exist")


def _check_numbers(args: argparse.Namespace) -> None:
    if args.workers < 1:
        raise OptionError(f"--workers: must be at least 1 (got {args.workers})")
    if args.status_interval <= 0:
        raise OptionError(f"--status-interval: must be positive (got {args.status_interval})")
    for flag, seconds in (
        ("--crd-wait", args.crd_wait),
        ("--unmatched-grace", args.unmatched_grace),
    ):
        if seconds < 0:
            raise OptionError(f"{flag}: must not be negative (got {seconds})")
    if args.lease_duration < 1:
        raise OptionError(f"--lease-duration: must be at least 1 (got {args.lease_duration})")
    if args.probe_timeout is not None and args.probe_timeout < 1:
        raise OptionError(f"--probe-timeout: must be at least 1 (got {args.probe_timeout})")
    for flag, port in (("--metrics-port", args.metrics_port), ("--health-port", args.health_port)):
        if not 0 <= port <= 65535:
            raise OptionError(f"{flag}: must be a port, 0 to 65535 (got {port})")


def owned_key_prefixes(extra: list[str]) -> tuple[str, ...]:
    """``gpuaccept.io/`` and the ``--owned-key-prefix`` values, checked."""
    for prefix in extra:
        if not re.match(OWNED_PREFIX_PATTERN, prefix):
            raise OptionError(
                f"--owned-key-prefix: {prefix!r} is not a DNS subdomain and '/', optionally "
                "followed by the start of a name (e.g. example.com/ or example.com/gpu-)"
            )
        if re.match(RESERVED_KEY_PATTERN, prefix):
            raise OptionError(
                f"--owned-key-prefix: {prefix} belongs to Kubernetes or the NVIDIA device plugin"
            )
    return tuple(dict.fromkeys([OWNED_KEY_PREFIX, *extra]))


DEFAULT_DRA_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver for GPUs
DEFAULT_DRA_DEVICE_CLASS = "gpu.nvidia.com"  # the DeviceClass NVIDIA's chart installs


def dra_device_class(text: str) -> str:
    """``--dra-device-class``: a DeviceClass name (a DNS subdomain)."""
    name = text.strip()
    if not _DNS_SUBDOMAIN.match(name) or len(name) > _MAX_SUBDOMAIN:
        raise OptionError(f"--dra-device-class: {name!r} is not a DNS subdomain (a class name)")
    return name


def dra_drivers(text: str) -> tuple[str, ...]:
    """``--dra-driver``: DRA driver names (DNS subdomains), comma-separated."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        if not _DNS_SUBDOMAIN.match(name) or len(name) > _MAX_SUBDOMAIN:
            raise OptionError(f"--dra-driver: {name!r} is not a DNS subdomain (a driver's name)")
    return tuple(dict.fromkeys(names))


def base_node_selector(
    text: str, *, allow_control_plane: bool = False
) -> tuple[tuple[str, str | None], ...]:
    """``--node-selector``: ``key=value`` or ``key`` (the label is present),
    comma-separated, as (key, value) pairs (value None: present)."""
    selector: dict[str, str | None] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not key:
            raise OptionError(f"--node-selector: empty key in {part!r}")
        if key in selector:
            raise OptionError(f"--node-selector: {key} is named twice")
        selector[key] = value.strip() if sep else None
    named = sorted(set(selector) & set(CONTROL_PLANE_ROLE_LABELS))
    if named and not allow_control_plane:
        raise OptionError(
            f"--node-selector: {', '.join(named)} is a control-plane role label; "
            "control-plane nodes are outside the operator's reach without "
            "--allow-control-plane-nodes"
        )
    return tuple(selector.items())
