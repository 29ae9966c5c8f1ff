"""The Helm chart without a cluster: lint, template, values schema, conventions.

Uses ``.bin/helm`` (built from hack/helm by mk/cluster.mk). Server-side apply,
install and upgrade against the real API server are in
tests/integration/test_chart_install.py.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.testsupport.chart_rbac import chart_dir, helm, render_chart

ROOT = Path(__file__).resolve().parents[2]
CHART = chart_dir()
HA_VALUES = CHART / "ci" / "ha-values.yaml"
DRA_VALUES = CHART / "examples" / "dra-values.yaml"
NAMESPACE = "gpuaccept-system"
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "helm.sh/chart",
)

Manifest = dict[str, Any]


def by_kind(docs: list[Manifest], kind: str) -> list[Manifest]:
    """The release's objects of ``kind`` (`helm test` hooks are in test_chart_conventions)."""
    return [
        d
        for d in docs
        if d["kind"] == kind and "helm.sh/hook" not in (d["metadata"].get("annotations") or {})
    ]


def one(docs: list[Manifest], kind: str) -> Manifest:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def default_docs() -> list[Manifest]:
    return render_chart(namespace=NAMESPACE)


@pytest.fixture(scope="module")
def ha_docs() -> list[Manifest]:
    return render_chart(namespace=NAMESPACE, values_files=[HA_VALUES])


def container(docs: list[Manifest]) -> Manifest:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    c: Manifest = pod["containers"][0]
    return c


def args_of(docs: list[Manifest]) -> dict[str, str]:
    out: dict[str, str] = {}
    for arg in container(docs)["args"][1:]:
        key, _, value = arg.partition("=")
        out[key] = value
    return out


@pytest.mark.parametrize(
    "values", [None, HA_VALUES, DRA_VALUES], ids=["defaults", "ha-values", "dra-values"]
)
def test_helm_lint(values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)]
    if values is not None:
        args += ["--values", str(values)]
    proc = helm(*args, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_default_render(default_docs: list[Manifest]) -> None:
    kinds = sorted(d["kind"] for d in default_docs)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ServiceAccount",
            "ClusterRole",
            # the view/edit roles aggregated into Kubernetes' default roles
            "ClusterRole",
            "ClusterRole",
            # release (kubectl gpuaccept release): its own role, not aggregated
            "ClusterRole",
            # lets the system-cluster-critical operator pods in (docs/install.md, "Priority")
            "ResourceQuota",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            # the Events (kube-system) and the installation lock (default)
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "NodeAcceptancePolicy",
            # `helm test` hooks: a headless Service and the test Pod
            "Service",
            "Pod",
            # the admission rules (templates/admission.yaml, docs/security.md)
            *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 11,
        ]
    )
    assert one(default_docs, "Deployment")["spec"]["replicas"] == 1


def test_ha_render(ha_docs: list[Manifest]) -> None:
    kinds = {d["kind"] for d in ha_docs}
    assert {"ServiceMonitor", "PrometheusRule", "PodDisruptionBudget"} <= kinds
    deployment = one(ha_docs, "Deployment")
    assert deployment["metadata"]["name"] == "gpuaccept-ha"
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    spread = pod["topologySpreadConstraints"][0]
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    assert container(ha_docs)["image"].endswith("@sha256:" + "0" * 63 + "1")
    assert "--workers=32" in container(ha_docs)["args"]
    for obj in ha_docs:
        assert obj["metadata"]["labels"]["team"] == "gpu-infra", obj["kind"]


