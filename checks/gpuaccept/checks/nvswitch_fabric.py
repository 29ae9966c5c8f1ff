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
    FailureOwnership,
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


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | `default-h100-h200.yaml` | meaning |
|-------|---------|------|---------|
| `expectedByModel` | `{h100-sxm: 1, h200-sxm: 1, b200: 1}` | `{h100-sxm: 1, h200-sxm: 1}` | Models whose GPUs must be on an NVSwitch fabric (1) or need not be (0). |
| `failOn` | `[degraded_bandwidth, route_unhealthy, incorrect_configuration, unhealthy]` | same | Health conditions that fail on any GPU. |
| `warnOn` | `[route_recovery, access_timeout_recovery, limited_capacity]` | same | Conditions that only warn. |

The probe calls `nvmlDeviceGetGpuFabricInfoV` with the v3 structure
(`nvmlGpuFabricInfo_v3`, health mask and health summary), falls back to v2
(health mask, R550) when the driver answers `ARGUMENT_VERSION_MISMATCH`, and
to the deprecated `nvmlDeviceGetGpuFabricInfo` (state and status only) only
when the driver has no versioned call (R535)
([NVML fabric definitions](https://docs.nvidia.com/deploy/nvml-api/group__nvmlFabricDefs.html)).

* **State `completed`, status success.** On an NVSwitch system the GPU registers
  with the fabric through nvidia-fabricmanager; until then CUDA fails with
  "system not yet initialized". A fabric manager whose version does not match
  the driver does not start, so this state covers that mismatch too; NVML does
  not expose the fabric manager's version. `not_started` fails naming the GPUs
  ("fabric registration not started (nvidia-fabricmanager not running, or not
  matching the driver)"), as does a completed registration with an error
  status. `in_progress` right after boot (the fabric manager still registering)
  is read again every 2 s for up to `inProgressWaitSeconds` (30) before it is
  judged; still in progress then fails: a registration stuck there is what makes
  CUDA fail with error 802 "system not yet initialized" (a Lambda H100 report of
  a state permanently "In Progress"). Trap:
  `h100-sxm-8gpu-fabric-registering.yaml`. The state is the low byte of
  pynvml's `c_uint` field: nvml.h declares `nvmlGpuFabricState_t` an
  `unsigned char`.
* **Health.** `degraded_bandwidth` (`NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE`),
  an unhealthy route and an incorrect configuration (wrong system GUID, chassis,
  partition, too few NVLinks, incompatible firmware) fail; recoveries in
  progress and the v3 summary `limited_capacity` warn. A healthy fabric reports
  `DEGRADED_BW_FALSE` or, on drivers that do not track it, `NOT_SUPPORTED`;
  neither is flagged. The trap `h100-sxm-8gpu-config-tuned.yaml` has a v2-only
  driver and passes; the fault `fabric-degraded-bandwidth.yaml` fails while its
  busbw (401 GB/s) still passes `ncclAllreduce`.
* **No fabric.** PCIe and NVL GPUs are on no fabric: NVML reports the state
  `not_supported`, or answers the call with NotSupported. That passes only for a
  model the policy does not expect on one (the trap
  `h100-nvl-8gpu-bridged-links.yaml`); for an expected model the state fails and
  a NotSupported call is `skip` ("cannot tell").
* **No fabric expected: recorded, not judged.** Where no fabric is expected (a
  model not listed, or no NVSwitch on the PCI bus, below), whatever NVML reports
  (`not_started`, `in_progress`, a status error, a health condition) is named in
  the message and passes: a board without an NVSwitch has nothing to register
  with. Before, any state but `not_supported` failed there. A GPU NVML lost
  still fails (`tests/checks/test_nvswitch_fabric.py`).

#### What the board has

An HGX H100 4-GPU board (GPUs linked directly, 6 of each GPU's 18 NVLinks to
each peer, no NVSwitch) and a VM given one GPU of an 8-GPU board report the
same NVML name as the 8-GPU HGX board (`NVIDIA H100 80GB HBM3`). So the
expectations of the NVSwitch classes (`h100-sxm`, `h200-sxm`, `b200`) are taken
from what the node has, which the probe reads into the report's summary as
`nvswitchDevices`: the NVIDIA PCI devices of class 0x068000 on the host's bus
(sysfs; NCCL tells an NVSwitch from a GPU the same way, `src/include/nvlink.h`,
`ncclDeviceType`). An 8-GPU Hopper baseboard has 4. A bus that cannot be
listed (no `/sys/bus/pci/devices`: a pod without the host's `/sys`, a capture's
replay) is not a bus without NVSwitches: `nvswitchDevices` is left out and the
class decides, as for a report that did not count them. Counting it as 0 made
every replayed HGX H100/H200 capture a 4-GPU board whose fabric was recorded,
never judged (the captures corpus, docs/probe.md).

* No NVSwitch on the bus: `nvswitchFabric` expects no fabric ("no NVSwitch on
  the PCI bus"), and `peerBandwidth.minGBpsByModel`'s class figure (a pair
  through the NVSwitches, ~380 GB/s) does not apply; a direct pair of 6 NVLink 4
  links carries at most 150 GB/s a direction, and the sibling rule
  (`maxBelowMedianPercent`) still catches a weak pair.
* Fewer than 8 GPUs, or no NVSwitch: `ncclAllreduce.minBusbwGBpsByModel`'s
  class figure (measured on full 8-GPU boards) does not apply; the global
  `minBusbwGBps` does, if set.
* One GPU: `peerBandwidth` and `ncclAllreduce` have nothing to measure and pass
  "not applicable" (a node shape, not a skip).
* One GPU and no NVSwitch on the bus (a VM or partition given one GPU of the
  board): `nvlink.activeLinksByModel` does not apply; the links are recorded,
  not judged ("one GPU without an NVSwitch, no peer"). Fabric Manager trains no
  NVLink for a one-GPU partition (the default partition tables of the
  [Fabric Manager user guide](https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html),
  shared NVSwitch model: 0 NVLink interconnects per GPU for one-GPU
  partitions), so NVML reports its 18 links inactive; before, that failed
  every such node. Not checked on such a VM here. Several GPUs without an
  NVSwitch (the 4-GPU board: 6 links to each of 3 peers) are still held to 18.
  MIG is not treated apart: no NVIDIA source read here says a MIG-enabled GPU's
  links go inactive (MIG disables GPU-to-GPU peer traffic, not link training).
* A report without `nvswitchDevices` (older probes) is judged by the class, as
  before.

Traps: `h100-sxm-4gpu-hgx-no-nvswitch.yaml`, `h100-sxm-1gpu-hgx-slice.yaml`.
"""  # noqa: E501


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
expectedByModel: {h100-sxm: 1, h200-sxm: 1}   # HGX boards: NVSwitch + fabric manager
failOn: [degraded_bandwidth, route_unhealthy, incorrect_configuration, unhealthy]
warnOn: [route_recovery, access_timeout_recovery, limited_capacity]
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why="the NVSwitches and the fabric state are the baseboard's",
        source="Fabric Manager user guide",
    ),
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
    shipped=SHIPPED,
    docs=DOCS,
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
