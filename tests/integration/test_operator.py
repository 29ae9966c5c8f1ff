"""The operator end to end: real kube-apiserver, kubelet stand-in, the real probe.

The operator runs as a subprocess (``python -m gpuaccept.cli operator``), as in
production, so killing and restarting it is real. The kubelet stand-in runs
the probe pods' command (``gpuaccept probe``) against hardware profiles.

The environment (``env``: the operator, the stand-in, per-test policies and
labels) and the polling helpers are test support, shared with the other
operator modules: gpuaccept.testsupport.operator_env, made the ``env`` fixture by
tests/integration/conftest.py. No timing assertions: generous waits, clear
messages.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from gpuaccept.contracts.api import (
    ACCEPTANCE_LABEL,
    ACCEPTANCE_PLURAL,
    CREATION_NONCE_ANNOTATION,
    GROUP,
    NODE_CONDITION_TYPE,
    PENDING_TAINT_KEY,
    POLICY_PLURAL,
    QUARANTINE_TAINT_KEY,
    REASON_LABEL,
    REPROBE_ANNOTATION,
    VERSION,
)
from gpuaccept.contracts.report import ProbeReport, encode_termination_message
from gpuaccept.operator.plugin.kubectl import main as plugin_main
from gpuaccept.probe.hardware.profile import expected_fault_reasons
from gpuaccept.testsupport.kubelet_standin import (
    Behaviour,
    Complete,
    Hang,
    ImagePullFailure,
    PodInfo,
    RunProcess,
    SandboxFailure,
    SimNode,
    StartFailure,
)
from gpuaccept.testsupport.operator_env import (
    HEALTHY,
    NAMESPACE,
    PENDING_TAINT,
    ROOT,
    SUITE_LABEL,
    Env,
    Operator,
    create_if_absent,
    http_get,
    operator_ports,
    suite_id,
    wait_for,
    wait_node_side,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

DOWNSHIFT = str(ROOT / "profiles/h100-sxm-8gpu-idle-downshift.yaml")
FAULTS = expected_fault_reasons(ROOT / "profiles" / "faults")  # each profile's expect.reason
DEFAULT_POLICY = ROOT / "policies" / "default-h100-h200.yaml"


# ---------------------------------------------------------------------- the main paths


def assert_accepted(env: Env, name: str) -> None:
    wait_node_side(env, name, "Accepted")
    wait_for(f"{name}'s probe pod to be deleted", lambda: not env.pods(name), 60)


def test_healthy_and_idle_downshift_nodes_are_accepted(env: Env) -> None:
    suite = suite_id("ok")
    env.policy(suite)
    names = env.nodes(suite, {"healthy": HEALTHY, "downshift": DOWNSHIFT})
    env.wait_phase(names, "Accepted")
    for name in names:
        assert_accepted(env, name)
        status = env.status(name)
        assert status["attempts"] == 1
        assert status["probedBootID"] == env.standin.node(name).boot_id
        assert status["figures"]["pcie"] == "Gen5x16"
        assert status["report"]["nodeName"] == name


def quarantine_events(env: Env, name: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in env.events(name, kind) if e["reason"] == "Quarantined"]


def test_each_fault_profile_is_quarantined_with_the_right_reason(env: Env) -> None:
    suite = suite_id("fault")
    # Each profile's `expect` is stated against the default policy.
    env.policy(suite, probe=yaml.safe_load(DEFAULT_POLICY.read_text()))
    profiles = {fault: str(ROOT / f"profiles/faults/{fault}.yaml") for fault in FAULTS}
    names = env.nodes(suite, profiles)
    env.wait_phase(names, "Quarantined", timeout=180)
    for fault, reason in FAULTS.items():
        name = f"{suite}-{fault}"
        status = env.status(name)
        assert status["reason"] == reason, env.describe([name])
        wait_node_side(env, name, "Quarantined", reason=reason)
        node_events = wait_for(
            f"a Quarantined Event on node {name}", partial(quarantine_events, env, name, "Node")
        )
        assert node_events[0]["type"] == "Warning"
        assert reason in node_events[0]["message"]
        wait_for(
            f"a Quarantined Event on NodeAcceptance {name}",
            partial(quarantine_events, env, name, "NodeAcceptance"),
        )


def test_manual_taint_and_cordon_survive_acceptance(env: Env) -> None:
    suite = suite_id("manual")
    env.policy(suite)
    manual = {"key": "example.com/maintenance", "value": "yes", "effect": "NoSchedule"}
    (name,) = env.nodes(suite, {"n": HEALTHY}, taints=[PENDING_TAINT, manual])
    # cordoned, and a probe asked for (a cordoned node is not probed unless asked)
    env.core.patch_node(
        name,
        {"spec": {"unschedulable": True}, "metadata": {"annotations": {REPROBE_ANNOTATION: "1"}}},
    )
    env.wait_phase([name], "Accepted")
    node = wait_node_side(env, name, "Accepted")
    keys = env.taint_keys(name)
    assert "example.com/maintenance" in keys
    assert PENDING_TAINT_KEY not in keys
    assert node["spec"].get("unschedulable") is True
    # the record keeps the operator's own keys only: the pending key stays on it after
    # the verdict removed its taint (no status write just to drop it), the manual one never
    assert set(env.status(name)["appliedTaints"]) <= {PENDING_TAINT_KEY}


def _report_for(node: str, boot_id: str) -> str:
    """A real, valid report produced by the probe for ``node``."""
    out = Path(f"/tmp/gpuaccept-optest-report-{uuid.uuid4().hex[:6]}.json")
    subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "probe", "--profile", HEALTHY,
         "--termination-log", str(out)],
        env={**os.environ, "NODE_NAME": node, "GPUACCEPT_BOOT_ID": boot_id},
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    text = out.read_text()
    out.unlink()
    return text


def test_untrustworthy_termination_messages_never_accept(env: Env) -> None:
    suite = suite_id("garbage")
    env.policy(suite)

    def other_node(info: PodInfo) -> Behaviour:
        return Complete(exit_code=0, message=_report_for("some-other-node", info.boot_id))

    def other_boot(info: PodInfo) -> Behaviour:
        return Complete(exit_code=0, message=_report_for(info.node_name, "not-this-boot"))

    names = [
        *env.nodes(suite, {"garbage": HEALTHY}, behaviour=Complete(0, "this is not a report")),
        *env.nodes(suite, {"oversize": HEALTHY}, behaviour=Complete(0, '{"a":"' + "x" * 6000)),
        *env.nodes(suite, {"empty": HEALTHY}, behaviour=Complete(0, "")),
        *env.nodes(suite, {"othernode": HEALTHY}, behaviour=other_node),
        *env.nodes(suite, {"otherboot": HEALTHY}, behaviour=other_boot),
    ]
    seen: dict[str, set[str]] = {n: set() for n in names}

    def all_quarantined() -> bool:
        for n in names:
            seen[n].add(str(env.status(n).get("phase")))
        return all(env.status(n).get("phase") == "Quarantined" for n in names)

    wait_for("every untrustworthy node to be quarantined", all_quarantined, 180)
    for n in names:
        assert "Accepted" not in seen[n]
        status = env.status(n)
        assert status["reason"] == "ProbeError", env.describe([n])
        assert status["attempts"] == 2  # retries: 1
        wait_node_side(env, n, "Quarantined")


def _passing_report(node: str, boot_id: str, *, gpus: int | None = None) -> str:
    """The probe's passing report on an 8-GPU node; ``gpus``: claim only that many."""
    out = Path(f"/tmp/gpuaccept-optest-report-{uuid.uuid4().hex[:6]}.json")
    subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "probe", "--profile", HEALTHY,
         "--termination-log", str(out)],
        env={**os.environ, "NODE_NAME": node, "GPUACCEPT_BOOT_ID": boot_id,
             "GPUACCEPT_EXPECTED_GPUS": "8"},
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    report = ProbeReport.model_validate_json(out.read_text())
    out.unlink()
    if gpus is not None:  # "4 of 4 GPUs": counts that agree with each other, not the node
        results = [
            r.model_copy(update={"observed": {"visible": gpus, "allocatable": gpus}})
            if r.check == "gpu_count"
            else r.model_copy(update={"observed": {**r.observed, "ranks": gpus}})
            if r.check == "nccl_allreduce" and isinstance(r.observed, dict)
            else r
            for r in report.results
        ]
        summary = report.summary.model_copy(update={"gpu_count": gpus})
        report = report.model_copy(update={"summary": summary, "results": results})
    return encode_termination_message(report)


