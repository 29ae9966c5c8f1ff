"""``throttle_reasons``: sustained NVML clock event reasons while every GPU is busy.

The probe keeps every GPU busy (a bf16 matmul loop) and samples each GPU's
``nvmlDeviceGetCurrentClocksEventReasons`` bitmask every 0.25 s: first for
``throttleReasons.warmupSeconds`` (not judged: NVML documents that HW slowdown
"may be also reported during PState or clock change"), then for
``throttleReasons.sampleSeconds``. A reason counts on a GPU when it is active
in more than ``maxActiveFraction`` of that GPU's judged samples: a sustained
condition, not one sample. HW slowdown, HW thermal slowdown and HW power brake
fail by default; SW thermal slowdown warns, SW power cap (a GPU at its power
limit, as a healthy one under a dense matmul is) is recorded, not judged
(``failOn`` and ``warnOn`` decide). GPU idle, application clocks and display clock settings are
never recorded. The SM clock reached under load is recorded per GPU against
its maximum (not judged). A GPU that NVML lost while sampling
(``GPU_IS_LOST``) fails the check by name; the others are still sampled.

observed::

    {"samples": 60, "warmupSamples": 12,
     "activeFraction": {"sw_power_cap": [0.35, 0.2, 0, 0, 0, 0, 0, 0]},
     "smClockMHz": [1755, 1980, ...], "smClockMaxMHz": [1980, 1980, ...]}

(``activeFraction``: reason → per GPU, index order, the fraction of the judged
samples in which it was active; only reasons seen at least once). Condensed:
``worst``: reason → [the largest fraction, the GPU it was on], and
``minSmClockMHz`` / ``minSmClockGpu`` instead of the columns, without
``warmupSamples`` (never judged). Older probes' condensed reports carry
``maxActiveFraction`` and ``worstGpu`` instead of ``worst``, and
``smClockMaxMHzTop`` (the highest max SM clock): judged the same. Reports of
earlier probes carry ``reasons`` (reason → GPUs that showed it once); they are
judged as before (any sample counts).
"""

from enum import StrEnum

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import SM_CLOCK_MAX_MHZ, Claims
from gpuaccept.checks.phase_estimate import LOAD_RAMP_S, PhaseEstimate
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

REASON = "ThrottleReasonsFailed"


class ThrottleReason(StrEnum):
    """NVML clock event reasons that matter (idle, application and display
    clock settings are never judged)."""

    HW_SLOWDOWN = "hw_slowdown"
    HW_THERMAL_SLOWDOWN = "hw_thermal_slowdown"
    HW_POWER_BRAKE = "hw_power_brake"
    SW_POWER_CAP = "sw_power_cap"
    SW_THERMAL_SLOWDOWN = "sw_thermal_slowdown"
    SYNC_BOOST = "sync_boost"


class ThrottleReasonsPolicy(CheckSwitch):
    fail_on: list[ThrottleReason] = Field(
        default_factory=lambda: [
            ThrottleReason.HW_SLOWDOWN,
            ThrottleReason.HW_THERMAL_SLOWDOWN,
            ThrottleReason.HW_POWER_BRAKE,
        ],
        description="Clock event reasons that fail the node when sustained on any GPU under load.",
    )
    warn_on: list[ThrottleReason] = Field(
        default_factory=lambda: [ThrottleReason.SW_THERMAL_SLOWDOWN],
        description="Reasons that only warn; a reason in both lists fails. SW power cap is "
        "not in it: a healthy GPU under a dense matmul runs at its power limit.",
    )
    warmup_seconds: float = Field(
        default=3.0,
        ge=0,
        le=600,
        description="Load before sampling counts (clock and P-state changes report HW slowdown).",
    )
    sample_seconds: float = Field(
        default=15.0,
        gt=0,
        le=1800,
        description="The judged window: how long the reasons are sampled after the warm-up.",
    )
    max_active_fraction: float = Field(
        default=0.1,
        ge=0,
        lt=1,
        description="A reason counts on a GPU when active in more than this fraction of its "
        "judged samples.",
    )


