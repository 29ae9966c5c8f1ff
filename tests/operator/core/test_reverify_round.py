"""Re-verification of an accepted node on the in-memory world, with real probe
reports (simulated profiles) and the real judge: an idle window starts a round
under the pending taint, a GPU pod that came first wins (the round gives up), a
drifted figure fails with its own reason, a suspect is re-probed with its checks
only, a node never idle is never re-probed, and a repeat offender stays
quarantined until a person releases it."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from world import PENDING, REPO, T0, World, make_report, probed, spec

from gpuaccept.contracts.api import REMEDY_LABEL
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.contracts.reverify import ReverifyStatus, Suspicion
from gpuaccept.operator.core import PolicyView, QuarantineLimitCounts
from gpuaccept.operator.core.model import CreateProbePod, GpuPodSample

DRIFTED = REPO / "profiles" / "reverify" / "h100-sxm-8gpu-drifted.yaml"
SLOW_GPU = REPO / "profiles" / "faults" / "gpu-compute-slow.yaml"
HOUR = 3600.0


def reverify_spec(**fields: Any) -> Any:
    section = {"enabled": True, "idleSeconds": 600, "periodSeconds": 7 * 24 * 3600}
    section.update(fields.pop("reverify", {}))
    return spec(reverify=section, **fields)


def probed_once(**fields: Any) -> World:
    world = World(policies=[PolicyView(name="default", generation=1, spec=reverify_spec(**fields))])
    world.settle()
    world.finish_with_report()
    world.settle()
    return world


def accepted(**fields: Any) -> World:
    world = probed_once(**fields)
    assert world.status.phase == Phase.ACCEPTED
    assert PENDING not in (world.node.taints if world.node else ())
    return world


def report_of(profile: Path) -> ProbeReport:
    return probed(profile).model_copy(
        update={"node_name": "gpu-1", "boot_id": "boot-1", "started_at": T0, "finished_at": T0}
    )


def sample(world: World, *pods: str) -> None:
    """The re-verification loop lists the node's pods now; the node reconciles."""
    world.gpu_pod_sample = GpuPodSample(world.now, tuple(pods))
    world.settle()


def idle_window(world: World) -> None:
    """A week later: two lists 600 s apart find no GPU pod."""
    world.advance(7 * 24 * HOUR)
    sample(world)
    world.advance(600)
    sample(world)


def test_baseline_is_taken_at_acceptance() -> None:
    world = accepted()
    baseline = world.status.baseline
    assert baseline is not None
    figures = {(f.check, f.figure): f.value for f in baseline.figures}
    assert figures[("gpu_compute", "bf16Tflops.median")] == 742.0
    assert figures[("nccl_allreduce", "busbwGBps")] > 0


def test_no_baseline_without_reverification() -> None:
    world = World()
    world.settle()
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.baseline is None  # nothing kept that no policy reads


def test_an_idle_window_starts_a_round_under_the_pending_taint() -> None:
    world = accepted()
    report = world.status.report
    world.advance(7 * 24 * HOUR)
    sample(world)
    assert world.status.phase == Phase.ACCEPTED  # the streak begins; not yet idle long enough
    assert world.status.reverify is not None
    assert world.status.reverify.idle_since == world.now
    assert PENDING not in world.node.taints  # type: ignore[union-attr]
    world.advance(600)
    sample(world)
    st = world.status
    assert st.phase == Phase.PROBING
    assert st.reverify is not None
    assert st.reverify.round is not None
    assert st.reverify.round.cause == "Idle"
    assert st.report == report  # kept until the round's own verdict
    assert PENDING in world.node.taints  # type: ignore[union-attr]
    world.finish_with_report()
    world.settle()
    st = world.status
    assert st.phase == Phase.ACCEPTED
    assert st.reverify is not None
    assert st.reverify.round is None
    assert st.reverify.last is not None
    assert st.reverify.last.outcome == "Passed"
    assert st.reverify.drift == []
    assert PENDING not in world.node.taints  # type: ignore[union-attr]


