"""``xid_errors``: no critical Xid while the probe loads the GPUs, and no GPU
left needing a recovery action by an earlier fault.

Two sources, both NVML (no kernel log):

* **Xid events while loading.** The probe registers every GPU for NVML's
  critical-Xid events (``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents``
  with ``nvmlEventTypeXidCriticalError``) before the first check that loads
  the GPUs and waits on them (``nvmlEventSetWait_v2``) until the last one has
  finished: the PCIe copies, the sustained matmul load and the all-reduce. Each
  Xid is recorded with its GPU, the seconds since the listener started and the
  check that was running. An Xid in ``failOn`` fails the node, one in
  ``warnOn`` warns; any other is recorded and named, not judged.
* **State an earlier fault left.** Each GPU's recovery action
  (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` on R570 and later; on R560-R565 the
  older reset-status fields, which say none, ``gpu_reset`` or
  ``drain_and_reset``; before R560 not read). An action in ``recoveryActionFailOn``
  fails the node, one in ``recoveryActionWarnOn`` warns. (The remapped-rows
  pending and failure flags, the other state earlier faults leave, are judged
  by ``memory_health``.)

Xids logged before the probe started (the kernel log's history) are not read:
that needs the kernel ring buffer, which a restricted pod cannot read
(docs/policy.md).

observed::

    {"watched": "0-7", "listenedS": 212.4,
     "events": [{"gpu": 5, "xid": 79, "atS": 141.2, "during": "nccl_allreduce"}],
     "xids": {"5": [79]},
     "recoveryAction": {"node_reboot": "5"},
     "notRead": {"recoveryAction": "GPUs 0-7: driver 550.54.15: no field before R560"}}

(GPU sets as range text, ``"0-3,5"``; ``events``: the first 16 in time order;
``xids``: GPUs → every Xid they reported, GPUs with the same Xids in one
entry; ``recoveryAction``: only GPUs whose action is not ``none``).
Condensed: ``events`` dropped, ``notRead`` only names the GPUs.
"""

from enum import StrEnum
from typing import Annotated

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims
from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus
from gpuaccept.checks.gpu_sets import gpu_label, notes_condensed
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    ObservedModel,
    RunbookEntry,
    clip,
)
from gpuaccept.checks.xid_classes import XidClass, xid_class
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "XidErrorsFailed"
EVENTS_MAX = 16

# NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/): code →
# (what it means, what the operator does). docs/policy.md and docs/runbook.md
# carry the same table with its sources.
XID_CATALOGUE: dict[int, tuple[str, str]] = {
    48: ("double-bit ECC error", "reset the GPU; replace it if it recurs"),
    63: ("row remap / page retirement recorded", "reset the GPU when convenient"),
    64: ("row remap / page retirement failed", "replace the GPU"),
    74: ("NVLink error", "reset the GPU; reseat or replace if it recurs"),
    79: ("GPU fallen off the bus", "reboot the node; reseat or replace if it recurs"),
    92: ("high single-bit ECC rate", "watch it; no action unless it persists"),
    94: ("contained ECC error", "reset the GPU when convenient"),
    95: ("uncontained ECC error", "reset the GPU now; replace it if it recurs"),
    119: ("GSP RPC timeout", "reset the GPU or reboot; contact support if it recurs"),
    120: ("GSP error", "reset the GPU or reboot; contact support if it recurs"),
    140: ("unrecovered ECC error", "reset the GPU; replace it if it recurs"),
    154: ("GPU recovery action changed", "do what the recovery action says"),
}


class RecoveryAction(StrEnum):
    """``nvmlDeviceGpuRecoveryAction_t`` (nvml.h, R570+; values 0-7)."""

    NONE = "none"
    GPU_RESET = "gpu_reset"
    NODE_REBOOT = "node_reboot"
    DRAIN_P2P = "drain_p2p"
    DRAIN_AND_RESET = "drain_and_reset"
    RECOVER_IMEX_DOMAIN = "recover_imex_domain"
    BUS_RESET = "bus_reset"
    SYSTEM_REBOOT = "system_reboot"