class ThrottleReasonsObserved(ObservedModel):
    samples: int = Field(ge=0)  # judged samples per GPU (after the warm-up)
    warmup_samples: int | None = Field(default=None, ge=0)
    # reason -> per GPU (index order) the fraction of judged samples it was active in
    active_fraction: dict[str, list[float]] | None = None
    sm_clock_mhz: list[int] | None = Field(default=None, alias="smClockMHz")
    sm_clock_max_mhz: list[int] | None = Field(default=None, alias="smClockMaxMHz")
    # GPUs NVML lost (or that hung) while sampling: index -> what happened
    failed_gpus: dict[str, str] | None = None
    # GPU -> judged samples NVML did not answer (a transient error); fractions are over the
    # samples read
    missed_samples: dict[str, int] | None = None
    # condensed
    max_active_fraction: dict[str, float] | None = None
    worst_gpu: dict[str, int] | None = None
    worst: dict[str, tuple[float, int]] | None = None  # reason -> [largest fraction, its GPU]
    min_sm_clock_mhz: int | None = Field(default=None, alias="minSmClockMHz")
    min_sm_clock_gpu: int | None = None
    sm_clock_max_mhz_top: int | None = Field(default=None, alias="smClockMaxMHzTop")
    # reports of earlier probes: reason -> the GPUs that showed it in any sample
    reasons: dict[str, list[int] | int] | None = None


def _sustained(observed: ThrottleReasonsObserved, limit: float) -> dict[str, str]:
    """reason → where it was sustained (above ``limit``), from whichever form is present."""
    if observed.active_fraction is not None:
        out = _sustained_per_gpu(observed.active_fraction, limit)
    elif observed.worst is not None:
        out = {
            reason: f"{reason} {worst:.0%} of samples on GPU {gpu}"
            for reason, (worst, gpu) in observed.worst.items()
            if worst > limit
        }
    elif observed.max_active_fraction is not None:
        out = _sustained_at_most(observed.max_active_fraction, observed.worst_gpu or {}, limit)
    else:
        out = {}
    for reason, gpus in (observed.reasons or {}).items():
        where = gpu_list(gpus) if isinstance(gpus, list) else f"{gpus} GPUs"
        out.setdefault(reason, f"{reason} on {where}")
    return out


def _sustained_per_gpu(active_fraction: dict[str, list[float]], limit: float) -> dict[str, str]:
    """The full form: each reason above ``limit`` on the GPUs it was, and its worst."""
    out: dict[str, str] = {}
    for reason, fractions in active_fraction.items():
        over = [i for i, f in enumerate(fractions) if f > limit]
        if over:
            out[reason] = f"{reason} {max(fractions):.0%} of samples on {gpu_list(over)}"
    return out


def _sustained_at_most(
    max_active_fraction: dict[str, float], worst_gpu: dict[str, int], limit: float
) -> dict[str, str]:
    """An earlier condensed form: each reason's largest fraction, and its GPU if known."""
    out: dict[str, str] = {}
    for reason, worst in max_active_fraction.items():
        if worst > limit:
            where = f"GPU {worst_gpu[reason]}" if reason in worst_gpu else "a GPU"
            out[reason] = f"{reason} {worst:.0%} of samples on {where}"
    return out


def judge(
    observed: ThrottleReasonsObserved, policy: ThrottleReasonsPolicy, summary: HardwareSummary
) -> CheckJudgement:
    fail_on = [str(r) for r in policy.fail_on]
    warn_on = [str(r) for r in policy.warn_on if r not in policy.fail_on]
    limit = policy.max_active_fraction
    expected: JsonValue = {
        "failOn": list(fail_on),
        "warnOn": list(warn_on),
        "maxActiveFraction": limit,
    }
    sustained = _sustained(observed, limit)
    lost = [f"GPU {g} failed: {what}" for g, what in (observed.failed_gpus or {}).items()]
    failing = lost + [text for r, text in sustained.items() if r in fail_on]
    warning = [text for r, text in sustained.items() if r in warn_on]
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing + warning)))
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warning)))
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        clip(_pass_message(observed, sustained, fail_on + warn_on, limit)),
    )


def _pass_message(
    observed: ThrottleReasonsObserved, sustained: dict[str, str], judged: list[str], limit: float
) -> str:
    """No judged reason sustained; the reasons that were, but are not judged, named."""
    other = [r for r in sustained if r not in judged]
    note = f" (not judged: {', '.join(other)})" if other else ""
    return (
        f"no judged clock event reason sustained (> {limit:.0%}) under load "
        f"in {observed.samples} samples{note}"
    )


