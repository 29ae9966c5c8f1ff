"""``nvswitch_fabric``: every GPU registered with the NVSwitch fabric, and healthy on it.

Per GPU the probe calls ``nvmlDeviceGetGpuFabricInfoV`` (with the v3
structure, or v2 where the driver knows no v3; the deprecated
``nvmlDeviceGetGpuFabricInfo`` only where the driver has no versioned call).
On an NVSwitch system the state must be ``completed`` and its status success:
until nvidia-fabricmanager (which must match the driver, or it does not start)
has registered the GPU, CUDA fails with "system not yet initialized". The
health mask (v2 and v3) and the health summary (v3) report degraded
bandwidth, unhealthy routes, an incorrect configuration and recoveries in
progress; ``failOn`` and ``warnOn`` decide. A GPU whose state is
``not_supported`` is on no fabric: that passes only for a model the policy
does not expect on one (PCIe and NVL parts).

observed (GPU sets are ranges, so it stays small for 16 failing GPUs)::

    {"gpus": 8, "completed": 7, "notCompleted": {"5": "not_started"},
     "statusErrors": {"3": 999}, "health": {"degraded_bandwidth": "2,6"},
     "structVersion": 3}

(``notCompleted``: GPUs → state; ``statusErrors``: GPUs → the registration's
``nvmlReturn_t``; ``health``: condition → GPUs.) Condensed: ``conditions``
(GPUs → their conditions) instead of ``health``, and no ``structVersion``.
"""

from enum import StrEnum

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims
from gpuaccept.checks.gpu_models import gpu_model_class, per_model_value, without_nvswitch
from gpuaccept.checks.gpu_ranges import group, parse_gpus, ungroup
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    ObservedModel,
    RunbookEntry,
    clip,
    gpu_list,
)
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "NvswitchFabricFailed"
NOT_SUPPORTED = "not_supported"
UNSUPPORTED = "unsupported"  # the fabric call itself answered NotSupported
STATE_TEXT = {
    "not_started": "fabric registration not started (nvidia-fabricmanager not running, or "
    "not matching the driver)",
    "in_progress": "fabric registration still in progress",
    NOT_SUPPORTED: "on no NVSwitch fabric",
    UNSUPPORTED: "no fabric info (NVML NotSupported)",
}


class FabricCondition(StrEnum):
    """Conditions of the fabric health mask and summary (``NVML_GPU_FABRIC_HEALTH_*``)."""

    DEGRADED_BANDWIDTH = "degraded_bandwidth"
    ROUTE_UNHEALTHY = "route_unhealthy"
    INCORRECT_CONFIGURATION = "incorrect_configuration"
    UNHEALTHY = "unhealthy"  # health summary (v3)
    ROUTE_RECOVERY = "route_recovery"
    ACCESS_TIMEOUT_RECOVERY = "access_timeout_recovery"
    LIMITED_CAPACITY = "limited_capacity"  # health summary (v3)


def _default_expected() -> dict[str, float]:
    return {"h100-sxm": 1, "h200-sxm": 1, "b200": 1}


class NvswitchFabricPolicy(CheckSwitch):
    expected_by_model: dict[str, float] = Field(
        default_factory=_default_expected,
        description="Models whose GPUs must be on an NVSwitch fabric (1) or need not be (0): an "
        "exact NVML name or a model class; a model not listed need not be.",
    )
    fail_on: list[FabricCondition] = Field(
        default_factory=lambda: [
            FabricCondition.DEGRADED_BANDWIDTH,
            FabricCondition.ROUTE_UNHEALTHY,
            FabricCondition.INCORRECT_CONFIGURATION,
            FabricCondition.UNHEALTHY,
        ],
        description="Fabric health conditions that fail the node on any GPU.",
    )
    # A registration in progress right after boot completes within seconds; one stuck in
    # progress is what makes CUDA fail with error 802 "system not yet initialized".
    in_progress_wait_seconds: float = Field(
        default=30,
        ge=0,
        le=300,
        description="How long the probe waits, reading again every 2 s, for a GPU whose fabric "
        "registration is in progress (right after boot) before judging it.",
    )
    warn_on: list[FabricCondition] = Field(
        default_factory=lambda: [
            FabricCondition.ROUTE_RECOVERY,
            FabricCondition.ACCESS_TIMEOUT_RECOVERY,
            FabricCondition.LIMITED_CAPACITY,
        ],
        description="Conditions that only warn; one in both lists fails.",
    )


