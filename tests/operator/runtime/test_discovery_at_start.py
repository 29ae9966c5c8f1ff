"""Whether the API server serves DeviceTaintRules, asked once at start (issue 40 review):
only a 404 means "not served"; any other answer is retried for ``--crd-wait`` seconds and
then the operator exits 1 (the pod restarts), never runs on without a rule watch.

The API server is faked at the HTTP edge: a local HTTP server that answers discovery
from a script of statuses, reached through the real Kubernetes client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, GROUP, POLICY_PLURAL, VERSION
from gpuaccept.operator.command import _serves_device_taint_rules, main
from gpuaccept.operator.kube import Kube

RESOURCE_V1 = "/apis/resource.k8s.io/v1"
SERVED = {"resources": [{"name": "resourceslices"}, {"name": "devicetaintrules"}]}
CRDS = {"resources": [{"name": ACCEPTANCE_PLURAL}, {"name": POLICY_PLURAL}]}


class FakeApiServer(ThreadingHTTPServer):
    """Answers ``GET /apis/resource.k8s.io/v1`` with the next status of ``script`` (its
    last one for ever after), the gpuaccept CRDs' discovery with both served."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[int] = [200]
        self.asked = 0

    def next_status(self) -> int:
        status = self.script[min(self.asked, len(self.script) - 1)]
        self.asked += 1
        return status


class _Handler(BaseHTTPRequestHandler):
    server: FakeApiServer

    def do_GET(self) -> None:
        status, body = 404, {"kind": "Status", "code": 404}
        if self.path == RESOURCE_V1:
            status = self.server.next_status()
            body = SERVED if status == 200 else {"kind": "Status", "code": status}
        elif self.path == f"/apis/{GROUP}/{VERSION}":
            status, body = 200, CRDS
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _kube(server: FakeApiServer) -> Kube:
    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    return Kube(kubernetes.client.ApiClient(configuration))


@pytest.mark.parametrize(
    ("script", "served", "asked"),
    [
        ([200], True, 1),
        ([404], False, 1),  # the group/version is not served: no rules
        ([503, 500, 200], True, 3),  # a transient outage is waited out, not "not served"
        ([429, 404], False, 2),
    ],
    ids=["served", "not-served", "outage-then-served", "throttled-then-not-served"],
)
def test_only_a_404_means_not_served(
    api: FakeApiServer, script: list[int], served: bool, asked: int
) -> None:
    api.script = script
    assert _serves_device_taint_rules(_kube(api), timeout=30, first_delay=0.01) is served
    assert api.asked == asked


def test_an_error_past_the_wait_exits_1_and_says_why(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the fix a 500 was taken for "not served": the operator ran on without a
    rule watch, never deleted a rule and quarantined every new fence's node."""
    api.script = [500]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "fake",
                        "cluster": {"server": f"http://127.0.0.1:{api.server_address[1]}"},
                    }
                ],
                "users": [{"name": "fake", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )
    )
    code = main(["--kubeconfig", str(kubeconfig), "--crd-wait", "0.3", "--standalone"])
    assert code == 1
    assert api.asked >= 2  # retried before giving up
    err = capsys.readouterr().err
    assert "devicetaintrules" in err
    assert "500" in err