def test_not_before_the_period() -> None:
    world = accepted()
    world.advance(24 * HOUR)  # a day after acceptance: not due; the loop does not list it,
    sample(world)  # and a list that comes anyway does not start a round
    world.advance(600)
    sample(world)
    assert world.status.phase == Phase.ACCEPTED


def test_a_gpu_pod_ends_the_idle_streak() -> None:
    world = accepted()
    world.advance(7 * 24 * HOUR)
    sample(world)
    world.advance(300)
    sample(world, "ml/train-0")
    rv = world.status.reverify
    assert rv is not None
    assert rv.idle_since is None
    assert rv.busy_pods == ["ml/train-0"]
    world.advance(600)
    sample(world)  # a new streak starts here
    assert world.status.phase == Phase.ACCEPTED


def test_a_node_never_idle_is_never_reprobed_and_never_failed() -> None:
    world = accepted()
    for _ in range(3 * 7 * 24):  # three weeks of hourly lists, a GPU pod each time
        world.advance(HOUR)
        sample(world, "ml/serve-0")
    assert world.status.phase == Phase.ACCEPTED
    assert world.status.reverify is not None
    assert world.status.reverify.last is None
    pods = [a for p in world.log for a in p.actions if isinstance(a, CreateProbePod)]
    assert len(pods) == 1  # the acceptance probe's, no other
    assert PENDING not in world.node.taints  # type: ignore[union-attr]


def test_a_gpu_pod_that_came_first_wins_the_round_gives_up() -> None:
    world = accepted()
    report = world.status.report
    idle_window(world)
    assert world.status.phase == Phase.PROBING
    # the executor's list just before the probe pod found a GPU pod bound meanwhile
    world.pods.clear()
    world.pod_create_error = "node busy: ml/train-1"
    world.settle()
    world.pod_create_error = None
    st = world.status
    assert st.phase == Phase.ACCEPTED  # back in service, as accepted: never a verdict
    assert st.report == report
    assert st.reverify is not None
    assert st.reverify.last is not None
    assert st.reverify.last.outcome == "GaveUp"
    assert PENDING not in world.node.taints  # type: ignore[union-attr]
    assert any(e.reason == "ReverifyGaveUp" for e in world.events)


def test_the_limit_holds_the_round_back_and_writes_only_the_sample() -> None:
    world = accepted(maxQuarantined=1)
    world.limit_counts = QuarantineLimitCounts(quarantined=1, matched=10)
    idle_window(world)
    st = world.status
    assert st.phase == Phase.ACCEPTED
    assert st.reason is None  # no BreakerOpen note: a re-verification simply waits
    assert st.reverify is not None
    assert st.reverify.round is None


def test_a_drifted_gpu_fails_with_its_own_reason() -> None:
    world = accepted()
    idle_window(world)
    world.finish_with_report(report_of(DRIFTED))
    world.settle()
    st = world.status
    assert st.phase == Phase.QUARANTINED
    assert st.reason == "BaselineDriftFailed"
    message = st.reasons[0].message
    assert "bf16Tflops" in message
    assert "GPU 0" in message
    assert "631" in message
    assert "742" in message
    assert "15.0 %" in message
    assert st.reverify is not None
    failing = [f for f in st.reverify.drift if f.level == "fail"]
    assert {f.figure for f in failing} >= {"bf16Tflops.median", "fp8Tflops.median"}
    assert world.node is not None
    assert world.node.labels.get(REMEDY_LABEL) == "person"
    assert world.node.remedy is not None
    assert world.node.remedy.reason == "NeedsPerson"
    assert any(e.reason == "BaselineDrift" for e in world.events)
    # the baseline stays what the node did at acceptance
    assert st.baseline is not None
    figures = {f.figure: f.value for f in st.baseline.figures}
    assert figures["bf16Tflops.median"] == 742.0


