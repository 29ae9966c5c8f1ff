"""``gpuaccept cleanup``: remove what gpuaccept leaves in a cluster.

``helm uninstall`` removes the operator, its RBAC and the default policy. It
leaves the nodes' taints, labels, annotations and ``GPUAcceptance`` condition, the
leader-election Lease, leftover probe pods, the ``NodeAcceptance`` objects and
the CRDs. This command removes them, with the admin's kubeconfig (never the
operator's ServiceAccount, whose RBAC stays least-privilege):

- taints, labels and annotations whose key is under ``gpuaccept.io/``, or that a
  node's ``NodeAcceptance`` recorded as applied (``status.appliedTaints``,
  ``status.appliedLabels``) and that are under an ``--owned-key-prefix`` given here
  (the operator's own); no other key. A recorded key under no such prefix is kept and
  named (a forged record must not make an admin's cleanup remove foreign taints);
- the ``GPUAcceptance`` node condition;
- probe pods (``app.kubernetes.io/managed-by=gpuaccept,app.kubernetes.io/component=probe``);
- fence DeviceTaintRules (``app.kubernetes.io/managed-by=gpuaccept,
  app.kubernetes.io/component=gpu-fence``, taint key ``gpuaccept.io/fenced``): a fenced
  GPU is back in service once gpuaccept is gone;
- the Lease ``--lease-name`` in ``--namespace``;
- every ``NodeAcceptance``;
- with ``--crds``, both CRDs (and with them every ``NodeAcceptancePolicy``).

It is a dry run unless ``--yes``: it prints what it would remove. With ``--yes``
it refuses to act while an operator still holds the Lease (it would put its
taints back): uninstall the release first.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import (
    ACCEPTANCE_PLURAL,
    FENCE_TAINT_KEY,
    GROUP,
    NODE_CONDITION_TYPE,
    POLICY_PLURAL,
)
from gpuaccept.contracts.cli_help import DefaultsHelpFormatter
from gpuaccept.contracts.policy_fields import OWNED_KEY_PREFIX
from gpuaccept.operator.core.fencerules import FENCE_COMPONENT
from gpuaccept.operator.core.podspec import (
    COMPONENT_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    PROBE_SELECTOR,
)
from gpuaccept.operator.kube import (
    DEVICE_TAINT_RULES_PATH,
    LEASE_PATH,
    MERGE,
    NA_PATH,
    STRATEGIC,
    ConflictError,
    Kube,
)
from gpuaccept.operator.options import OptionError, owned_key_prefixes

EXIT_USAGE = 2
EXIT_LEASE_HELD = 1
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD_NAMES = (f"{ACCEPTANCE_PLURAL}.{GROUP}", f"{POLICY_PLURAL}.{GROUP}")
CONFLICT_RETRIES = 5


# --------------------------------------------------------------------- pure decisions
@dataclass(frozen=True)
class RecordedKeys:
    """Keys a node's NodeAcceptance recorded as applied (under any owned prefix)."""

    taints: frozenset[str] = frozenset()
    labels: frozenset[str] = frozenset()


def recorded_keys(
    acceptances: Iterable[Mapping[str, Any]], prefixes: Sequence[str]
) -> tuple[dict[str, RecordedKeys], list[str]]:
    """Per node name (a NodeAcceptance is named after its node), its recorded keys
    under one of ``prefixes``; and, as lines to print, those recorded under none."""
    out: dict[str, RecordedKeys] = {}
    refused: list[str] = []
    for acceptance in acceptances:
        name = acceptance["metadata"]["name"]
        status = acceptance.get("status") or {}
        kept: dict[str, frozenset[str]] = {}
        for kind, field in (("taint", "appliedTaints"), ("label", "appliedLabels")):
            keys = [str(k) for k in status.get(field) or ()]
            kept[kind] = frozenset(k for k in keys if k.startswith(tuple(prefixes)))
            refused += [
                f"kept {kind} {k} of node {name}: recorded as applied in its NodeAcceptance, "
                "but under no owned prefix (--owned-key-prefix)"
                for k in keys
                if k not in kept[kind]
            ]
        out[name] = RecordedKeys(taints=kept["taint"], labels=kept["label"])
    return out, refused


def owned(key: str, recorded: Set[str]) -> bool:
    """gpuaccept owns ``key``: under ``gpuaccept.io/``, or recorded as applied by it."""
    return key.startswith(OWNED_KEY_PREFIX) or key in recorded


