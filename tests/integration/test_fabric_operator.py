"""The fabric test end to end: the operator (a subprocess, killed for real), the real
kube-apiserver and the kubelet stand-in, whose fabric pairs complete in scale mode
from the nodes' profiles (docs/fabric.md; one real gloo pair runs in
test_fabric_standin.py and in the demo).

The kill-safety test builds, while no operator runs, the state an operator killed
at each moment of a pair test leaves behind, then starts one: every result is
read into both nodes' statuses once, and no fabric pod is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.api import ACCEPTANCE_PLURAL, GROUP, VERSION
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus
from gpuaccept.operator.core.creationintent import intended_create
from gpuaccept.operator.core.model import FabricPodLabels, NodeView, OperatorConfig
from gpuaccept.operator.core.podidentity import shape_digest
from gpuaccept.operator.core.podspec import FabricPodRequest, fabric_pod_manifest
from gpuaccept.testsupport.kubelet_standin import (
    Behaviour,
    Complete,
    PodInfo,
    RunProcess,
    fabric_pairs_from_profiles,
)
from gpuaccept.testsupport.operator_env import (
    HEALTHY,
    NAMESPACE,
    PENDING_TAINT,
    SUITE_LABEL,
    Env,
    Operator,
    operator_ports,
    suite_id,
    wait_for,
    wait_node_side,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
DAMAGED = str(ROOT / "profiles" / "fabric" / "h100-sxm-8gpu-damaged-cable.yaml")
FABRIC = {"enabled": True, "minBusbwGBps": 200, "deadlineSeconds": 600}
FABRIC_SELECTOR = "gpuaccept.io/fabric-pair"


# A prepared report is trusted only if its times fall within its pod's life (60 s of
# clock skew allowed: report_trust's freshness rule), so the template is made again
# once it is older than this.
TEMPLATE_FRESH_S = 30.0
_template: dict[str, Any] = {}


def _report_template() -> dict[str, Any]:
    """One real probe report (healthy profile), made afresh at most every
    TEMPLATE_FRESH_S; each pod gets a copy."""
    if _template and time.monotonic() - _template["madeAt"] < TEMPLATE_FRESH_S:
        return dict(_template["report"])
    out = Path(f"/tmp/gpuaccept-fabtest-report-{uuid.uuid4().hex[:6]}.json")
    subprocess.run(
        [sys.executable, "-m", "gpuaccept.cli", "probe", "--profile", HEALTHY,
         "--termination-log", str(out)],
        env={**os.environ, "NODE_NAME": "template", "GPUACCEPT_BOOT_ID": "template"},
        check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    _template.update(madeAt=time.monotonic(), report=report)
    return dict(report)


def single_node_report(info: PodInfo) -> Behaviour:
    report = dict(_report_template(), nodeName=info.node_name, bootID=info.boot_id)
    return Complete(exit_code=0, message=json.dumps(report, separators=(",", ":")))


def fabric_nodes(env: Env, suite: str, profiles: dict[str, str], **kwargs: Any) -> list[str]:
    behaviour = fabric_pairs_from_profiles(env.standin.inter_node_busbw, single_node_report)
    return env.nodes(suite, profiles, behaviour=behaviour, **kwargs)


def fabric_pods(env: Env, names: list[str]) -> list[dict[str, Any]]:
    return [
        p
        for n in names
        for p in env.pods(n)
        if FABRIC_SELECTOR in (p["metadata"].get("labels") or {})
    ]


def pair_records(env: Env, name: str) -> list[dict[str, Any]]:
    return list((env.status(name).get("fabric") or {}).get("pairs") or [])


def assert_results_consistent(env: Env, names: list[str], gone: tuple[str, ...] = ()) -> None:
    """Each pair result is in both nodes' statuses (one where the partner node is
    ``gone``), once, with the same outcome."""
    seen: dict[str, dict[str, Any]] = {}
    for name in names:
        records = pair_records(env, name)
        ids = [r["pair"] for r in records]
        assert len(ids) == len(set(ids)), f"{name}: a pair recorded twice: {records}"
        for record in records:
            seen.setdefault(record["pair"], {})[name] = record
    for pair, by_node in seen.items():
        partners = {r["partner"] for r in by_node.values()}
        assert partners <= set(names) | set(gone), (pair, by_node)
        expected = 1 if partners & set(gone) else 2
        assert len(by_node) == expected, f"pair {pair} recorded on {sorted(by_node)}"
        assert len({r["outcome"] for r in by_node.values()}) == 1, by_node


def test_one_slow_fabric_node_in_a_batch_is_quarantined_and_no_healthy_one(env: Env) -> None:
    suite = suite_id("fabric")
    env.policy(suite, fabric=FABRIC)
    profiles = {f"ok{i}": HEALTHY for i in range(5)} | {"slow": DAMAGED}
    names = fabric_nodes(env, suite, profiles)
    slow = f"{suite}-slow"
    healthy = [n for n in names if n != slow]
    env.wait_phase([slow], "Quarantined", timeout=240)
    env.wait_phase(healthy, "Accepted", timeout=120)
    status = env.status(slow)
    assert status["reason"] == "FabricAllreduceFailed"
    assert status["fabric"]["verdict"] == "FabricAllreduceFailed"
    wait_node_side(env, slow, "Quarantined")
    assert "180" in status["reasons"][0]["message"]  # the partners' figures are recorded
    for name in healthy:
        assert env.status(name)["fabric"]["summary"] == "passed 390.0 GB/s"
    for name in names:  # the fabric pass writes whole statuses: the stored evidence stays
        status = env.status(name)
        assert status.get("report"), (name, sorted(status))
        assert status.get("checks"), (name, sorted(status))
        assert status["attempts"] == 1, (name, status["attempts"])
    wait_for("the fabric pods to be deleted", lambda: not fabric_pods(env, names), 60)
    assert_results_consistent(env, names)


# ---------------------------------------------------------------------- kill safety


def _na_in_fabric(env: Env, name: str, policy: str, waiting_since: datetime) -> None:
    """The NodeAcceptance of a node that passed its single-node checks under ``policy``."""
    node = env.node(name)
    boot = node["status"]["nodeInfo"]["bootID"]
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeAcceptance",
        "metadata": {"name": name},
        "spec": {"nodeName": name},
    }
    path = f"/apis/{GROUP}/{VERSION}/{ACCEPTANCE_PLURAL}"
    na = env.kube.request("POST", path, body)
    policy_body = env.kube.request(
        "GET", f"/apis/{GROUP}/{VERSION}/nodeacceptancepolicies/{policy}"
    )
    status = {
        "phase": "Fabric",
        "reason": "FabricPending",
        "policy": policy,
        "policyGeneration": policy_body["metadata"]["generation"],
        "policyUID": policy_body["metadata"]["uid"],
        "probedBootID": boot,
        "attempts": 1,
        "podSerial": 1,
        "appliedTaints": [PENDING_TAINT["key"]],
        "fabric": {"waitingSince": waiting_since.isoformat(), "summary": "waiting"},
    }
    env.kube.patch_na_status(name, na["metadata"]["resourceVersion"], status)


def _fabric_pod(
    env: Env, labels: FabricPodLabels, node: str, rendezvous: str | None, *, crash: bool = False
) -> str:
    """A fabric pod as the operator creates it, its UID on record in the node's status
    as the operator writes it right after the create (core/podidentity.py); with
    ``crash``, as an operator killed between the create and that record leaves it: the
    intent on record, the pod carrying its nonce, no UID (core/creationintent.py)."""
    config = OperatorConfig(namespace=NAMESPACE, probe_command=("gpuaccept", "probe"))
    na = env.na(node)
    assert na is not None
    request = FabricPodRequest(
        labels=labels,
        node=NodeView(name=node, gpus=8, gpu_capacity=8),
        policy_name="kill-safety",
        spec=env_spec(),
        rendezvous_address=rendezvous,
        applied_taints=[PENDING_TAINT["key"]],
        owner_uid=na["metadata"]["uid"],
    )
    manifest = fabric_pod_manifest(request, config)
    name = str(manifest["metadata"]["name"])
    if crash:
        st, create = intended_create(NodeAcceptanceStatus(), uuid.uuid4().hex, name, manifest)
        manifest = dict(create.manifest)
        intent = st.to_wire()["creationIntents"]
    pod = env.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", manifest)
    record = {"name": name, "uid": pod["metadata"]["uid"], "shape": shape_digest(manifest)}
    na = env.na(node)
    assert na is not None
    status = (
        {**na["status"], "creationIntents": intent}
        if crash
        else {**na["status"], "ownedPods": [*na["status"].get("ownedPods", []), record]}
    )
    env.kube.patch_na_status(node, na["metadata"]["resourceVersion"], status)
    return str(manifest["metadata"]["name"])


def env_spec() -> NodeAcceptancePolicySpec:
    return NodeAcceptancePolicySpec.model_validate({"fabric": FABRIC})


def _pod_status(env: Env, name: str) -> dict[str, Any]:
    pod = env.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    return dict(pod.get("status") or {})


@pytest.fixture
def stopped_operator(env: Env) -> Iterator[None]:
    env.operator.stop()
    try:
        yield
    finally:
        env.operator.start(**operator_ports())


def test_an_operator_killed_at_any_moment_of_a_pair_loses_no_result_and_leaves_no_pod(
    env: Env, stopped_operator: None
) -> None:
    suite = suite_id("fabkill")
    policy = env.policy(suite, fabric=FABRIC)
    keys = ["a1", "a2", "b1", "b2", "c1", "c2", "d1", "e1", "e2"]
    names = fabric_nodes(env, suite, dict.fromkeys(keys, HEALTHY))
    node = {k: f"{suite}-{k}" for k in keys}
    since = datetime.now(UTC) - timedelta(seconds=5)
    for name in names:
        _na_in_fabric(env, name, policy, since)
    # a: killed between the two creates: rank 0 runs, its partner pod was never created.
    pair_a = FabricPodLabels(f"a{uuid.uuid4().hex[:8]}", 0, node["a1"], node["a2"])
    _fabric_pod(env, pair_a, node["a1"], None)
    # b: killed after both pods ended, before the result was read.
    pair_b = FabricPodLabels(f"b{uuid.uuid4().hex[:8]}", 0, node["b1"], node["b2"])
    b0 = _fabric_pod(env, pair_b, node["b1"], None)
    ip = wait_for("b's rank-0 pod IP", lambda: _pod_status(env, b0).get("podIP"), 60)
    second = FabricPodLabels(pair_b.pair, 1, pair_b.first, pair_b.second)
    b1 = _fabric_pod(env, second, node["b2"], ip)
    for pod in (b0, b1):
        wait_for(f"{pod} to end", lambda p=pod: _pod_status(env, p).get("phase") == "Succeeded")
    # c: as b, and killed between the two status writes: c1 has the result, c2 not.
    pair_c = FabricPodLabels(f"c{uuid.uuid4().hex[:8]}", 0, node["c1"], node["c2"])
    c0 = _fabric_pod(env, pair_c, node["c1"], None)
    ip = wait_for("c's rank-0 pod IP", lambda: _pod_status(env, c0).get("podIP"), 60)
    c1 = _fabric_pod(
        env, FabricPodLabels(pair_c.pair, 1, pair_c.first, pair_c.second), node["c2"], ip
    )
    for pod in (c0, c1):
        wait_for(f"{pod} to end", lambda p=pod: _pod_status(env, p).get("phase") == "Succeeded")
    na = env.na(node["c1"])
    assert na is not None
    record = {"pair": pair_c.pair, "partner": node["c2"], "nodeRank": 0, "outcome": "passed",
              "busbwGBps": 390.0, "finishedAt": datetime.now(UTC).isoformat()}  # fmt: skip
    fabric = dict(na["status"]["fabric"], pairs=[record])
    env.kube.patch_na_status(
        node["c1"], na["metadata"]["resourceVersion"], {**na["status"], "fabric": fabric}
    )
    # d: a rank-0 pod whose partner node is gone: deleted, the pair recorded incomplete.
    pair_d = FabricPodLabels(f"d{uuid.uuid4().hex[:8]}", 0, node["d1"], f"{suite}-gone")
    _fabric_pod(env, pair_d, node["d1"], None)
    # e: killed between a rank-0 pod's create and the record of its UID (issue 42 item
    # 9): the pod carries the nonce of the intent on record; deleted unread.
    pair_e = FabricPodLabels(f"e{uuid.uuid4().hex[:8]}", 0, node["e1"], node["e2"])
    e0 = _fabric_pod(env, pair_e, node["e1"], None, crash=True)

    operator = Operator(
        env.cp, env.log_dir, lease=f"fabkill-{uuid.uuid4().hex[:6]}", name="fabkill"
    )
    operator.start()
    try:

        def recorded() -> bool:
            return all(
                any(r["pair"] == pair.pair for r in pair_records(env, n))
                for pair, members in ((pair_a, ("a1", "a2")), (pair_b, ("b1", "b2")),
                                      (pair_c, ("c1", "c2")), (pair_d, ("d1",)))
                for n in (node[m] for m in members)
            )  # fmt: skip

        wait_for("every pair's result in every node's status", recorded, 180)
        wait_for("no fabric pod left", lambda: not fabric_pods(env, names), 120)
        assert_results_consistent(env, names, gone=(f"{suite}-gone",))
        outcome = {k: {r["pair"]: r["outcome"] for r in pair_records(env, node[k])} for k in keys}
        assert outcome["b1"][pair_b.pair] == outcome["b2"][pair_b.pair] == "passed"
        assert outcome["c2"][pair_c.pair] == "passed"
        assert outcome["d1"][pair_d.pair] == "incomplete"
        # e: never on record, never read: no result of its pair anywhere
        assert not any(pair_e.pair in outcome[k] for k in keys), outcome
        assert e0 not in {p["metadata"]["name"] for p in fabric_pods(env, names)}
        # a: the restarted operator carries the pair on (its second pod) or gives it up;
        # either way both nodes hold the same result.
        assert outcome["a1"][pair_a.pair] == outcome["a2"][pair_a.pair]
    finally:
        operator.kill()


def _all_recorded(env: Env, names: list[str], rank: str | None = None) -> bool:
    """Fabric pods run (one of ``rank`` among them), and their nodes' statuses record
    every one's UID. A kill between a create and that record (the next pass, at once)
    leaves a pod told from a squatter's only by its nonce (core/creationintent.py);
    the kills here come after the record, and such a pod is deleted unread."""
    pods = fabric_pods(env, names)
    uids = {o["uid"] for n in names for o in env.status(n).get("ownedPods", [])}
    ranks = {p["metadata"]["labels"].get("gpuaccept.io/fabric-rank") for p in pods}
    return (
        bool(pods)
        and (rank is None or rank in ranks)
        and all(p["metadata"]["uid"] in uids for p in pods)
    )


def test_killing_the_operator_while_pairs_run_still_decides_every_node(env: Env) -> None:
    suite = suite_id("fablive")
    env.policy(suite, fabric=FABRIC)
    env.operator.stop()  # this test runs its own operator, which it crashes
    lease = f"fablive-{uuid.uuid4().hex[:6]}"
    first = Operator(env.cp, env.log_dir, lease=lease, name="fablive-1").start()
    try:
        profiles = {f"ok{i}": HEALTHY for i in range(5)} | {"slow": DAMAGED}
        names = fabric_nodes(env, suite, profiles)
        wait_for("fabric pods, all on record", lambda: _all_recorded(env, names), 180, 0.1)
        first.kill()  # mid-pair
        second = Operator(env.cp, env.log_dir, lease=lease, name="fablive-2").start()
        try:
            wait_for(
                "a second-rank fabric pod, all on record (or every pair over)",
                lambda: (
                    _all_recorded(env, names, rank="1")
                    or all(env.status(n).get("phase") in ("Accepted", "Quarantined") for n in names)
                ),
                120,
                every=0.1,
            )
            second.kill()  # between two pods of a pair, or as they run
        finally:
            second.kill()
        third = Operator(env.cp, env.log_dir, lease=lease, name="fablive-3").start()
        try:
            slow = f"{suite}-slow"
            env.wait_phase([slow], "Quarantined", timeout=240)
            env.wait_phase([n for n in names if n != slow], "Accepted", timeout=120)
            # Every pod on record is cleared out, and so is one created in a kill's
            # crash window: it carries the nonce of the intent on record, and is
            # deleted unread (docs/fabric.md, "Kill safety"). Nothing is left.
            wait_for("no fabric pod left", lambda: not fabric_pods(env, names), 60)

            assert_results_consistent(env, names)
        finally:
            third.stop()
    finally:
        first.kill()
        env.operator.start(**operator_ports())


def test_taints_stay_while_a_node_waits_for_its_pair(env: Env) -> None:
    """A lone node under a fabric policy passes its single-node checks and waits in
    phase Fabric under the pending taint: nobody to pair it with."""
    suite = suite_id("fablone")
    env.policy(suite, fabric=FABRIC)
    (name,) = fabric_nodes(env, suite, {"lone": HEALTHY})
    # Generous: when this test follows one that restarts the session's operator,
    # the operator re-reads every node the session made before it reaches this one.
    env.wait_phase([name], "Fabric", timeout=300)
    wait_node_side(env, name, "Pending")
    assert env.status(name)["fabric"]["summary"] == "waiting"
    assert SUITE_LABEL in env.node(name)["metadata"]["labels"]


@pytest.mark.long
def test_reverification_pairs_nodes_again_and_blames_only_the_degraded_link(env: Env) -> None:
    """Issue 24 item 4: under a fabric policy with re-verification on, an idle accepted
    node is paired again when it is re-verified. A node whose inter-node link degrades
    after acceptance is quarantined by its pairs (FabricAllreduceFailed); its good
    partners, re-verified beside it, stay Accepted."""
    suite = suite_id("fabrev")
    # due 30 s after acceptance (the link degrades within a second or two of it); one
    # round of pairs in the test, not the next (the pairs are real gloo processes)
    reverify = {"enabled": True, "idleSeconds": 2, "periodSeconds": 30, "sampleSeconds": 2}
    # room to re-verify every node within the test (the default rate, 10 % of five
    # nodes per 300 s, takes one out per five minutes)
    rate = {"maxPerWindow": 5, "windowSeconds": 60}
    env.policy(suite, fabric=FABRIC, reverify=reverify, quarantineRate=rate)
    profiles = {f"ok{i}": HEALTHY for i in range(4)} | {"later": HEALTHY}
    # the real probe for single-node pods: a re-verification's report must be fresh
    # (report_trust's freshness rule), which the prepared template is not
    behaviour = fabric_pairs_from_profiles(env.standin.inter_node_busbw, RunProcess())
    names = env.nodes(suite, profiles, behaviour=behaviour)
    env.wait_phase(names, "Accepted", timeout=240)
    first_pairs = {n: {r["pair"] for r in pair_records(env, n)} for n in names}
    later = f"{suite}-later"
    env.standin.node(later).profile = DAMAGED  # weeks later: its cable degraded
    wait_for(
        f"{later} quarantined by a re-verification's pairs",
        lambda: env.status(later).get("reason") == "FabricAllreduceFailed",
        300,
    )
    wait_node_side(env, later, "Quarantined", reason="FabricAllreduceFailed")
    status = env.status(later)
    assert status["reverify"]["last"]["cause"] == "Idle"
    new_pairs = [r for r in pair_records(env, later) if r["pair"] not in first_pairs[later]]
    assert new_pairs
    assert all(r["outcome"] == "failed" for r in new_pairs), new_pairs
    good = [n for n in names if n != later]
    # the good nodes were re-verified too (paired again), and none was blamed
    wait_for(
        "a good node re-verified through a new pair",
        lambda: any({r["pair"] for r in pair_records(env, n)} - first_pairs[n] for n in good),
        240,
    )
    for n in good:
        st = env.status(n)
        assert st.get("phase") in ("Accepted", "Fabric", "Pending", "Probing"), (n, st)
        assert st.get("reason") != "FabricAllreduceFailed", (n, st)
    # (each round keeps its own pairs: a partner's later round replaces its record of
    # an earlier pair, so pair records are not compared across nodes here)