def test_hostile_probe_results_never_accept(env: Env) -> None:
    """A passing report with exit 1 or 137, or claiming 4 of 4 GPUs on an 8-GPU node:
    each attempt is an error (issue 10), and the node ends quarantined, never accepted."""
    suite = suite_id("hostile")
    env.policy(suite, probeRun={"retries": 1, "backoffSeconds": 1})

    def exit_with(code: int, **kwargs: int) -> Callable[[PodInfo], Behaviour]:
        def behaviour(info: PodInfo) -> Behaviour:
            return Complete(code, _passing_report(info.node_name, info.boot_id, **kwargs))

        return behaviour

    nodes = {
        "exit1": exit_with(1),
        "exit137": exit_with(137),
        "halfgpus": exit_with(0, gpus=4),
    }
    names = {
        kind: env.nodes(suite, {kind: HEALTHY}, behaviour=behaviour)[0]
        for kind, behaviour in nodes.items()
    }
    seen: dict[str, set[str]] = {n: set() for n in names.values()}

    def all_quarantined() -> bool:
        for n in names.values():
            seen[n].add(str(env.status(n).get("phase")))
        return all(env.status(n).get("phase") == "Quarantined" for n in names.values())

    wait_for("every hostile node to be quarantined", all_quarantined, 180)
    expected = {"exit1": "ReportMismatch", "exit137": "ProbeFailed", "halfgpus": "ReportMismatch"}
    for kind, n in names.items():
        assert "Accepted" not in seen[n], kind
        status = env.status(n)
        assert status["reason"] == "ProbeError", env.describe([n])
        assert status["reasons"][0]["message"].startswith(expected[kind]), status
        wait_node_side(env, n, "Quarantined")
    wait_for("the probe pods to be gone", lambda: not any(env.pods(n) for n in seen), 60)


@pytest.mark.long  # two probe deadlines of 30 s, the policy's least
def test_deadline_exceeded_is_retried_then_probe_error(env: Env) -> None:
    suite = suite_id("deadline")
    env.policy(suite, probeRun={"timeoutSeconds": 30, "retries": 1, "backoffSeconds": 1})
    (name,) = env.nodes(suite, {"hang": HEALTHY}, behaviour=Hang())
    wait_for(
        "a retry after the first deadline",
        lambda: (
            env.status(name).get("attempts") == 2 or env.status(name).get("phase") == "Quarantined"
        ),
        150,
    )
    env.wait_phase([name], "Quarantined", timeout=150)
    status = env.status(name)
    assert status["reason"] == "ProbeError"
    assert "DeadlineExceeded" in status["reasons"][0]["message"], status
    wait_node_side(env, name, "Quarantined")
    wait_for("the probe pods to be gone", lambda: not env.pods(name), 60)


def test_breaker_holds_at_the_limit_then_raising_it_releases(env: Env) -> None:
    suite = suite_id("breaker")
    policy = env.policy(suite, maxQuarantined=1)
    names = env.nodes(
        suite, {f"f{i}": str(ROOT / "profiles/faults/pcie-x8.yaml") for i in range(3)}
    )

    def settled() -> bool:
        phases = [env.status(n).get("phase") for n in names]
        return phases.count("Quarantined") == 1 and phases.count("Held") == 2

    wait_for("one node quarantined and two held by the breaker", settled, 180)
    for n in names:
        status = env.status(n)
        if status["phase"] == "Held":
            assert status["reason"] == "BreakerOpen"
            assert status["heldAction"] == "Quarantine"
            wait_node_side(env, n, "Pending")
            assert env.taint_keys(n) == [PENDING_TAINT_KEY]
    wait_for(
        "the policy to report the open breaker",
        lambda: env.policy_status(policy).get("breakerOpen") is True,
        60,
    )
    wait_for(
        "a BreakerOpen Event on the policy",
        lambda: [
            e for e in env.events(policy, "NodeAcceptancePolicy") if e["reason"] == "BreakerOpen"
        ],
        60,
    )
    env.kube.request(
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}/{policy}",
        {"spec": {"maxQuarantined": 3}},
        content_type="application/merge-patch+json",
    )
    env.wait_phase(names, "Quarantined")
    for n in names:
        wait_node_side(env, n, "Quarantined")
        assert env.taint_keys(n) == [QUARANTINE_TAINT_KEY]


def test_dry_run_changes_no_taint_or_label(env: Env) -> None:
    suite = suite_id("dryrun")
    env.policy(suite, dryRun=True)
    names = env.nodes(
        suite,
        {"ok": HEALTHY, "bad": str(ROOT / "profiles/faults/governor-powersave.yaml")},
        taints=[],
    )
    env.wait_phase(names, "Held")
    ok, bad = names
    assert env.status(ok)["heldAction"] == "Accept"
    assert env.status(bad)["heldAction"] == "Quarantine"
    assert env.status(bad)["reasons"][0]["reason"] == "CpuGovernorFailed"
    for n in names:
        assert env.status(n)["reason"] == "DryRun"
        node = env.node(n)
        assert not node["spec"].get("taints")
        assert ACCEPTANCE_LABEL not in node["metadata"]["labels"]
        conditions = {c["type"] for c in node["status"].get("conditions") or []}
        assert NODE_CONDITION_TYPE not in conditions
    wait_for("a DryRun Event", lambda: [e for e in env.events(bad, "NodeAcceptance")
                                         if e["reason"] == "DryRun"], 60)  # fmt: skip


