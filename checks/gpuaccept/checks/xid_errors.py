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
from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, RunbookEntry, clip
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


SPEC = CheckSpec(
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
    claims=claims,
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