def test_drift_that_only_warns_keeps_the_node() -> None:
    world = accepted(reverify={"drift": {"warnPercent": 5, "failPercent": None}})
    idle_window(world)
    world.finish_with_report(report_of(DRIFTED))
    world.settle()
    st = world.status
    assert st.phase == Phase.ACCEPTED
    assert st.reverify is not None
    assert st.reverify.drift
    assert all(f.level == "warn" for f in st.reverify.drift)


def suspect(world: World, checks: list[str], gpus: list[int]) -> None:
    st = world.status
    rv = (st.reverify or ReverifyStatus()).model_copy(
        update={
            "suspicions": [
                Suspicion(checks=checks, gpus=gpus, cause="Xid 13 x3 on GPU 3", since=world.now)
            ]
        }
    )
    assert world.na is not None
    world.na = dataclasses.replace(world.na, status=st.model_copy(update={"reverify": rv}))


def _policy_of(plan_actions: list[Any]) -> dict[str, Any]:
    create = [a for a in plan_actions if isinstance(a, CreateProbePod)][-1]  # the round's
    env = create.manifest["spec"]["containers"][0]["env"]
    raw = next(e["value"] for e in env if e["name"] == "GPUACCEPT_POLICY")
    return dict(json.loads(raw))


def test_a_suspect_is_reprobed_with_its_checks_only_and_cleared() -> None:
    world = accepted()
    report = world.status.report
    world.advance(HOUR)  # a suspect does not wait for the period
    suspect(world, ["gpu_compute"], [3])
    sample(world)
    world.advance(600)
    sample(world)
    st = world.status
    assert st.phase == Phase.PROBING
    assert st.reverify is not None
    assert st.reverify.round is not None
    assert st.reverify.round.cause == "Suspect"
    assert st.reverify.round.checks == ["gpu_compute"]
    assert st.reverify.round.gpus == [3]
    policy = _policy_of([a for p in world.log for a in p.actions])
    enabled = sorted(k for k, v in policy.items() if isinstance(v, dict) and v.get("enabled"))
    assert enabled == ["gpuCompute"]
    world.finish_with_report(make_report())
    world.settle()
    st = world.status
    assert st.phase == Phase.ACCEPTED
    assert st.report == report  # the full evidence stays; the targeted report covered one check
    assert st.reverify is not None
    assert st.reverify.last is not None
    assert st.reverify.last.outcome == "Passed"
    assert st.reverify.last.suspicion


def test_a_suspect_the_targeted_probe_confirms() -> None:
    world = accepted()
    world.advance(HOUR)
    suspect(world, ["gpu_compute"], [5])
    sample(world)
    world.advance(600)
    sample(world)
    world.finish_with_report(report_of(SLOW_GPU))
    world.settle()
    st = world.status
    assert st.phase == Phase.QUARANTINED
    assert st.reason == "GpuComputeFailed"
    assert st.reverify is not None
    assert st.reverify.last is not None
    assert st.reverify.last.outcome == "Failed"
    assert st.reverify.last.cause == "Suspect"
    # a suspicion already confirmed starts no second round
    assert st.reverify.round is None


def rebooted(world: World, boot: str) -> None:
    assert world.node is not None
    world.node = dataclasses.replace(world.node, boot_id=boot)
    world.settle()
    world.finish_with_report(make_report(boot_id=boot))
    world.settle()