def test_a_dry_run_answers_in_columns_and_counts(env: Env) -> None:
    suite = suite_id("dryanswer")
    policy = env.policy(suite, dryRun=True)
    names = env.nodes(
        suite,
        {"ok": HEALTHY, "bad": str(ROOT / "profiles/faults/pcie-x8.yaml")},
        taints=[],
    )
    env.wait_phase(names, "Held")
    wait_for(
        "the policy's would-accept and would-quarantine counts",
        lambda: (
            (
                (
                    env.policy_status(policy).get("wouldAccept"),
                    env.policy_status(policy).get("wouldQuarantine"),
                )
                == (1, 1)
            )
            or None
        ),
        60,
    )
    ok, bad = names
    rows = {
        line.split()[0]: line.split()
        for line in env.cp.kubectl("get", "na", ok, bad).stdout.splitlines()
    }
    header = rows["NAME"]
    held, failing = header.index("HELD"), header.index("FAILING")
    assert rows[bad][held] == "Quarantine"
    assert rows[bad][failing] == "PcieLinkFailed"
    assert rows[ok][held] == "Accept"
    nap = env.cp.kubectl("get", "nap", policy).stdout.splitlines()
    values = dict(zip(nap[0].split(), nap[1].split(), strict=True))
    assert (values["WOULD-ACCEPT"], values["WOULD-QUARANTINE"]) == ("1", "1")
    assert (values["READY"], values["MATCHED"]) == ("True", "2")


def test_kubectl_wait_for_condition_accepted_and_the_node_says_why(env: Env) -> None:
    suite = suite_id("wait")
    env.policy(suite)
    ok, bad = env.nodes(suite, {"ok": HEALTHY, "bad": str(ROOT / "profiles/faults/pcie-x8.yaml")})
    wait_for("both NodeAcceptances", lambda: env.na(ok) is not None and env.na(bad) is not None)
    # the command the runbook gives, against the real API server (its short name too)
    done = env.cp.kubectl("wait", "--for=condition=Accepted", f"na/{ok}", "--timeout=120s")
    assert f"nodeacceptance.{GROUP}/{ok} condition met" in done.stdout
    env.cp.kubectl("wait", "--for=condition=Accepted=false", f"na/{bad}", "--timeout=120s")
    conditions = {c["type"]: c for c in env.status(bad)["conditions"]}
    assert conditions["Accepted"]["reason"] == "PcieLinkFailed"
    node = wait_node_side(env, bad, "Quarantined", reason="PcieLinkFailed")
    assert node["metadata"]["labels"][REASON_LABEL] == "PcieLinkFailed"
    found = env.cp.kubectl("get", "nodes", "-l", f"{REASON_LABEL}=PcieLinkFailed", "-o", "name")
    assert f"node/{bad}" in found.stdout.split()
    assert REASON_LABEL not in (env.node(ok)["metadata"].get("labels") or {})


def test_release_records_who_and_when_and_a_reprobe_hands_the_node_back(env: Env) -> None:
    suite = suite_id("release")
    env.policy(suite)
    (name,) = env.nodes(suite, {"bad": str(ROOT / "profiles/faults/pcie-x8.yaml")})
    env.wait_phase([name], "Quarantined")
    wait_node_side(env, name, "Quarantined")
    review = env.kube.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    me = review["status"]["userInfo"]["username"]
    out = io.StringIO()
    code = plugin_main(
        ["--kubeconfig", str(env.cp.kubeconfig), "release", name, "--reason", "riser replaced",
         "--wait", "60"],
        out=out,
    )  # fmt: skip
    assert code == 0, out.getvalue()
    assert "released: released by" in out.getvalue()
    status = env.status(name)
    assert status["phase"] == "Released"
    record = status["release"]
    assert (record["by"], record["fromPhase"], record["fromReason"]) == (
        me,
        "Quarantined",
        "PcieLinkFailed",
    )
    assert record["reason"] == "riser replaced"

    def untainted() -> dict[str, Any] | None:
        node = env.node(name)
        return None if node["spec"].get("taints") else node

    node = wait_for(f"{name}'s taints off", untainted, 30)
    assert node["metadata"]["labels"][ACCEPTANCE_LABEL] == "released"
    released = wait_for(
        "a Released Event on the Node",
        lambda: [e for e in env.events(name, "Node") if e["reason"] == "Released"],
    )
    assert me in released[0]["message"]
    # a re-probe hands it back: probed again, and quarantined again on the same fault
    env.core.patch_node(name, {"metadata": {"annotations": {REPROBE_ANNOTATION: "now"}}})
    wait_for(
        "a new round after the re-probe",
        lambda: (
            env.status(name).get("phase") == "Quarantined"
            and env.status(name).get("podSerial") == 2
        ),
        120,
    )
    assert env.status(name)["release"]["by"] == me  # the record stays


def test_a_pending_node_no_policy_matches_is_reported(env: Env) -> None:
    suite = suite_id("unmatched")
    env.policy(suite)
    (name,) = env.nodes(f"{suite}-nopolicy", {"n": HEALTHY})  # its suite label: no policy
    op = env.operator

    def reported() -> str | None:
        status, text = http_get(op.metrics_port, "/metrics")
        line = f'gpuaccept_node_unmatched_pending{{node="{name}"}} 1.0'
        return text if status == 200 and line in text else None

    wait_for("the unmatched node's series", reported, 60)
    wait_for(
        "the operator's log line",
        lambda: f"node {name} carries a pending taint and no policy matches it" in op.log(),
        30,
    )
    assert env.na(name) is None  # never governed, never touched
    assert env.taint_keys(name) == [PENDING_TAINT_KEY]


def test_boot_id_change_and_reprobe_annotation_trigger_a_new_probe(env: Env) -> None:
    suite = suite_id("reprobe")
    env.policy(suite)
    (name,) = env.nodes(suite, {"n": HEALTHY})
    env.wait_phase([name], "Accepted")
    assert env.status(name)["podSerial"] == 1
    new_boot = env.standin.reboot(name)
    wait_for(
        "a re-probe after the reboot",
        lambda: (
            env.status(name).get("probedBootID") == new_boot
            and env.status(name).get("phase") == "Accepted"
        ),
        120,
    )
    assert env.status(name)["podSerial"] == 2
    env.core.patch_node(name, {"metadata": {"annotations": {REPROBE_ANNOTATION: "please"}}})
    wait_for(
        "a re-probe after the annotation",
        lambda: (
            env.status(name).get("podSerial") == 3 and env.status(name).get("phase") == "Accepted"
        ),
        120,
    )
    annotations = env.node(name)["metadata"].get("annotations") or {}
    assert REPROBE_ANNOTATION not in annotations
    assert_accepted(env, name)


def test_node_deletion_removes_its_nodeacceptance(env: Env) -> None:
    suite = suite_id("delete")
    env.policy(suite)
    (name,) = env.nodes(suite, {"n": HEALTHY}, behaviour=Hang())
    wait_for("a probe pod", lambda: env.pods(name), 60)
    env.standin.delete_nodes([name])
    wait_for("the NodeAcceptance to be deleted", lambda: env.na(name) is None, 60)
    wait_for("the probe pod to be deleted", lambda: not env.pods(name), 60)


def test_schema_invalid_policy_is_refused_naming_the_field(env: Env) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeAcceptancePolicy",
        "metadata": {"name": f"optest-invalid-{uuid.uuid4().hex[:4]}"},
        "spec": {"probeRun": {"timeoutSeconds": 5}, "quarantine": {"taintEffect": "Sometimes"}},
    }
    with pytest.raises(ApiException) as raised:
        env.kube.request("POST", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}", body)
    assert raised.value.status == 422
    message = json.loads(raised.value.body or "{}")["message"]
    assert "spec.probeRun.timeoutSeconds" in message
    assert "spec.quarantine.taintEffect" in message


def _columns(env: Env, plural: str) -> list[str]:
    """The header of ``kubectl get <plural>`` (kubectl is built if missing)."""
    out = env.cp.kubectl("get", f"{plural}.{GROUP}").stdout
    return out.splitlines()[0].split() if out.strip() else []