RECOVERY_ACTION_BY_VALUE: tuple[RecoveryAction, ...] = tuple(RecoveryAction)


def _default_fail_xids() -> list[int]:
    return [48, 63, 64, 74, 79, 94, 95, 119, 120, 140, 154]


def _default_fail_actions() -> list[RecoveryAction]:
    return [
        RecoveryAction.GPU_RESET,
        RecoveryAction.NODE_REBOOT,
        RecoveryAction.DRAIN_P2P,
        RecoveryAction.DRAIN_AND_RESET,
        RecoveryAction.BUS_RESET,
        RecoveryAction.SYSTEM_REBOOT,
    ]


Xid = Annotated[int, Field(ge=0, le=65535)]


class XidErrorsPolicy(CheckSwitch):
    fail_on: list[Xid] = Field(
        default_factory=_default_fail_xids,
        description="Xids (NVIDIA's catalogue) that fail the node when any GPU reports one "
        "while the probe loads it.",
        max_length=256,
    )
    warn_on: list[Xid] = Field(
        default_factory=lambda: [92],
        description="Xids that only warn; one in both lists fails.",
        max_length=256,
    )
    recovery_action_fail_on: list[RecoveryAction] = Field(
        default_factory=_default_fail_actions,
        description="GPU recovery actions (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) that fail "
        "the node.",
    )
    recovery_action_warn_on: list[RecoveryAction] = Field(
        default_factory=lambda: [RecoveryAction.RECOVER_IMEX_DOMAIN],
        description="Recovery actions that only warn (the IMEX domain, not the GPU).",
    )


class XidEventObserved(ObservedModel):
    gpu: int = Field(ge=-1)  # -1: NVML named no GPU we know
    xid: int = Field(ge=0)
    at_s: float = Field(ge=0, alias="atS")  # seconds since the listener started
    during: str | None = Field(default=None, max_length=32)  # the check then running


class ListenerStop(ObservedModel):
    """The listener's wait ended before the probe did (an NVML error other than its
    timeout): no Xid after ``atS`` was seen."""

    at_s: float = Field(ge=0, alias="atS")
    during: str | None = Field(default=None, max_length=64)
    error: str = Field(max_length=160)
    gpu_lost: bool = False  # NVML answered GPU_IS_LOST


class XidErrorsObserved(ObservedModel):
    # the usable GPUs (range text): each must be watched, or "no critical Xid" is unknown
    gpus: str | None = None
    watched: str | None = None  # the GPUs registered for Xid events (range text)
    listened_s: float | None = Field(default=None, ge=0, alias="listenedS")
    events: list[XidEventObserved] | None = None  # detail: the first EVENTS_MAX
    xids: dict[str, list[int]] | None = None  # GPUs (range text) → every Xid they reported
    recovery_action: dict[str, str] | None = None  # action (not none) → GPUs
    not_read: dict[str, str] | None = None  # part → why it was not read
    listener_stopped: ListenerStop | None = None  # the wait died before the probe ended


def describe_xid(xid: int) -> str:
    known = XID_CATALOGUE.get(xid)
    return f"Xid {xid} ({known[0]}: {known[1]})" if known else f"Xid {xid}"


def _during(observed: XidErrorsObserved, xid: int) -> str:
    phases = sorted({e.during for e in observed.events or [] if e.xid == xid and e.during})
    return f" during {', '.join(phases)}" if phases else ""


def xids_by_code(observed: XidErrorsObserved) -> dict[int, list[int]]:
    """Xid → the GPUs that reported it (-1: a GPU NVML named but we do not know)."""
    out: dict[int, set[int]] = {}
    for gpus, codes in (observed.xids or {}).items():
        indices = [-1] if gpus == "-1" else parse_gpus(gpus)
        for xid in codes:
            out.setdefault(xid, set()).update(indices)
    return {xid: sorted(g) for xid, g in sorted(out.items())}