@dataclass(frozen=True)
class NodeCleanup:
    """What to remove from one node, computed from one read of it."""

    node: str
    resource_version: str
    taints: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    annotations: tuple[str, ...] = ()
    condition: bool = False
    kept_taints: tuple[Mapping[str, Any], ...] = ()

    @property
    def metadata_changes(self) -> bool:
        return bool(self.taints or self.labels or self.annotations)

    def metadata_patch(self) -> dict[str, Any]:
        """A merge patch guarded by resourceVersion; ``spec.taints`` is replaced whole."""
        metadata: dict[str, Any] = {"resourceVersion": self.resource_version}
        if self.labels:
            metadata["labels"] = dict.fromkeys(self.labels)
        if self.annotations:
            metadata["annotations"] = dict.fromkeys(self.annotations)
        patch: dict[str, Any] = {"metadata": metadata}
        if self.taints:
            patch["spec"] = {"taints": [dict(t) for t in self.kept_taints] or None}
        return patch

    def describe(self) -> list[str]:
        where = f"node {self.node}"
        return [
            *(f"taint {key} from {where}" for key in self.taints),
            *(f"label {key} from {where}" for key in self.labels),
            *(f"annotation {key} from {where}" for key in self.annotations),
            *([f"condition {NODE_CONDITION_TYPE} from {where}"] if self.condition else []),
        ]


def _owned_keys(keys: Mapping[str, Any] | None, recorded: frozenset[str]) -> tuple[str, ...]:
    """The keys of a label or annotation map that gpuaccept owns."""
    return tuple(key for key in keys or {} if owned(key, recorded))


def node_cleanup(node: Mapping[str, Any], recorded: RecordedKeys) -> NodeCleanup:
    """What gpuaccept left on ``node``: the keys it owns, and its condition."""
    metadata = node.get("metadata") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    conditions = (node.get("status") or {}).get("conditions") or []
    removed = [t for t in taints if owned(t.get("key", ""), recorded.taints)]
    return NodeCleanup(
        node=metadata["name"],
        resource_version=metadata.get("resourceVersion", ""),
        taints=tuple(dict.fromkeys(t["key"] for t in removed)),
        labels=_owned_keys(metadata.get("labels"), recorded.labels),
        annotations=_owned_keys(metadata.get("annotations"), frozenset()),
        condition=any(c.get("type") == NODE_CONDITION_TYPE for c in conditions),
        kept_taints=tuple(t for t in taints if t not in removed),
    )