def test_kubectl_get_shows_the_columns(env: Env) -> None:
    suite = suite_id("columns")
    env.policy(suite)
    (name,) = env.nodes(suite, {"n": HEALTHY})
    env.wait_phase([name], "Accepted")
    na_columns = _columns(env, ACCEPTANCE_PLURAL)
    for column in ("NAME", "PHASE", "REASON", "BUSBW", "PCIE", "DRIVER", "PROBED", "AGE"):
        assert column in na_columns, na_columns
    policy_columns = _columns(env, POLICY_PLURAL)
    for column in ("NAME", "ACCEPTED", "QUARANTINED", "PENDING", "DRYRUN", "PAUSED", "AGE"):
        assert column in policy_columns, policy_columns


# ---------------------------------------------------------------------- restart and HA


def test_kill_mid_probe_and_restart_resumes_with_one_pod(env: Env) -> None:
    suite = suite_id("restart")
    env.policy(suite)
    lease = f"optest-restart-{uuid.uuid4().hex[:6]}"
    env.operator.stop()  # this test runs its own operator, which it crashes

    def slow_valid_report(info: PodInfo) -> Behaviour:
        return Complete(0, _report_for(info.node_name, info.boot_id), delay_s=10)

    first = Operator(env.cp, env.log_dir, lease=lease, name="restart-1").start()
    try:
        (name,) = env.nodes(suite, {"n": HEALTHY}, behaviour=slow_valid_report)
        wait_for("the first probe pod", lambda: env.pods(name), 90)
        # its UID on record (the write right after the create; before it, a restart
        # could not tell the pod from a squatter's: core/podidentity.py)
        wait_for("the probe pod's UID on record", lambda: env.status(name).get("ownedPods"), 30)
        first.kill()  # crash mid-probe: the pod runs, its result not yet read
        max_pods = len(env.pods(name))
        wait_for(
            "the probe pod to finish while no operator runs",
            lambda: all(p["status"].get("phase") == "Succeeded" for p in env.pods(name)),
            60,
        )
        second = Operator(env.cp, env.log_dir, lease=lease, name="restart-2").start()
        try:

            def done() -> bool:
                nonlocal max_pods
                max_pods = max(max_pods, len(env.pods(name)))
                return env.status(name).get("phase") == "Accepted"

            wait_for("the verdict after the restart", done, 150)
            assert max_pods <= 1, "two probe pods existed at once"
            status = env.status(name)
            assert status["podSerial"] == 1, "the restart started a second probe"
            assert status["attempts"] == 1
            assert_accepted(env, name)
        finally:
            second.stop()
    finally:
        first.kill()
        env.operator.start(**operator_ports())


def _crash_window(env: Env, name: str, step: str) -> None:
    """The API server as an operator killed at ``step`` of its first probe pod's create
    leaves it (built from the state after the record, with no operator running):
    ``intent``: the intent on record, no pod; ``create``: the pod created, carrying the
    intent's nonce, its UID not recorded; ``record``: as it is."""
    pod = env.pods(name)[0]
    pod_name = pod["metadata"]["name"]
    nonce = pod["metadata"]["annotations"][CREATION_NONCE_ANNOTATION]
    if step == "record":
        return
    if step == "intent":
        env.cp.kubectl("-n", NAMESPACE, "delete", "pod", pod_name, "--grace-period=0", "--force")
        wait_for("the pod gone", lambda: not env.pods(name), 30)
        nonce = uuid.uuid4().hex  # the pod never made: its nonce was never sent
    intent = {
        "kind": "Pod",
        "name": pod_name,
        "nonceDigest": hashlib.sha256(nonce.encode()).hexdigest(),
    }
    status = {
        "ownedPods": [],
        "creationIntents": [intent],
        "probeStartedTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    env.cp.kubectl(
        "patch", "nodeacceptance", name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


@pytest.mark.parametrize("step", ["intent", "create", "record"])
def test_an_operator_killed_at_each_step_of_a_pod_create_leaves_no_pod(env: Env, step: str) -> None:
    """Issue 42 item 9: killed (SIGKILL) between the intent and the create, between the
    create and the record of its UID, after the record: the restarted operator decides
    the node and no probe pod is left behind; the crash-window pod is deleted unread."""
    suite = suite_id(f"crash-{step}")
    env.policy(suite)
    lease = f"optest-crash-{uuid.uuid4().hex[:6]}"
    env.operator.stop()

    def valid_report(info: PodInfo) -> Behaviour:
        return Complete(0, _report_for(info.node_name, info.boot_id), delay_s=3)

    first = Operator(env.cp, env.log_dir, lease=lease, name=f"crash-{step}-1").start()
    try:
        (name,) = env.nodes(suite, {"n": HEALTHY}, behaviour=valid_report)
        wait_for("the probe pod's UID on record", lambda: env.status(name).get("ownedPods"), 90)
        first.kill()
        _crash_window(env, name, step)
        second = Operator(env.cp, env.log_dir, lease=lease, name=f"crash-{step}-2").start()
        try:
            wait_for("the verdict after the restart", env.phase_of([name], "Accepted"), 150)
            wait_for("no probe pod left", lambda: not env.pods(name), 60)
            status = env.status(name)
            assert status["attempts"] == 1, status
            assert status["podSerial"] == (2 if step == "create" else 1), status
            deleted = [e for e in env.events(name, "NodeAcceptance")
                       if e["reason"] == "CrashWindowPodDeleted"]  # fmt: skip
            assert len(deleted) == (1 if step == "create" else 0), deleted
            assert_accepted(env, name)
        finally:
            second.stop()
    finally:
        first.kill()
        env.operator.start(**operator_ports())


def test_a_refused_probe_pod_waits_with_the_reason_and_never_convicts(env: Env) -> None:
    suite = suite_id("refused")
    env.policy(suite)
    env.operator.stop()
    lease = f"optest-refused-{uuid.uuid4().hex[:6]}"
    op = Operator(env.cp, env.log_dir, lease=lease, name="refused")
    op.start("--probe-service-account", "no-such-account")
    try:
        (name,) = env.nodes(suite, {"n": HEALTHY})
        env.wait_phase([name], "Waiting", timeout=120)
        status = env.status(name)
        assert status["reason"] == "PodRefused", status
        assert "no-such-account" in status["message"], status
        assert status.get("attempts", 0) == 0, status
        wait_node_side(env, name, "Pending")  # under the pending taint, not quarantined
    finally:
        op.stop()
        env.operator.start(**operator_ports())


def test_two_replicas_never_double_act_and_the_standby_takes_over(env: Env) -> None:
    suite = suite_id("ha")
    env.policy(suite)
    env.operator.stop()
    lease = f"optest-ha-{uuid.uuid4().hex[:6]}"
    a = Operator(env.cp, env.log_dir, lease=lease, name="ha-a").start()
    b = Operator(env.cp, env.log_dir, lease=lease, name="ha-b").start()
    try:
        names = env.nodes(suite, {f"n{i}": HEALTHY for i in range(4)})
        env.wait_phase(names, "Accepted", timeout=150)
        for n in names:
            assert env.status(n)["podSerial"] == 1, env.describe([n])

            def accepted_events(node: str = n) -> list[dict[str, Any]]:
                return [e for e in env.events(node, "NodeAcceptance") if e["reason"] == "Accepted"]

            # the Event is written after the status that accepts (the plan's order)
            wait_for("the Accepted Event", lambda: bool(accepted_events()), 30)
            assert len(accepted_events()) == 1, [e["message"] for e in accepted_events()]
        actors = [op for op in (a, b) if "probe attempt 1" in op.log()]
        assert len(actors) == 1, "both replicas (or none) started probes"
        leader, standby = (a, b) if actors[0] is a else (b, a)
        leader.kill()
        late = env.nodes(suite, {"late": HEALTHY})
        env.wait_phase(late, "Accepted", timeout=150)
        assert "probe attempt 1" in standby.log()
        held = env.kube.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease}"
        )["spec"]
        assert held["holderIdentity"].startswith(f"{standby.name}_"), held
        assert held["leaseTransitions"] >= 1, held
    finally:
        a.stop()
        b.stop()
        env.operator.start(**operator_ports())