@pytest.mark.parametrize(
    "values", [None, HA_VALUES, DRA_VALUES], ids=["defaults", "ha-values", "dra-values"]
)
def test_standard_labels_everywhere(values: Path | None) -> None:
    docs = render_chart(namespace=NAMESPACE, values_files=[values] if values else [])
    for obj in docs:
        labels = obj["metadata"].get("labels", {})
        missing = [k for k in STANDARD_LABELS if k not in labels]
        assert not missing, f"{obj['kind']}/{obj['metadata']['name']} lacks {missing}"
        if obj["kind"] in {
            "ClusterRole",
            "ClusterRoleBinding",
            "NodeAcceptancePolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        }:
            assert "namespace" not in obj["metadata"], obj["kind"]
        elif not obj["metadata"]["name"].endswith(("-events", "-installation-lock")):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


def test_operator_pod_security(default_docs: list[Manifest]) -> None:
    pod = one(default_docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(default_docs)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # The only writable path is an emptyDir.
    mounts = container(default_docs)["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/tmp"]
    assert pod["volumes"][0]["emptyDir"]
    assert container(default_docs)["resources"]["limits"]["memory"]
    assert container(default_docs)["resources"]["requests"]["cpu"]


def test_probes_wired_to_health_port(default_docs: list[Manifest]) -> None:
    c = container(default_docs)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"]["port"] == "health"
    assert c["readinessProbe"]["httpGet"]["port"] == "health"
    args = args_of(default_docs)
    assert args["--health-port"] == str(ports["health"])
    assert args["--metrics-port"] == str(ports["metrics"])
    service = one(default_docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    selector = service["spec"]["selector"]
    pod_labels = one(default_docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()


def test_probe_settings_reach_the_operator_not_the_policy(ha_docs: list[Manifest]) -> None:
    args = args_of(ha_docs)
    assert args["--probe-image"] == "registry.example.com/gpuaccept/probe:0.1.0-cuda12.4"
    assert args["--probe-runtime-class"] == ""
    assert args["--probe-priority-class"] == "gpu-acceptance-probe"
    assert args["--probe-timeout"] == "1200"
    assert json.loads(args["--probe-tolerations"])[0]["key"] == "nvidia.com/gpu"
    assert json.loads(args["--probe-resources"])["requests"]["memory"] == "8Gi"
    assert args["--probe-service-account"] == "gpuaccept-ha-probe"
    policy = one(ha_docs, "NodeAcceptancePolicy")["spec"]
    text = json.dumps(policy)
    for leaked in ("image", "registry.example.com", "runtimeClass", "priorityClass"):
        assert leaked not in text, f"probe setting {leaked} leaked into the policy"


def test_default_probe_settings(default_docs: list[Manifest]) -> None:
    args = args_of(default_docs)
    assert args["--probe-runtime-class"] == "nvidia"
    assert args["--probe-timeout"] == "900"
    assert args["--probe-image"] == "ghcr.io/gpuaccept/probe:0.1.0"
    assert container(default_docs)["image"] == "ghcr.io/gpuaccept/operator:0.1.0"


def test_probe_service_account_has_no_token(default_docs: list[Manifest]) -> None:
    accounts = {a["metadata"]["name"]: a for a in by_kind(default_docs, "ServiceAccount")}
    probe = accounts["gpuaccept-probe"]
    assert probe["automountServiceAccountToken"] is False
    assert args_of(default_docs)["--probe-service-account"] == "gpuaccept-probe"
    operator_sa = one(default_docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert operator_sa in accounts
    assert operator_sa != "gpuaccept-probe"
    # No role is bound to the probe account.
    for binding in by_kind(default_docs, "RoleBinding") + by_kind(
        default_docs, "ClusterRoleBinding"
    ):
        assert all(s["name"] != "gpuaccept-probe" for s in binding["subjects"])


def test_default_policy_is_dry_run(default_docs: list[Manifest], ha_docs: list[Manifest]) -> None:
    policy = one(default_docs, "NodeAcceptancePolicy")
    assert policy["metadata"]["name"] == "default"
    assert policy["spec"]["dryRun"] is True
    assert policy["spec"]["maxQuarantined"] == "10%"
    assert policy["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    enforcing = one(ha_docs, "NodeAcceptancePolicy")["spec"]
    assert enforcing["dryRun"] is False
    assert enforcing["maxQuarantined"] == 2
    assert enforcing["probe"] == {"ncclAllreduce": {"minBusbwGBps": 350}}


def test_rendered_policies_validate_against_the_contract(
    default_docs: list[Manifest], ha_docs: list[Manifest]
) -> None:
    from gpuaccept.checks.policy import NodeAcceptancePolicySpec  # noqa: PLC0415

    for docs in (default_docs, ha_docs):
        NodeAcceptancePolicySpec.model_validate(one(docs, "NodeAcceptancePolicy")["spec"])


def test_default_policy_can_be_disabled() -> None:
    docs = render_chart(namespace=NAMESPACE, set_values={"defaultPolicy.enabled": "false"})
    assert not by_kind(docs, "NodeAcceptancePolicy")


def test_lease_name_matches_the_role(ha_docs: list[Manifest]) -> None:
    lease = args_of(ha_docs)["--lease-name"]
    assert lease == "gpuaccept-ha"
    roles = [r for r in by_kind(ha_docs, "Role") if r["metadata"]["namespace"] == NAMESPACE]
    named = [rule for rule in roles[0]["rules"] if rule.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": ["get", "update"],
        }
    ]
    env = {e["name"]: e for e in container(ha_docs)["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_fabric_pod_settings_reach_the_operator_not_the_policy(ha_docs: list[Manifest]) -> None:
    """The RDMA settings of the fabric pods are chart values, parsed by the operator."""
    options = importlib.import_module("gpuaccept.operator.options")
    fabric = options.fabric_pods(args_of(ha_docs)["--fabric-pods"])
    assert fabric.resources == {"rdma/rdma_shared_device_a": "1"}
    assert fabric.annotations == {"k8s.v1.cni.cncf.io/networks": "rdma-net"}
    assert fabric.capabilities == ("IPC_LOCK",)
    assert dict(fabric.env) == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_NET": "IB"}
    assert fabric.timeout_seconds == 900
    policy = json.dumps(one(ha_docs, "NodeAcceptancePolicy")["spec"])
    assert "rdma" not in policy
    assert "NCCL" not in policy


def test_args_parse_with_the_operator_cli(ha_docs: list[Manifest]) -> None:
    """The chart's command line is one the operator accepts, with the values it means."""
    cli = importlib.import_module("gpuaccept.operator.command")
    c = container(ha_docs)
    assert c["args"][0] == "operator"
    parsed = cli.parser().parse_args(c["args"][1:])
    assert parsed.lease_name == "gpuaccept-ha"
    assert parsed.namespace == NAMESPACE
    assert parsed.probe_image == "registry.example.com/gpuaccept/probe:0.1.0-cuda12.4"
    assert parsed.probe_timeout == 1200
    assert parsed.probe_service_account == "gpuaccept-ha-probe"
    assert parsed.health_port == 8080
    assert parsed.metrics_port == 9090
    assert not parsed.standalone
    assert parsed.workers == 32
    assert parsed.log_format == "json"


def test_chart_ships_the_generated_crds() -> None:
    out = helm("template", "x", str(CHART), "--include-crds").stdout
    crds = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "CustomResourceDefinition"]
    shipped = {d["metadata"]["name"] for d in crds}
    assert shipped == {
        "nodeacceptancepolicies.gpuaccept.io",
        "nodeacceptances.gpuaccept.io",
    }
    for path in (CHART / "crds").glob("*.yaml"):
        assert path.read_bytes() == (ROOT / "crds" / path.name).read_bytes(), path.name


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("operator.replicas=-1", "operator.replicas"),
        ("operator.replicaz=2", "replicaz"),
        ("image.tag=latest", "image.tag"),
        ("probe.timeoutSeconds=5", "probe.timeoutSeconds"),
        ("defaultPolicy.maxQuarantined=abc", "defaultPolicy.maxQuarantined"),
        ("defaultPolicy.dryRun=maybe", "defaultPolicy.dryRun"),
        ("operator.logLevel=loud", "operator.logLevel"),
        ("probe.image.digest=sha256:nothex", "probe.image.digest"),
        # dropping the only default key would leave a policy that governs every node
        ("defaultPolicy.nodeSelector.nvidia\\.com/gpu\\.present=null", "minProperties"),
        # a probe toleration without a key would tolerate every taint
        ("probe.tolerations[0].operator=Exists", "probe.tolerations.0"),
        ("operator.tolerations[0].operator=Sometimes", "operator.tolerations.0.operator"),
        # a critical probe pod pinned with nodeName makes the kubelet evict workloads
        ("probe.priorityClassName=system-node-critical", "probe.priorityClassName"),
        ("probe.priorityClassName=system-cluster-critical", "probe.priorityClassName"),
        # an owned key prefix is a subdomain and "/", never another owner's
        ("operator.ownedKeyPrefixes={example.com}", "operator.ownedKeyPrefixes.0"),
        ("operator.ownedKeyPrefixes={kubernetes.io/}", "operator.ownedKeyPrefixes.0"),
        ("operator.ownedKeyPrefixes={nvidia.com/gpu-}", "operator.ownedKeyPrefixes.0"),
    ],
)
def test_bad_values_fail_with_a_clear_message(setting: str, message: str) -> None:
    flag = "--set-string" if setting.endswith(("=abc", "=maybe")) else "--set"
    proc = helm("template", "x", str(CHART), flag, setting, check=False)
    assert proc.returncode != 0, f"{setting} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert message in proc.stderr.replace("/", "."), proc.stderr


def test_non_default_release_name_and_namespace() -> None:
    docs = render_chart(release="acme", namespace="gpu-ops")
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["name"] == "acme-gpuaccept"
    assert deployment["metadata"]["namespace"] == "gpu-ops"
    assert args_of(docs)["--namespace"] == "gpu-ops"
    assert {r["metadata"]["namespace"] for r in by_kind(docs, "Role")} == {
        "gpu-ops", "kube-system", "default"
    }  # fmt: skip
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "acme-gpuaccept", "namespace": "gpu-ops"}
    ]


def test_alerts_use_the_operators_metrics(ha_docs: list[Manifest]) -> None:
    """Every metric an alert queries is one the operator exports; one alert per
    in-service reason."""
    import re  # noqa: PLC0415

    from gpuaccept.operator.core.inservice.evidence import (  # noqa: PLC0415
        REASONS as IN_SERVICE_REASONS,
    )

    importlib.import_module("gpuaccept.operator.metrics")  # registers them
    from prometheus_client import REGISTRY  # noqa: PLC0415

    exported = {family.name for family in REGISTRY.collect()}
    rule = one(ha_docs, "PrometheusRule")
    alerts = rule["spec"]["groups"][0]["rules"]
    assert {a["alert"] for a in alerts} == {
        "GPUAcceptOperatorDown",
        "GPUAcceptNoLeader",
        "GPUAcceptInstallationStandby",
        "GPUAcceptNodeStuck",
        "GPUAcceptUnknownPhase",
        "GPUAcceptNodeUnmatched",
        "GPUAcceptPendingNodeUnwatched",
        "GPUAcceptNodesWaiting",
        "GPUAcceptNodesQuarantined",
        "GPUAcceptBreakerTripped",
        "GPUAcceptProbeErrors",
        *(f"GPUAcceptInService{reason}" for reason in (*IN_SERVICE_REASONS, "CommonCause")),
        "GPUAcceptInServiceWatchBlind",  # a blind watch window (notRead), never a quiet one
    }
    for alert in alerts:
        used = set(re.findall(r"\b(gpuaccept_[a-z_]+)\b", alert["expr"]))
        assert used or alert["expr"].startswith("absent(up{"), alert["alert"]
        for name in used:
            base = name.removesuffix("_total")
            assert name in exported or base in exported, f"{alert['alert']}: {name} not exported"
        assert 'service="gpuaccept-ha-metrics"' in alert["expr"]


def test_ha_defaults_spread_replicas() -> None:
    docs = render_chart(namespace=NAMESPACE, set_values={"operator.replicas": "2"})
    affinity = one(docs, "Deployment")["spec"]["template"]["spec"]["affinity"]
    term = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "gpuaccept",
        "app.kubernetes.io/instance": "gpuaccept",
        "app.kubernetes.io/component": "operator",
    }
    single = render_chart(namespace=NAMESPACE)
    # one replica: no anti-affinity, only the exclusion of judged nodes (issue 42 item 3)
    assert set(one(single, "Deployment")["spec"]["template"]["spec"]["affinity"]) == {
        "nodeAffinity"
    }


def test_one_port_for_health_and_metrics_is_refused() -> None:
    proc = helm(
        "template", "x", str(CHART),
        "--set", "operator.healthPort=9090", "--set", "operator.metricsPort=9090", check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "operator.healthPort and operator.metricsPort are both 9090" in proc.stderr


def test_pdb_that_would_block_drains_is_refused() -> None:
    proc = helm(
        "template", "x", str(CHART), "--set", "podDisruptionBudget.enabled=true", check=False
    )
    assert proc.returncode != 0
    assert "would block every node drain" in proc.stderr
    docs = render_chart(
        namespace=NAMESPACE,
        set_values={"podDisruptionBudget.enabled": "true", "operator.replicas": "2"},
    )
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_app_version_is_the_project_version() -> None:
    """The default image tags (appVersion) are the version the code is built as."""
    import tomllib  # noqa: PLC0415

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == project


def test_a_default_selector_key_can_be_dropped() -> None:
    docs = render_chart(
        namespace=NAMESPACE,
        set_values={
            "defaultPolicy.nodeSelector.nvidia\\.com/gpu\\.present": "null",
            "defaultPolicy.nodeSelector.pool": "h100",
        },
    )
    assert one(docs, "NodeAcceptancePolicy")["spec"]["nodeSelector"] == {"pool": "h100"}


def test_owned_key_prefixes_reach_the_operator() -> None:
    cli = importlib.import_module("gpuaccept.operator.command")
    options = importlib.import_module("gpuaccept.operator.options")
    docs = render_chart(
        namespace=NAMESPACE,
        set_values={"operator.ownedKeyPrefixes": "{example.com/gpu-,gpu.example.org/}"},
    )
    parsed = cli.parser().parse_args(container(docs)["args"][1:])
    assert options.owned_key_prefixes(parsed.owned_key_prefixes) == (
        "gpuaccept.io/",
        "example.com/gpu-",
        "gpu.example.org/",
    )
    assert "--owned-key-prefix" not in args_of(render_chart(namespace=NAMESPACE))


def test_image_pull_secrets_reach_the_probe_pods() -> None:
    """imagePullSecrets (the operator's) and probe.imagePullSecrets become the probe
    pods' pull secrets: the operator's flags, parsed by its CLI, without repeats."""
    cli = importlib.import_module("gpuaccept.operator.command")
    docs = render_chart(
        namespace=NAMESPACE,
        set_values={
            "imagePullSecrets[0].name": "regcred",
            "probe.imagePullSecrets[0].name": "gpu-mirror",
            "probe.imagePullSecrets[1].name": "regcred",
        },
    )
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    parsed = cli.parser().parse_args(container(docs)["args"][1:])
    assert parsed.probe_image_pull_secrets == ["regcred", "gpu-mirror"]
    assert "--probe-image-pull-secret" not in args_of(render_chart(namespace=NAMESPACE))


def test_a_bad_probe_pull_secret_name_is_refused() -> None:
    proc = helm(
        "template", "x", str(CHART), "--set", "probe.imagePullSecrets[0].name=Reg Cred",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "probe.imagePullSecrets.0.name" in proc.stderr.replace("/", "."), proc.stderr


def test_the_dra_example_values_are_the_charts_defaults_written_out() -> None:
    """examples/dra-values.yaml (docs/install.md, GPU Operator in DRA mode) names NVIDIA's
    driver and DeviceClass; the chart renders them as the operator's flags and grants
    the DRA mode's RBAC (the slices read, the probe claims, the fence rules)."""
    example = yaml.safe_load(DRA_VALUES.read_text())["operator"]
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["operator"]
    assert example == {"draDrivers": ["gpu.nvidia.com"], "draDeviceClass": "gpu.nvidia.com"}
    assert {k: defaults[k] for k in example} == example
    docs = render_chart(namespace=NAMESPACE, values_files=[DRA_VALUES])
    args = args_of(docs)
    assert args["--dra-driver"] == "gpu.nvidia.com"
    assert args["--dra-device-class"] == "gpu.nvidia.com"
    rules = [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
    granted = {res for r in rules if "resource.k8s.io" in r["apiGroups"] for res in r["resources"]}
    assert granted == {"resourceslices", "resourceclaims", "devicetaintrules"}