class NvswitchFabricObserved(ObservedModel):
    gpus: int = Field(ge=0)
    completed: int = Field(ge=0)
    not_completed: dict[str, str] | None = None  # GPUs ("0-3,5") -> state
    status_errors: dict[str, int] | None = None  # GPUs -> nvmlReturn of a completed registration
    health: dict[str, str] | None = None  # condition -> GPUs
    struct_version: int | None = Field(default=None, ge=1, le=9)
    failed_gpus: dict[str, str] | None = None
    # condensed: GPUs -> their conditions, instead of ``health`` (a condition on every GPU
    # is then written once per GPU set, not once per condition)
    conditions: dict[str, list[str]] | None = None


def _health(observed: NvswitchFabricObserved) -> dict[str, list[int]]:
    """condition → GPUs, from either form."""
    out = {condition: parse_gpus(gpus) for condition, gpus in (observed.health or {}).items()}
    for gpus, conditions in (observed.conditions or {}).items():
        for condition in conditions:
            out.setdefault(condition, []).extend(parse_gpus(gpus))
    return {condition: sorted(set(gpus)) for condition, gpus in out.items()}


def _by_gpu(findings: dict[str, list[int]]) -> list[str]:
    return [f"{gpu_list(gpus)}: {text}" for text, gpus in findings.items()]


def _condition_findings(observed: NvswitchFabricObserved, conditions: set[str]) -> list[str]:
    return _by_gpu(
        {
            condition.replace("_", " "): gpus
            for condition, gpus in _health(observed).items()
            if condition in conditions
        }
    )


def _state_findings(observed: NvswitchFabricObserved) -> list[str]:
    found: dict[str, list[int]] = {}
    for gpu, state in sorted(ungroup(observed.not_completed or {}).items()):
        found.setdefault(STATE_TEXT.get(state, f"fabric state {state}"), []).append(gpu)
    for gpu, code in sorted(ungroup(observed.status_errors or {}).items()):
        found.setdefault(f"fabric registration failed (NVML error {code})", []).append(gpu)
    return _by_gpu(found)


def _all_state(observed: NvswitchFabricObserved) -> str | None:
    """The state every GPU is in, when none completed and all share one."""
    states = ungroup(observed.not_completed or {})
    distinct = set(states.values())
    if observed.completed == 0 and len(states) == observed.gpus and len(distinct) == 1:
        return distinct.pop()
    return None


def _recorded(observed: NvswitchFabricObserved, why: str, expected: JsonValue) -> CheckJudgement:
    """Where no fabric is expected, whatever NVML reports is recorded, not judged (a board
    without an NVSwitch has no fabric to register with, whatever state the driver shows)."""
    seen = _state_findings(observed) + _condition_findings(
        observed, {str(c) for c in FabricCondition}
    )
    state = f"{observed.completed} GPUs completed" + (f"; {'; '.join(seen)}" if seen else "")
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        clip(f"no NVSwitch fabric expected {why}: fabric state recorded, not judged ({state})"),
    )


def _no_fabric(
    observed: NvswitchFabricObserved,
    fabric_expected: bool,
    model: str,
    expected: JsonValue,
    why_not: str | None = None,
) -> CheckJudgement:
    """Every GPU on no fabric (state not_supported) or without fabric info (NotSupported)."""
    answer = (
        "NVML fabric state not supported"
        if _all_state(observed) == NOT_SUPPORTED
        else "NVML answers the fabric call with NotSupported"
    )
    if not fabric_expected:
        return CheckJudgement(
            CheckStatus.PASS,
            expected,
            f"{observed.gpus} GPUs on no NVSwitch fabric ({answer}); none expected "
            f"{'(' + why_not + ')' if why_not else 'for ' + model}",
        )
    if _all_state(observed) == UNSUPPORTED:
        return CheckJudgement(
            CheckStatus.SKIP, expected, f"{answer}: cannot tell whether {model} is on its fabric"
        )
    return CheckJudgement(
        CheckStatus.FAIL,
        expected,
        f"no GPU is on an NVSwitch fabric ({answer}); {model} is expected on one",
    )