def test_two_policies_matching_one_node_is_an_error_on_both(env: Env) -> None:
    suite = suite_id("conflict")
    first = env.policy(suite)
    second = f"{first}-twin"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeAcceptancePolicy",
        "metadata": {"name": second},
        "spec": {"nodeSelector": {SUITE_LABEL: suite}},
    }
    env.kube.request("POST", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}", body)
    env.policies.append(second)
    (name,) = env.nodes(suite, {"n": HEALTHY})

    def conflict(policy: str) -> bool:
        conditions = env.policy_status(policy).get("conditions") or []
        return any(
            c["type"] == "Ready"
            and c["status"] == "False"
            and c["reason"] == "PolicyConflict"
            and name in c["message"]
            for c in conditions
        )

    wait_for("PolicyConflict on both policies", lambda: conflict(first) and conflict(second), 60)
    assert env.na(name) is None, "a node matched by two policies got a NodeAcceptance"
    assert env.pods(name) == []
    assert env.taint_keys(name) == [PENDING_TAINT_KEY]


def test_paused_policy_starts_no_probe_until_resumed(env: Env) -> None:
    suite = suite_id("paused")
    policy = env.policy(suite, paused=True)
    (name,) = env.nodes(suite, {"n": HEALTHY}, taints=[])
    wait_for("a NodeAcceptance", lambda: env.na(name), 60)
    time.sleep(3)  # no probe may start meanwhile (not a timing assertion on the operator)
    assert env.pods(name) == []
    # found in service under a paused policy: left in service, not tainted
    assert env.taint_keys(name) == []
    assert env.status(name).get("phase", "Pending") == "Pending"
    env.kube.request(
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}/{policy}",
        {"spec": {"paused": False}},
        content_type="application/merge-patch+json",
    )
    env.wait_phase([name], "Accepted")
    assert_accepted(env, name)


def test_metrics_and_health_endpoints(env: Env) -> None:
    suite = suite_id("metrics")
    policy = env.policy(suite)
    names = env.nodes(suite, {"ok": HEALTHY, "bad": str(ROOT / "profiles/faults/pcie-x8.yaml")})
    env.wait_phase(names[:1], "Accepted")
    env.wait_phase(names[1:], "Quarantined")
    op = env.operator
    assert http_get(op.health_port, "/healthz")[0] == 200
    assert http_get(op.health_port, "/readyz")[0] == 200

    def scraped() -> str | None:
        status, text = http_get(op.metrics_port, "/metrics")
        wanted = [
            f'gpuaccept_nodes{{phase="{phase}",policy="{policy}"}} 1.0'
            for phase in ("Accepted", "Quarantined")
        ]
        return text if status == 200 and all(w in text for w in wanted) else None

    # both gauges: they are refreshed together, but not with the phases read above
    text = wait_for("the phase gauges on /metrics", scraped, 60)
    assert 'gpuaccept_check_failures_total{check="pcie_link",reason="PcieLinkFailed"}' in text
    assert f'gpuaccept_node_busbw_bytes_per_second{{node="{names[0]}"}}' in text
    assert (
        f'gpuaccept_node_phase{{node="{names[1]}",phase="Quarantined",policy="{policy}",'
        'reason="PcieLinkFailed"} 1.0' in text
    )
    assert 'gpuaccept_build_info{version="' in text
    assert "_created" not in text
    assert "gpuaccept_probe_duration_seconds_count" in text
    assert f'gpuaccept_breaker_open{{policy="{policy}"}} 0.0' in text


def test_no_node_carries_kopf_annotations_or_finalizers(env: Env) -> None:
    suite = suite_id("kopf")
    env.policy(suite)
    names = env.nodes(suite, {"n": HEALTHY})
    env.wait_phase(names, "Accepted")
    for node in env.kube.request("GET", "/api/v1/nodes")["items"]:
        meta = node["metadata"]
        annotations = meta.get("annotations") or {}
        finalizers = meta.get("finalizers") or []
        bad = [k for k in annotations if "kopf" in k] + [f for f in finalizers if "kopf" in f]
        assert not bad, f"{meta['name']}: {bad}"


# ---------------------------------------------------------------------- issue 10


CILIUM_TAINT = {"key": "node.cilium.io/agent-not-ready", "effect": "NoSchedule"}
KARPENTER_LABEL = "karpenter.sh/nodepool"


def test_a_policy_naming_other_owners_keys_is_invalid_and_touches_nothing(env: Env) -> None:
    # The example: a policy that would have the operator remove Cilium's
    # taint and overwrite and remove Karpenter's label.
    suite = suite_id("foreign")
    policy = env.policy(
        suite,
        pendingTaintKey=CILIUM_TAINT["key"],
        quarantine={"labels": {KARPENTER_LABEL: "quarantined"}},
    )
    sim = SimNode(
        name=f"{suite}-n",
        profile=HEALTHY,
        labels={SUITE_LABEL: suite, "nvidia.com/gpu.present": "false", KARPENTER_LABEL: "gpu"},
        taints=[CILIUM_TAINT],
    )
    env.standin.add_nodes([sim])

    def ready_false() -> dict[str, Any] | None:
        conditions = {c["type"]: c for c in env.policy_status(policy).get("conditions") or []}
        ready = conditions.get("Ready") or {}
        return ready if ready.get("reason") == "InvalidSpec" else None

    ready = wait_for("the policy's Ready condition to say InvalidSpec", ready_false, 60)
    assert ready["status"] == "False"
    assert CILIUM_TAINT["key"] in ready["message"]
    assert KARPENTER_LABEL in ready["message"]
    assert "gpuaccept.io/" in ready["message"]
    time.sleep(5)  # give a (wrong) operator time to act; nothing may happen
    node = env.node(sim.name)
    assert env.taint_keys(sim.name) == [CILIUM_TAINT["key"]]
    assert node["metadata"]["labels"][KARPENTER_LABEL] == "gpu"
    assert ACCEPTANCE_LABEL not in node["metadata"]["labels"]
    assert env.na(sim.name) is None
    assert env.pods(sim.name) == []


def _patch_policy(env: Env, name: str, spec: dict[str, Any]) -> None:
    env.kube.request(
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}/{name}",
        {"spec": spec},
        content_type="application/merge-patch+json",
    )


