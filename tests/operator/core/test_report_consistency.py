"""A report accepts a node only if every part of it is consistent with the node.

Each shape a hostile or fuzzed probe result took, through the pure core with the
real judge, from the real probe's report of a healthy 8-GPU H100 node (which alone
is accepted): numbers given as strings or booleans, a key twice, a check's GPU count
or GPU range that is not the node's, figures no hardware produces, timestamps from
before the pod, and passing results without the observed values to judge them by.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from test_untrusted_results import assert_out_and_retrying, probing
from world import T0, make_report, spec

from gpuaccept.checks.nccl_allreduce import SPEC as NCCL
from gpuaccept.checks.verdict import UNSHOWN_PASS, evaluate, rejudge
from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    ProbeReport,
    decode_termination_message,
    encode_termination_message,
)
from gpuaccept.operator.core.model import NodeView, PodView
from gpuaccept.operator.core.report_trust import CLOCK_SKEW, freshness_problem, trusted_report

HEALTHY = make_report()
HEALTHY_MESSAGE = encode_termination_message(HEALTHY)
NODE = NodeView(name="gpu-1", boot_id="boot-1", gpus=8, gpu_capacity=8)


def finish(message: str, *, accepted: bool = True) -> Phase:
    """The probe pod ends with ``message`` and the exit code of an accepted run."""
    world = probing()
    world.finish_pod(message, exit_code=0 if accepted else 1)
    world.settle()
    return world.status.phase


def refused(message: str, reason: str) -> str:
    world = probing()
    world.finish_pod(message)
    world.settle()
    assert_out_and_retrying(world, reason)
    return world.status.message or ""


def test_the_healthy_report_is_accepted() -> None:
    """The trap case every rule below must let through."""
    assert finish(HEALTHY_MESSAGE) == Phase.ACCEPTED


def test_a_report_before_the_pods_terminal_phase_waits_for_it() -> None:
    """A kubelet reports the container's end while the pod is still Running and the
    terminal phase only after the pod is torn down (kubelet 1.37, tests/realnode): the
    report is judged once the phase agrees with it, not refused as a mismatch."""
    world = probing()
    attempt = (world.status.attempts, world.status.probe_pod)
    world.finish_pod(HEALTHY_MESSAGE, exit_code=0, phase="Running")
    world.settle()
    assert world.status.phase == Phase.PROBING, world.status
    assert (world.status.attempts, world.status.probe_pod) == attempt, world.status
    world.finish_pod(HEALTHY_MESSAGE, exit_code=0, phase="Succeeded")
    world.settle()
    assert world.status.phase == Phase.ACCEPTED


# ---------------------------------------------------------------- strict types


# In the envelope the report is refused as it is read; in an observed value the check's
# result cannot be judged (an error), so the probe's exit 0 disagrees with its report.
IN_OBSERVED = "ReportMismatch"


@pytest.mark.parametrize(
    ("healthy", "hostile", "reason"),
    [
        ('"gpuCount":8', '"gpuCount":"8"', "InvalidReport"),
        ('"gpuCount":8', '"gpuCount":8.0', "InvalidReport"),
        ('"gpuCount":8', '"gpuCount":true', "InvalidReport"),
        ('"durationS":0.1', '"durationS":"0.1"', "InvalidReport"),
        ('"nvswitchDevices":4', '"nvswitchDevices":"4"', "InvalidReport"),
        ('"busbwGBps":465.3', '"busbwGBps":"468"', IN_OBSERVED),
        ('"busbwGBps":465.3', '"busbwGBps":"1_000"', IN_OBSERVED),
        ('"busbwGBps":465.3', '"busbwGBps":true', IN_OBSERVED),
        ('"ranks":8', '"ranks":"8"', IN_OBSERVED),
        ('"visible":8', '"visible":"8"', IN_OBSERVED),
        ('"minGen":5', '"minGen":"5"', IN_OBSERVED),
        ('"minH2DGBps":52.8', '"minH2DGBps":"52.8"', IN_OBSERVED),
        ('"minSmClockFraction":1.0', '"minSmClockFraction":true', IN_OBSERVED),
    ],
)
def test_numbers_as_strings_or_booleans_are_refused(
    healthy: str, hostile: str, reason: str
) -> None:
    assert healthy in HEALTHY_MESSAGE
    refused(HEALTHY_MESSAGE.replace(healthy, hostile, 1), reason)


def test_a_key_twice_is_refused_whichever_comes_last() -> None:
    """A failing report with a second ``status`` key saying pass."""
    failing = encode_termination_message(make_report(failing=["pcie_link"]))
    doubled = failing.replace('"status":"fail"', '"status":"fail","status":"pass"', 1)
    assert doubled != failing
    assert "appears twice" in refused(doubled, "InvalidReport")


def test_a_field_from_a_newer_probe_is_ignored_and_the_report_judged() -> None:
    report = json.loads(HEALTHY_MESSAGE)
    # room for the newer fields within the 4096 bytes (the GPUs' UUIDs are optional)
    del report["summary"]["gpuUuids"]
    report["probeFeature"] = {"anything": 1}
    report["summary"]["gpuFirmware"] = "96.00.5E.00.01"
    report["results"][0]["confidence"] = 0.99
    assert finish(json.dumps(report, separators=(",", ":"))) == Phase.ACCEPTED


# ---------------------------------------------------------------- GPU counts and ranges


def _edited(check: str, **fields: Any) -> str:
    report = json.loads(HEALTHY_MESSAGE)
    result = next(r for r in report["results"] if r["check"] == check)
    result["observed"] = {**result["observed"], **fields}
    return json.dumps(report, separators=(",", ":"))


@pytest.mark.parametrize("check", ["pcie_link", "nvswitch_fabric", "gpu_config", "memory_health"])
@pytest.mark.parametrize("gpus", [0, 4, 16])
def test_a_checks_gpu_count_must_be_the_nodes(check: str, gpus: int) -> None:
    extra = {"completed": min(gpus, 8)} if check == "nvswitch_fabric" else {}
    message = refused(_edited(check, gpus=gpus, **extra), "ReportMismatch")
    assert f"{check}.gpus covers {gpus} GPUs; the report has 8" in message


@pytest.mark.parametrize(
    ("check", "fields", "named"),
    [
        ("nvlink", {"links": {"0-15": 18}, "active": {"0-15": 18}}, "nvlink.links"),
        ("nvlink", {"active": {"0-7": 18, "12": 18}}, "nvlink.active"),
        ("xid_errors", {"watched": "0-15"}, "xid_errors.watched"),
        ("xid_errors", {"xids": {"9": [13]}}, "xid_errors.xids"),
        ("pcie_link", {"slowH2D": [11]}, "pcie_link.slowH2D"),
        ("gpu_compute", {"bf16": [742.0, 742.0, 9, 8]}, "gpu_compute.bf16"),
        ("throttle_reasons", {"minSmClockGpu": 8}, "throttle_reasons.minSmClockGpu"),
    ],
)
def test_every_gpu_a_result_names_is_one_of_the_nodes(
    check: str, fields: dict[str, Any], named: str
) -> None:
    message = refused(_edited(check, **fields), "ReportMismatch")
    assert named in message


# ---------------------------------------------------------------- plausible figures


@pytest.mark.parametrize(
    ("check", "fields", "figure"),
    [
        ("nccl_allreduce", {"busbwGBps": 1e308}, "nccl_allreduce.busbwGBps"),
        ("nccl_allreduce", {"busbwGBps": 5000.0}, "nccl_allreduce.busbwGBps"),
        ("pcie_link", {"minH2DGBps": 400.0}, "pcie_link.minH2DGBps"),
        ("gpu_compute", {"bf16": [742.0, 90000.0, 0, 8]}, "gpu_compute.bf16"),
        ("gpu_memory_bandwidth", {"memory": [3015.0, 60000.0, 0, 8]}, "memory"),
        ("peer_bandwidth", {"weakest": {"nvlink": [9000.0, 0, 1, 380.0]}}, "weakest.nvlink"),
        ("throttle_reasons", {"worst": {"hw_slowdown": [3.0, 1]}}, "worst.hw_slowdown"),
    ],
)
def test_a_figure_no_hardware_produces_is_a_mismatch_naming_it(
    check: str, fields: dict[str, Any], figure: str
) -> None:
    message = refused(_edited(check, **fields), "ReportMismatch")
    assert figure in message
    assert "beyond what the hardware can give" in message


def test_fast_healthy_figures_are_within_the_bounds() -> None:
    """H100/H200 at their best measured figures and beyond: NVLS busbw ~480 GB/s, triad
    ~3.0/4.4 TB/s, bf16 ~750 TFLOPS, pinned copies ~55 GB/s at Gen5 x16."""
    fast = _edited("nccl_allreduce", busbwGBps=600.0)
    assert finish(fast) == Phase.ACCEPTED
    report = json.loads(HEALTHY_MESSAGE)
    report["summary"]["gpuModel"] = "NVIDIA H200"
    for result in report["results"]:
        if result["check"] == "gpu_memory_bandwidth":
            result["observed"]["memory"] = [4400.0, 4500.0, 0, 8]
        if result["check"] == "gpu_compute":
            result["observed"]["bf16"] = [900.0, 950.0, 0, 8]
        if result["check"] == "pcie_link":
            result["observed"]["minH2DGBps"] = 58.0
    assert finish(json.dumps(report, separators=(",", ":"))) == Phase.ACCEPTED


# ---------------------------------------------------------------- freshness


def _pod(created: timedelta = timedelta(0), finished: timedelta = timedelta(minutes=2)) -> PodView:
    return PodView(name="probe-gpu-1-1", created=T0 + created, finished=T0 + finished)


def _at(started: timedelta, finished: timedelta) -> ProbeReport:
    return HEALTHY.model_copy(update={"started_at": T0 + started, "finished_at": T0 + finished})


def test_a_report_from_long_before_its_pod_is_a_mismatch() -> None:
    world = probing()
    pod = world.current_pod()
    world.pods[pod.name] = dataclasses.replace(pod, created=T0)
    old = _at(-timedelta(days=30), -timedelta(days=30) + timedelta(seconds=40))
    world.finish_with_report(old)
    world.settle()
    assert_out_and_retrying(world, "ReportMismatch")
    assert "before its pod" in (world.status.message or "")


@pytest.mark.parametrize(
    ("started", "finished", "problem"),
    [
        (timedelta(seconds=5), timedelta(seconds=50), None),
        (-CLOCK_SKEW + timedelta(seconds=1), timedelta(seconds=50), None),  # within the skew
        (-CLOCK_SKEW - timedelta(seconds=1), timedelta(seconds=50), "before its pod"),
        (timedelta(seconds=5), timedelta(minutes=2) + CLOCK_SKEW, None),
        (timedelta(seconds=5), timedelta(minutes=2, seconds=1) + CLOCK_SKEW, "after its pod"),
        (timedelta(seconds=50), timedelta(seconds=5), "before it started"),
    ],
)
def test_report_times_within_the_pods_lifetime(
    started: timedelta, finished: timedelta, problem: str | None
) -> None:
    found = freshness_problem(_at(started, finished), _pod())
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found.message
        assert found.reason == "ReportMismatch"


def test_a_pod_without_times_compares_nothing() -> None:
    assert freshness_problem(_at(-timedelta(days=3), -timedelta(days=3)), PodView("p")) is None


# ---------------------------------------------------------------- results without observed


def test_passing_results_without_observed_values_never_accept() -> None:
    """The probe's own ``pass`` with nothing to judge again: an error, not an acceptance."""
    report = json.loads(HEALTHY_MESSAGE)
    for result in report["results"]:
        del result["observed"]
    phase = finish(json.dumps(report, separators=(",", ":")))
    assert phase != Phase.ACCEPTED


