"""``gpu_config``: power limit, persistence, MIG and compute mode, and no clocks held low.

Per GPU the probe reads the enforced power limit
(``nvmlDeviceGetEnforcedPowerLimit``) and the default one
(``nvmlDeviceGetPowerManagementDefaultLimit``), persistence mode
(``nvmlDeviceGetPersistenceMode``), the current and pending MIG mode
(``nvmlDeviceGetMigMode``) and the compute mode (``nvmlDeviceGetComputeMode``).
An item NVML answers with NotSupported is listed in ``unsupported`` and not
judged on that GPU.

Clocks held low by configuration (application clocks, locked clocks: NVML
reports both as the ``applications_clocks_setting`` clock event reason, and
has no getter for locked clocks) are judged from the samples the
``throttle_reasons`` check takes under load, not from a second load: the
fraction of samples with that reason, and the median SM clock against
``nvmlDeviceGetMaxClockInfo``. A GPU on which a power or thermal reason was
sustained is left out of the SM clock rule (its clock is low for that reason,
judged by ``throttle_reasons``). Without those samples (``throttleReasons``
disabled or skipped) the clock rule is not judged.

observed::

    {"gpus": 8, "powerLimitW": {"0-7": 700}, "defaultPowerLimitW": {"0-7": 700},
     "persistenceOff": "3", "migEnabled": "0-1", "migPending": {"2": "enabled"},
     "computeModes": {"4": "exclusive_process"}, "unsupported": {"mig": "0-7"},
     "loadSamples": 120, "appClocksFraction": {"6": 1.0},
     "smClockFraction": {"0-4,6-7": 0.83, "5": 0.61}, "limited": "5"}

(GPU sets are ranges, ``"0-3,5"``; maps keyed by GPUs group the GPUs that share
a value.) Condensed: ``belowDefault`` (GPUs → [enforced, default] W: the GPUs
furthest below their default) instead of the two power maps, and
``minSmClockFraction`` / ``minSmClockGpu`` (over the GPUs not ``limited``)
instead of ``smClockFraction``.
"""

from enum import StrEnum

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import MARGIN, POWER_LIMIT_MAX_W, Claims
from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus, ungroup
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

REASON = "GpuConfigFailed"


class MigRequirement(StrEnum):
    DISABLED = "disabled"
    ENABLED = "enabled"
    ANY = "any"


class ComputeModeRequirement(StrEnum):
    """``NVML_COMPUTEMODE_*`` names (EXCLUSIVE_THREAD is no longer supported by NVML)."""

    DEFAULT = "default"
    EXCLUSIVE_PROCESS = "exclusive_process"
    PROHIBITED = "prohibited"
    ANY = "any"


class GpuConfigPolicy(CheckSwitch):
    power_limit_tolerance: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="How far (a fraction of the default limit) the enforced power limit may be "
        "below the default one.",
    )
    require_persistence: bool = Field(
        default=True, description="Persistence mode must be on for every GPU."
    )
    mig_mode: MigRequirement = Field(
        default=MigRequirement.DISABLED,
        description="MIG mode every GPU must be in, now and after its next reset (pending).",
    )
    compute_mode: ComputeModeRequirement = Field(
        default=ComputeModeRequirement.DEFAULT, description="Compute mode every GPU must be in."
    )
    max_app_clocks_fraction: float = Field(
        default=0.1,
        ge=0,
        lt=1,
        description="Under load, the applications_clocks_setting reason (application or locked "
        "clocks) may be active in at most this fraction of a GPU's samples.",
    )
    min_sm_clock_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Under load, each GPU's median SM clock must reach this fraction of its "
        "maximum (GPUs held by a power or thermal reason excepted).",
    )


class GpuConfigObserved(ObservedModel):
    gpus: int = Field(ge=0)
    # GPUs -> whole watts (detail: dropped when condensed)
    power_limit_w: dict[str, int] | None = Field(default=None, alias="powerLimitW")
    default_power_limit_w: dict[str, int] | None = Field(default=None, alias="defaultPowerLimitW")
    persistence_off: str | None = None  # GPUs
    mig_enabled: str | None = None  # GPUs
    mig_pending: dict[str, str] | None = None  # GPUs -> pending mode where it differs
    compute_modes: dict[str, str] | None = None  # GPUs -> mode, where not "default"
    unsupported: dict[str, str] | None = None  # item -> GPUs
    # under load, from the throttle_reasons samples (absent: not sampled)
    load_samples: int | None = Field(default=None, ge=0)
    app_clocks_fraction: dict[str, float] | None = None  # GPUs -> fraction, non-zero only
    sm_clock_fraction: dict[str, float] | None = None  # GPUs -> median SM clock / max
    limited: str | None = None  # GPUs
    failed_gpus: dict[str, str] | None = None
    # Read when persistence reads Off: nvidia-persistenced's socket reachable from the probe
    # (False: NVML in a container reads Off although the daemon holds persistence on).
    persistenced_socket: bool | None = None
    # condensed
    below_default: dict[str, list[int]] | None = None  # GPUs -> [enforced, default] W
    min_sm_clock_fraction: float | None = None
    min_sm_clock_gpu: int | None = None