def _xid_texts(
    by_code: dict[int, list[int]], observed: XidErrorsObserved, codes: set[int]
) -> list[str]:
    out = []
    for xid, gpus in by_code.items():
        if xid in codes:
            where = (
                "an unknown GPU"
                if gpus == [-1]
                else gpu_label(format_gpus([g for g in gpus if g >= 0]))
            )
            out.append(f"{where}: {describe_xid(xid)}{_during(observed, xid)}")
    return out


def _action_texts(observed: XidErrorsObserved, actions: set[str]) -> list[str]:
    return [
        f"{gpu_label(gpus)}: recovery action {action}"
        for action, gpus in sorted((observed.recovery_action or {}).items())
        if action in actions
    ]


def judge(
    observed: XidErrorsObserved, policy: XidErrorsPolicy, summary: HardwareSummary
) -> CheckJudgement:
    fail_xids = set(policy.fail_on)
    warn_xids = set(policy.warn_on) - fail_xids
    fail_actions = {str(a) for a in policy.recovery_action_fail_on}
    warn_actions = {str(a) for a in policy.recovery_action_warn_on} - fail_actions
    expected: JsonValue = {
        "failOn": list[JsonValue](sorted(fail_xids)),
        "warnOn": list[JsonValue](sorted(warn_xids)),
        "recoveryActionFailOn": list[JsonValue](sorted(fail_actions)),
        "recoveryActionWarnOn": list[JsonValue](sorted(warn_actions)),
    }
    for gpus in (observed.recovery_action or {}).values():
        parse_gpus(gpus)  # a malformed GPU set is an error, never a pass
    by_code = xids_by_code(observed)
    failing = _action_texts(observed, fail_actions) + _xid_texts(by_code, observed, fail_xids)
    warning = _action_texts(observed, warn_actions) + _xid_texts(by_code, observed, warn_xids)
    unwatched = _unwatched(observed, summary)
    if unwatched and not failing:  # no evidence of "no critical Xid" on them: never a pass
        return CheckJudgement(
            CheckStatus.ERROR, expected, clip(_unwatched_text(observed, unwatched))
        )
    stopped = observed.listener_stopped
    if stopped is not None:
        text = _stopped_text(stopped)
        if stopped.gpu_lost:  # NVML lost a GPU while waiting: the Xid 79 it hides
            failing.append(f"a GPU was lost: {text}")
        elif not failing:  # no evidence of "no critical Xid": an error, never a pass
            return CheckJudgement(CheckStatus.ERROR, expected, clip("; ".join([text, *warning])))
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing + warning)))
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warning)))
    return CheckJudgement(CheckStatus.PASS, expected, clip(_pass_message(observed, by_code)))


def _unwatched_text(observed: XidErrorsObserved, unwatched: list[int]) -> str:
    why = (observed.not_read or {}).get("events")
    text = f"Xid events not watched on {gpu_label(format_gpus(unwatched))}"
    return text + (f" ({why})" if why else "")


def _stopped_text(stopped: ListenerStop) -> str:
    during = f" during {stopped.during}" if stopped.during else ""
    return (
        f"the Xid listener stopped after {stopped.at_s:g} s{during}: {stopped.error}; "
        "no Xid after that was seen"
    )


def _pass_message(observed: XidErrorsObserved, by_code: dict[int, list[int]]) -> str:
    """What was watched, how long; the Xids seen but not judged, the parts not read."""
    seen = list(by_code)
    notes = [f"not judged: Xid {', '.join(str(x) for x in seen)}"] if seen else []
    notes += [f"{part} not read: {why}" for part, why in (observed.not_read or {}).items()]
    watched = (
        f"no critical Xid on {gpu_label(observed.watched)} in {observed.listened_s:g} s under load"
        if observed.watched and observed.listened_s is not None
        else "no Xid listener ran"
    )
    return "; ".join([watched, *notes])