def condense(observed: ThrottleReasonsObserved) -> ThrottleReasonsObserved:
    update: dict[str, object] = {"warmup_samples": None}  # never judged
    if observed.active_fraction is not None:
        update["active_fraction"] = None
        update["worst"] = {
            r: (max(f), f.index(max(f))) for r, f in observed.active_fraction.items()
        }
    clocks = observed.sm_clock_mhz
    if clocks:
        update.update(
            sm_clock_mhz=None,
            sm_clock_max_mhz=None,
            min_sm_clock_mhz=min(clocks),
            min_sm_clock_gpu=clocks.index(min(clocks)),
        )
    if observed.reasons is not None:
        update["reasons"] = {
            r: (len(g) if isinstance(g, list) else g) for r, g in observed.reasons.items()
        }
    return observed.model_copy(update=update)


# What the time budget assumes of the probe's sampling (a test ties each to the probe's).
THROTTLE_SAMPLE_INTERVAL_S = 0.25  # measure/throttle_reasons.py
NVML_SAMPLE_S = 0.0005  # one NVML query (reasons, or SM clock): an estimate
LOAD_STOP_S = 0.5  # to stop the load and free its memory: an estimate


def budget(section: ThrottleReasonsPolicy, gpus: int) -> PhaseEstimate:
    """The load: its ramp, the warm-up and the judged window."""
    # each judged sample queries every GPU twice (reasons, SM clock), then sleeps
    per_sample = THROTTLE_SAMPLE_INTERVAL_S + 2 * gpus * NVML_SAMPLE_S
    window = section.sample_seconds * per_sample / THROTTLE_SAMPLE_INTERVAL_S
    return PhaseEstimate(
        "load: bf16 matmul on every GPU, clock event reasons sampled",
        LOAD_RAMP_S + section.warmup_seconds + window + LOAD_STOP_S,
        f"{LOAD_RAMP_S:g} s ramp + {section.warmup_seconds:g} s warm-up "
        f"(`warmupSeconds`) + {section.sample_seconds:g} s window (`sampleSeconds`) "
        f"x {per_sample / THROTTLE_SAMPLE_INTERVAL_S:.3f} ({2 * gpus} NVML queries of "
        f"{NVML_SAMPLE_S * 1000:g} ms per {THROTTLE_SAMPLE_INTERVAL_S:g} s sample) + "
        f"{LOAD_STOP_S:g} s to stop the load and free its memory",
        "the policy; the NVML query time is an estimate, not measured on a GPU",
    )


def claims(o: ThrottleReasonsObserved, _summary: HardwareSummary) -> Claims:
    """One fraction and clock per GPU, fractions of samples in 0..1."""
    out = Claims()
    for reason, fractions in (o.active_fraction or {}).items():
        out.per_gpu(f"activeFraction.{reason[:32]}", fractions)
        out.each(f"activeFraction.{reason[:32]}", fractions, 1.0)
    out.per_gpu("smClockMHz", o.sm_clock_mhz).per_gpu("smClockMaxMHz", o.sm_clock_max_mhz)
    out.each("smClockMHz", o.sm_clock_mhz, SM_CLOCK_MAX_MHZ)
    out.each("smClockMaxMHz", o.sm_clock_max_mhz, SM_CLOCK_MAX_MHZ)
    out.keys("failedGpus", o.failed_gpus).keys("missedSamples", o.missed_samples)
    out.indices("worstGpu", (o.worst_gpu or {}).values())
    out.each("maxActiveFraction", (o.max_active_fraction or {}).values(), 1.0)
    for reason, (fraction, gpu) in (o.worst or {}).items():
        out.figure(f"worst.{reason[:32]}", fraction, 1.0).gpu(f"worst.{reason[:32]}", gpu)
    out.gpu("minSmClockGpu", o.min_sm_clock_gpu)
    out.figure("minSmClockMHz", o.min_sm_clock_mhz, SM_CLOCK_MAX_MHZ)
    out.figure("smClockMaxMHzTop", o.sm_clock_max_mhz_top, SM_CLOCK_MAX_MHZ)
    for reason, gpus in (o.reasons or {}).items():
        out.indices(f"reasons.{reason[:32]}", gpus if isinstance(gpus, list) else [gpus])
    return out


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | meaning |
|-------|---------|---------|
| `failOn` | `[hw_slowdown, hw_thermal_slowdown, hw_power_brake]` | Clock event reasons that fail the node when sustained on any GPU under load. |
| `warnOn` | `[sw_power_cap, sw_thermal_slowdown]` | Reasons that only warn (accepted with a warning). A reason in both lists fails. |
| `warmupSeconds` | 3 | Load before sampling counts. |
| `sampleSeconds` | 15 | The judged window: every GPU is kept busy (a bf16 matmul loop) and sampled every 0.25 s (60 samples). |
| `maxActiveFraction` | 0.1 | A reason counts on a GPU when it is active in more than this fraction of that GPU's judged samples. |