def test_quarantine_labels_are_recorded_and_an_old_key_is_cleaned_up(env: Env) -> None:
    suite = suite_id("labels")
    policy = env.policy(suite, quarantine={"labels": {"gpuaccept.io/pool": "bad"}})
    (name,) = env.nodes(suite, {"n": str(ROOT / "profiles/faults/pcie-x8.yaml")})
    env.wait_phase([name], "Quarantined")
    assert env.status(name)["appliedLabels"] == ["gpuaccept.io/pool"]
    wait_for(  # the status is written first, then the node
        "the quarantine label",
        lambda: env.node(name)["metadata"]["labels"].get("gpuaccept.io/pool") == "bad",
        60,
    )
    # The label key changes (merge patch: null drops the old key from the map).
    _patch_policy(
        env, policy, {"quarantine": {"labels": {"gpuaccept.io/pool": None, "gpuaccept.io/q": "y"}}}
    )

    def relabelled() -> dict[str, str] | None:
        labels = env.node(name)["metadata"]["labels"]
        done = "gpuaccept.io/pool" not in labels and labels.get("gpuaccept.io/q") == "y"
        return labels if done else None

    wait_for("the old quarantine label to go and the new one to be set", relabelled, 60)
    wait_for(
        "appliedLabels to record only the new key",
        lambda: env.status(name).get("appliedLabels") == ["gpuaccept.io/q"],
        60,
    )
    assert env.status(name)["phase"] == "Quarantined"


def test_a_node_without_gpus_is_counted_then_stalls_at_the_deadline(env: Env) -> None:
    suite = suite_id("nogpu")
    policy = env.policy(suite, waitForGPUs={"timeoutSeconds": 30})
    sim = SimNode(
        name=f"{suite}-cpu",
        profile=HEALTHY,
        gpu_count=0,
        labels={SUITE_LABEL: suite, "nvidia.com/gpu.present": "false"},
        taints=[PENDING_TAINT],
    )
    env.standin.add_nodes([sim])
    name = sim.name
    wait_for(
        "the waiting node to name its policy",
        lambda: (
            env.status(name).get("policy") == policy
            and env.status(name).get("reason") == "WaitingForGPUs"
        ),
        60,
    )
    assert env.status(name)["phase"] == "Pending"
    wait_for(
        "the policy to count the waiting node",
        lambda: (env.policy_status(policy).get("counts") or {}).get("pending") == 1,
        60,
    )

    def scraped() -> str | None:
        status, text = http_get(env.operator.metrics_port, "/metrics")
        wanted = f'gpuaccept_nodes{{phase="Pending",policy="{policy}"}} 1.0'
        return text if status == 200 and wanted in text else None

    wait_for("the waiting node in gpuaccept_nodes{phase=Pending}", scraped, 60)
    env.wait_phase([name], "Stalled", timeout=120)
    status = env.status(name)
    assert status["reason"] == "NoGPUsAdvertised"
    assert "does not tolerate the pending taint" in status["message"]
    assert env.taint_keys(name) == [PENDING_TAINT_KEY]  # the default keeps it
    assert env.pods(name) == []
    wait_for(
        "the policy to count the stalled node",
        lambda: (env.policy_status(policy).get("counts") or {}).get("stalled") == 1,
        60,
    )
    wait_for(
        "a NoGPUsAdvertised Event",
        lambda: [
            e for e in env.events(name, "NodeAcceptance") if e["reason"] == "NoGPUsAdvertised"
        ],
        60,
    )


def test_a_selector_naming_control_plane_nodes_needs_the_opt_in(env: Env) -> None:
    name = f"optest-cp-{uuid.uuid4().hex[:4]}"
    spec: dict[str, Any] = {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeAcceptancePolicy",
        "metadata": {"name": name},
        "spec": spec,
    }
    with pytest.raises(ApiException) as raised:
        env.kube.request("POST", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}", body)
    assert raised.value.status == 422
    assert "includeControlPlane" in json.loads(raised.value.body or "{}")["message"]
    spec["includeControlPlane"] = True
    env.kube.request("POST", f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}", body)
    env.policies.append(name)


# ---------------------------------------------------------------------- probe pods that never ran

TOOLKIT_STDERR = (
    "failed to create containerd task: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected "
    "mode as 'legacy'\nnvidia-container-cli: "
)
TOOLKIT_MISMATCH = "initialization error: nvml error: driver/library version mismatch: unknown"
TOOLKIT_CUDA = (
    "requirement error: unsatisfied condition: cuda>=13.2, please update your driver to a "
    "newer version, or use an earlier cuda container: unknown"
)


def test_a_toolkit_driver_mismatch_quarantines_with_driver_libraries(env: Env) -> None:
    suite = suite_id("toolkit")
    env.policy(suite)
    (name,) = env.nodes(
        suite, {"n": HEALTHY}, behaviour=StartFailure(TOOLKIT_STDERR + TOOLKIT_MISMATCH)
    )
    env.wait_phase([name], "Quarantined")
    status = env.status(name)
    assert status["reason"] == "DriverLibrariesFailed", env.describe([name])
    assert status["attempts"] == 1  # the node's fault: judged, not retried
    assert status["reasons"][0]["check"] == "driver_libraries"
    assert status["reasons"][0]["message"].endswith("nvidia-container-cli: " + TOOLKIT_MISMATCH)
    wait_node_side(env, name, "Quarantined")
    wait_for("the failed probe pod to be deleted", lambda: not env.pods(name), 60)


def test_other_start_failures_end_in_probe_error_with_their_own_reason(env: Env) -> None:
    suite = suite_id("nostart")
    env.policy(suite, probeRun={"timeoutSeconds": 30, "retries": 0, "backoffSeconds": 1})
    behaviours = {
        "CudaRequirementRefused": StartFailure(TOOLKIT_STDERR + TOOLKIT_CUDA),
        "ProbeContainerNeverStarted": SandboxFailure(),
    }
    names = {
        reason: env.nodes(suite, {reason.lower(): HEALTHY}, behaviour=behaviour)[0]
        for reason, behaviour in behaviours.items()
    }
    env.wait_phase(list(names.values()), "Quarantined", timeout=150)
    for reason, name in names.items():
        status = env.status(name)
        assert status["reason"] == "ProbeError", env.describe([name])
        assert status["reasons"][0]["message"].startswith(f"{reason}: "), env.describe([name])
    assert "cuda>=13.2" in env.status(names["CudaRequirementRefused"])["reasons"][0]["message"]


def test_an_unpullable_image_and_a_kubelet_refusal_wait_never_convict(env: Env) -> None:
    suite = suite_id("nowait")
    env.policy(suite, probeRun={"timeoutSeconds": 30, "retries": 0, "backoffSeconds": 1})
    (pull,) = env.nodes(suite, {"pull": HEALTHY}, behaviour=ImagePullFailure())
    # a GPU failed after the node status was posted: the kubelet admits against 7
    fewer = SimNode(
        name=f"{suite}-fewer",
        profile=HEALTHY,
        labels={SUITE_LABEL: suite, "nvidia.com/gpu.present": "false"},
        taints=[PENDING_TAINT],
        healthy_gpus=7,
    )
    env.standin.add_nodes([fewer])
    expected = {pull: "ImageUnavailable", fewer.name: "NodeBusy"}
    env.wait_phase(list(expected), "Waiting", timeout=120)

    def waiting_after_three_tries(name: str, reason: str) -> bool:
        status = env.status(name)
        # between two tries the node is briefly Probing (a new pod): never convicted
        assert status.get("phase") not in ("Quarantined", "Held"), env.describe([name])
        assert status.get("attempts", 0) <= 1, env.describe([name])
        return status.get("podSerial", 0) >= 3 and (
            status.get("phase"),
            status.get("reason"),
            status.get("attempts", 0),
        ) == ("Waiting", reason, 0)

    # several tries later (backoffSeconds 1): still waiting, no attempt spent
    for name, reason in expected.items():
        wait_for(
            f"{name} waiting after three tries",
            functools.partial(waiting_after_three_tries, name, reason),
            120,
        )
    assert "requested number of devices unavailable" in env.status(fewer.name)["message"]