def _below_default(o: GpuConfigObserved) -> dict[int, tuple[int, int]]:
    if o.power_limit_w is not None and o.default_power_limit_w is not None:
        enforced, default = ungroup(o.power_limit_w), ungroup(o.default_power_limit_w)
        return {
            g: (enforced[g], default[g])
            for g in sorted(enforced)
            if default.get(g, 0) > 0 and enforced[g] < default[g]
        }
    return {g: (v[0], v[1]) for g, v in ungroup(o.below_default or {}).items() if len(v) == 2}


def _power_findings(o: GpuConfigObserved, tolerance: float) -> list[str]:
    low = {
        gpu: (enforced, default)
        for gpu, (enforced, default) in _below_default(o).items()
        if enforced < default * (1 - tolerance)
    }
    if not low:
        return []
    worst = min(low, key=lambda g: low[g][0] / low[g][1])
    enforced, default = low[worst]
    return [
        f"power limit {enforced:g} W < default {default:g} W - {tolerance:.0%} on "
        f"{gpu_list(sorted(low))}"
    ]


def _mode_findings(o: GpuConfigObserved, p: GpuConfigPolicy) -> list[str]:
    out = []
    if p.require_persistence and o.persistence_off and o.persistenced_socket is not False:
        out.append(f"persistence mode off on {gpu_list(parse_gpus(o.persistence_off))}")
    unsupported = {item: set(parse_gpus(gpus)) for item, gpus in (o.unsupported or {}).items()}
    out += _mig_findings(o, p, unsupported.get("mig", set()))
    if p.compute_mode is not ComputeModeRequirement.ANY:
        out += _compute_mode_findings(o, p, unsupported.get("computeMode", set()))
    return out


def _mig_findings(o: GpuConfigObserved, p: GpuConfigPolicy, unknown: set[int]) -> list[str]:
    """MIG on where the policy wants it off (or off where it wants it on, the GPUs whose
    mode NVML does not answer left out), and a change pending against it."""
    out = []
    enabled = set(parse_gpus(o.mig_enabled or "")) if o.mig_enabled else set()
    if p.mig_mode is MigRequirement.DISABLED and enabled:
        out.append(f"MIG enabled on {gpu_list(sorted(enabled))}")
    if p.mig_mode is MigRequirement.ENABLED:
        disabled = [g for g in range(o.gpus) if g not in enabled and g not in unknown]
        if disabled:
            out.append(f"MIG disabled on {gpu_list(disabled)}")
    return out + _mig_pending(o, p)


def _mig_pending(o: GpuConfigObserved, p: GpuConfigPolicy) -> list[str]:
    """A MIG change pending (at the next reset) against the policy's mode."""
    if p.mig_mode is MigRequirement.ANY:
        return []
    pending = [g for g, mode in ungroup(o.mig_pending or {}).items() if mode != p.mig_mode]
    if not pending:
        return []
    return [
        f"MIG {'enable' if p.mig_mode is MigRequirement.DISABLED else 'disable'} "
        f"pending (at next reset) on {gpu_list(sorted(pending))}"
    ]


def _compute_mode_findings(
    o: GpuConfigObserved, p: GpuConfigPolicy, unknown: set[int]
) -> list[str]:
    """The GPUs in another compute mode than the policy's, by mode (the GPUs whose mode
    NVML does not answer left out)."""
    modes = ungroup(o.compute_modes or {})
    wrong: dict[str, list[int]] = {}
    for gpu in range(o.gpus):
        mode = modes.get(gpu, "default")
        if gpu not in unknown and mode != p.compute_mode:
            wrong.setdefault(mode, []).append(gpu)
    return [f"compute mode {mode} on {gpu_list(gpus)}" for mode, gpus in wrong.items()]


APP_CLOCKS_AT_MAX_FRACTION = 0.95  # a median SM clock this near the max is not held low