def _unwatched(observed: XidErrorsObserved, summary: HardwareSummary) -> list[int]:
    """The usable GPUs no listener watched (a report without ``gpus``, from an older
    probe: every GPU of the summary)."""
    usable = (
        set(parse_gpus(observed.gpus))
        if observed.gpus is not None
        else set(range(summary.gpu_count))
    )
    watched = set(parse_gpus(observed.watched)) if observed.watched else set()
    return sorted(usable - watched)


def condense(observed: XidErrorsObserved) -> XidErrorsObserved:
    return observed.model_copy(
        update={"events": None, "not_read": notes_condensed(observed.not_read)}
    )


def xid_sets(events: list[tuple[int, int]]) -> dict[str, list[int]]:
    """``[(gpu, xid), ...]`` → ``{GPU range text: [xid, ...]}``, GPUs with the same
    Xids in one entry (``"-1"``: GPUs NVML named that we do not know)."""
    by_gpu: dict[int, set[int]] = {}
    for gpu, xid in events:
        by_gpu.setdefault(gpu, set()).add(xid)
    unknown = by_gpu.pop(-1, None)
    groups: dict[tuple[int, ...], list[int]] = {}
    for gpu, codes in sorted(by_gpu.items()):
        groups.setdefault(tuple(sorted(codes)), []).append(gpu)
    out = {format_gpus(gpus): list(codes) for codes, gpus in groups.items()}
    if unknown:
        out["-1"] = sorted(unknown)
    return out


def claims(o: XidErrorsObserved, _summary: HardwareSummary) -> Claims:
    """Every GPU named is one of the report's (an event's GPU -1: NVML named none)."""
    out = Claims().ranges("gpus", o.gpus).ranges("watched", o.watched).keys("xids", o.xids)
    out.indices("events.gpu", [e.gpu for e in o.events or () if e.gpu != -1])
    return out.values("recoveryAction", o.recovery_action)


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | meaning |
|-------|---------|---------|
| `failOn` | `[48, 63, 64, 74, 79, 94, 95, 119, 120, 140, 154]` | Xids that fail the node when any GPU reports one while the probe loads it. |
| `warnOn` | `[92]` | Xids that only warn. One in both lists fails. |
| `recoveryActionFailOn` | `[gpu_reset, node_reboot, drain_p2p, drain_and_reset, bus_reset, system_reboot]` | GPU recovery actions that fail the node. |
| `recoveryActionWarnOn` | `[recover_imex_domain]` | Recovery actions that only warn. |

