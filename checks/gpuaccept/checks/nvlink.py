"""``nvlink``: every GPU's active NVLinks against its model, and the link error counters.

Per GPU the probe reads the number of links the device has
(``NVML_FI_DEV_NVLINK_LINK_COUNT`` through ``nvmlDeviceGetFieldValues``; not
the binding's ``NVML_NVLINK_MAX_LINKS`` of 36, which is no device's count),
asks ``nvmlDeviceGetNvLinkState`` for each of those links, and reads the
cumulative error counters of each link with ``nvmlDeviceGetNvLinkErrorCounter``
(replay, recovery, CRC = flit CRC + data CRC, and data ECC; on Blackwell, which
answers those NotSupported, the recoveries from the field
``NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS``). The expected number of
active links comes from the policy per GPU model (H100/H200 SXM: 18); a model
without an entry (PCIe and NVL parts, whose bridges link pairs or none) has
its links recorded, not judged. Counters above ``failAbove`` fail and above
``warnAbove`` warn, per link.

observed::

    {"links": {"0-7": 18}, "active": {"0,2-7": 18, "1": 16}, "inactive": {"1": [16, 17]},
     "errors": {"replay": {"3:7": 12}, "recovery": {"3:7": 1}}}

(``links``/``active``: GPUs (ranges) → count; ``inactive``: GPU → its inactive
links; ``errors``: counter → ``"gpu:link"`` → count, non-zero counts only;
``countersUnsupported``: GPUs whose driver answers the counters with
NotSupported: not judged.) Condensed: ``inactive`` dropped and ``worst``:
counter → ``[count, gpu, link]`` instead of ``errors``.
"""

from enum import StrEnum

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import NVLINK_MAX_LINKS, Claims
from gpuaccept.checks.gpu_models import gpu_model_class, per_model_value
from gpuaccept.checks.gpu_ranges import parse_gpus, ungroup
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

REASON = "NvlinkFailed"
SHOWN = 3  # offending links named in a message, per kind


class NvlinkCounter(StrEnum):
    REPLAY = "replay"
    RECOVERY = "recovery"
    CRC = "crc"
    ECC = "ecc"


def _default_links() -> dict[str, float]:
    return {"h100-sxm": 18, "h200-sxm": 18, "b200": 18}


def _default_warn() -> dict[NvlinkCounter, int]:
    return {
        NvlinkCounter.REPLAY: 0,
        NvlinkCounter.RECOVERY: 0,
        NvlinkCounter.CRC: 0,
        NvlinkCounter.ECC: 0,
    }


def _default_fail() -> dict[NvlinkCounter, int]:
    return {NvlinkCounter.RECOVERY: 0}


class NvlinkPolicy(CheckSwitch):
    active_links_by_model: dict[str, float] = Field(
        default_factory=_default_links,
        description="Active NVLinks every GPU of this model must have: an exact NVML name or a "
        "model class (docs/policy.md); a model not listed has its links recorded, not judged.",
    )
    # Judged as increases over the probe's run, as DCGM's NVLink health watch judges
    # new errors in its window (docs/policy.md); counts from before the run only warn.
    warn_above: dict[NvlinkCounter, int] = Field(
        default_factory=_default_warn,
        description="Per link: more errors than this during the probe's run, or already "
        "counted before it (since driver load), warns (replay, recovery, crc, ecc).",
    )
    fail_above: dict[NvlinkCounter, int] = Field(
        default_factory=_default_fail,
        description="Per link: more errors than this during the probe's run fails; a counter "
        "not listed never fails.",
    )


class NvlinkObserved(ObservedModel):
    # per GPU, index order (detail: dropped when condensed)
    links: dict[str, int] | None = None  # GPUs -> link count
    active: dict[str, int] | None = None  # GPUs -> active links
    inactive: dict[str, list[int]] | None = None
    # counter -> "gpu:link" -> errors during the probe's run (since driver load for the GPUs
    # in sinceDriverLoad: no baseline was read)
    errors: dict[str, dict[str, int]] | None = None
    errors_before: dict[str, dict[str, int]] | None = None  # counts at the baseline
    # both forms
    counters_unsupported: str | None = None  # GPUs on which NVML answers no counter: "0-7"
    # NVML counter (replay, recovery, crc_flit, crc_data) -> GPUs that answer NotSupported
    counters_not_supported: dict[str, str] | None = None
    # NVML counter -> GPUs on which it answered another error on some link: not judged there
    counters_not_read: dict[str, str] | None = None
    since_driver_load: str | None = None  # GPUs whose errors have no baseline (cumulative)
    failed_gpus: dict[str, str] | None = None
    # condensed
    worst: dict[str, list[int]] | None = None  # counter -> [count, gpu, link]
    worst_before: dict[str, list[int]] | None = None  # the same, of errorsBefore


