"""``kubectl-gpuaccept`` (``kubectl gpuaccept``): the commands a platform engineer
types about one node or a policy change.

* ``explain NODE``: the verdict, every reason, and the stored report as the
  probe's table, judged under the node's policy (its thresholds shown);
* ``reprobe NODE``: sets the re-probe annotation on the Node (the operator probes
  it again, under a policy with ``reprobe.onAnnotation``; a released node is
  handed back this way);
* ``release NODE``: asks the operator to release the node (its taints and label
  off, left alone until a re-probe), recording who asks (the API server's answer
  to a SelfSubjectReview, never the kubeconfig's name) and when in the
  NodeAcceptance; the operator records it in ``status.release`` and an Event;
* ``what-if POLICY_FILE``: every stored report judged under a candidate policy;
  what would change and how many nodes would be quarantined against the limit.
  Reads only.

Exit codes: 0 done, 1 not found, 2 bad usage or a bad file.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import kubernetes.client
import kubernetes.config
import yaml
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import (
    POLICY_KIND,
    RELEASE_AT_ANNOTATION,
    RELEASE_BY_ANNOTATION,
    REPROBE_ANNOTATION,
)
from gpuaccept.contracts.cli_help import DefaultsHelpFormatter
from gpuaccept.operator.core.fencerules import FENCE_COMPONENT
from gpuaccept.operator.core.podspec import (
    COMPONENT_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NODE_LABEL,
    node_label_value,
)
from gpuaccept.operator.kube import DEVICE_TAINT_RULES_PATH, MERGE, NA_PATH, POLICY_PATH, Kube
from gpuaccept.operator.plugin.explain import explain_lines
from gpuaccept.operator.plugin.release import (
    SELF_SUBJECT_REVIEW_PATHS,
    applied,
    request_annotations,
    self_subject_review,
    username_of,
)
from gpuaccept.operator.plugin.whatif import what_if, what_if_lines

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
PROG = "kubectl gpuaccept"


class PluginError(Exception):
    """A one-line message and the exit code it ends with."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Explain, re-probe, and try policies against the NodeAcceptances "
        "gpuaccept keeps.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config")
    p.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    explain = sub.add_parser("explain", help="why the node is where it is")
    explain.add_argument("node")
    reprobe = sub.add_parser("reprobe", help=f"set {REPROBE_ANNOTATION} on the Node")
    reprobe.add_argument("node")
    release = sub.add_parser(
        "release",
        help="release the node: the operator takes its taints and label off and leaves it "
        "alone until a re-probe; records who and when",
    )
    release.add_argument("node")
    release.add_argument("--reason", default="", help="why (kept in the record)")
    release.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds to wait for the operator to apply it (0: do not wait)",
    )
    whatif = sub.add_parser(
        "what-if", help="judge every stored report under a candidate policy (writes nothing)"
    )
    whatif.add_argument("policy_file", type=Path, help="a NodeAcceptancePolicy manifest (YAML)")
    whatif.add_argument(
        "--all",
        action="store_true",
        help="judge every NodeAcceptance, not only those of the policy the file names",
    )
    return p