def _at_max_clock(o: GpuConfigObserved) -> set[int]:
    """GPUs whose median SM clock under load was at (within 5 % of) their maximum."""
    if o.sm_clock_fraction is not None:
        return {
            g for g, f in ungroup(o.sm_clock_fraction).items() if f >= APP_CLOCKS_AT_MAX_FRACTION
        }
    if (
        o.min_sm_clock_fraction is not None
        and o.min_sm_clock_fraction >= APP_CLOCKS_AT_MAX_FRACTION
    ):
        return set(range(o.gpus))  # condensed: the lowest GPU was at max, so all were
    return set()


def _clock_findings(o: GpuConfigObserved, p: GpuConfigPolicy) -> list[str]:
    if o.load_samples is None:
        return []
    out = []
    # The rule catches clocks held *low* by configuration: application clocks set at the
    # maximum (a common tuning: `nvidia-smi -ac <mem>,<max>`) hold nothing low.
    at_max = _at_max_clock(o)
    held = sorted(
        g
        for g, f in ungroup(o.app_clocks_fraction or {}).items()
        if f > p.max_app_clocks_fraction and g not in at_max
    )
    if held:
        out.append(
            f"applications_clocks_setting under load (clocks set or locked) on {gpu_list(held)}"
        )
    low = _low_sm_clocks(o, p)
    if low:
        worst = min(f for _, f in low)
        out.append(
            f"SM clock under load {worst:.0%} of max < {p.min_sm_clock_fraction:.0%} on "
            f"{gpu_list([g for g, _ in low])}"
        )
    return out


def _low_sm_clocks(o: GpuConfigObserved, p: GpuConfigPolicy) -> list[tuple[int, float]]:
    """(GPU, SM clock / max) under load below the policy's fraction, the GPUs a power or
    thermal reason held left out (their clock is low for that reason); condensed, only
    the lowest GPU is known."""
    limited = set(parse_gpus(o.limited)) if o.limited else set()
    if o.sm_clock_fraction is not None:
        return [
            (g, f)
            for g, f in sorted(ungroup(o.sm_clock_fraction).items())
            if g not in limited and f < p.min_sm_clock_fraction
        ]
    if o.min_sm_clock_fraction is not None and o.min_sm_clock_gpu is not None:
        low = [(o.min_sm_clock_gpu, o.min_sm_clock_fraction)]
        return [(g, f) for g, f in low if f < p.min_sm_clock_fraction]
    return []


def _persistence_unknowable(o: GpuConfigObserved, p: GpuConfigPolicy) -> str | None:
    """Persistence read as Off where NVML could not ask nvidia-persistenced: inside a
    container without the daemon's socket NVML reports Off even when the host holds
    persistence on (NVIDIA/dgx-selinux pull request 3; docs/policy.md), so it is not
    evidence of persistence off. A warning with the reason, never a failure."""
    if not (p.require_persistence and o.persistence_off and o.persistenced_socket is False):
        return None
    return (
        f"persistence mode reads Off on {gpu_list(parse_gpus(o.persistence_off))}, and "
        "nvidia-persistenced's socket is not reachable from the probe pod: NVML cannot tell "
        "the host's mode there (check `nvidia-smi -q | grep Persistence` on the host)"
    )


def judge(
    observed: GpuConfigObserved, policy: GpuConfigPolicy, summary: HardwareSummary
) -> CheckJudgement:
    expected: JsonValue = {
        "powerTolerance": policy.power_limit_tolerance,
        "persistence": policy.require_persistence,
        "mig": str(policy.mig_mode),
        "computeMode": str(policy.compute_mode),
        "appClocksMax": policy.max_app_clocks_fraction,
        "smClockMin": policy.min_sm_clock_fraction,
    }
    lost = [f"GPU {g} failed: {what}" for g, what in (observed.failed_gpus or {}).items()]
    failing = (
        lost
        + _power_findings(observed, policy.power_limit_tolerance)
        + _mode_findings(observed, policy)
        + _clock_findings(observed, policy)
    )
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing)))
    warning = _persistence_unknowable(observed, policy)
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip(warning))
    notes = [
        f"{item} not supported on {gpu_list(parse_gpus(gpus))}"
        for item, gpus in (observed.unsupported or {}).items()
    ]
    if observed.load_samples is None:
        notes.append("clocks under load not sampled (throttleReasons did not run)")
    note = f" ({'; '.join(notes)}: not judged)" if notes else ""
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        clip(f"{observed.gpus} GPUs configured as the policy says{note}"),
    )


