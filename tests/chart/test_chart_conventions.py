"""Chart conventions (issue 16 item 5): security contexts as values, a `helm test`
hook that checks the operator, a Grafana dashboard for the sidecar, NOTES with
absolute links, the operator's node watch filter as a value."""

from __future__ import annotations

import http.server
import importlib
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.testsupport.chart_rbac import chart_dir, helm, render_chart

CHART = chart_dir()
NAMESPACE = "gpuaccept-system"
Manifest = dict[str, Any]


def _one(docs: list[Manifest], kind: str, component: str | None = None) -> Manifest:
    found = [
        d
        for d in docs
        if d["kind"] == kind
        and (
            component is None or d["metadata"]["labels"]["app.kubernetes.io/component"] == component
        )
    ]
    assert len(found) == 1, f"{kind}/{component}: {len(found)}"
    return found[0]


def _operator_pod(docs: list[Manifest]) -> Manifest:
    spec: Manifest = _one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


# --- security contexts ----------------------------------------------------------------


def test_security_contexts_default_to_todays() -> None:
    pod = _operator_pod(render_chart(namespace=NAMESPACE))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_fixed_ids_can_be_dropped_for_openshift() -> None:
    docs = render_chart(
        namespace=NAMESPACE,
        set_values={
            "operator.podSecurityContext.runAsUser": "null",
            "operator.podSecurityContext.runAsGroup": "null",
            "operator.podSecurityContext.fsGroup": "null",
        },
    )
    assert _operator_pod(docs)["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    test_pod = _one(docs, "Pod", "test")["spec"]
    assert "runAsUser" not in test_pod["securityContext"]


# --- the node watch filter --------------------------------------------------------------


def test_watch_node_selector_reaches_the_operator() -> None:
    cli = importlib.import_module("gpuaccept.operator.command")
    options = importlib.import_module("gpuaccept.operator.options")
    docs = render_chart(
        namespace=NAMESPACE,
        set_values={"operator.watchNodeSelector": "nvidia.com/gpu.present=true\\,pool"},
    )
    args = _operator_pod(docs)["containers"][0]["args"]
    parsed = cli.parser().parse_args(args[1:])
    selector = dict(options.base_node_selector(parsed.node_selector))
    assert selector == {"nvidia.com/gpu.present": "true", "pool": None}
    assert parsed.allow_control_plane_nodes is False
    # By default the nodes labelled as GPU nodes only (docs/security.md, "Bounded reach");
    # "" watches every node.
    default_args = _operator_pod(render_chart(namespace=NAMESPACE))["containers"][0]["args"]
    assert [a for a in default_args if a.startswith("--node-selector")] == [
        "--node-selector=nvidia.com/gpu.present=true"
    ]
    every = render_chart(namespace=NAMESPACE, set_values={"operator.watchNodeSelector": ""})
    assert not [a for a in _operator_pod(every)["containers"][0]["args"] if "node-selector" in a]


def test_a_malformed_watch_node_selector_is_refused() -> None:
    proc = helm(
        "template", "x", str(CHART), "--set-string", "operator.watchNodeSelector=a==b",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "operator.watchNodeSelector" in proc.stderr.replace("/", "."), proc.stderr


@pytest.mark.parametrize(
    ("selector", "why"),
    [
        ("pool=a\\,pool", "pool is named twice"),
        ("node-role.kubernetes.io/master", "outside the operator's reach without "
         "operator.allowControlPlaneNodes"),
    ],
)  # fmt: skip
def test_a_watch_node_selector_the_operator_refuses_fails_the_chart(
    selector: str, why: str
) -> None:
    proc = helm(
        "template", "x", str(CHART), "--set-string", f"operator.watchNodeSelector={selector}",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert why in proc.stderr, proc.stderr


def test_control_plane_nodes_are_allowed_only_by_the_value() -> None:
    cli = importlib.import_module("gpuaccept.operator.command")
    allowed = render_chart(
        namespace=NAMESPACE,
        set_values={
            "operator.allowControlPlaneNodes": "true",
            "operator.watchNodeSelector": "node-role.kubernetes.io/control-plane",
        },
    )
    args = _operator_pod(allowed)["containers"][0]["args"]
    assert cli.parser().parse_args(args[1:]).allow_control_plane_nodes is True
    default_args = _operator_pod(render_chart(namespace=NAMESPACE))["containers"][0]["args"]
    assert "--allow-control-plane-nodes" not in default_args


# --- helm test ------------------------------------------------------------------------------


def test_helm_test_hook_checks_the_operator() -> None:
    docs = render_chart(namespace=NAMESPACE)
    pod = _one(docs, "Pod", "test")
    service = _one(docs, "Service", "test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert service["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert service["spec"]["clusterIP"] == "None"
    deployment = _one(docs, "Deployment")
    assert service["spec"]["selector"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    container = pod["spec"]["containers"][0]
    assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    script, host, health, metrics, _deadline = container["args"]
    assert script == (CHART / "files" / "helm-test.py").read_text()
    assert host == f"gpuaccept-test.{NAMESPACE}.svc"
    assert (health, metrics) == ("8080", "9090")
    assert pod["spec"]["automountServiceAccountToken"] is False


class _Operator(http.server.BaseHTTPRequestHandler):
    leader = "1.0"

    def do_GET(self) -> None:
        body = {
            "/healthz": "ok",
            "/metrics": f"# HELP gpuaccept_leader x\ngpuaccept_leader {self.leader}\n",
        }.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write((body or "").encode())

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def operator_endpoints() -> Iterator[tuple[int, int]]:
    servers = [http.server.HTTPServer(("127.0.0.1", 0), _Operator) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield servers[0].server_address[1], servers[1].server_address[1]
    for server in servers:
        server.shutdown()


@pytest.mark.parametrize(("leader", "code"), [("1.0", 0), ("0.0", 1)])
def test_helm_test_script_passes_only_with_a_leader(
    operator_endpoints: tuple[int, int], leader: str, code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Operator, "leader", leader)
    health, metrics = operator_endpoints
    script = CHART / "files" / "helm-test.py"
    proc = subprocess.run(
        [sys.executable, "-c", script.read_text(), "127.0.0.1", str(health), str(metrics), "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert ("holds the Lease" if code == 0 else "0 of 1 replicas hold the Lease") in proc.stdout


# --- the Grafana dashboard -----------------------------------------------------------------


def test_dashboard_configmap_for_the_sidecar() -> None:
    assert not [d for d in render_chart(namespace=NAMESPACE) if d["kind"] == "ConfigMap"]
    docs = render_chart(namespace=NAMESPACE, set_values={"grafana.dashboard.enabled": "true"})
    config_map = _one(docs, "ConfigMap", "dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["gpuaccept.json"])
    assert dashboard == json.loads((CHART / "files" / "dashboard.json").read_text())
    titles = " | ".join(p["title"] for p in dashboard["panels"])
    for topic in ("by phase", "Time to verdict", "quarantines by reason", "bus bandwidth", "PCIe"):
        assert topic.lower() in titles.lower(), topic


def test_dashboard_queries_only_exported_metrics() -> None:
    importlib.import_module("gpuaccept.operator.metrics")  # registers them
    registry = importlib.import_module("prometheus_client").REGISTRY
    exported = {family.name for family in registry.collect()}
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    names = {name for expr in exprs for name in re.findall(r"\b(gpuaccept_[a-z_]+)\b", expr)}
    assert names, "the dashboard queries no gpuaccept metric"
    for name in names:
        base = re.sub(r"_(total|bucket|count|sum|info)$", "", name)
        assert name in exported or base in exported, f"{name} is not exported"


# --- NOTES ---------------------------------------------------------------------------------


def test_notes_link_absolute_documentation() -> None:
    out = helm("install", "gpuaccept", str(CHART), "--dry-run=client", "-n", NAMESPACE).stdout
    notes = out.split("NOTES:", 1)[1]
    links = re.findall(r"https://\S+", notes)
    assert any(link.endswith("/docs/install.md") for link in links), notes
    assert any(link.endswith("/docs/runbook.md") for link in links), notes
    assert not re.search(r"(?<!/)\bdocs/\w+\.md", notes.replace("/docs/", "")), notes
    assert "helm test gpuaccept" in notes


def test_docs_base_url_is_a_value() -> None:
    out = helm(
        "install", "gpuaccept", str(CHART), "--dry-run=client",
        "--set", "docs.baseURL=https://docs.example.com/gpuaccept/",
    ).stdout  # fmt: skip
    assert "https://docs.example.com/gpuaccept/runbook.md" in out


def test_files_are_in_the_package(tmp_path: Path) -> None:
    """helm package keeps files/ (no .helmignore drops them)."""
    helm("package", str(CHART), "-d", str(tmp_path))
    (archive,) = tmp_path.glob("*.tgz")
    listing = subprocess.run(
        ["tar", "tzf", str(archive)], capture_output=True, text=True, check=True
    ).stdout
    assert "gpuaccept/files/helm-test.py" in listing
    assert "gpuaccept/files/dashboard.json" in listing
