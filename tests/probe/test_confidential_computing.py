"""A node in confidential computing mode copies to and from its GPUs through encrypted
bounce buffers: its H2D/D2H are judged by their own floors (ccMinH2DGBps,
ccMinD2HGBps; unset by default, so not judged, and the message says so), never by a
non-CC node's. Issue 37, item 9."""

import sys
import types
from typing import Any

import pytest
from probe_scenarios import PROFILES, default_policy, probe

from gpuaccept.checks.pcie_link import SPEC as PCIE
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.real import RealBackend

CC_NODE = PROFILES / "h100-sxm-8gpu-confidential-computing.yaml"
FIXTURES = PROFILES.parent / "tests" / "fixtures"


def test_a_cc_nodes_copies_are_not_held_to_the_non_cc_floor() -> None:
    result = probe(CC_NODE).result("pcie_link")
    assert result is not None
    assert result.status is CheckStatus.PASS, result.message
    assert "confidential computing on" in result.message
    assert "H2D/D2H not judged (no CC floor)" in result.message
    assert result.observed is not None
    assert result.observed["ccMode"] == "on"


def test_the_same_copies_without_cc_fail() -> None:
    profile = load_profile(CC_NODE)
    off = profile.model_copy(
        update={"driver": profile.driver.model_copy(update={"conf_compute": "off"})}
    )
    result = probe(off).result("pcie_link")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "H2D 9.5 GB/s < 40" in result.message


def test_a_cc_floor_judges_a_cc_node() -> None:
    policy = default_policy()
    section = policy.section(PCIE).model_copy(update={"cc_min_h2d_gbps": 12})
    result = probe(CC_NODE, policy.model_copy(update={"pcie_link": section})).result("pcie_link")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "H2D 9.5 GB/s < 12" in result.message


class FakeNVMLError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.value = code


def nvml_with_cc(state: Any) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError  # type: ignore[attr-defined]

    def get_state() -> Any:
        if isinstance(state, int):
            raise FakeNVMLError(state)
        return state

    functions: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 0,
        "nvmlSystemGetConfComputeState": get_state,
    }
    for name, fn in functions.items():
        setattr(m, name, fn)
    return m


@pytest.mark.parametrize(
    ("state", "mode"),
    [
        (types.SimpleNamespace(environment=2, ccFeature=1, devToolsMode=0), "on"),
        (types.SimpleNamespace(environment=2, ccFeature=1, devToolsMode=1), "devtools"),
        (types.SimpleNamespace(environment=0, ccFeature=0, devToolsMode=0), "off"),
        (3, "off"),  # NVML_ERROR_NOT_SUPPORTED: no CC on this GPU or driver
        (999, None),  # any other error: not read
    ],
)
def test_the_real_backend_reads_the_cc_state(
    monkeypatch: pytest.MonkeyPatch, state: Any, mode: str | None
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml_with_cc(state))
    hw = RealBackend(sysfs_root=FIXTURES / "sysfs", proc_root=FIXTURES / "proc")
    try:
        assert hw.conf_compute() == mode
    finally:
        hw.close()