def _worst_below_default(observed: GpuConfigObserved) -> dict[str, list[int]] | None:
    """The GPUs furthest below their default limit (all sharing that pair), for the
    condensed form: whether any GPU is out of tolerance depends on the worst only."""
    below = _below_default(observed)
    if not below:
        return None
    worst = min(below.values(), key=lambda v: v[0] / v[1])
    return {format_gpus(g for g, v in below.items() if v == worst): list(worst)}


def condense(observed: GpuConfigObserved) -> GpuConfigObserved:
    update: dict[str, object] = {}
    if observed.power_limit_w is not None:
        update.update(
            power_limit_w=None,
            default_power_limit_w=None,
            below_default=_worst_below_default(observed),
        )
    if observed.sm_clock_fraction is not None:
        limited = set(parse_gpus(observed.limited)) if observed.limited else set()
        judged = [
            (f, g) for g, f in ungroup(observed.sm_clock_fraction).items() if g not in limited
        ]
        update["sm_clock_fraction"] = None
        if judged:
            fraction, gpu = min(judged)
            update.update(min_sm_clock_fraction=fraction, min_sm_clock_gpu=gpu)
    return observed.model_copy(update=update)


def claims(o: GpuConfigObserved, _summary: HardwareSummary) -> Claims:
    """The GPUs are the report's; power limits and clock fractions physical."""
    out = Claims().count("gpus", o.gpus)
    for name, by_gpus in (
        ("powerLimitW", o.power_limit_w),
        ("defaultPowerLimitW", o.default_power_limit_w),
    ):
        out.keys(name, by_gpus).each(name, (by_gpus or {}).values(), POWER_LIMIT_MAX_W)
    out.ranges("persistenceOff", o.persistence_off).ranges("migEnabled", o.mig_enabled)
    out.keys("migPending", o.mig_pending).keys("computeModes", o.compute_modes)
    out.values("unsupported", o.unsupported).ranges("limited", o.limited)
    out.keys("appClocksFraction", o.app_clocks_fraction)
    out.each("appClocksFraction", (o.app_clocks_fraction or {}).values(), 1.0)
    out.keys("smClockFraction", o.sm_clock_fraction)
    out.each("smClockFraction", (o.sm_clock_fraction or {}).values(), MARGIN)
    out.keys("failedGpus", o.failed_gpus).keys("belowDefault", o.below_default)
    for watts in (o.below_default or {}).values():
        out.each("belowDefault", watts, POWER_LIMIT_MAX_W)
    out.figure("minSmClockFraction", o.min_sm_clock_fraction, MARGIN)
    return out.gpu("minSmClockGpu", o.min_sm_clock_gpu)


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | `default-h100-h200.yaml` | meaning |
|-------|---------|------|---------|
| `powerLimitTolerance` | 0.05 | 0.05 | The enforced power limit may be at most this fraction below the default one. |
| `requirePersistence` | `true` | `true` | Persistence mode on for every GPU. |
| `migMode` | `disabled` | `disabled` | `disabled`, `enabled` or `any`: the current MIG mode, and the pending one (after the next GPU reset). |
| `computeMode` | `default` | `default` | `default`, `exclusive_process`, `prohibited` or `any`. |
| `maxAppClocksFraction` | 0.1 | 0.1 | Under load, `applications_clocks_setting` may be active in at most this fraction of a GPU's samples. |
| `minSmClockFraction` | 0.5 | 0.5 | Under load, each GPU's median SM clock must reach this fraction of its maximum (GPUs held by a power or thermal reason excepted). |

* **Power limit.** `nvmlDeviceGetEnforcedPowerLimit` against
  `nvmlDeviceGetPowerManagementDefaultLimit` (both in mW). On a healthy HGX
  H100/H200 both are 700 W; an administrator's `nvidia-smi -pl 500` survives in
  the enforced limit and makes the GPU run within spec but slower (the
  issue's example, the fault `power-limit-capped.yaml`, which `throttle_reasons`
  only warns about as SW power cap). 5 % tolerates a small deliberate trim
  (the trap `h100-sxm-8gpu-config-tuned.yaml`: 690 W, and one GPU at 720 W);
  a limit above the default is never flagged.
