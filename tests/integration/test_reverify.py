"""Re-verification end to end (issue 24): the real kube-apiserver, the kubelet
stand-in running the real probe on simulated profiles, the operator as a
subprocess under the chart's RBAC. Each profile ends where it says:

* a drifted node (every GPU 15 % slower than at acceptance, within the policy's
  minimum and its siblings) is found by re-verification: Quarantined,
  BaselineDriftFailed, the figure, the GPU and both values named, the remedy rung
  on the Node;
* a suspect the targeted re-probe clears stays Accepted, one it confirms is
  quarantined with the check's own reason;
* a node never idle (a GPU pod bound throughout) is never re-probed, never failed;
* a repeat offender stays quarantined (RepeatedQuarantine) until a person's
  release is recorded.

Periods and idle times are seconds here (the policy allows a period of ten seconds
and up; the defaults are a week and an hour). A period of 15 s: the tests act on a
node (a slower profile, a GPU pod) within a second or two of its acceptance.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuaccept.contracts.api import (
    ACCEPTANCE_PLURAL,
    GROUP,
    REMEDY_CONDITION_TYPE,
    REMEDY_LABEL,
    REPROBE_ANNOTATION,
    VERSION,
)
from gpuaccept.operator.plugin.kubectl import main as plugin_main
from gpuaccept.testsupport.operator_env import (
    HEALTHY,
    NAMESPACE,
    ROOT,
    Env,
    suite_id,
    wait_for,
    wait_node_side,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

DRIFTED = str(ROOT / "profiles" / "reverify" / "h100-sxm-8gpu-drifted.yaml")
SLOW_GPU = str(ROOT / "profiles" / "faults" / "gpu-compute-slow.yaml")
REVERIFY = {"enabled": True, "idleSeconds": 2, "periodSeconds": 15, "sampleSeconds": 2}


def _patch_status(env: Env, name: str, reverify: dict[str, Any]) -> None:
    """What the in-service rules write into the NodeAcceptance status (a suspicion):
    status.reverify's input."""
    current = env.status(name).get("reverify") or {}
    env.kube.request(
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/{ACCEPTANCE_PLURAL}/{name}/status",
        {"status": {"reverify": {**current, **reverify}}},
        content_type="application/merge-patch+json",
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _remedy(env: Env, name: str) -> tuple[str | None, str | None]:
    node = env.node(name)
    conditions = {c["type"]: c for c in node["status"].get("conditions") or []}
    label = (node["metadata"].get("labels") or {}).get(REMEDY_LABEL)
    return label, (conditions.get(REMEDY_CONDITION_TYPE) or {}).get("reason")


def test_a_drifted_node_is_found_by_reverification(env: Env) -> None:
    suite = suite_id("drift")
    env.policy(suite, reverify=REVERIFY)
    (name,) = env.nodes(suite, {"d": HEALTHY})
    env.wait_phase([name], "Accepted")
    baseline = env.status(name)["baseline"]
    assert any(
        f["figure"] == "bf16Tflops.median" and f["value"] == 742.0 for f in baseline["figures"]
    )
    env.standin.node(name).profile = DRIFTED  # weeks later: the same node, slower
    wait_for(
        f"{name} quarantined by re-verification",
        lambda: env.status(name).get("reason") == "BaselineDriftFailed",
        240,
    )
    wait_node_side(env, name, "Quarantined", reason="BaselineDriftFailed")
    status = env.status(name)
    message = status["reasons"][0]["message"]
    assert "bf16Tflops" in message
    assert "631" in message
    assert "742" in message
    assert "GPU " in message
    drift = status["reverify"]["drift"]
    assert any(f["level"] == "fail" and f["figure"] == "bf16Tflops.median" for f in drift)
    assert status["reverify"]["last"]["cause"] == "Idle"
    assert status["reverify"]["last"]["outcome"] == "Failed"
    wait_for(f"{name}'s remedy rung", lambda: _remedy(env, name) == ("person", "NeedsPerson"), 30)
    assert any(e["reason"] == "BaselineDrift" for e in env.events(name, "NodeAcceptance"))


def _gpu_pod(env: Env, name: str) -> None:
    """A workload's pod holding a GPU, bound to the node (the stand-in runs it)."""
    env.core.create_namespaced_pod(
        NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"job-{name}"},
            "spec": {
                "nodeName": name,
                "restartPolicy": "Never",
                "serviceAccountName": "gpuaccept-probe",
                "automountServiceAccountToken": False,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "train",
                        "image": "local/train:1",
                        "command": ["sleep", "600"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )


def test_a_node_never_idle_is_never_reprobed_and_never_failed(env: Env) -> None:
    suite = suite_id("busy")
    env.policy(suite, reverify=REVERIFY)
    (name,) = env.nodes(suite, {"b": HEALTHY})
    env.wait_phase([name], "Accepted")
    env.standin.node(name).profile = DRIFTED  # it would fail, were it re-probed
    _gpu_pod(env, name)
    try:
        wait_for(
            f"{name}'s pods listed and found busy",
            lambda: (env.status(name).get("reverify") or {}).get("busyPods"),
            120,
        )
        # past its period (15 s) and lists later: still accepted, one probe only
        first = env.status(name)["reverify"]["sampledTime"]
        wait_for(
            "more lists of a busy node",
            lambda: env.status(name)["reverify"]["sampledTime"] != first,
            60,
        )
        status = env.status(name)
        assert status["phase"] == "Accepted"
        assert status["podSerial"] == 1
        assert "last" not in status["reverify"]
        wait_node_side(env, name, "Accepted")
    finally:
        env.core.delete_namespaced_pod(f"job-{name}", NAMESPACE, grace_period_seconds=0)


def test_a_suspect_the_targeted_probe_clears_and_one_it_confirms(env: Env) -> None:
    suite = suite_id("suspect")
    reverify = {**REVERIFY, "periodSeconds": 86400}  # only the suspicion makes them due
    # two nodes taken out at once: the rate allows it (its default, 10 % of two nodes
    # per 300 s, would let the second wait its turn)
    env.policy(suite, reverify=reverify, quarantineRate={"maxPerWindow": 2})
    clear, confirm = env.nodes(suite, {"clear": HEALTHY, "confirm": HEALTHY})
    env.wait_phase([clear, confirm], "Accepted")
    report = env.status(clear)["report"]
    env.standin.node(confirm).profile = SLOW_GPU  # GPU 5 30 % below its siblings now
    for name, gpu in ((clear, 3), (confirm, 5)):
        suspicion = {
            "checks": ["gpu_compute"],
            "gpus": [gpu],
            "cause": f"Xid 13 three times on GPU {gpu} within an hour",
            "since": _now(),
        }
        _patch_status(env, name, {"suspicions": [suspicion]})
    wait_for(
        "both suspect rounds over",
        lambda: all(
            (env.status(n).get("reverify") or {}).get("last", {}).get("cause") == "Suspect"
            for n in (clear, confirm)
        ),
        240,
    )
    cleared = env.status(clear)
    assert cleared["phase"] == "Accepted"
    assert cleared["reverify"]["last"]["outcome"] == "Passed"
    assert cleared["reverify"]["last"]["checks"] == ["gpu_compute"]
    assert cleared["report"] == report  # the full evidence stays
    wait_node_side(env, clear, "Accepted")
    confirmed = env.status(confirm)
    assert confirmed["phase"] == "Quarantined"
    assert confirmed["reason"] == "GpuComputeFailed"
    assert confirmed["reverify"]["last"]["outcome"] == "Failed"
    wait_node_side(env, confirm, "Quarantined", reason="GpuComputeFailed")


def test_a_repeat_offender_stays_quarantined_until_a_person_releases_it(env: Env) -> None:
    suite = suite_id("repeat")
    env.policy(suite, repeatOffenders={"count": 2, "windowSeconds": 3600})
    (name,) = env.nodes(suite, {"r": SLOW_GPU})
    env.wait_phase([name], "Quarantined")
    env.standin.node(name).profile = HEALTHY
    env.standin.reboot(name)  # "repaired": the probe passes, it comes back
    wait_for(f"{name} accepted after the repair", env.phase_of([name], "Accepted"), 120)
    env.standin.node(name).profile = SLOW_GPU
    env.standin.reboot(name)  # and fails again: the second quarantine in the window
    wait_for(
        f"{name} quarantined again",
        lambda: env.status(name).get("reason") == "GpuComputeFailed",
        120,
    )
    env.standin.node(name).profile = HEALTHY
    env.standin.reboot(name)  # repaired again: passes, and still stays out
    wait_for(
        f"{name} held for a person",
        lambda: env.status(name).get("reason") == "RepeatedQuarantine",
        120,
    )
    wait_node_side(env, name, "Quarantined", reason="RepeatedQuarantine")
    wait_for(f"{name}'s remedy rung", lambda: _remedy(env, name) == ("person", "NeedsPerson"), 30)
    env.standin.reboot(name)  # a reboot alone does not bring it back
    wait_for(
        f"{name} probed again after the reboot",
        lambda: (
            (env.status(name).get("podSerial") or 0) >= 5
            and env.status(name).get("reason") == "RepeatedQuarantine"
        ),
        120,
    )
    out = io.StringIO()
    code = plugin_main(
        ["--kubeconfig", str(env.cp.kubeconfig), "release", name, "--reason", "GPU replaced",
         "--wait", "60"],
        out=out,
    )  # fmt: skip
    assert code == 0, out.getvalue()
    env.core.patch_node(name, {"metadata": {"annotations": {REPROBE_ANNOTATION: "now"}}})
    wait_for(f"{name} accepted after the release", env.phase_of([name], "Accepted"), 120)
    wait_node_side(env, name, "Accepted")
    assert _remedy(env, name)[0] is None