**What is watched.** The runner opens one NVML event set before the first
check and closes it after the last one. It registers every GPU for
`nvmlEventTypeXidCriticalError` (`nvmlEventSetCreate`,
`nvmlDeviceRegisterEvents`; a GPU whose `nvmlDeviceGetSupportedEventTypes`
lacks the bit is named under `notRead.events`), and a thread waits on the set
(`nvmlEventSetWait_v2`, 500 ms at a time). So the listener covers every phase
that loads the GPUs: the PCIe copies, the 70 s matmul load, and the all-reduce
sweep. `xid_errors` is measured after every other check, whatever the registry
order, so that its result includes the Xids of all of them. Each Xid is
recorded with its GPU (the event's device handle mapped to the NVML index), the
seconds since the listener started, and the check that was running
(`events`, first 16). `xids` maps each group of GPUs to the Xids they reported.
The kernel's Xid is `eventData`; the same event set is what NVIDIA's
Kubernetes device plugin uses for its health check.

**A listener that died is no evidence.** `nvmlEventSetWait_v2` answers
`NVML_ERROR_TIMEOUT` when nothing arrived in its 500 ms (the listener waits
again); any other answer ends the wait (pynvml's `nvmlEventSetWait_v2` raises
it as an `NVMLError`). The report then says when and during which check
(`listenerStopped`: `atS`, `during`, `error`), `listenedS` is the time it
really listened, and the judge never says "no critical Xid": an answer of
`NVML_ERROR_GPU_IS_LOST` (a GPU fell off the bus during the wait, the Xid 79
the wait can no longer deliver) fails, any other error is an `error`
(`ProbeError`). The device plugin's health check treats a wait error the same
way: it stops trusting the event set (NVIDIA/k8s-device-plugin,
`internal/rm/health.go`). Any other exception in the wait thread (a binding
that raises something else, an event that cannot be read) is recorded the same
way, as `listenerStopped`; before, only `NVMLError` was caught, and anything
else ended the thread silently while the check passed on what it had seen
(`tests/probe/test_consequences_and_listener.py`).

**Every usable GPU is watched, or the check errors.** The result lists the
usable GPUs (`gpus`: every GPU but one NVML lost, which fails elsewhere) next
to the ones registered (`watched`). A usable GPU not watched (a listener that
registered no GPU, NVML's supported event types without
`nvmlEventTypeXidCriticalError`, a registration NVML refused) makes the check
`error` ("Xid events not watched on GPU 5 (why)"), unless a critical Xid on a
watched GPU already fails it. Before, a listener that registered no GPU passed
with "no Xid listener ran" wherever the recovery action could be read (R570
and later), and a GPU left out passed with a note. A report without `gpus`
(an older probe) is compared with the summary's GPU count. The simulator's
`unsupported: [xidEvents]` leaves a GPU unregistered.

**A GPU that fell off the bus stays gone.** On a real node, after Xid 79
every NVML query on the GPU answers `GPU_IS_LOST` and CUDA errors on it; the
simulated backend models that consequence (the GPU is lost for every check
after the Xid arrives), so `faults/xid-79-under-load.yaml` fails every later
check naming GPU 5, the first of them in registry order being
`throttle_reasons`, and `xid_errors` names the Xid.

**The defaults** come from NVIDIA's Xid catalogue
([Xid errors](https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html),
the catalogue for Ampere and later, with its immediate and investigatory
resolution buckets). The older page-retirement document
([dynamic page retirement](https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html))
describes 48, 63 and 64. The memory error guide
([A100 GPU memory error management](https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html))
describes 94, 95 and the recovery flags.

| Xid | meaning | action it asks for | default |
|----:|---------|--------------------|---------|
| 48 | double-bit (uncorrectable) ECC error | reset the GPU; replace it if it recurs | fail |
| 63 | a row remap (A100 and later) or page retirement was recorded; it takes effect at the next GPU reset (or driver reload) | **reset the GPU when convenient**; not a replacement | fail |
| 64 | the row remap or page retirement could not be recorded | replace the GPU (RMA) | fail |
| 74 | NVLink error | reset the GPU; if it recurs, reseat the GPU/baseboard or contact support | fail |
| 79 | the GPU fell off the bus | reboot the node; if it recurs, reseat it, check power and the slot, then RMA | fail |
| 92 | high single-bit ECC error rate (NVIDIA marks it non-critical) | none now; watch it | warn |
| 94 | contained uncorrectable ECC error: only the application that touched the memory was affected | restart the application; **reset the GPU when convenient** (the row is then remapped); not a replacement | fail |
| 95 | uncontained uncorrectable ECC error: every application on the GPU is affected | reset the GPU now; replace it if it recurs | fail |
| 119 | GSP RPC timeout | reset the GPU or reboot the node; contact support if it recurs | fail |
| 120 | GSP error | reset the GPU or reboot the node; contact support if it recurs | fail |
| 140 | unrecovered ECC error | reset the GPU; replace it if it recurs | fail |
| 154 | the GPU's recovery action changed (the driver says what is needed) | what the recovery action says (below) | fail |

63 and 94 fail the node. The node is out of service only until the reset,
and then the re-probe passes (see the [runbook](runbook.md#memory-and-xid-faults)).
Other Xids (13, 31, 43 and the like, which NVIDIA classes as application
errors, the device plugin's skip list) are recorded and named in the message,
but not judged. The probe's own load is well-formed. An application Xid during
the probe is worth reading, but it is not evidence of a hardware fault.

**State earlier faults left.** Each GPU's recovery action is
`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`, read with `nvmlDeviceGetFieldValues`.
Its values are `nvmlDeviceGpuRecoveryAction_t`: 0 `none`, 1 `gpu_reset`,
2 `node_reboot`, 3 `drain_p2p`, 4 `drain_and_reset`, 5 `recover_imex_domain`,
6 `bus_reset`, 7 `system_reboot`. NVML field IDs are not stable across driver
branches, so the probe reads this field only on a driver branch whose
numbering it knows. That is R570 and later, where the ID is 230: the nvml.h of
R570 and R580 and the installed nvidia-ml-py 13.615 agree on it, and NVML
added the field in R565. **R560 and R565** answer the same question with two
older fields, `NVML_FI_DEV_RESET_STATUS` (226, "reset required") and
`NVML_FI_DEV_DRAIN_AND_RESET_STATUS` (227, "drain and reset recommended"),
which the installed nvidia-ml-py 13.615 marks "Deprecated use
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION instead". They exist from R560 only: nvml.h
at NVIDIA/go-nvml's sync points has `NVML_FI_MAX` ("one greater than the
largest field ID") 197 at CUDA 12.2 (R535), 200 at 12.4 (R550) and 223 at 12.5
(R555), and defines 226/227 first at 12.6 (R560). Earlier probes read them
from R535, and claimed that coverage; on R535 to R555 they name no field.
(`nvidia-smi -q` prints a "GPU Reset Status" section on 530 and 550 drivers
too, but nvidia-smi is not limited to NVML's public fields.) The probe reads
them on R560 and R565 as `drain_and_reset` when the drain flag is set,
`gpu_reset` when "reset required" is, else `none`; a drain flag answering
NotSupported (nvidia-smi's "N/A") leaves "reset required" to decide
(`nvml_health.read_reset_status`, `tests/probe/test_probe_xid_memory_real.py`;
fault `profiles/faults/reset-required-r560.yaml`). **Before R560** neither
field is asked for, and the recovery action is not read: the reason is named
under `notRead.recoveryAction` and in the pass message ("driver 550.54.15: no
recovery action or reset status field before R560"). So on R535 and R550 the
probe cannot see a GPU that an earlier fault left needing a reset; it says so,
and the Xids under load and `memoryHealth` (remapped rows pending or failed)
are still judged. The same holds when a field answers NotSupported, a value
type other than unsigned int, or a number outside 0–7. It never passes
silently, and it never fails a node.
`recover_imex_domain` only warns, because it concerns the IMEX domain (a
multi-node NVLink partition) and not this GPU. The other state earlier faults
leave, the remapped-rows pending and failure flags, is judged by
[`memoryHealth`](#memoryhealth).

**What healthy hardware shows.** No critical Xid during the probe, and a
recovery action of `none`; NVIDIA's guide says `none` means "the GPU can be
immediately used again". The shipped trap `h100-sxm-8gpu-old-row-remaps.yaml`
(R570, recovery action `none`, Xid 92 on one GPU) is accepted with a warning.
Most other shipped healthy profiles run a 550 driver, where the recovery action
is not read (named in the message).

When neither part can be read (no GPU delivers Xid events, as on some
virtualized GPUs, and the driver is older than R560), the check is `skip`,
which quarantines a node when the check is required. Set `xidErrors.required:
false` on such a platform: the skip then only warns. A listener that stopped
early (an NVML wait error) is named under `notRead.events`, and what it saw
is still judged.

**The Xid history is not read.** Xids logged before the probe started (the
`NVRM: Xid` lines of the kernel ring buffer, `dmesg` or `journalctl -k`) need
the kernel log. Reading `/dev/kmsg` or calling `syslog(2)` needs
`CAP_SYSLOG`, or a privileged pod with `kernel.dmesg_restrict=0`. The probe
pod runs restricted (no added capabilities, no host paths beyond what it
needs), and it is not widened for this. What earlier faults leave behind is
still visible through NVML: the recovery action above, the remapped-rows
flags and the ECC counts in `memoryHealth`. A platform that does collect the
kernel log (node-problem-detector, DCGM health watches, a log pipeline) can
join it with these verdicts.
"""  # noqa: E501, RUF001


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
# NVIDIA's Xid catalogue (docs/policy.md has each code's meaning and action)
failOn: [48, 63, 64, 74, 79, 94, 95, 119, 120, 140, 154]
warnOn: [92]              # high single-bit ECC rate: NVIDIA marks it non-critical
recoveryActionFailOn:
  [gpu_reset, node_reboot, drain_p2p, drain_and_reset, bus_reset, system_reboot]
recoveryActionWarnOn: [recover_imex_domain]
"""


# Whose a failure is (docs/policy.md, "Per-GPU verdicts"): the Xids of one GPU's own
# memory or of the GPU itself gone (the in-service classes fatal and memory: 48, 63, 64,
# 79, 94, 95, 140) and the recovery actions that reset that GPU alone are the GPU's; any
# other (NVLink 74, internal and GSP errors, a reboot, a P2P drain, the IMEX domain) is
# the node's.
GPU_XID_CLASSES = frozenset({XidClass.FATAL, XidClass.MEMORY})
GPU_RECOVERY_ACTIONS = frozenset({RecoveryAction.GPU_RESET, RecoveryAction.DRAIN_AND_RESET})


def failing_gpus(observed: XidErrorsObserved, policy: XidErrorsPolicy) -> frozenset[int] | None:
    """The GPUs a failure names, or None where one is the node's (the table above), names
    no GPU we know, or is a GPU lost while the listener waited (which one is not said)."""
    if observed.listener_stopped is not None and observed.listener_stopped.gpu_lost:
        return None
    out: set[int] = set()
    failing_actions = {str(a) for a in policy.recovery_action_fail_on}
    for action, gpus in (observed.recovery_action or {}).items():
        if action not in failing_actions:
            continue
        if action not in GPU_RECOVERY_ACTIONS:
            return None
        out |= set(parse_gpus(gpus))
    for xid, reporters in xids_by_code(observed).items():
        if xid not in policy.fail_on:
            continue
        if xid_class(xid) not in GPU_XID_CLASSES or -1 in reporters:
            return None
        out |= set(reporters)
    return frozenset(out)


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            "an Xid names its GPU: one of that GPU's memory or of the GPU itself gone (48, 63, "
            "64, 79, 94, 95, 140: the in-service classes fatal and memory) and a recovery "
            "action that resets that GPU alone (gpu_reset, drain_and_reset) are the GPU's; "
            "an NVLink Xid (74: the fabric, the node's all-reduce), an internal or GSP error "
            "(62, 119, 120), 154, a reboot, a bus reset, a P2P drain or the IMEX domain, an "
            "Xid of a GPU NVML did not name, or a GPU lost under the listener is the node's"
        ),
        source=(
            "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors: each Xid's resolution); "
            "nvml.h nvmlDeviceGpuRecoveryAction_t; docs/policy.md In-service Xid classes"
        ),
    ),
    measuring=frozenset(),
    judging=frozenset({"fail_on", "warn_on", "recovery_action_fail_on", "recovery_action_warn_on"}),
    name="xid_errors",
    title="Xid errors",
    summary="no critical Xid (NVML events) while the probe loads the GPUs, and no GPU "
    "left needing a recovery action",
    reason=REASON,
    policy_model=XidErrorsPolicy,
    observed_model=XidErrorsObserved,
    judge=judge,
    condense=condense,
    failing_gpus=failing_gpus,
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    needs=frozenset({"xids"}),  # the run's Xid listener, open over every check
    budget=fixed_phase(
        "Xids seen, recovery actions",
        0.1,
        "one NVML query per GPU (the listener stops after the last check)",
    ),
    runbook=RunbookEntry(
        meaning=(
            "a critical Xid while the probe loaded the GPUs, or a GPU left needing a recovery "
            "action"
        ),
        fix="per Xid and action: [Memory and Xid faults](#memory-and-xid-faults)",
    ),
)