def _active_facts(o: NvlinkObserved) -> tuple[int, int, list[int]]:
    """(GPUs, fewest active links, the GPUs with that few)."""
    active = ungroup(o.active or {})
    if not active:
        return 0, 0, []
    least = min(active.values())
    return len(active), least, sorted(g for g, a in active.items() if a == least)


def _worst_errors(o: NvlinkObserved, before: bool = False) -> dict[str, list[tuple[int, str]]]:
    """counter → [(count, "GPU g link l")], largest first, from either form (``before``:
    the counts from before the run)."""
    out: dict[str, list[tuple[int, str]]] = {}
    errors = o.errors_before if before else o.errors
    if errors is not None:
        for counter, by_link in errors.items():
            entries = []
            for where, count in by_link.items():
                gpu, _, link = where.partition(":")
                entries.append((count, f"GPU {gpu} link {link}"))
            out[counter] = sorted(entries, reverse=True)
    for counter, worst in ((o.worst_before if before else o.worst) or {}).items():
        if len(worst) == 3:
            out.setdefault(counter, [(worst[0], f"GPU {worst[1]} link {worst[2]}")])
    return out


def _link_failures(o: NvlinkObserved, expected: int | None) -> list[str]:
    """GPUs below the expected count, grouped by their count (a lost GPU is named
    as failed, not here); one GPU's inactive links are listed."""
    if expected is None:
        return []
    failed = o.failed_gpus or {}
    by_count: dict[int, list[int]] = {}
    for gpu, active in sorted(ungroup(o.active or {}).items()):
        if active < expected and str(gpu) not in failed:
            by_count.setdefault(active, []).append(gpu)
    out = []
    for active, gpus in sorted(by_count.items()):
        links = (o.inactive or {}).get(str(gpus[0]), []) if len(gpus) == 1 else []
        detail = f" (inactive: {', '.join(map(str, links[:6]))})" if links else ""
        out.append(f"{gpu_list(gpus)}: {active} of {expected} NVLinks active{detail}")
    return out


def _counter_findings(
    o: NvlinkObserved, limits: dict[NvlinkCounter, int], before: bool = False
) -> list[str]:
    findings = []
    when = " before the probe (since driver load)" if before else ""
    for counter, entries in _worst_errors(o, before).items():
        limit = limits.get(NvlinkCounter(counter)) if counter in set(NvlinkCounter) else None
        if limit is None:
            continue
        over = [(count, where) for count, where in entries if count > limit]
        if over:
            shown = ", ".join(f"{where}: {count}" for count, where in over[:SHOWN])
            more = f" (+{len(over) - SHOWN})" if len(over) > SHOWN else ""
            findings.append(f"{counter} errors{when} > {limit} on {shown}{more}")
    return findings


def expected_links(policy: NvlinkPolicy, summary: HardwareSummary) -> int | None:
    """The active links each GPU must have; None where not judged: a model not listed,
    or one GPU without an NVSwitch beside it (a VM or partition given one GPU of an HGX
    board: Fabric Manager trains no NVLink for a one-GPU partition, and with no peer
    the links carry nothing)."""
    if one_gpu_slice(summary):
        return None
    value = per_model_value(policy.active_links_by_model, summary.gpu_model, None)
    return None if value is None else int(value)


def one_gpu_slice(summary: HardwareSummary) -> bool:
    """One GPU and no NVSwitch on the bus: a slice of a board, whose NVLinks are idle."""
    return summary.gpu_count == 1 and summary.nvswitch_devices == 0