def _get(kube: Kube, path: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", path)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def explain(kube: Kube, node: str) -> list[str]:
    acceptance = _get(kube, f"{NA_PATH}/{node}")
    if acceptance is None:
        raise PluginError(
            f"no NodeAcceptance {node}: no policy governs that node (or it does not exist)",
            EXIT_NOT_FOUND,
        )
    status = acceptance.get("status") or {}
    policy_name = status.get("policy")
    policy = _get(kube, f"{POLICY_PATH}/{policy_name}") if policy_name else None
    rules = _fence_rules(kube, node) if status.get("gpuVerdicts") else None
    return explain_lines(acceptance, policy, rules=rules)


def _fence_rules(kube: Kube, node: str) -> list[Mapping[str, Any]] | str:
    """The node's fence DeviceTaintRules as the API server has them (their status too:
    the eviction feedback of a dryRun rule), or why they cannot be read."""
    selector = ",".join(
        f"{k}={v}"
        for k, v in (
            (MANAGED_BY_LABEL, MANAGED_BY_VALUE),
            (COMPONENT_LABEL, FENCE_COMPONENT),
            (NODE_LABEL, node_label_value(node)),
        )
    )
    try:
        body = kube.request("GET", DEVICE_TAINT_RULES_PATH, query=[("labelSelector", selector)])
    except ApiException as error:
        if error.status == 404:
            return "the API server serves no DeviceTaintRules"
        if error.status == 403:
            return "you may not list DeviceTaintRules"
        raise
    items = body.get("items")
    return [r for r in items if isinstance(r, Mapping)] if isinstance(items, list) else []


def reprobe(kube: Kube, node: str, now: Callable[[], float] = time.time) -> list[str]:
    if _get(kube, f"/api/v1/nodes/{node}") is None:
        raise PluginError(f"no Node {node}", EXIT_NOT_FOUND)
    value = str(int(now()))
    body = {"metadata": {"annotations": {REPROBE_ANNOTATION: value}}}
    kube.request("PATCH", f"/api/v1/nodes/{node}", body, content_type=MERGE)
    return [f"node/{node} annotated {REPROBE_ANNOTATION}={value}: the operator probes it again"]


def whoami(kube: Kube) -> str:
    """The caller's username, as the API server authenticated it (SelfSubjectReview)."""
    for path in SELF_SUBJECT_REVIEW_PATHS:
        version = path.split("/")[3]
        try:
            name = username_of(kube.request("POST", path, self_subject_review(version)))
        except ApiException as error:
            if error.status == 404:
                continue  # an older API server: the next version
            raise
        if name:
            return name
    raise PluginError(
        "cannot tell who you are: the API server answers no SelfSubjectReview "
        "(authentication.k8s.io, Kubernetes 1.27+); a release is recorded only with its requester",
        EXIT_NOT_FOUND,
    )


def release(kube: Kube, node: str, *, reason: str = "", wait: float = 30.0) -> list[str]:
    """Ask for ``node``'s release, recording who (the API server's word) and when; wait
    up to ``wait`` seconds for the operator to apply it."""
    path = f"{NA_PATH}/{node}"
    acceptance = _get(kube, path)
    if acceptance is None:
        raise PluginError(f"no NodeAcceptance {node}: no policy governs that node", EXIT_NOT_FOUND)
    phase = (acceptance.get("status") or {}).get("phase") or "Pending"
    if phase in ("Accepted", "Released"):
        raise PluginError(f"{node} is {phase}: nothing to release", EXIT_NOT_FOUND)
    annotations = request_annotations(whoami(kube), datetime.now(UTC), reason)
    kube.request("PATCH", path, {"metadata": {"annotations": annotations}}, content_type=MERGE)
    by, at = annotations[RELEASE_BY_ANNOTATION], annotations[RELEASE_AT_ANNOTATION]
    lines = [f"nodeacceptance/{node}: release asked for by {by} at {at} (was {phase})"]
    deadline = time.monotonic() + wait
    while wait > 0:
        current = _get(kube, path) or {}
        if applied(current, annotations):
            message = (current.get("status") or {}).get("message") or ""
            return [*lines, f"released: {message}"]
        if time.monotonic() >= deadline:
            return [*lines, f"not applied within {wait:g}s: is the operator running?"]
        time.sleep(1.0)
    return [*lines, "the operator applies it and records it in status.release and an Event"]


def load_candidate(path: Path) -> tuple[str | None, NodeAcceptancePolicySpec]:
    """The candidate policy's name (None: a bare spec) and its spec."""
    try:
        loaded: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise PluginError(f"{path}: {' '.join(str(error).split())}", EXIT_USAGE) from error
    if not isinstance(loaded, Mapping):
        raise PluginError(f"{path}: not a YAML mapping", EXIT_USAGE)
    name: str | None = None
    spec: Any = loaded
    if loaded.get("kind") == POLICY_KIND:
        name = (loaded.get("metadata") or {}).get("name")
        spec = loaded.get("spec") or {}
    try:
        return name, NodeAcceptancePolicySpec.model_validate(spec)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "spec"
        raise PluginError(f"{path}: spec.{where}: {first['msg']}", EXIT_USAGE) from error


def what_if_command(kube: Kube, path: Path, *, every: bool) -> list[str]:
    name, spec = load_candidate(path)
    listed = _get(kube, NA_PATH) or {}
    acceptances = [a for a in listed.get("items") or [] if isinstance(a, Mapping)]
    scope = None if every or name is None else name
    return what_if_lines(what_if(acceptances, spec, policy_name=scope), policy_name=scope)


def _kube(kubeconfig: str | None, context: str | None) -> Kube:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, context=context, client_configuration=configuration
    )
    return Kube(kubernetes.client.ApiClient(configuration))


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    out = out or sys.stdout
    try:
        kube = _kube(args.kubeconfig, args.context)
        if args.command == "explain":
            lines = explain(kube, args.node)
        elif args.command == "reprobe":
            lines = reprobe(kube, args.node)
        elif args.command == "release":
            lines = release(kube, args.node, reason=args.reason, wait=args.wait)
        else:
            lines = what_if_command(kube, args.policy_file, every=args.all)
    except PluginError as error:
        sys.stderr.write(f"{PROG}: {error}\n")
        return error.code
    except (kubernetes.config.ConfigException, OSError, ValueError) as error:
        reason = " ".join(str(error).split())
        sys.stderr.write(f"{PROG}: cannot load Kubernetes credentials: {reason}\n")
        return EXIT_USAGE
    out.write("".join(f"{line}\n" for line in lines))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
