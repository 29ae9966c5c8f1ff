"""kubeconform validates the chart's rendered manifests against JSON schemas made
from the local API server's own OpenAPI (/openapi/v2, the served CRDs included),
strictly (an unknown field is an error). kubeconform is built from Go modules by
mk/tools.mk, like helm. Nothing is fetched from the network."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.testsupport.chart_rbac import apply_crds, helm
from gpuaccept.testsupport.controlplane import ControlPlane, bin_dir, repo_root

pytestmark = pytest.mark.integration

CHART = repo_root() / "charts"
# Served by the Prometheus Operator's CRDs, which a bare API server does not have.
NOT_SERVED = ("PrometheusRule", "ServiceMonitor", "PodMonitor")
EVERYTHING_ON = (
    "--set", "metrics.prometheusRule.enabled=true",
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "grafana.dashboard.enabled=true",
    "--set", "podDisruptionBudget.enabled=true",
    "--set", "operator.replicas=2",
    "--set", "imagePullSecrets[0].name=regcred",
)  # fmt: skip
INT_OR_STRING = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
QUANTITY = {"anyOf": [{"type": "string"}, {"type": "number"}]}


_SCHEMA_MAPS = ("properties", "definitions", "patternProperties")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    """One OpenAPI v2 schema as kubeconform's strict JSON schemas are: objects with
    properties take no other keys; int-or-string and quantities take both types."""
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        return dict(INT_OR_STRING)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS:
            out[key] = {name: _strict(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS:
            out[key] = [_strict(sub) for sub in value]
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _strict(value)
        else:
            out[key] = value
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def schemas_from_openapi(openapi: dict[str, Any], directory: Path) -> int:
    """One JSON schema file per served kind, named for the -schema-location template
    below; each holds every definition (its $refs stay local)."""
    definitions = {name: _strict(d) for name, d in openapi["definitions"].items()}
    definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = INT_OR_STRING
    definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"] = QUANTITY
    written = 0
    for name, definition in openapi["definitions"].items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            group, version, kind = gvk["group"], gvk["version"], gvk["kind"]
            path = directory / f"{group or version}_{version}_{kind.lower()}.json"
            path.write_text(
                json.dumps({"$ref": f"#/definitions/{name}", "definitions": definitions})
            )
            written += 1
    return written


SCHEMA_LOCATION = "{{ .Group }}_{{ .ResourceAPIVersion }}_{{ .ResourceKind }}.json"


@pytest.fixture(scope="module")
def schema_dir(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    apply_crds(control_plane)  # the API server then serves the CRDs' schemas too
    directory = tmp_path_factory.mktemp("schemas")
    openapi = json.loads(control_plane.get_raw("/openapi/v2"))
    assert schemas_from_openapi(openapi, directory) > 50
    assert (directory / "gpuaccept.io_v1alpha1_nodeacceptancepolicy.json").exists()
    return directory


def kubeconform(schema_dir: Path, manifests: str) -> subprocess.CompletedProcess[str]:
    exe = bin_dir() / "kubeconform"
    if not exe.exists():
        subprocess.run(
            ["make", "--no-print-directory", "-C", str(repo_root()), "-f", "mk/tools.mk",
             ".bin/kubeconform"],
            check=True, capture_output=True,
        )  # fmt: skip
    return subprocess.run(
        [
            str(exe), "-strict", "-summary", "-output", "text",
            "-schema-location", f"{schema_dir}/{SCHEMA_LOCATION}",
            "-skip", ",".join(NOT_SERVED), "-",
        ],
        input=manifests, capture_output=True, text=True, check=False,
    )  # fmt: skip


HA_VALUES = CHART / "gpuaccept" / "ci" / "ha-values.yaml"
DRA_VALUES = CHART / "gpuaccept" / "examples" / "dra-values.yaml"
RENDERS: dict[str, tuple[str, ...]] = {
    "gpuaccept-defaults": ("gpuaccept", str(CHART / "gpuaccept")),
    "gpuaccept-every-option": (
        "gpuaccept", str(CHART / "gpuaccept"), "--include-crds", *EVERYTHING_ON
    ),
    "gpuaccept-ha-values": ("gpuaccept", str(CHART / "gpuaccept"), "-f", str(HA_VALUES)),
    "gpuaccept-dra-values": ("gpuaccept", str(CHART / "gpuaccept"), "-f", str(DRA_VALUES)),
    # the platform knobs: NetworkPolicies, the CRDs as templates, a PodMonitor, another
    # namespace and registry, the critical-pods ResourceQuota and aggregated roles (defaults)
    "gpuaccept-platform-options": (
        "gpuaccept", str(CHART / "gpuaccept"),
        "--set", "networkPolicy.enabled=true", "--set", "crds.enabled=true",
        "--set", "metrics.podMonitor.enabled=true", "--set", "namespaceOverride=gpu-ops",
        "--set", "global.imageRegistry=mirror.example.com",
    ),
    "gpuaccept-crds": ("gpuaccept-crds", str(CHART / "gpuaccept-crds")),
}  # fmt: skip


@pytest.mark.parametrize("name", list(RENDERS))
def test_rendered_manifests_are_valid(schema_dir: Path, name: str) -> None:
    manifests = helm("template", *RENDERS[name]).stdout
    proc = kubeconform(schema_dir, manifests)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}{proc.stderr}"
    kinds = [d["kind"] for d in yaml.safe_load_all(manifests) if d]
    skipped = sum(kind in NOT_SERVED for kind in kinds)
    assert f"Valid: {len(kinds) - skipped}, Invalid: 0, Errors: 0, Skipped: {skipped}" in (
        proc.stdout
    )


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        (("spec", "replicas"), "two", "replicas"),
        (("spec", "template", "spec", "automountServiceAcountToken"), True, "additional"),
    ],
)
def test_a_bad_manifest_is_caught(
    schema_dir: Path, path: tuple[str, ...], value: object, error: str
) -> None:
    docs = [d for d in yaml.safe_load_all(helm("template", "g", str(CHART / "gpuaccept")).stdout)]
    deployment = next(d for d in docs if d and d["kind"] == "Deployment")
    node = deployment
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    proc = kubeconform(schema_dir, yaml.safe_dump(deployment))
    assert proc.returncode != 0, proc.stdout
    assert error in proc.stdout, proc.stdout
