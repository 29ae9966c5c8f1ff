"""The nvlink, nvswitch_fabric and gpu_config checks: their judges, their condensed forms,
the real backend's NVML readers against a fake pynvml shaped like the real binding, and
gpu_config reusing the throttle_reasons samples (one load)."""

import contextlib
import ctypes
import json
import sys
import types
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest
from probe_scenarios import PROFILES, default_policy, probe
from pydantic import JsonValue
from test_probe_real_backend import FakeNVMLError, backend, fake_nvml

from gpuaccept.checks.gpu_config import SPEC as GPU_CONFIG
from gpuaccept.checks.nvlink import SPEC as NVLINK
from gpuaccept.checks.nvswitch_fabric import SPEC as FABRIC
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware import nvml_links
from gpuaccept.probe.hardware.base import LoadTimer, MatmulPrecision, Unavailable
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.runner import RunSetup, run_check, run_probe

H100 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)
NOT_SUPPORTED, INVALID_ARGUMENT, GPU_IS_LOST, VERSION_MISMATCH = 3, 2, 15, 25


def judged(
    check: AnyCheckSpec,
    observed: JsonValue,
    summary: HardwareSummary = H100,
    policy: ProbePolicy | None = None,
) -> tuple[CheckStatus, str]:
    """(status, message) of ``observed`` as measured and condensed: both must agree."""
    section = (policy or default_policy()).section(check)
    full = check.judge(check.parse(observed), section, summary)
    condensed = check.judge(check.condense(check.parse(observed)), section, summary)
    assert condensed.status is full.status, (full.message, condensed.message)
    return full.status, full.message


# --- nvlink -----------------------------------------------------------------------


# --- nvswitch_fabric ----------------------------------------------------------------


# --- gpu_config -----------------------------------------------------------------------

W700 = {"0-3": 700}


def config(**fields: Any) -> JsonValue:
    base: dict[str, Any] = {"gpus": 4, "powerLimitW": W700, "defaultPowerLimitW": W700}
    base.update(fields)
    return json.loads(json.dumps(base))


# --- condensed forms stay small ---------------------------------------------------------


def test_condensed_forms_of_16_failing_gpus_stay_small() -> None:
    sixteen = range(16)
    worst: dict[AnyCheckSpec, JsonValue] = {
        NVLINK: {
            "links": {"0-15": 18},
            "active": {"0-15": 10},
            "inactive": {str(g): list(range(10, 18)) for g in sixteen},
            "errors": {
                c: {f"{g}:{link}": 1000 + g for g in sixteen for link in range(18)}
                for c in ("replay", "recovery", "crc")
            },
        },
        FABRIC: {
            "gpus": 16,
            "completed": 16,
            "notCompleted": {"0-7": "not_started"},
            "statusErrors": {"8-15": 999},
            "health": {"degraded_bandwidth": "0-15", "route_unhealthy": "0-15"},
            "structVersion": 3,
        },
        GPU_CONFIG: config(
            gpus=16,
            powerLimitW={str(g): 400 + g for g in sixteen},
            defaultPowerLimitW={"0-15": 700},
            persistenceOff="0-15",
            migEnabled="0-15",
            migPending={"0-15": "disabled"},
            computeModes={"0-15": "prohibited"},
            loadSamples=120,
            appClocksFraction={"0-15": 1.0},
            smClockFraction={str(g): 0.3 + g / 100 for g in sixteen},
        ),
    }
    for check, observed in worst.items():
        condensed = check.condense(check.parse(observed)).to_observed()
        size = len(json.dumps(condensed, separators=(",", ":")))
        # gpu_config with every one of its items failing on all 16 GPUs: 261 bytes
        assert size <= 270, (check.name, size, condensed)
        assert judged(check, observed)[0] is CheckStatus.FAIL


# --- the real backend's NVML readers (fake pynvml, shaped like nvidia-ml-py) -------------