A sample NVML does not answer (an error other than `GPU_IS_LOST`) is that
sample's: it is counted in `missedSamples` for its GPU and the fractions are over
the samples read; a GPU none of whose judged samples was read fails naming it,
and only when no sample of any GPU was read does the check skip. The reasons are
read with `nvmlDeviceGetCurrentClocksEventReasons`, and with the deprecated
`nvmlDeviceGetCurrentClocksThrottleReasons` (the same mask) where the driver's
library has no such symbol (pynvml raises `FUNCTION_NOT_FOUND` at the call).

Names map to NVML's `nvmlClocksEventReason*` bits
([NVML API reference](https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html);
the deprecated `nvmlClocksThrottleReason*` names are the same bits):
`sw_power_cap` 0x4, `hw_slowdown` 0x8, `sync_boost` 0x10,
`sw_thermal_slowdown` 0x20, `hw_thermal_slowdown` 0x40, `hw_power_brake`
0x80. `gpu_idle` (0x1), `applications_clocks_setting` (0x2) and
`display_clock_setting` (0x100) say nothing about health and are never
recorded. HW slowdown means the clocks are cut by a factor of two or more
(temperature, power-brake assertion, or fast-trigger power protection).

**SW power cap is not judged by default** (`warnOn: [sw_thermal_slowdown]`;
earlier defaults warned on it). nvml.h, and DCGM's `dcgm_structs.h` which
copies it, describes the reason as "the clocks have been optimized to ensure
not to exceed currently set power limits": the power limit doing its job.
NVIDIA's H100 datasheet gives the SXM5 a TDP of "up to 700 W", and a dense
bf16 GEMM, the probe's load, is the load that reaches it, so the reason is on
for much or all of the window on healthy H100s; a warning every healthy node
shows is noise that hides the warnings that matter. What a power cap can hide
is judged elsewhere: a limit set below the default by `gpu_config`
(`profiles/faults/power-limit-capped.yaml`: 500 W), a GPU slower than its
siblings by `gpu_compute`. Trap: `h100-sxm-8gpu-gemm-at-power-limit.yaml`
(SW power cap in every sample, accepted with no warning, `expect.warnings:
[]`); `warnOn: [sw_power_cap, sw_thermal_slowdown]` restores the old default.
How much of the window a healthy H100 spends at the cap was not measured here
(no 8-GPU node was lent).

Why a sustained condition, and these defaults:

* **Warm-up 3 s.** NVML documents that HW slowdown "may be also reported
  during PState or clock change" (`nvmlClocksEventReasonHwSlowdown` in the
  reference above): a GPU going from idle to full load changes P-state and
  clocks in its first moments. Judging one sample, as earlier probes did (a
  union over 5 s starting 0.5 s into the load), failed healthy nodes. The
  trap `h100-sxm-8gpu-brief-slowdown.yaml` reports HW slowdown for the first
  1.5 s of load; 3 s is twice that, and also covers the load threads' own
  start (cuBLAS initialisation, the first matmuls) after the 0.5 s ramp.
  Earlier defaults waited 10 s; nothing documented needs more than the
  transition itself.
