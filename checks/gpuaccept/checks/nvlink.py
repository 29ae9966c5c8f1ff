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
    FailureOwnership,
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


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | `default-h100-h200.yaml` | meaning |
|-------|---------|------|---------|
| `activeLinksByModel` | `{h100-sxm: 18, h200-sxm: 18, b200: 18}` | `{h100-sxm: 18, h200-sxm: 18}` | Active NVLinks each GPU of the model must have (exact NVML name or [class](#gpu-model-classes)). A model not listed has its links recorded, not judged. |
| `warnAbove` | `{replay: 0, recovery: 0, crc: 0, ecc: 0}` | same | Per link: more errors than this during the probe's run, or already counted before it, warns. |
| `failAbove` | `{recovery: 0}` | same | Per link: more errors than this during the probe's run fails; a counter not listed never fails. |

How the probe reads the links: the device's own link count from
`nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_LINK_COUNT)` (field 91 in every
`nvml.h` from R450 to R590; the renumbering between branches moved fields
above 250 only), never the binding's `NVML_NVLINK_MAX_LINKS` (36, a bound for
arrays, not any GPU's count: iterating to it would report 18 phantom inactive
links on an H100), then `nvmlDeviceGetNvLinkState` for each link. A link
count NVML answers with NotSupported is a GPU without NVLink (NVML's return for
"the device does not support this feature": a PCIe card without a bridge): 0
links, judged against what the model should have (nothing for `h100-pcie`, so
it passes; trap `h100-pcie-8gpu-no-nvlink-bridge.yaml`,
`tests/probe/test_probe_nvlink_fabric_config.py`). Earlier probes made that
answer a `skip`, which quarantined every such node. Any other error on the
count makes the check `skip` with the GPU named; a link whose state is
NotSupported counts as inactive (it cannot make a GPU pass).

Why these figures:

* **18 links on HGX H100/H200.** Each H100 SXM5 and H200 SXM GPU has 18
  fourth-generation NVLinks (900 GB/s), all of them to the board's NVSwitches;
  NVIDIA's own health checks expect every link active
  ([Health Validation, NVLink checks](https://docs.nvidia.com/health-validation/reference/checks/nvlink):
  `max_inactive_nvlinks` 0, `expected_link_count` 18). One link down costs that
  GPU 1/18 of its NVLink bandwidth and every all-reduce waits for it, often
  without the node-wide busbw falling below `ncclAllreduce`'s minimum.
* **PCIe/NVL parts are not listed.** An H100 NVL pair is bridged with 12 of its
  18 links; the trap `h100-nvl-8gpu-bridged-links.yaml` shows 6 inactive links
  per GPU and passes.
* **Counters.** NVML's counters are cumulative since the driver loaded (a reboot,
  or `nvmlDeviceResetNvLinkErrorCounters`); the probe runs right after a boot
  (a new boot ID triggers a re-probe), after its own all-reduce over those
  links. NVIDIA's DCGM health watch treats a replay or recovery error in its
  window as critical and CRC errors as a warning below 100 per second
  (`DCGM_LIMIT_MAX_NVLINK_CRC_ERROR`: "CRC errors only matter at rates of 100+
  per second"); Meta's GCM health checks default every NVLink error threshold
  to 0 ([nvlink check](https://facebookresearch.github.io/gcm/docs/GCM_Health_Checks/health_checks/check-dcgmi/nvlink)).
  A cumulative count cannot give a rate, and a healthy high-speed serial link
  shows an occasional CRC error and the replay that corrects it, so replay and
  CRC only warn by default (the all-reduce judges what they cost). A recovery
  is the link going down and retraining: healthy links do not do that, so any
  recovery fails. The trap `h100-sxm-8gpu-config-tuned.yaml` has 14 CRC and 2
  replay errors on one link and is accepted with a warning; the fault
  `nvlink-recovery-errors.yaml` fails.
* **Judged over the probe's own run.** The runner reads every GPU's counters
  once before the first check; `errors` is the increase from then to the
  `nvlink` measurement (after the copies, the load and the all-reduce), which
  `failAbove` and `warnAbove` judge, as DCGM's NVLink health watch judges the
  errors that arrive in its window. What was there before (`errorsBefore`:
  since driver load, e.g. link training at boot) only warns. A GPU whose
  baseline could not be read is listed in `sinceDriverLoad` and judged on its
  cumulative counts, as before. Trap:
  `h100-sxm-8gpu-nvlink-errors-before-probe.yaml` (a recovery counted before the
  probe: accepted with a warning; before, it was quarantined).
* **Each counter on its own.** `nvmlDeviceGetNvLinkErrorCounter` is called per
  link and per counter (`DL_REPLAY`, `DL_RECOVERY`, `DL_CRC_FLIT`,
  `DL_CRC_DATA`); one that answers NotSupported is listed per GPU in
  `countersNotSupported` and the others are still read and judged (on Hopper
  the per-link CRC data counter is not in the set, NVIDIA/DCGM issue 173; DCGM's
  NVLink 4 monitor reads each field separately). Before, the first NotSupported
  dropped every counter of the GPU, so recovery errors were never judged (the
  fault `nvlink-recovery-crc-data-unsupported.yaml`). A counter that answers
  any other NVML error on some link (but `GPU_IS_LOST`, which fails the GPU) is
  listed in `countersNotRead` and not judged on that GPU; the GPU's other
  counters are kept and judged. Before, that one error made the whole GPU
  `Unavailable`, the check skipped, and a required skip quarantined
  (`tests/probe/test_nvlink_counters_per_field.py`).
* **Data ECC (`ecc`).** `NVML_NVLINK_ERROR_DL_ECC_DATA` (4, "Data link receive
  data ECC error counter", in `nvmlNvLinkErrorCounter_t` of every nvml.h from
  R535 to R590, NVIDIA/go-nvml) counts the data errors NVLink 4 (Hopper)
  corrects. Corrected errors, like CRC: `warnAbove.ecc: 0`, never fails by
  default. A GPU that answers NotSupported (before Hopper) lists `ecc_data`.
* **Blackwell.** nvml.h marks the replay, recovery and CRC link counters
  "unsupported for Blackwell+. Please use NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*".
  Where `DL_RECOVERY` answers NotSupported, the probe reads
  `NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS` (field 215, "number of times
  link went from Up to recovery, irrespective of the result"; in nvml.h from the
  R560 sync, CUDA 12.6) per link (`scopeId` = link) through
  `nvmlDeviceGetFieldValues`, and judges it as `recovery` (`failAbove.recovery:
  0`). Replay and CRC have no Blackwell counterpart in NVML: on a B200 they are
  listed in `countersNotSupported` and not judged; that is all the NVLink error
  judgement a B200 gets (not checked on a B200 here). Where neither the counter
  nor the field answers, the GPUs are listed in `countersUnsupported` and the
  counters are not judged (the links still are).
"""  # noqa: E501


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
# NVML_FI_DEV_NVLINK_LINK_COUNT / nvmlDeviceGetNvLinkState; HGX H100/H200: 18 NVLink 4
# links per GPU. PCIe/NVL parts are not listed: their links are recorded, not judged.
activeLinksByModel: {h100-sxm: 18, h200-sxm: 18}
warnAbove: {replay: 0, recovery: 0, crc: 0, ecc: 0}   # per link, over the probe's run
failAbove: {recovery: 0}                      # a link that retrained (DCGM: critical)
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            'a GPU with a link down drops out of NVLink peer-to-peer ("If a GPU fails to '
            "register with the fabric, it will lose its NVLink peer-to-peer capability and be"
            ' available for non-peer-to-peer use cases"), and a job spanning it runs its '
            "collectives at the slowest path: the node's multi-GPU capacity is lost, not one "
            "GPU's"
        ),
        source=(
            "NVIDIA Fabric Manager user guide "
            "(docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide)"
        ),
    ),
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
    shipped=SHIPPED,
    docs=DOCS,
    # each GPU's NVLink counters before the first check (the run)
    needs=frozenset({"nvlink_before"}),
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
