"""gpu_count: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import Case, assert_row, ids, judge_json
from pydantic import JsonValue

from gpuaccept.checks.claims import claims_problem
from gpuaccept.checks.gpu_count import SPEC as GPU_COUNT
from gpuaccept.checks.gpu_count import GpuCountObserved, claims
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


@pytest.mark.parametrize(
    ("observed", "status", "needle"),
    [
        # the dead GPU: the device plugin marked it unhealthy; the pod got 7, sees 7
        (
            {"visible": 7, "allocatable": 7, "capacity": 8},
            CheckStatus.FAIL,
            "allocatable nvidia.com/gpu 7 < capacity 8",
        ),
        # after a restart everything Kubernetes knows says 7; the PCI bus says 8
        (
            {"visible": 7, "allocatable": 7, "capacity": 7, "labelled": 7, "pciDevices": 8},
            CheckStatus.FAIL,
            "7 of 8 GPUs visible (expected from PCI bus)",
        ),
        # the GFD label alone remembers 8
        (
            {"visible": 7, "allocatable": 7, "capacity": 7, "labelled": 8},
            CheckStatus.FAIL,
            "expected from label nvidia.com/gpu.count",
        ),
        # the pod was given 8 but NVML sees 7
        (
            {"visible": 7, "allocatable": 8, "capacity": 8, "pciDevices": 8},
            CheckStatus.FAIL,
            "the probe was given 8 GPUs but NVML sees 7",
        ),
        # healthy: every source agrees
        (
            {"visible": 8, "allocatable": 8, "capacity": 8, "labelled": 8, "pciDevices": 8},
            CheckStatus.PASS,
            "8 of 8 GPUs visible (expected from capacity, label nvidia.com/gpu.count, PCI bus)",
        ),
        # a node without GPU feature discovery and without readable PCI sysfs
        (
            {"visible": 8, "allocatable": 8, "capacity": 8},
            CheckStatus.PASS,
            "expected from capacity",
        ),
        # no evidence at all: not a pass by default
        ({"visible": 8}, CheckStatus.SKIP, "no expected count"),
        ({"visible": 8, "allocatable": 0, "capacity": 0}, CheckStatus.SKIP, "no expected count"),
        ({"visible": 0, "problem": "NVML gone"}, CheckStatus.FAIL, "no GPU found (NVML gone)"),
    ],
)
def test_gpu_count_judges_against_the_strongest_evidence(
    observed: JsonValue, status: CheckStatus, needle: str
) -> None:
    judgement = judge_json(GPU_COUNT, observed, ProbePolicy(), SUMMARY)
    assert judgement.status is status, judgement.message
    assert needle in judgement.message


def test_the_policy_count_is_the_administrators_word() -> None:
    p = policy(gpuCount={"expected": 4})
    # a node with 4 of its 8 GPUs passed through to VMs: the policy says 4
    ok = {"visible": 4, "allocatable": 4, "capacity": 4, "pciDevices": 8}
    assert judge_json(GPU_COUNT, ok, p, SUMMARY).status is CheckStatus.PASS
    # allocatable below capacity still fails
    sick = {"visible": 4, "allocatable": 4, "capacity": 5}
    assert judge_json(GPU_COUNT, sick, p, SUMMARY).status is CheckStatus.FAIL


CASES = [
    Case("all-present", {"visible": 8, "allocatable": 8, "capacity": 8, "pciDevices": 8},
         CheckStatus.PASS),
    Case("allocatable-below-capacity", {"visible": 7, "allocatable": 7, "capacity": 8},
         CheckStatus.FAIL, "allocatable nvidia.com/gpu 7 < capacity 8"),
    Case("pci-bus-remembers", {"visible": 7, "allocatable": 7, "capacity": 7, "pciDevices": 8},
         CheckStatus.FAIL, "7 of 8 GPUs visible (expected from PCI bus)"),
    Case("no-gpu", {"visible": 0}, CheckStatus.FAIL, "no GPU found"),
    Case("no-expected-count", {"visible": 8}, CheckStatus.SKIP, "no expected count"),
    Case("policy-count", {"visible": 4, "allocatable": 4, "capacity": 4, "pciDevices": 8},
         CheckStatus.PASS, section={"expected": 4}),
    Case("policy-count-allocatable-short", {"visible": 4, "allocatable": 4, "capacity": 5},
         CheckStatus.FAIL, section={"expected": 4}),
    # a DRA node: the pool's count as allocatable and capacity, its UUIDs against NVML's
    Case("dra-pool-seen", {"visible": 8, "allocatable": 8, "capacity": 8, "published": 8,
                           "uuidsCompared": True},
         CheckStatus.PASS, "the 8 UUIDs the DRA pool publishes are the GPUs NVML sees"),
    Case("dra-published-not-seen", {"visible": 8, "allocatable": 8, "capacity": 8,
                                    "published": 8, "uuidsCompared": True,
                                    "missing": ["GPU-a"], "unpublished": ["GPU-b"]},
         CheckStatus.FAIL, "the DRA pool publishes GPU(s) NVML does not see: GPU-a"),
    Case("dra-seen-not-published", {"visible": 8, "allocatable": 8, "capacity": 8,
                                    "published": 8, "uuidsCompared": True,
                                    "unpublished": ["GPU-b"]},
         CheckStatus.FAIL, "NVML sees GPU(s) the DRA pool does not publish: GPU-b"),
    Case("dra-uuids-unread", {"visible": 8, "allocatable": 8, "capacity": 8, "published": 8,
                              "uuidsCompared": False},
         CheckStatus.PASS, "the DRA pool's UUIDs not compared"),
    Case("dra-pool-short", {"visible": 7, "allocatable": 7, "capacity": 7, "published": 7,
                            "uuidsCompared": True, "pciDevices": 8},
         CheckStatus.FAIL, "7 of 8 GPUs visible (expected from PCI bus)"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(GPU_COUNT, case)


def test_a_report_of_no_gpu_on_the_pci_bus_beside_visible_gpus_is_refused() -> None:
    """Issue 42 item 10 (found by fuzzing reports): ``pciDevices: 0`` beside 8 GPUs
    that NVML sees was accepted. The probe never writes 0 (it omits the field when the
    bus shows no NVIDIA GPU), so the report is inconsistent."""
    summary = HardwareSummary(gpu_count=8)
    forged = GpuCountObserved(visible=8, allocatable=8, capacity=8, pci_devices=0)
    assert claims_problem("gpu_count", claims(forged, summary), 8) == (
        "gpu_count.visible = 8 is beyond what the hardware can give (0 to 0)"
    )
    unread = GpuCountObserved(visible=8, allocatable=8, capacity=8)
    assert claims_problem("gpu_count", claims(unread, summary), 8) is None
    read = GpuCountObserved(visible=8, allocatable=8, capacity=8, pci_devices=8)
    assert claims_problem("gpu_count", claims(read, summary), 8) is None