* **Window 15 s.** The whole default suite must finish within 60 s on an
  8-GPU node, process start, CUDA and NCCL initialisation included (issue 13;
  the per-phase budget is in [probe.md](probe.md#time-budget)), and this
  load phase is its largest part. The former 60 s window with its 10 s
  warm-up took 70 s on its own. What 15 s of full bf16 load still catches:
  everything that holds a reason from the moment the GPUs are loaded — HW
  power brake (an external signal from the baseboard or the power supply),
  HW slowdown from a power or board fault, a GPU that is already hot or
  heats within seconds (a heatsink not seated, a fan that does not turn in a
  hot aisle), SW power cap at a lowered limit, clocks locked low
  (`gpu_config`, same samples) — and the SM clock each GPU reaches, which
  `gpu_compute`'s per-GPU throughput comparison judges against its siblings.
  What a longer burn-in adds, and this window can miss: a cooling fault that
  takes longer than the window to bring a GPU to its slowdown temperature
  (a GPU's temperature keeps rising for longer than 15 s of full load while
  its heatsink warms; how long on an H100/H200 SXM was not measured here, no
  GPU was lent to this work), intermittent
  faults rarer than one in 15 s, and HBM or power-delivery faults that only
  show after sustained heat. NVIDIA's DCGM diagnostics load longer for
  exactly those (the
  [targeted power](https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/diag-targeted-power-plugin.html)
  test 120 s, the
  [diagnostic](https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/diagnostic.html)
  test 180 s; about 2 minutes are quoted for the level-2 diagnostic). A
  platform team that wants a burn-in sets `sampleSeconds` (up to 1800 s) in
  its policy, and `probeRun.timeoutSeconds` with it; the budget table and a
  simulated node's durations follow the policy.
* **Sampling every 0.25 s.** 60 judged samples in the window: the 10 %
  threshold is then more than 6 samples (1.5 s), fine enough to tell 8 %
  from 12 % (at 0.5 s, 30 samples, 12 % would be exactly 3 of 30 and pass).
  Each sample is two NVML queries per GPU (the reasons, the SM clock).
* **Fraction 10 %.** After the warm-up a P-state change shows in one sample
  or two of 60 (≤ 3 %); a thermal or power-brake problem holds the reason
  for most of the window once it starts. 10 % (6 samples, 1.5 s) sits
  between the two. The trap above has HW slowdown in 8 % of one GPU's
  samples and passes; the fault `hw-slowdown-intermittent.yaml` has 12 % and
  fails.

The SM clock under load is recorded per GPU against its maximum
(`smClockMHz`, `smClockMaxMHz`; NVML `nvmlDeviceGetClockInfo` /
`nvmlDeviceGetMaxClockInfo` with `NVML_CLOCK_SM`, the median of the judged
samples) so that a review sees the effect; `throttle_reasons` does not judge
it, and `gpu_config` judges it (and `applications_clocks_setting`) from these
same samples ([below](#gpuconfig)). The
clock-event-reason duration fields and `nvmlDeviceGetViolationStatus` are not
read ([probe.md](probe.md#how-the-real-backend-measures) says why).
"""  # noqa: E501


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
failOn: [hw_slowdown, hw_thermal_slowdown, hw_power_brake]
# SW power cap: a healthy GPU at its power limit under a GEMM (docs/policy.md)
warnOn: [sw_thermal_slowdown]
warmupSeconds: 3          # not judged: clock/P-state changes report HW slowdown briefly
# the judged window under full load (the 60 s suite budget: docs/probe.md)
sampleSeconds: 15
maxActiveFraction: 0.1    # a reason counts when active in > 10 % of the judged samples
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            "not tied to GPUs yet: a HW power brake is asserted by the system for every GPU "
            '(NVML `nvmlClocksEventReasonHwPowerBrakeSlowdown`: "External Power Brake '
            'Assertion"), a thermal slowdown per GPU is a candidate'
        ),
        source="NVML reference, clocks event reasons",
    ),
    measuring=frozenset({"warmup_seconds", "sample_seconds", "max_active_fraction"}),
    judging=frozenset({"fail_on", "warn_on"}),
    name="throttle_reasons",
    title="Clock throttle reasons",
    summary="no sustained HW slowdown, thermal or power-brake clock event reason under load "
    "(SW thermal warns; SW power cap, a GPU at its power limit, is not judged)",
    reason=REASON,
    policy_model=ThrottleReasonsPolicy,
    observed_model=ThrottleReasonsObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    # its samples under load (gpu_config) and its timed matmuls (gpu_compute)
    provides=frozenset({"under_load", "matmul_load"}),
    budget=budget,
    runbook=RunbookEntry(
        meaning="HW slowdown, thermal or power brake under load",
        fix="cooling, power, GPU replacement",
    ),
)