def _fabric_expected(
    policy: NvswitchFabricPolicy, summary: HardwareSummary, why_not: str | None
) -> bool:
    """Whether the GPU model is expected on an NVSwitch fabric: the class says NVSwitch,
    and the node's PCI bus has the last word (a 4-GPU HGX board has none: ``why_not``)."""
    return why_not is None and bool(per_model_value(policy.expected_by_model, summary.gpu_model, 0))


def judge(
    observed: NvswitchFabricObserved, policy: NvswitchFabricPolicy, summary: HardwareSummary
) -> CheckJudgement:
    why_not = without_nvswitch(summary)
    fabric_expected = _fabric_expected(policy, summary, why_not)
    fail_on = {str(c) for c in policy.fail_on}
    warn_on = {str(c) for c in policy.warn_on} - fail_on
    expected: JsonValue = {"fabric": fabric_expected, "state": "completed"}
    model = gpu_model_class(summary.gpu_model) or summary.gpu_model or "this model"
    lost = [f"GPU {g} failed: {what}" for g, what in (observed.failed_gpus or {}).items()]
    if _all_state(observed) in (NOT_SUPPORTED, UNSUPPORTED) and not lost:
        return _no_fabric(observed, fabric_expected, model, expected, why_not)
    if not fabric_expected and not lost:  # recorded, not judged: no fabric to be on
        return _recorded(observed, f"({why_not})" if why_not else f"for {model}", expected)
    failing = lost + _state_findings(observed) + _condition_findings(observed, fail_on)
    warning = _condition_findings(observed, warn_on)
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing + warning)))
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warning)))
    version = f" (v{observed.struct_version})" if observed.struct_version else ""
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        f"{observed.completed} GPUs on the NVSwitch fabric, healthy{version}",
    )


def condense(observed: NvswitchFabricObserved) -> NvswitchFabricObserved:
    """``health`` inverted to ``conditions`` (GPUs → conditions), and no ``structVersion``
    (only named in a passing message)."""
    if observed.health is None:
        return observed.model_copy(update={"struct_version": None})
    by_gpu: dict[int, list[str]] = {}
    for condition, gpus in _health(observed).items():
        for gpu in gpus:
            by_gpu.setdefault(gpu, []).append(condition)
    return observed.model_copy(
        update={"health": None, "struct_version": None, "conditions": group(by_gpu)}
    )


def claims(o: NvswitchFabricObserved, _summary: HardwareSummary) -> Claims:
    """The GPUs are the report's; no more registered than there are GPUs."""
    out = Claims().count("gpus", o.gpus).figure("completed", o.completed, o.gpus)
    try:  # every GPU is registered, not registered or failed: none goes unaccounted
        other = {g for key in [*(o.not_completed or {}), *(o.failed_gpus or {})]
                 for g in parse_gpus(key)}  # fmt: skip
        out.count("completed + notCompleted + failedGpus", o.completed + len(other))
    except ValueError:
        out.unreadable.append("notCompleted")
    out.keys("notCompleted", o.not_completed).keys("statusErrors", o.status_errors)
    out.values("health", o.health).keys("failedGpus", o.failed_gpus)
    return out.keys("conditions", o.conditions)


SPEC = CheckSpec(
    measuring=frozenset({"in_progress_wait_seconds"}),
    judging=frozenset({"expected_by_model", "fail_on", "warn_on"}),
    name="nvswitch_fabric",
    title="NVSwitch fabric",
    summary="on NVSwitch systems every GPU's fabric registration completed with success, no "
    "degraded bandwidth or unhealthy route",
    reason=REASON,
    policy_model=NvswitchFabricPolicy,
    observed_model=NvswitchFabricObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    budget=fixed_phase("fabric state per GPU", 0.1, "one NVML query per GPU"),
    runbook=RunbookEntry(
        meaning=(
            'a GPU\'s fabric registration did not complete ("fabric registration not started": '
            "nvidia-fabricmanager not running or not the driver's version), or the fabric reports"
            " degraded bandwidth or an unhealthy route"
        ),
        fix=(
            "`systemctl status nvidia-fabricmanager`; install the fabric manager of exactly the "
            "driver's version and restart it (or reboot); degraded bandwidth after that: an "
            "NVSwitch or its links, reset the node's GPUs, then RMA the baseboard"
        ),
    ),
)