def test_one_passing_result_without_observed_is_an_error_naming_it() -> None:
    report = json.loads(HEALTHY_MESSAGE)
    result = next(r for r in report["results"] if r["check"] == "memory_health")
    del result["observed"]
    message = json.dumps(report, separators=(",", ":"))
    assert finish(message) != Phase.ACCEPTED
    verdict = evaluate(decode_termination_message(message), spec().probe)
    assert [(r.check, r.reason, r.message) for r in verdict.reasons] == [
        ("memory_health", "ProbeError", UNSHOWN_PASS)
    ]


def test_a_one_gpu_nodes_not_applicable_pass_stands_without_observed() -> None:
    """No pair to copy between, no all-reduce: nothing the probe could show."""
    one = HEALTHY.model_copy(
        update={"summary": HEALTHY.summary.model_copy(update={"gpu_count": 1})}
    )
    result = CheckResult(
        check="nccl_allreduce", status=CheckStatus.PASS, duration_s=0.1,
        message="not applicable: all-reduce bus bandwidth needs at least 2 GPUs",
    )  # fmt: skip
    assert rejudge(NCCL, result, one, spec().probe).status is CheckStatus.PASS
    assert rejudge(NCCL, result, HEALTHY, spec().probe).status is CheckStatus.ERROR


def test_the_same_rules_hold_for_a_stored_report_judged_again() -> None:
    bad = HEALTHY.model_copy(
        update={
            "results": [
                r.model_copy(update={"observed": {"gpus": 4}}) if r.check == "memory_health" else r
                for r in HEALTHY.results
            ]
        }
    )
    problem = trusted_report(bad, NODE, accept_simulated=True)
    assert not isinstance(problem, ProbeReport)
    assert problem.reason == "ReportMismatch"
    assert "memory_health.gpus" in problem.message
    assert trusted_report(HEALTHY, NODE, accept_simulated=True) == HEALTHY