def test_a_missing_runtime_class_is_named(env: Env) -> None:
    suite = suite_id("rtclass")
    env.policy(suite, probeRun={"timeoutSeconds": 60, "retries": 0, "backoffSeconds": 1})
    env.operator.stop()
    lease = f"optest-rtclass-{uuid.uuid4().hex[:6]}"
    op = Operator(env.cp, env.log_dir, lease=lease, name="rtclass")
    op.start("--probe-runtime-class", "no-such-runtime-class")
    try:
        (name,) = env.nodes(suite, {"n": HEALTHY})
        env.wait_phase([name], "Waiting", timeout=120)
        status = env.status(name)
        # the API server's RuntimeClass admission refused the pod at creation: the
        # operator's configuration, not the node's fault
        assert status["reason"] == "RuntimeClassMissing", status
        assert 'RuntimeClass "no-such-runtime-class" not found' in status["message"]
    finally:
        op.stop()
        env.operator.start(**operator_ports())


def _squat(
    env: Env, name: str, *, node: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """What anyone who may create pods in the release namespace can do (the chart's
    admission rules are not installed in this module): the attempt's pod name, with
    the probe's labels, pinned to ``node``."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "gpuaccept",
                "app.kubernetes.io/component": "probe",
                "gpuaccept.io/node": node,
                "gpuaccept.io/attempt": "1",
                **(labels or {}),
            },
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "serviceAccountName": "gpuaccept-probe",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "probe",
                    "image": "local/gpuaccept-probe:test",
                    "command": ["gpuaccept", "probe", "--termination-log", "/dev/termination-log"],
                }
            ],
        },
    }
    return env.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)


def test_a_squatted_probe_pod_never_speaks_for_the_node(env: Env) -> None:
    """Issue 29, item 1, with no admission rule in the way. The attempt's pod name is
    taken before the operator creates it: on the target node by a pod that "succeeds"
    with a forged passing report (the node's real probe would fail: PCIe x8), and, for
    a second node, by a pod bound elsewhere. Neither node is accepted or quarantined:
    both wait (PodNameTaken), the squatters are left in place and named in Warning
    Events, and no attempt is spent."""
    suite = suite_id("squat")
    # a long backoff: the retry under a new name does not come within the test
    env.policy(suite, probeRun={"timeoutSeconds": 60, "retries": 0, "backoffSeconds": 600})
    same, other = f"{suite}-same", f"{suite}-other"
    squatted = {same: f"gpuaccept-probe-{same}-1", other: f"gpuaccept-probe-{other}-1"}

    def forged(info: PodInfo) -> Behaviour:
        if info.name == squatted[same]:  # built from what the Node object shows
            return Complete(0, _report_for(info.node_name, info.boot_id))
        return RunProcess()

    env.operator.stop()  # the squats land first, as an attacker's would
    try:
        env.nodes(suite, {"same": str(ROOT / "profiles/faults/pcie-x8.yaml")}, behaviour=forged)
        env.nodes(suite, {"other": HEALTHY})
        pods = {
            same: _squat(env, squatted[same], node=same),
            other: _squat(env, squatted[other], node=f"{suite}-nowhere"),
        }
        wait_for(
            "the squatter on the target node to succeed",
            lambda: [p for p in env.pods(same) if p["status"].get("phase") == "Succeeded"],
            60,
        )
    finally:
        env.operator.start(**operator_ports())
    env.wait_phase([same, other], "Waiting", timeout=120)
    for name in (same, other):
        status = env.status(name)
        assert status["reason"] == "PodNameTaken", env.describe([name])
        assert status.get("attempts", 0) == 0, env.describe([name])
        assert squatted[name] in status["message"]
        assert "report" not in status, "the squatter's report was read"
        node = wait_node_side(env, name, "Pending")  # not accepted, not quarantined
        assert ACCEPTANCE_LABEL not in (node["metadata"].get("labels") or {})
        warnings = [e for e in env.events(name, "Node") if e["reason"] == "PodNameTaken"]
        assert warnings, f"no PodNameTaken Event on {name}"
        assert squatted[name] in warnings[0]["message"]
        left = env.core.read_namespaced_pod(squatted[name], NAMESPACE)  # left for a person
        assert left.metadata.uid == pods[name]["metadata"]["uid"]
        assert left.metadata.deletion_timestamp is None
    time.sleep(3)  # a few more passes change nothing
    assert env.status(same)["phase"] == "Waiting", env.describe([same])
    assert env.status(other)["phase"] == "Waiting", env.describe([other])


def test_a_probe_pod_replaced_under_its_name_is_never_read(env: Env) -> None:
    """The operator's own probe pod is deleted and another created under its name,
    which "succeeds" with a passing report built from what the Node object shows
    (the node's real probe hangs). Before issue 29 the operator read it by its name and
    accepted the node; now its UID is not the one on record: the node waits
    (PodNameTaken), the replacement is left in place, and nothing is accepted."""
    suite = suite_id("replaced")
    env.policy(suite, probeRun={"timeoutSeconds": 300, "retries": 0, "backoffSeconds": 600})
    name = f"{suite}-n"

    def behaviour(info: PodInfo) -> Behaviour:
        labels = info.pod["metadata"].get("labels") or {}
        if labels.get("squatter") == "yes":
            return Complete(0, _report_for(info.node_name, info.boot_id))
        return Hang()  # the operator's own pod never reports

    env.nodes(suite, {"n": HEALTHY}, behaviour=behaviour)
    running = wait_for(
        "the operator's probe pod to run",
        lambda: [p for p in env.pods(name) if p["status"].get("phase") == "Running"],
        90,
    )
    own = {"name": running[0]["metadata"]["name"], "uid": running[0]["metadata"]["uid"]}
    env.operator.stop()  # the swap lands between two of the operator's passes
    try:
        env.core.delete_namespaced_pod(own["name"], NAMESPACE, grace_period_seconds=0)
        wait_for("the operator's pod to be gone", lambda: not env.pods(name), 30)
        body = _squat(env, own["name"], node=name, labels={"squatter": "yes"})
        wait_for(
            "the replacement to succeed",
            lambda: [p for p in env.pods(name) if p["status"].get("phase") == "Succeeded"],
            60,
        )
    finally:
        env.operator.start(**operator_ports())
    status = wait_for(
        "a decision on the replacement",
        lambda: (st := env.status(name)).get("phase") in ("Waiting", "Accepted") and st,
        120,
    )
    assert (status["phase"], status.get("reason")) == ("Waiting", "PodNameTaken"), status
    assert f"UID {own['uid']} on record" in status["message"]
    assert status["ownedPods"] == [{**own, "shape": status["ownedPods"][0]["shape"]}]
    assert "report" not in status, "the replacement's report was read"
    wait_node_side(env, name, "Pending")
    left = env.core.read_namespaced_pod(own["name"], NAMESPACE)
    assert left.metadata.uid == body["metadata"]["uid"]


def _pdb_status(env: Env, namespace: str, name: str, allowed: int) -> None:
    """Write the budget's status as the disruption controller would (no controller-manager
    runs on this control plane): one healthy pod, ``allowed`` disruptions."""
    path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"
    generation = env.kube.request("GET", path)["metadata"]["generation"]
    status = {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": 1,
        "desiredHealthy": 1,
        "expectedPods": 1,
    }
    env.kube.request(
        "PATCH", f"{path}/status", {"status": status}, content_type="application/merge-patch+json"
    )


def test_a_noexecute_quarantine_drains_through_the_eviction_api_within_budgets(env: Env) -> None:
    """Issue 29, item 4: ``taintEffect: NoExecute`` puts a NoSchedule taint on the node
    and evicts its pods through the Eviction API, which the API server refuses while a
    PodDisruptionBudget allows no disruption. What this proves and what not: the API
    server's own budget check on the eviction subresource, against a budget status the
    test writes as the disruption controller would; not the disruption controller
    (no controller-manager runs here) nor the kubelet's graceful termination."""
    suite = suite_id("drain")
    workloads = f"{suite}-apps"
    create_if_absent(env.kube, "/api/v1/namespaces", {"metadata": {"name": workloads}})
    create_if_absent(
        env.kube,
        f"/api/v1/namespaces/{workloads}/serviceaccounts",
        {"metadata": {"name": "default"}},
    )
    probe = yaml.safe_load(DEFAULT_POLICY.read_text())
    env.policy(suite, probe=probe, quarantine={"taintEffect": "NoExecute"})
    name = f"{suite}-n"

    def behaviour(info: PodInfo) -> Behaviour:
        return RunProcess() if info.namespace == NAMESPACE else Hang()  # workloads run on

    env.operator.stop()  # the workloads run before the node is judged
    try:
        env.nodes(suite, {"n": str(ROOT / "profiles/faults/pcie-x8.yaml")}, behaviour=behaviour)
        for app in ("free", "guarded"):
            pod = {
                "metadata": {"name": app, "labels": {"app": app}},
                "spec": {
                    "nodeName": name,
                    "automountServiceAccountToken": False,
                    "tolerations": [{"key": PENDING_TAINT_KEY, "operator": "Exists"}],
                    "containers": [{"name": "app", "image": "example.com/app:1"}],
                },
            }
            env.kube.request("POST", f"/api/v1/namespaces/{workloads}/pods", pod)
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        }
        env.kube.request(
            "POST", f"/apis/policy/v1/namespaces/{workloads}/poddisruptionbudgets", budget
        )
        _pdb_status(env, workloads, "guarded", allowed=0)
        wait_for(
            "the workloads to run",
            lambda: all(
                env.core.read_namespaced_pod(a, workloads).status.phase == "Running"
                for a in ("free", "guarded")
            ),
            60,
        )
    finally:
        env.operator.start(**operator_ports())

    def workload(app: str) -> k8s.V1Pod | None:
        try:
            pod = env.core.read_namespaced_pod(app, workloads)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return None if pod.metadata.deletion_timestamp else pod

    try:
        env.wait_phase([name], "Quarantined", timeout=120)
        node = wait_node_side(env, name, "Quarantined", reason="PcieLinkFailed")
        assert {t["key"]: t["effect"] for t in node["spec"]["taints"]} == {
            QUARANTINE_TAINT_KEY: "NoSchedule"  # never NoExecute
        }
        blocked = wait_for(
            "the drain to wait for the budget",
            lambda: (env.status(name).get("drain") or {}).get("blocked"),
            60,
        )
        assert blocked[0].startswith(f"{workloads}/guarded: "), blocked
        wait_for("the free pod to be evicted", lambda: workload("free") is None, 60)
        assert workload("guarded") is not None
        assert [e for e in env.events(name, "NodeAcceptance") if e["reason"] == "DrainBlocked"]
        _pdb_status(env, workloads, "guarded", allowed=1)  # one disruption allowed now
        drain = wait_for(
            "the drain to finish once the budget allows",
            lambda: (d := env.status(name).get("drain") or {}).get("done") and d,
            90,
        )
        assert not drain.get("blocked"), drain
        assert workload("guarded") is None
        path = f"/apis/policy/v1/namespaces/{workloads}/poddisruptionbudgets/guarded"
        spent = env.kube.request("GET", path)["status"]
        assert spent["disruptionsAllowed"] == 0  # the API server took the one allowed
        assert "guarded" in spent.get("disruptedPods", {})
    finally:
        for app in ("free", "guarded"):
            with contextlib.suppress(ApiException):
                env.core.delete_namespaced_pod(app, workloads, grace_period_seconds=0)


def test_a_second_installation_stands_by_and_says_why(env: Env) -> None:
    """Issue 28, item 7: two releases of the chart on one cluster (each its own
    namespace, ServiceAccount and Lease), both with the chart's installation lock. Only
    the first acts; the second stands by, says why (its log, its metric) and takes
    over once the first is gone."""
    suite = suite_id("twoinst")
    env.policy(suite)
    second_ns = f"{NAMESPACE}-b"
    create_if_absent(env.kube, "/api/v1/namespaces", {"metadata": {"name": second_ns}})
    create_if_absent(
        env.kube,
        f"/api/v1/namespaces/{second_ns}/serviceaccounts",
        {"metadata": {"name": "gpuaccept-probe"}},
    )
    lock = ("--installation-lock", "gpuaccept-installation")  # the chart's (its RBAC's)
    env.operator.stop()
    first = Operator(env.cp, env.log_dir, lease=f"optest-a-{uuid.uuid4().hex[:6]}", name="inst-a")
    second = Operator(
        env.cp,
        env.log_dir,
        lease=f"optest-b-{uuid.uuid4().hex[:6]}",
        name="inst-b",
        namespace=second_ns,
    )
    try:
        first.start(*lock)
        wait_for(
            "the first installation to hold the lock", lambda: "acquired by" in first.log(), 60
        )
        ports = operator_ports()
        second.start(*lock, **ports)
        wait_for("the second installation to stand by", lambda: "standing by" in second.log(), 60)
        assert f"{NAMESPACE}/{first.lease}" in second.log()  # it names who holds the lock
        wait_for(
            "the standby metric",
            lambda: (
                "gpuaccept_installation_standby 1.0"
                in http_get(ports["metrics_port"], "/metrics")[1]
            ),
            30,
        )
        names = env.nodes(suite, {f"n{i}": HEALTHY for i in range(2)})
        env.wait_phase(names, "Accepted", timeout=120)
        assert "probe attempt" in first.log()
        assert "probe attempt" not in second.log(), "the standing-by installation acted"
        for name in names:
            assert env.status(name)["podSerial"] == 1, env.describe([name])
        first.stop()  # the first installation goes: the second takes over
        wait_for(
            "the second installation to take the lock", lambda: "acquired by" in second.log(), 60
        )
        (late,) = env.nodes(suite, {"late": HEALTHY})
        env.wait_phase([late], "Accepted", timeout=120)
        assert "probe attempt" in second.log()
    finally:
        first.stop()
        second.stop()
        env.operator.start(**operator_ports())
