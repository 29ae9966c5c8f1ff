"""A policy may name only taint and label keys gpuaccept owns (issue 10 item 1).

The operator is the enforcement point: ``policy_entry`` turns a policy that
names another owner's key into an invalid one (no node is acted on under it,
its Ready condition says why), and ``--owned-key-prefix`` adds prefixes.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuaccept.operator.command import main
from gpuaccept.operator.core.fleet import PolicyTally, matching_policies, policy_status
from gpuaccept.operator.options import OptionError, owned_key_prefixes
from gpuaccept.operator.views import policy_entry

# The example: Cilium's taint and Karpenter's label.
CILIUM_TAINT = "node.cilium.io/agent-not-ready"
KARPENTER_LABEL = "karpenter.sh/nodepool"


def _policy(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "generation": 1, "uid": "u"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "foreign"),
    [
        ({"pendingTaintKey": CILIUM_TAINT}, [CILIUM_TAINT]),
        ({"quarantine": {"taintKey": "example.com/bad"}}, ["example.com/bad"]),
        ({"quarantine": {"labels": {KARPENTER_LABEL: "quarantined"}}}, [KARPENTER_LABEL]),
        (
            {
                "pendingTaintKey": CILIUM_TAINT,
                "quarantine": {"labels": {KARPENTER_LABEL: "quarantined"}},
            },
            [CILIUM_TAINT, KARPENTER_LABEL],
        ),
        # Not under gpuaccept.io/: a look-alike domain, and a key without a prefix.
        (
            {"quarantine": {"taintKey": "gpuaccept.io.evil.example/q"}},
            ["gpuaccept.io.evil.example/q"],
        ),
        ({"quarantine": {"labels": {"quarantined": "yes"}}}, ["quarantined"]),
    ],
)
def test_a_policy_naming_another_owners_key_is_invalid(
    spec: dict[str, Any], foreign: list[str]
) -> None:
    entry = policy_entry(_policy(nodeSelector={"pool": "gpu"}, **spec))
    view = entry.view
    assert view.spec is None
    assert view.error is not None
    for key in foreign:
        assert key in view.error
    assert "gpuaccept.io/" in view.error
    # No node is governed by it, and its Ready condition says why.
    assert matching_policies([view], {"pool": "gpu"}) == ()
    status = policy_status(view, PolicyTally(), {}, now=datetime.now(UTC))
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert (ready.status.value, ready.reason) == ("False", "InvalidSpec")
    assert foreign[0] in ready.message


def test_gpuaccept_keys_and_the_defaults_are_owned() -> None:
    entry = policy_entry(
        _policy(
            pendingTaintKey="gpuaccept.io/not-ready",
            quarantine={"taintKey": "gpuaccept.io/bad", "labels": {"gpuaccept.io/pool": "bad"}},
        )
    )
    assert entry.view.error is None
    assert entry.view.spec is not None
    assert policy_entry(_policy()).view.spec is not None


def test_an_owned_prefix_the_operator_is_started_with_admits_those_keys() -> None:
    body = _policy(quarantine={"labels": {"example.com/gpu-pool": "bad"}})
    assert policy_entry(body).view.spec is None
    prefixes = owned_key_prefixes(["example.com/gpu-"])
    assert prefixes == ("gpuaccept.io/", "example.com/gpu-")
    assert policy_entry(body, prefixes).view.spec is not None
    # The prefix owns only what starts with it.
    other = _policy(quarantine={"labels": {"example.com/team": "x"}})
    assert policy_entry(other, prefixes).view.spec is None


@pytest.mark.parametrize(
    ("prefix", "why"),
    [
        ("example.com", "DNS subdomain and '/'"),  # no "/": would own example.com.evil/...
        ("Example.com/", "DNS subdomain and '/'"),
        ("/", "DNS subdomain and '/'"),
        ("kubernetes.io/", "belongs to Kubernetes"),
        ("node.kubernetes.io/", "belongs to Kubernetes"),
        ("nvidia.com/", "belongs to Kubernetes or the NVIDIA"),
    ],
)
def test_owned_key_prefix_flag_is_checked(prefix: str, why: str) -> None:
    with pytest.raises(OptionError, match=why):
        owned_key_prefixes([prefix])


def test_owned_key_prefix_flag_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kubeconfig", os.devnull, "--owned-key-prefix", "k8s.io/"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuaccept operator: --owned-key-prefix: k8s.io/ belongs to")
    assert len(err.splitlines()) == 1