def test_a_repeat_offender_stays_quarantined_until_a_person_releases_it() -> None:
    world = accepted()
    for n in range(3):  # three quarantines within a week, each "repaired" by a reboot
        world.advance(HOUR)
        assert world.node is not None
        world.node = dataclasses.replace(world.node, boot_id=f"boot-q{n}")
        world.settle()
        bad = report_of(SLOW_GPU).model_copy(update={"boot_id": f"boot-q{n}"})
        world.finish_with_report(bad)
        world.settle()
        assert world.status.phase == Phase.QUARANTINED
        if n < 2:
            world.advance(HOUR)
            rebooted(world, f"boot-ok{n}")
            assert world.status.phase == Phase.ACCEPTED
    world.advance(HOUR)
    rebooted(world, "boot-ok2")  # the repair passes the probe, and still:
    st = world.status
    assert st.phase == Phase.QUARANTINED
    assert st.reason == "RepeatedQuarantine"
    assert world.node is not None
    assert world.node.labels.get(REMEDY_LABEL) == "person"
    # a repair by reboot alone does not bring it back
    world.advance(HOUR)
    rebooted(world, "boot-ok3")
    assert (world.status.phase, world.status.reason) == (Phase.QUARANTINED, "RepeatedQuarantine")
    # a person looks and releases it (kubectl gpuaccept release: who and when) ...
    assert world.na is not None
    world.na = dataclasses.replace(
        world.na,
        annotations={
            "gpuaccept.io/release-by": "alice@example.com",
            "gpuaccept.io/release-at": world.now.isoformat(),
        },
    )
    world.settle()
    assert world.status.phase == Phase.RELEASED
    # ... and hands it back with a re-probe: the passing probe accepts it now
    world.advance(60)
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": "now"})
    world.settle()
    world.finish_with_report(make_report(boot_id=world.node.boot_id))
    world.settle()
    assert world.status.phase == Phase.ACCEPTED


def test_the_remedy_ladder_follows_the_evidence() -> None:
    world = World()
    world.settle()
    world.finish_with_report(report_of(REPO / "profiles" / "faults" / "recovery-action-reset.yaml"))
    world.settle()
    assert world.status.phase == Phase.QUARANTINED
    assert world.node is not None
    assert world.node.remedy is not None
    assert world.node.remedy.reason == "ResetGPU"
    assert world.node.labels.get(REMEDY_LABEL) == "reset-gpu"
    rebooted(world, "boot-2")
    assert world.status.phase == Phase.ACCEPTED
    assert world.node.labels.get(REMEDY_LABEL) is None
    assert world.node.remedy is not None
    assert world.node.remedy.status == "False"


def test_reverification_waits_while_the_node_is_cordoned() -> None:
    world = accepted()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, unschedulable=True)
    idle_window(world)
    assert world.status.phase == Phase.ACCEPTED


def test_a_reverification_is_counted_against_the_rate() -> None:
    world = accepted()
    idle_window(world)
    st = world.status
    assert st.was_in_service
    assert st.taken_out_time == world.now
    assert timedelta(0) <= world.now - T0


def test_under_a_fabric_policy_a_reverified_node_is_paired_again() -> None:
    """The round's passing probe goes to the fabric test (the existing pairing and
    blame rules decide); its pair's busbw is compared with the baseline's, and only
    warns (a pair's figure is also its partner's)."""
    from gpuaccept.operator.core.fabric.pairing import FabricPassed  # noqa: PLC0415

    world = probed_once(fabric={"enabled": True, "minBusbwGBps": 300})
    assert world.status.phase == Phase.FABRIC
    world.fabric_verdict = FabricPassed("gpu-2", 390.0, T0)
    world.settle()
    world.fabric_verdict = None
    assert world.status.phase == Phase.ACCEPTED
    baseline = world.status.baseline
    assert baseline is not None
    assert any(f.check == "fabric_allreduce" and f.value == 390.0 for f in baseline.figures)
    idle_window(world)
    assert world.status.phase == Phase.PROBING
    world.finish_with_report()
    world.settle()
    assert world.status.phase == Phase.FABRIC  # paired again, under the pending taint
    assert world.node is not None
    assert PENDING in world.node.taints
    world.fabric_verdict = FabricPassed("gpu-3", 300.0, world.now)  # passes, 23 % lower
    world.settle()
    st = world.status
    assert st.phase == Phase.ACCEPTED
    assert st.reverify is not None
    assert [(f.check, f.level) for f in st.reverify.drift] == [("fabric_allreduce", "warn")]
    assert st.reverify.last is not None
    assert st.reverify.last.outcome == "Passed"