def test_nvml_numbers_match_the_installed_binding() -> None:
    assert pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT == nvml_links.NVML_FI_DEV_NVLINK_LINK_COUNT
    assert pynvml.NVML_NVLINK_MAX_LINKS == nvml_links.NVML_NVLINK_MAX_LINKS
    assert nvml_links.NVLINK_COUNTERS == {
        "replay": (pynvml.NVML_NVLINK_ERROR_DL_REPLAY,),
        "recovery": (pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,),
        "crc": (pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
        "ecc": (pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA,),
    }
    assert (
        nvml_links.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS
        == pynvml.NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS
    )
    assert nvml_links.FABRIC_STATES == {
        pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: "not_supported",
        pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED: "not_started",
        pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS: "in_progress",
        pynvml.NVML_GPU_FABRIC_STATE_COMPLETED: "completed",
    }
    shifts = {name: shift for name, shift, _w, _f in nvml_links.FABRIC_HEALTH_FIELDS}
    assert shifts == {
        "degraded_bandwidth": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW,
        "route_recovery": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY,
        "route_unhealthy": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY,
        "access_timeout_recovery": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
        "incorrect_configuration": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION,
    }
    assert nvml_links.COMPUTE_MODES[pynvml.NVML_COMPUTEMODE_DEFAULT] == "default"
    assert nvml_links.COMPUTE_MODES[pynvml.NVML_COMPUTEMODE_PROHIBITED] == "prohibited"
    assert (
        nvml_links.COMPUTE_MODES[pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS] == "exclusive_process"
    )
    assert pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH == VERSION_MISMATCH


def _field(code: int, value: int) -> Any:
    """One ``c_nvmlFieldValue_t`` as the binding returns it."""
    v = pynvml.c_nvmlFieldValue_t()
    v.fieldId = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT
    v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    v.nvmlReturn = code
    v.value.uiVal = value
    return v


def nvlink_nvml(
    *,
    link_count: int = 18,
    count_code: int = 0,
    down: frozenset[int] = frozenset(),
    counters: dict[tuple[int, int], int] | None = None,
    counters_code: int = 0,
) -> types.ModuleType:
    """NVML for 2 GPUs: links at or above the count answer INVALID_ARGUMENT, as NVML does."""
    m = fake_nvml()

    def state(_h: int, link: int) -> int:
        if link >= link_count:
            raise FakeNVMLError(INVALID_ARGUMENT)
        return 0 if link in down else 1

    def counter(_h: int, link: int, which: int) -> int:
        if link >= link_count:
            raise FakeNVMLError(INVALID_ARGUMENT)
        if counters_code:
            raise FakeNVMLError(counters_code)
        return (counters or {}).get((link, which), 0)

    def fields(_h: int, ids: list[Any]) -> list[Any]:
        """The link count; any other field (a per-link one, the link in scopeId) answers
        NotSupported, as on a Hopper driver."""
        return [
            _field(count_code, link_count)
            if wanted == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT
            else _field(NOT_SUPPORTED, 0)
            for wanted in ids
        ]

    m.nvmlDeviceGetFieldValues = fields  # type: ignore[attr-defined]
    m.nvmlDeviceGetNvLinkState = state  # type: ignore[attr-defined]
    m.nvmlDeviceGetNvLinkErrorCounter = counter  # type: ignore[attr-defined]
    return m


def test_reads_the_device_link_count_not_the_binding_maximum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hw = backend(monkeypatch, nvlink_nvml(down=frozenset({17}), counters={(3, 2): 5, (3, 3): 2}))
    links = hw.nvlink(0)
    assert links.count == 18
    assert links.active == tuple(range(17))
    assert links.errors is not None
    assert links.errors["crc"][3] == 7  # flit + data


def test_link_count_not_supported_is_a_gpu_without_nvlink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NotSupported is how NVML says the GPU has no NVLink (a PCIe card without a
    bridge): no links, judged against the model, not a skip of the whole check."""
    hw = backend(monkeypatch, nvlink_nvml(count_code=NOT_SUPPORTED))
    links = hw.nvlink(0)
    assert (links.count, links.active) == (0, ())


def test_a_pcie_card_without_nvlink_passes_nvlink(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, nvlink_nvml(count_code=NOT_SUPPORTED))
    summary = HardwareSummary(gpu_model="NVIDIA H100 PCIe", gpu_count=2)
    result = run_check(NVLINK, hw, ProbePolicy(), ProbeContext(), summary)
    assert result.status is CheckStatus.PASS, result.message
    assert "not judged" in result.message


def test_link_count_other_errors_are_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, nvlink_nvml(count_code=999))
    with pytest.raises(Unavailable, match="GPU 0: NVML gives no NVLink count"):
        hw.nvlink(0)


def test_counters_not_supported_are_none_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, nvlink_nvml(counters_code=NOT_SUPPORTED))
    assert hw.nvlink(0).errors is None


def fabric_nvml(answers: list[Any]) -> types.ModuleType:
    """The versioned fabric call answering, in turn, each of ``answers``: an NVML error
    code to raise, or ``(state, status, healthMask, healthSummary)`` to fill in."""
    m = fake_nvml()
    m.c_nvmlGpuFabricInfo_v3_t = pynvml.c_nvmlGpuFabricInfo_v3_t  # type: ignore[attr-defined]
    m.c_nvmlGpuFabricInfo_v2_t = pynvml.c_nvmlGpuFabricInfo_v2_t  # type: ignore[attr-defined]
    pending = iter(answers)

    def get(_h: int, ref: Any) -> int:
        answer = next(pending)
        if isinstance(answer, int):
            raise FakeNVMLError(answer)
        info = ref._obj  # what ctypes.byref points at
        info.state, info.status, info.healthMask = answer[:3]
        if hasattr(info, "healthSummary"):
            info.healthSummary = answer[3]
        return 0

    m.nvmlDeviceGetGpuFabricInfoV = get  # type: ignore[attr-defined]
    return m


def test_fabric_v3_health_mask_and_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    degraded = pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
    hw = backend(monkeypatch, fabric_nvml([(3, 0, degraded, 3)]))
    info = hw.gpu_fabric(0)
    assert (info.state, info.struct_version) == ("completed", 3)
    assert info.conditions == ("degraded_bandwidth", "limited_capacity")


def test_fabric_falls_back_to_v2_on_an_older_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    healthy = pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE
    hw = backend(monkeypatch, fabric_nvml([VERSION_MISMATCH, (1, 0, healthy, 0)]))
    info = hw.gpu_fabric(0)
    assert (info.state, info.struct_version, info.conditions) == ("not_started", 2, ())


def test_fabric_call_not_supported_is_recorded_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, fabric_nvml([NOT_SUPPORTED]))
    assert hw.gpu_fabric(0).state == "unsupported"


def settings_nvml(*, mig_error: int | None = None) -> types.ModuleType:
    m = fake_nvml()

    def mig(_h: int) -> list[int]:
        if mig_error is not None:
            raise FakeNVMLError(mig_error)
        return [0, 1]  # disabled now, enabled after the next reset

    functions: dict[str, Any] = {
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 500000,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700000,
        "nvmlDeviceGetPersistenceMode": lambda h: pynvml.NVML_FEATURE_ENABLED,
        "nvmlDeviceGetMigMode": mig,
        "nvmlDeviceGetComputeMode": lambda h: pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
    }
    for name, fn in functions.items():
        setattr(m, name, fn)
    return m


def test_reads_the_gpu_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    s = backend(monkeypatch, settings_nvml()).gpu_settings(1)
    assert (s.power_limit_mw, s.default_power_limit_mw, s.persistence) == (500000, 700000, True)
    assert (s.mig_current, s.mig_pending, s.compute_mode) == (False, True, "exclusive_process")


def test_a_setting_not_supported_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (
        backend(monkeypatch, settings_nvml(mig_error=NOT_SUPPORTED)).gpu_settings(0).mig_current
        is None
    )


def test_a_lost_gpu_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    hw = backend(monkeypatch, settings_nvml(mig_error=GPU_IS_LOST))
    result = run_probe(
        hw,
        ProbePolicy.model_validate({"throttleReasons": {"enabled": False}}),
        RunSetup(node_name="n", checks=[GPU_CONFIG]),
    ).result("gpu_config")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "GPU 0 failed: the MIG mode" in result.message


# --- gpu_config reuses the throttle samples -------------------------------------------


class CountingLoads(SimulatedBackend):
    loads = 0  # bf16 loads (gpu_compute's fp8 phase is a load of its own)

    @contextlib.contextmanager
    def gpu_load(self, precision: MatmulPrecision = "bf16") -> Iterator[LoadTimer]:
        CountingLoads.loads += precision == "bf16"
        with super().gpu_load(precision) as timer:
            yield timer


def test_clocks_are_judged_from_the_throttle_samples_with_one_load() -> None:
    hw = CountingLoads(load_profile(PROFILES / "faults" / "clocks-locked.yaml"))
    try:
        report = run_probe(hw, default_policy(), RunSetup(node_name="n", context=ProbeContext()))
    finally:
        hw.close()
    assert CountingLoads.loads == 1
    result = report.result("gpu_config")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "applications_clocks_setting under load" in result.message


def test_without_throttle_samples_clocks_are_not_judged() -> None:
    policy = ProbePolicy.model_validate({"throttleReasons": {"enabled": False}})
    result = probe(PROFILES / "faults" / "clocks-locked.yaml", policy).result("gpu_config")
    assert result is not None
    assert result.status is CheckStatus.PASS
    assert "clocks under load not sampled (throttleReasons did not run)" in result.message


def test_ctypes_byref_reaches_the_structure() -> None:
    """The fake above reads ``ref._obj``: what ``ctypes.byref`` really carries."""
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    assert ctypes.byref(info)._obj is info  # type: ignore[attr-defined]
    assert sys.modules["pynvml"] is pynvml
