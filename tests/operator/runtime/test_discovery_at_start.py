"""Whether the API server serves DeviceTaintRules, asked once at start (issue 40 review):
only a 404 means "not served"; any other answer is retried for ``--crd-wait`` seconds and
then the operator exits 1 (the pod restarts), never runs on without a rule watch.
The API server is faked at the HTTP edge (fakeapi.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeapi import FakeApiServer, fake_api, status_body

from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, GROUP, POLICY_PLURAL, VERSION
from gpuaccept.operator.command import _serves_device_taint_rules, main

RESOURCE_V1 = ("GET", "/apis/resource.k8s.io/v1")
SERVED = {"resources": [{"name": "resourceslices"}, {"name": "devicetaintrules"}]}
CRDS = {"resources": [{"name": ACCEPTANCE_PLURAL}, {"name": POLICY_PLURAL}]}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api() as server:
        server.script[("GET", f"/apis/{GROUP}/{VERSION}")] = [(200, CRDS)]
        yield server


def answers(*codes: int) -> list[tuple[int, dict[str, object]]]:
    return [(code, SERVED if code == 200 else status_body(code)) for code in codes]


@pytest.mark.parametrize(
    ("codes", "served", "asked"),
    [
        ((200,), True, 1),
        ((404,), False, 1),  # the group/version is not served: no rules
        ((503, 500, 200), True, 3),  # a transient outage is waited out, not "not served"
        ((429, 404), False, 2),
    ],
    ids=["served", "not-served", "outage-then-served", "throttled-then-not-served"],
)
def test_only_a_404_means_not_served(
    api: FakeApiServer, codes: tuple[int, ...], served: bool, asked: int
) -> None:
    api.script[RESOURCE_V1] = answers(*codes)
    assert _serves_device_taint_rules(api.kube(), timeout=30, first_delay=0.01) is served
    assert api.count(*RESOURCE_V1) == asked


def test_an_error_past_the_wait_exits_1_and_says_why(
    api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the fix a 500 was taken for "not served": the operator ran on without a
    rule watch, never deleted a rule and quarantined every new fence's node."""
    api.script[RESOURCE_V1] = answers(500)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                "users": [{"name": "fake", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )
    )
    code = main(["--kubeconfig", str(kubeconfig), "--crd-wait", "0.3", "--standalone"])
    assert code == 1
    assert api.count(*RESOURCE_V1) >= 2  # retried before giving up
    err = capsys.readouterr().err
    assert "devicetaintrules" in err
    assert "500" in err