* **Persistence mode** keeps the driver initialised between jobs; without it
  every CUDA context start re-initialises the GPUs (seconds) and settings made
  by the administrator can be lost. NVIDIA recommends nvidia-persistenced on
  data-center nodes ([Driver persistence](https://docs.nvidia.com/deploy/driver-persistence/index.html)).
  With nvidia-persistenced running, NVML asks the daemon over
  `/var/run/nvidia-persistenced/socket`; a container that cannot reach it reads
  persistence mode **Off although it is on** (NVIDIA/dgx-selinux pull request 3;
  apptainer/singularity issue 3565; NVIDIA/nvidia-container-toolkit issue 136).
  So the probe also records whether that socket is reachable from its pod
  (`persistencedSocket`): Off with the socket reachable fails; Off without it
  only warns, with that reason (the trap
  `profiles/h100-sxm-8gpu-persistenced-unreachable.yaml`); check the host's
  `nvidia-smi -q` then.
* **MIG** enabled splits a GPU into instances; a node meant for whole-GPU jobs
  then advertises something else or nothing. A pending change (applied at the
  next GPU reset) is judged too.
* **Compute mode** other than default refuses more than one process per GPU
  (`exclusive_process`) or every process (`prohibited`): NCCL and most job
  launchers fail.
* **Application clocks at the maximum hold nothing low.** A GPU whose median SM
  clock under load is within 5 % of `nvmlDeviceGetMaxClockInfo` is not failed
  for `applications_clocks_setting` (administrators set `nvidia-smi -ac
  <mem>,<max>` as a tuning; the rule exists for clocks held *low*). Trap:
  `h100-sxm-8gpu-app-clocks-at-max.yaml`; the fault `clocks-locked.yaml`
  (990 of 1,980 MHz) still fails.
* **Clocks held low by configuration.** Application clocks (`nvidia-smi -ac`)
  and locked clocks (`nvidia-smi -lgc`) both show as the
  `applications_clocks_setting` clock event reason
  (`nvmlClocksThrottleReasonUserDefinedClocks` is an alias of it); the
  application-clock getters are deprecated in the installed binding and locked
  clocks have no getter. The check reads the `throttle_reasons` samples (no
  second load): the reason's fraction per GPU, and the median SM clock against
  `nvmlDeviceGetMaxClockInfo`. 0.5 sits well below what a healthy H100 SXM5
  reaches under a power-capped matmul (its base clock, 1,590 MHz, is 80 % of
  the 1,980 MHz maximum) and at the cut HW slowdown makes ("a factor of 2 or
  more", which `throttle_reasons` fails on its own), so a GPU on which a power
  or thermal reason was sustained is left out (`limited`). The trap
  `h100-sxm-8gpu-config-tuned.yaml` runs at 1,650 MHz with SW power cap 35 % of
  the time and passes; the fault `clocks-locked.yaml` fails. With
  `throttleReasons` disabled or skipped the clocks are not judged (the message
  says so).
* NotSupported for any item on a GPU lists it in `unsupported` and that item is
  not judged there.
"""  # noqa: E501


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
powerLimitTolerance: 0.05     # enforced >= 95 % of nvmlDeviceGetPowerManagementDefaultLimit
requirePersistence: true
migMode: disabled
computeMode: default
maxAppClocksFraction: 0.1     # applications_clocks_setting (app/locked clocks) under load
# median SM clock under load >= 50 % of max (HW slowdown halves it)
minSmClockFraction: 0.5
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            "not tied to GPUs yet: persistence, power limits and locked clocks are mostly set"
            " host-wide (nvidia-persistenced, `nvidia-smi -pl` without `-i`); a per-GPU clock"
            " or power cap is a candidate"
        ),
        source="NVML `nvmlDeviceGetPowerManagementLimit` (per device), nvidia-smi manual",
    ),
    measuring=frozenset(),
    judging=frozenset(
        {
            "power_limit_tolerance",
            "require_persistence",
            "mig_mode",
            "compute_mode",
            "max_app_clocks_fraction",
            "min_sm_clock_fraction",
        }
    ),
    name="gpu_config",
    title="GPU configuration",
    summary="enforced power limit not below the default (5 % tolerance), persistence on, MIG "
    "disabled, compute mode default, no clocks held low under load",
    reason=REASON,
    policy_model=GpuConfigPolicy,
    observed_model=GpuConfigObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    # throttle_reasons' clocks under load: judged without a second load
    needs=frozenset({"under_load"}),
    budget=fixed_phase("power, persistence, MIG, compute mode", 0.1, "NVML queries"),
    runbook=RunbookEntry(
        meaning=(
            "power limit below the default, persistence off, MIG or compute mode not as the "
            "policy says, or clocks held low by configuration under load"
        ),
        fix=(
            "undo the setting: `nvidia-smi -pl <default W>`, `nvidia-persistenced` (or `-pm 1`), "
            "`nvidia-smi -mig 0` then a GPU reset, `nvidia-smi -c DEFAULT`, `nvidia-smi -rac` / "
            "`-rgc` (application and locked clocks); find what sets it at boot (a tuning script, "
            "a DaemonSet)"
        ),
    ),
)