def judge(
    observed: NvlinkObserved, policy: NvlinkPolicy, summary: HardwareSummary
) -> CheckJudgement:
    expected_count = expected_links(policy, summary)
    expected: JsonValue = {
        "activeLinks": expected_count,
        "failAbove": {str(k): v for k, v in policy.fail_above.items()},
    }
    lost = [f"GPU {g} failed: {what}" for g, what in (observed.failed_gpus or {}).items()]
    failing = lost + _link_failures(observed, expected_count)
    failing += _counter_findings(observed, policy.fail_above)
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing)))
    unsupported = (
        f"; error counters not supported on {gpu_list(parse_gpus(observed.counters_unsupported))}"
        ": not judged"
        if observed.counters_unsupported
        else ""
    )
    unsupported += "".join(
        f"; {part} not supported on {gpu_list(parse_gpus(gpus))}"
        for part, gpus in (observed.counters_not_supported or {}).items()
    )
    unsupported += "".join(
        f"; {part} not read on {gpu_list(parse_gpus(gpus))} (NVML error): not judged there"
        for part, gpus in (observed.counters_not_read or {}).items()
    )
    warning = _counter_findings(observed, policy.warn_above)
    warning += _counter_findings(observed, policy.warn_above, before=True)
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warning) + unsupported))
    gpus, least, _where = _active_facts(observed)
    model = gpu_model_class(summary.gpu_model) or summary.gpu_model or "this model"
    links = (
        f">= {expected_count} active NVLinks"
        if expected_count is not None
        else f">= {least} active NVLinks (one GPU without an NVSwitch, no peer: not judged)"
        if one_gpu_slice(summary)
        else f">= {least} active NVLinks (none expected for {model}: not judged)"
    )
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        clip(f"{gpus} GPUs: {links}, error counts within limits{unsupported}"),
    )


def condense(observed: NvlinkObserved) -> NvlinkObserved:
    worst: dict[str, list[int]] = {}
    for counter, by_link in (observed.errors or {}).items():
        if by_link:
            at = max(by_link, key=by_link.__getitem__)
            gpu, _, link = at.partition(":")
            worst[counter] = [by_link[at], int(gpu), int(link)]
    worst_before: dict[str, list[int]] = {}
    for counter, by_link in (observed.errors_before or {}).items():
        if by_link:
            at = max(by_link, key=by_link.__getitem__)
            gpu, _, link = at.partition(":")
            worst_before[counter] = [by_link[at], int(gpu), int(link)]
    return observed.model_copy(
        update={
            "inactive": None,
            "errors": None,
            "errors_before": None,
            "worst": worst or observed.worst,
            "worst_before": worst_before or observed.worst_before,
        }
    )


def claims(o: NvlinkObserved, _summary: HardwareSummary) -> Claims:
    """Every GPU named is one of the report's; link counts within NVML's 36 links."""
    out = Claims().keys("links", o.links).keys("active", o.active).keys("inactive", o.inactive)
    out.each("links", (o.links or {}).values(), NVLINK_MAX_LINKS)
    out.each("active", (o.active or {}).values(), NVLINK_MAX_LINKS)
    for counters, name in ((o.errors, "errors"), (o.errors_before, "errorsBefore")):
        for by_link in (counters or {}).values():
            for key in by_link:
                gpu, _, _link = key.partition(":")
                out.ranges(name, gpu)
    for worst, name in ((o.worst, "worst"), (o.worst_before, "worstBefore")):
        for entry in (worst or {}).values():
            out.gpu(name, entry[1] if len(entry) > 1 else None)
    out.ranges("countersUnsupported", o.counters_unsupported)
    out.ranges("sinceDriverLoad", o.since_driver_load)
    out.values("countersNotSupported", o.counters_not_supported)
    out.values("countersNotRead", o.counters_not_read)
    return out.keys("failedGpus", o.failed_gpus)


SPEC = CheckSpec(
    measuring=frozenset(),
    judging=frozenset({"active_links_by_model", "warn_above", "fail_above"}),
    name="nvlink",
    title="NVLink",
    summary="every GPU has the active NVLinks its model should (H100/H200 SXM: 18); link "
    "replay, recovery and CRC error counters within limits",
    reason=REASON,
    policy_model=NvlinkPolicy,
    observed_model=NvlinkObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    budget=fixed_phase("NVLink state and counters", 0.5, "8 x 18 links x 4 NVML queries"),
    runbook=RunbookEntry(
        meaning=(
            'a GPU has fewer active NVLinks than its model should (message: "GPU 5: 16 of 18 '
            'NVLinks active (inactive: 16, 17)"), or a link retrained (recovery errors)'
        ),
        fix=(
            "reset the GPU (`nvidia-smi -r`, or reboot) and re-probe; links still down or still "
            "recovering after a reset: reseat the GPU baseboard connectors, then RMA the GPU or "
            "baseboard"
        ),
        warning_meaning="replay or CRC errors on a link since boot",
        warning_fix=(
            "watch the counters (`nvidia-smi nvlink -e`); rising counts on one link precede Xid "
            "74: reseat, then RMA"
        ),
    ),
)