def lease_holder(lease: Mapping[str, Any] | None, now: datetime) -> str | None:
    """The Lease's holder while its term runs, else None (free, expired or released)."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = spec.get("renewTime")
    if not holder or not renewed:
        return None
    renew_time = datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))
    term = timedelta(seconds=float(spec.get("leaseDurationSeconds") or 0))
    return str(holder) if renew_time + term > now else None


# --------------------------------------------------------------------- the command
@dataclass
class Cleanup:
    """Walks the cluster and removes (``act``) or reports what gpuaccept left."""

    kube: Kube
    out: TextIO
    act: bool
    count: int = 0

    def _did(self, what: str) -> None:
        self.count += 1
        self.out.write(f"{'removed' if self.act else 'would remove'} {what}\n")

    def _list(self, path: str, query: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        try:
            items = self.kube.request("GET", path, query=query).get("items") or []
        except ApiException as error:
            if error.status == 404:  # the CRD is not installed
                return []
            raise
        return [dict(item) for item in items]

    def _delete(self, path: str, what: str) -> None:
        if self.act:
            try:
                self.kube.request("DELETE", path)
            except ApiException as error:
                if error.status != 404:
                    raise
                return
        self._did(what)

    def nodes(self, recorded: Mapping[str, RecordedKeys]) -> None:
        for node in self._list("/api/v1/nodes"):
            name = node["metadata"]["name"]
            self._node(node, recorded.get(name, RecordedKeys()))

    def _node(self, node: Mapping[str, Any], recorded: RecordedKeys) -> None:
        name = node["metadata"]["name"]
        for _ in range(CONFLICT_RETRIES):
            plan = node_cleanup(node, recorded)
            try:
                self._apply(plan)
            except ConflictError:
                node = self.kube.request("GET", f"/api/v1/nodes/{name}")
                continue
            for what in plan.describe():
                self._did(what)
            return
        raise RuntimeError(f"node {name} kept changing; run gpuaccept cleanup again")

    def _apply(self, plan: NodeCleanup) -> None:
        if not self.act:
            return
        path = f"/api/v1/nodes/{plan.node}"
        if plan.metadata_changes:
            self.kube.request("PATCH", path, plan.metadata_patch(), content_type=MERGE)
        if plan.condition:
            body = {"status": {"conditions": [{"type": NODE_CONDITION_TYPE, "$patch": "delete"}]}}
            self.kube.request("PATCH", f"{path}/status", body, content_type=STRATEGIC)

    def probe_pods(self) -> None:
        for pod in self._list("/api/v1/pods", query=[("labelSelector", PROBE_SELECTOR)]):
            ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            self._delete(f"/api/v1/namespaces/{ns}/pods/{name}", f"probe pod {ns}/{name}")

    def fence_rules(self) -> None:
        """gpuaccept's fence DeviceTaintRules (none where the API server serves none)."""
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{COMPONENT_LABEL}={FENCE_COMPONENT}"
        for rule in self._list(DEVICE_TAINT_RULES_PATH, query=[("labelSelector", selector)]):
            if ((rule.get("spec") or {}).get("taint") or {}).get("key") != FENCE_TAINT_KEY:
                continue  # under the operator's labels, but not its key: not its fence
            name = rule["metadata"]["name"]
            self._delete(f"{DEVICE_TAINT_RULES_PATH}/{name}", f"DeviceTaintRule {name}")

    def lease(self, namespace: str, name: str) -> None:
        if self.kube.get_lease(namespace, name) is not None:
            path = f"{LEASE_PATH.format(ns=namespace)}/{name}"
            self._delete(path, f"Lease {namespace}/{name}")

    def acceptances(self, items: Sequence[Mapping[str, Any]]) -> None:
        for item in items:
            name = item["metadata"]["name"]
            self._delete(f"{NA_PATH}/{name}", f"NodeAcceptance {name}")

    def crds(self) -> None:
        for name in CRD_NAMES:
            try:
                self.kube.request("GET", f"{CRD_PATH}/{name}")
            except ApiException as error:
                if error.status == 404:
                    continue
                raise
            self._delete(f"{CRD_PATH}/{name}", f"CustomResourceDefinition {name}")

    def run(self, namespace: str, lease_name: str, *, crds: bool, prefixes: Sequence[str]) -> None:
        acceptances = self._list(NA_PATH)
        recorded, refused = recorded_keys(acceptances, prefixes)
        for line in refused:
            self.out.write(f"{line}\n")
        self.nodes(recorded)
        self.probe_pods()
        self.fence_rules()
        self.lease(namespace, lease_name)
        self.acceptances(acceptances)
        if crds:
            self.crds()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuaccept cleanup",
        formatter_class=DefaultsHelpFormatter,
        description="Remove what gpuaccept leaves in a cluster (after helm uninstall): its "
        "taints, labels and annotations, the GPUAcceptance condition, probe pods, the Lease, "
        "the NodeAcceptances and, with --crds, the CRDs. A dry run unless --yes.",
    )
    p.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config")
    p.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    p.add_argument(
        "--namespace", default="gpuaccept-system", help="the release namespace (the Lease)"
    )
    p.add_argument(
        "--lease-name",
        default="gpuaccept",
        help="the leader-election Lease (the chart's: the release's full name)",
    )
    p.add_argument(
        "--crds",
        action="store_true",
        help="also delete the CRDs, and with them every NodeAcceptancePolicy",
    )
    p.add_argument(
        "--owned-key-prefix",
        dest="owned_key_prefixes",
        action="append",
        default=[],
        metavar="PREFIX",
        help=f"a key prefix the operator owned besides {OWNED_KEY_PREFIX} (its "
        "--owned-key-prefix, the chart's operator.ownedKeyPrefixes; repeatable): a key a "
        "NodeAcceptance recorded as applied is removed only under one of these",
    )
    p.add_argument("--yes", action="store_true", help="act (default: only print)")
    return p


def _kube(kubeconfig: str | None, context: str | None) -> Kube:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, context=context, client_configuration=configuration
    )
    return Kube(kubernetes.client.ApiClient(configuration))


def main(
    argv: Sequence[str],
    *,
    out: TextIO | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> int:
    args = parser().parse_args(argv)
    out = out or sys.stdout
    try:
        prefixes = owned_key_prefixes(args.owned_key_prefixes)
    except OptionError as error:
        sys.stderr.write(f"gpuaccept cleanup: {error}\n")
        return EXIT_USAGE
    try:
        kube = _kube(args.kubeconfig, args.context)
    except (kubernetes.config.ConfigException, OSError, ValueError) as error:
        reason = " ".join(str(error).split())
        sys.stderr.write(f"gpuaccept cleanup: cannot load Kubernetes credentials: {reason}\n")
        return EXIT_USAGE
    holder = lease_holder(kube.get_lease(args.namespace, args.lease_name), now())
    if holder and args.yes:
        sys.stderr.write(
            f"gpuaccept cleanup: {holder} holds Lease {args.namespace}/{args.lease_name}: an "
            "operator still runs and would put its taints back; helm uninstall it first\n"
        )
        return EXIT_LEASE_HELD
    cleanup = Cleanup(kube, out, act=args.yes)
    cleanup.run(args.namespace, args.lease_name, crds=args.crds, prefixes=prefixes)
    if args.yes:
        out.write(f"removed {cleanup.count} object(s) or key(s)\n")
    else:
        note = f" ({holder} holds the Lease: uninstall the operator first)" if holder else ""
        out.write(
            f"dry run: {cleanup.count} to remove{note}; run again with --yes to remove them\n"
        )
    return 0
