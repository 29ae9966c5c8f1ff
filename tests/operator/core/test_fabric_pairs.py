"""One pass over a policy's fabric pairs (pure; docs/fabric.md): pods started in
order, results read into both statuses before the pods go, every moment at which
an operator may be killed picked up again from what the API server holds."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta

import pytest
from fabric_pods import CONFIG, SPEC, T0, na_uid, ours, owned, pod, report

from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import (
    FabricPairRecord,
    FabricStatus,
    NodeAcceptanceStatus,
    Phase,
)
from gpuaccept.contracts.probe_invocation import ENV_FABRIC_NONCE
from gpuaccept.operator.core.fabric.pairing import NodePair
from gpuaccept.operator.core.fabric.policypass import (
    PARTNER_START_GRACE_SECONDS,
    FabricMember,
    FabricSnapshot,
    FabricStep,
    plan_fabric_pass,
)
from gpuaccept.operator.core.model import (
    CreatedPod,
    CreateProbePod,
    DeleteProbePod,
    EmitEvent,
    FabricNoPartner,
    FabricPassed,
    FabricPodConfig,
    FabricQuarantined,
    NAView,
    NodeView,
    OperatorConfig,
    PatchNAStatus,
    PodView,
    PolicyView,
)
from gpuaccept.operator.core.podspec import fabric_pair_nonce
from gpuaccept.operator.views import pod_view


def waiting(
    name: str, pods: tuple[PodView, ...] = (), pairs: tuple[FabricPairRecord, ...] = ()
) -> FabricMember:
    pods = ours(name, pods)  # pods the operator created, their UIDs on record
    status = NodeAcceptanceStatus(
        phase=Phase.FABRIC,
        policy="fab",
        fabric=FabricStatus(waiting_since=T0, pairs=list(pairs), summary="waiting"),
        applied_taints=["gpuaccept.io/pending"],
        owned_pods=owned(name, pods),
    )
    return FabricMember(
        node=NodeView(name=name, boot_id=f"boot-{name}", gpus=8, gpu_capacity=8),
        na=NAView(name=name, status=status, resource_version=f"rv-{name}", uid=na_uid(name)),
        pods=pods,
    )


def observed(*members: FabricMember, spec: NodeAcceptancePolicySpec = SPEC, now: datetime = T0,
             config: OperatorConfig = CONFIG) -> FabricSnapshot:  # fmt: skip
    return FabricSnapshot(PolicyView(name="fab", spec=spec), spec, members, now, config)


def kinds(step: FabricStep) -> list[tuple[str, str]]:
    return [(node, type(action).__name__) for node, action in step.writes]


def created(step: FabricStep) -> list[CreateProbePod]:
    return [a for _n, a in step.writes if isinstance(a, CreateProbePod)]


def recorded(step: FabricStep, node: str) -> FabricPairRecord:
    (status,) = [a.status for n, a in step.writes if isinstance(a, PatchNAStatus) and n == node]
    assert status.fabric is not None
    return status.fabric.pairs[-1]


def test_two_waiting_nodes_start_a_pair_with_the_rank0_pod_only() -> None:
    step = plan_fabric_pass(observed(waiting("a"), waiting("b")))
    assert step.started == (NodePair("a", "b"),) or step.started == (NodePair("b", "a"),)
    (create,) = created(step)
    first = step.started[0].first
    spec = create.manifest["spec"]
    container = spec["containers"][0]
    command = container["command"]
    assert spec["nodeName"] == first
    assert spec["automountServiceAccountToken"] is False
    assert {"key": "gpuaccept.io/pending", "operator": "Exists"} in spec["tolerations"]
    assert command[:3] == ["gpuaccept", "probe", "fabric"]
    assert command[command.index("--node-rank") + 1] == "0"
    assert command[command.index("--rendezvous-address") + 1] == "$(GPUACCEPT_POD_IP)"
    assert command[command.index("--min-busbw-gbps") + 1] == "300"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    pod_ip = {"name": "GPUACCEPT_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert pod_ip in container["env"]
    meta = create.manifest["metadata"]
    assert meta["labels"]["gpuaccept.io/fabric-rank"] == "0"
    assert meta["annotations"]["gpuaccept.io/fabric-first"] == first
    assert not step.verdicts


def test_the_second_pod_waits_for_the_first_pods_ip_then_gets_it_as_rendezvous() -> None:
    no_ip = plan_fabric_pass(observed(waiting("a", (pod(0),)), waiting("b")))
    assert no_ip.writes == ()
    with_ip = plan_fabric_pass(observed(waiting("a", (pod(0, ip="10.0.0.7"),)), waiting("b")))
    (create,) = created(with_ip)
    command = create.manifest["spec"]["containers"][0]["command"]
    assert create.manifest["spec"]["nodeName"] == "b"
    assert command[command.index("--node-rank") + 1] == "1"
    assert command[command.index("--rendezvous-address") + 1] == "10.0.0.7"
    assert with_ip.started == ()  # a running pair: nothing new planned for a or b


def _nonce_of(manifest: dict[str, object]) -> str:
    (container,) = manifest["spec"]["containers"]  # type: ignore[index]
    values = [e["value"] for e in container["env"] if e["name"] == ENV_FABRIC_NONCE]
    return str(values[0]) if values else ""


def test_both_pods_of_a_pair_carry_its_nonce_and_no_other_pair_has_it() -> None:
    """Issue 42 item 10: the rendezvous takes only a peer with the pair's nonce. Rank 0's
    is derived from the operator process's random key and the pair; rank 1 copies rank
    0's from its pod (read back by the cache), so an operator restarted in between
    (another key) still gives both pods the same one."""
    key = bytes(range(32))
    step = plan_fabric_pass(dataclasses.replace(observed(waiting("a"), waiting("b")), pair_key=key))
    (create,) = created(step)
    nonce = _nonce_of(create.manifest)
    pair = create.manifest["metadata"]["labels"]["gpuaccept.io/fabric-pair"]
    assert re.fullmatch("[0-9a-f]{32}", nonce)
    assert nonce == fabric_pair_nonce(key, pair)
    assert nonce not in {fabric_pair_nonce(key, "another-pair"), fabric_pair_nonce(b"k" * 32, pair)}
    read_back = pod_view({**create.manifest, "status": {"podIP": "10.0.0.7"}})
    assert read_back.fabric_nonce == nonce
    rank0 = dataclasses.replace(pod(0, ip="10.0.0.7"), fabric_nonce=read_back.fabric_nonce)
    restarted = dataclasses.replace(
        observed(waiting("a", (rank0,)), waiting("b")), pair_key=b"another process" * 2
    )
    (partner,) = created(plan_fabric_pass(restarted))
    assert _nonce_of(partner.manifest) == nonce


BUSY = waiting("b", (PodView(name="probe-b-1", phase="Running"),))
LATE = T0 + timedelta(seconds=PARTNER_START_GRACE_SECONDS)
ORPHANS = [
    ("partner node gone", (waiting("a", (pod(0, ip="10.0.0.7"),)),), T0),
    ("rank 0 ended alone", (waiting("a", (pod(0, message=report("a", None, phase="rendezvous")),)),
                            waiting("b")), T0),
    ("no IP within the grace", (waiting("a", (pod(0),)), waiting("b")), LATE),
    ("partner busy with a probe", (waiting("a", (pod(0, ip="10.0.0.7"),)), BUSY), T0),
]  # fmt: skip


@pytest.mark.parametrize(("members", "now"), [c[1:] for c in ORPHANS], ids=[c[0] for c in ORPHANS])
def test_a_rank0_pod_whose_partner_pod_cannot_come_is_recorded_incomplete_then_deleted(
    members: tuple[FabricMember, ...], now: datetime
) -> None:
    step = plan_fabric_pass(observed(*members, now=now))
    assert recorded(step, "a").outcome == "incomplete"
    order = kinds(step)
    delete = ("a", "DeleteProbePod")
    assert delete in order
    assert all(i < order.index(delete) for i, k in enumerate(order) if k[1] == "PatchNAStatus")
    assert not any(isinstance(a, CreateProbePod) and n == "b" and "-p1-" in a.name
                   for n, a in step.writes)  # fmt: skip


def test_a_finished_pair_goes_into_both_statuses_before_its_pods_are_deleted() -> None:
    a = waiting("a", (pod(0, ip="10.0.0.7", message=report("a", 390.0)),))
    b = waiting("b", (pod(1, message=report("b", 390.0)),))
    step = plan_fabric_pass(observed(a, b))
    order = kinds(step)
    assert order[:2] == [("a", "PatchNAStatus"), ("b", "PatchNAStatus")]
    assert sorted(order[2:]) == [("a", "DeleteProbePod"), ("b", "DeleteProbePod")]
    for node, partner, rank in (("a", "b", 0), ("b", "a", 1)):
        record = recorded(step, node)
        assert (record.partner, record.node_rank, record.outcome) == (partner, rank, "passed")
        assert record.busbw_gbps == 390.0
    assert step.verdicts == {"a": FabricPassed("b", 390.0, T0), "b": FabricPassed("a", 390.0, T0)}


def test_a_slow_pair_fails_against_the_policy_minimum() -> None:
    a = waiting("a", (pod(0, message=report("a", 180.0)),))
    b = waiting("b", (pod(1, message=report("b", 180.0)),))
    step = plan_fabric_pass(observed(a, b))
    assert recorded(step, "a").outcome == "failed"
    assert step.verdicts == {}


def test_killed_between_the_two_status_writes_writes_only_the_missing_one() -> None:
    done = FabricPairRecord(pair="p1", partner="b", node_rank=0, outcome="passed",
                            busbw_gbps=390.0, finished_at=T0)  # fmt: skip
    a = waiting("a", (pod(0, message=report("a", 390.0)),), pairs=(done,))
    b = waiting("b", (pod(1, message=report("b", 390.0)),))
    step = plan_fabric_pass(observed(a, b))
    assert [k for k in kinds(step) if k[1] == "PatchNAStatus"] == [("b", "PatchNAStatus")]
    assert len(recorded(step, "b").pair) > 0


def test_pods_left_after_both_results_are_recorded_are_only_deleted() -> None:
    rec = {n: FabricPairRecord(pair="p1", partner=p, node_rank=r, outcome="passed",
                               busbw_gbps=390.0, finished_at=T0)
           for n, p, r in (("a", "b", 0), ("b", "a", 1))}  # fmt: skip
    a = waiting("a", (pod(0, message=report("a", 390.0)),), pairs=(rec["a"],))
    b = waiting("b", (pod(1, message=report("b", 390.0)),), pairs=(rec["b"],))
    step = plan_fabric_pass(observed(a, b))
    assert sorted(kinds(step)) == [("a", "DeleteProbePod"), ("b", "DeleteProbePod")]
    assert set(step.verdicts) == {"a", "b"}


def test_paused_starts_no_pair_but_reads_a_finished_one() -> None:
    paused = NodeAcceptancePolicySpec.model_validate({"fabric": {"enabled": True}, "paused": True})
    assert plan_fabric_pass(observed(waiting("c"), waiting("d"), spec=paused)).writes == ()
    a = waiting("a", (pod(0, message=report("a", 390.0)),))
    b = waiting("b", (pod(1, message=report("b", 390.0)),))
    step = plan_fabric_pass(observed(a, b, spec=paused))
    assert ("a", "PatchNAStatus") in kinds(step)


def test_the_charts_rdma_settings_go_on_both_pods() -> None:
    fabric = FabricPodConfig(
        resources={"rdma/rdma_shared_device_a": "1"},
        annotations={"k8s.v1.cni.cncf.io/networks": "rdma-net"},
        capabilities=("IPC_LOCK",),
        env=(("NCCL_IB_HCA", "=mlx5_0"),),
    )
    config = OperatorConfig(accept_simulated_reports=True, fabric=fabric)
    for members in (
        (waiting("a"), waiting("b")),
        (waiting("a", (pod(0, ip="10.0.0.7"),)), waiting("b")),
    ):
        (create,) = created(plan_fabric_pass(observed(*members, config=config)))
        container = create.manifest["spec"]["containers"][0]
        assert container["resources"]["requests"]["rdma/rdma_shared_device_a"] == "1"
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert {"name": "NCCL_IB_HCA", "value": "=mlx5_0"} in container["env"]
        assert (
            create.manifest["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net"
        )


def test_a_node_with_another_probe_pod_is_not_paired() -> None:
    busy = waiting("c", (PodView(name="probe-c-1", phase="Running"),))
    assert plan_fabric_pass(observed(busy, waiting("d"))).writes == ()


def test_accepted_nodes_that_passed_a_pair_are_partners_while_idle() -> None:
    passed = FabricPairRecord(pair="p0", partner="y", node_rank=0, outcome="passed",
                              busbw_gbps=390.0, finished_at=T0)  # fmt: skip
    x = waiting("x", pairs=(passed,))
    x = FabricMember(x.node, NAView("x", x.na.status.model_copy(update={"phase": Phase.ACCEPTED})))
    failed = FabricPairRecord(pair="p9", partner="z", node_rank=0, outcome="failed",
                              busbw_gbps=100.0, finished_at=T0)  # fmt: skip
    step = plan_fabric_pass(observed(x, waiting("s", pairs=(failed,))))
    assert step.started == (NodePair("x", "s"),)
    assert created(step)[0].manifest["spec"]["nodeName"] == "x"


def test_a_node_cleared_in_this_pass_loses_its_read_pod_before_it_partners_again() -> None:
    a = waiting("a", (pod(0, message=report("a", 390.0)),))
    b = waiting("b", (pod(1, message=report("b", 390.0)),))
    failed = FabricPairRecord(pair="p9", partner="z", node_rank=0, outcome="failed",
                              busbw_gbps=100.0, finished_at=T0)  # fmt: skip
    step = plan_fabric_pass(observed(a, b, waiting("s", pairs=(failed,))))
    (pair,) = step.started
    order = kinds(step)
    assert order.index((pair.first, "DeleteProbePod")) < order.index((pair.first, "CreateProbePod"))


@pytest.mark.parametrize(
    ("phase", "held_action", "partner"),
    [
        (Phase.ACCEPTED, None, True),
        (Phase.HELD, "Accept", True),  # a dry run that would accept: pairs still run
        (Phase.HELD, "Quarantine", False),
        (Phase.QUARANTINED, None, False),
    ],
)
def test_which_decided_nodes_that_passed_a_pair_are_partners(
    phase: Phase, held_action: str | None, partner: bool
) -> None:
    passed = FabricPairRecord(pair="p0", partner="y", node_rank=0, outcome="passed",
                              busbw_gbps=390.0, finished_at=T0)  # fmt: skip
    x = waiting("x", pairs=(passed,))
    update = {"phase": phase, "held_action": held_action}
    x = FabricMember(x.node, NAView("x", x.na.status.model_copy(update=update)))
    failed = FabricPairRecord(pair="p9", partner="z", node_rank=0, outcome="failed",
                              busbw_gbps=100.0, finished_at=T0)  # fmt: skip
    step = plan_fabric_pass(observed(x, waiting("s", pairs=(failed,))))
    assert (step.started == (NodePair("x", "s"),)) is partner


@pytest.mark.parametrize("deadline_passed", [False, True], ids=["before", "after"])
def test_a_waiting_node_without_gpus_is_never_paired_but_gets_its_deadline_verdict(
    deadline_passed: bool,
) -> None:
    member = waiting("a")
    gone = FabricMember(dataclasses.replace(member.node, gpus=0), member.na)
    now = T0 + timedelta(hours=2 if deadline_passed else 0)
    step = plan_fabric_pass(observed(gone, waiting("b"), waiting("c"), now=now))
    assert all("a" not in pair.members for pair in step.started)
    assert ("a" in step.verdicts) is deadline_passed
    if deadline_passed:
        assert isinstance(step.verdicts["a"], FabricNoPartner)


def _record(pair: str, partner: str, outcome: str, minute: int) -> FabricPairRecord:
    return FabricPairRecord(
        pair=pair, partner=partner, node_rank=0, outcome=outcome,  # type: ignore[arg-type]
        busbw_gbps=390.0 if outcome == "passed" else 100.0,
        finished_at=T0 + timedelta(minutes=minute),
    )  # fmt: skip


def _accepted_partner(
    name: str, pairs: tuple[FabricPairRecord, ...], *, rebooted: bool
) -> FabricMember:
    member = waiting(name, pairs=pairs)
    status = member.na.status.model_copy(
        update={
            "phase": Phase.ACCEPTED,
            "probed_boot_id": "boot-before" if rebooted else member.node.boot_id,
        }
    )
    return FabricMember(member.node, NAView(name, status))


@pytest.mark.parametrize("rebooted", [False, True])
def test_a_partner_rebooted_since_its_probe_witnesses_nothing(rebooted: bool) -> None:
    """n failed with p1 and p2, which passed with w1 and w2: a conviction, unless p1
    rebooted since it was probed (its pass is from an older boot)."""
    p1 = _accepted_partner(
        "p1", (_record("q1", "w1", "passed", 1), _record("f1", "n", "failed", 3)),
        rebooted=rebooted,
    )  # fmt: skip
    p2 = _accepted_partner(
        "p2", (_record("q2", "w2", "passed", 2), _record("f2", "n", "failed", 4)), rebooted=False
    )
    n = waiting("n", pairs=(_record("f1", "p1", "failed", 3), _record("f2", "p2", "failed", 4)))
    step = plan_fabric_pass(observed(p1, p2, n, now=T0 + timedelta(minutes=10)))
    assert isinstance(step.verdicts.get("n"), FabricQuarantined) is not rebooted, step.verdicts


# --------------------------------------------------------------------------- pod identity


def test_a_fabric_pod_the_operator_did_not_create_is_never_read() -> None:
    """A squatter's rank-1 pod with the pair's labels, "passed" with a forged report:
    not the pair's result. The operator's own rank-1 create finds the name taken, and
    the pair is recorded incomplete (evidence against neither node); the pod is left."""
    a = waiting("a", (pod(0, ip="10.0.0.7", message=report("a", 390.0)),))
    forged = dataclasses.replace(pod(1, message=report("b", 390.0)), uid="u-squatter")
    b = dataclasses.replace(waiting("b"), pods=(forged,))  # on b, no record of it
    step = plan_fabric_pass(observed(a, b))
    assert recorded(step, "a").outcome == "incomplete"
    assert step.verdicts == {}
    deleted = [a.name for _n, a in step.writes if isinstance(a, DeleteProbePod)]
    assert forged.name not in deleted
    warnings = [a for n, a in step.writes if isinstance(a, EmitEvent) and n == "b"]
    assert [w.reason for w in warnings] == ["PodNameTaken"]
    assert forged.name in warnings[0].message


def test_the_partner_pods_create_answered_already_exists_ends_the_pair_incomplete() -> None:
    a = waiting("a", (pod(0, ip="10.0.0.7"),))
    taken = {"b": "gpuaccept-probe-fabric-p1-1"}  # bound elsewhere: not among b's pods
    step = plan_fabric_pass(dataclasses.replace(observed(a, waiting("b")), names_taken=taken))
    assert recorded(step, "a").outcome == "incomplete"
    assert not created(step)


def test_a_fabric_pod_just_created_is_recorded_then_read() -> None:
    """The create's answer vouches for a pod until the node's status records it."""
    mine = dataclasses.replace(pod(0), uid="u-new")
    a = dataclasses.replace(waiting("a"), pods=(mine,))
    answer = {"a": {mine.name: CreatedPod(uid="u-new", shape=mine.shape)}}
    step = plan_fabric_pass(dataclasses.replace(observed(a, waiting("b")), created_pods=answer))
    (status,) = [s.status for n, s in step.writes if isinstance(s, PatchNAStatus) and n == "a"]
    assert [(o.name, o.uid) for o in status.owned_pods] == [(mine.name, "u-new")]
    assert step.started == ()  # the pair is running: a's pod is the pass's own


def test_fabric_pods_name_the_nodes_nodeacceptance_as_controller() -> None:
    """``kubectl drain`` evicts a pod with a controller ownerReference without --force."""
    (create,) = created(plan_fabric_pass(observed(waiting("a"), waiting("b"))))
    (owner,) = create.manifest["metadata"]["ownerReferences"]
    node = create.manifest["spec"]["nodeName"]
    assert owner == {
        "apiVersion": "gpuaccept.io/v1alpha1",
        "kind": "NodeAcceptance",
        "name": node,
        "uid": na_uid(node),
        "controller": True,
    }
