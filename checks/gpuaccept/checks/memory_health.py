"""``memory_health``: ECC on, no uncorrected errors since the driver loaded,
no row remap pending or failed, no page retirement pending.

Per GPU, from NVML (no load needed):

* ECC mode, current and pending (``nvmlDeviceGetEccMode``): both must be on
  when ``requireEcc`` (a pending "off" takes effect at the next reset).
* Volatile uncorrected ECC errors (``nvmlDeviceGetTotalEccErrors``, since the
  driver last loaded): more than ``maxVolatileUncorrected`` fails.
* Aggregate uncorrected ECC errors (the GPU's lifetime): more than
  ``warnAggregateUncorrected`` warns. Lifetime counts include errors the GPU
  has already repaired by remapping, so they only warn.
* Remapped rows (``nvmlDeviceGetRemappedRows``, Ampere and later): a pending
  remap fails (the GPU must be reset to apply it); a remap failure fails (the
  GPU must be replaced).
* Retired pages (``nvmlDeviceGetRetiredPages``, GPUs before Ampere that use
  dynamic page retirement; NVML answers NotSupported on the others): a
  retirement pending fails (reset or reboot to apply it); more than
  ``maxRetiredPages`` fails (replace).

A part NVML does not support on a GPU is named in ``notRead`` (remapped rows
and retired pages are each expected to be missing on one GPU generation and
are not named then); a part that could not be read on any GPU leaves the rest
judged.

observed::

    {"gpus": 8, "eccOff": "3", "volatileUncorrected": {"5": 2},
     "aggregateUncorrected": {"5": 2}, "remapPending": "5",
     "remappedRows": {"5": [0, 1]}, "remapFailed": "2",
     "retiredPages": {"1": 64}, "retirePending": "1",
     "notRead": {"eccMode": "GPU 6: NotSupported"}}

(GPU sets as range text ``"0-3,5"``; counts only for GPUs above zero;
``remappedRows``: [correctable, uncorrectable] rows of the GPUs with a pending
or failed remap.) Condensed: each count map merged to one entry (every GPU
concerned → the largest count), ``remappedRows`` dropped and ``notRead``
only naming the GPUs.
"""

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims
from gpuaccept.checks.gpu_ranges import format_gpus, parse_gpus
from gpuaccept.checks.gpu_sets import gpu_label, merged, notes_condensed
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, RunbookEntry, clip
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "MemoryHealthFailed"


class MemoryHealthPolicy(CheckSwitch):
    require_ecc: bool = Field(
        default=True, description="ECC must be on, both current and pending, on every GPU."
    )
    max_volatile_uncorrected: int = Field(
        default=0,
        ge=0,
        description="Uncorrected ECC errors since the driver loaded above this fail the GPU.",
    )
    warn_aggregate_uncorrected: int = Field(
        default=0,
        ge=0,
        description="Lifetime uncorrected ECC errors above this warn.",
    )
    max_retired_pages: int = Field(
        default=60,
        ge=0,
        description="Retired pages (page-retirement GPUs) above this fail the GPU.",
    )


class MemoryHealthObserved(ObservedModel):
    gpus: int = Field(ge=0)
    ecc_off: str | None = None  # GPUs whose current ECC mode is off
    ecc_pending_off: str | None = None  # GPUs whose ECC mode turns off at the next reset
    volatile_uncorrected: dict[str, int] | None = None
    aggregate_uncorrected: dict[str, int] | None = None
    remap_pending: str | None = None
    remap_failed: str | None = None
    remapped_rows: dict[str, list[int]] | None = None  # detail: [correctable, uncorrectable]
    retired_pages: dict[str, int] | None = None
    retire_pending: str | None = None
    not_read: dict[str, str] | None = None  # part → which GPUs and why


def _pending_groups(observed: MemoryHealthObserved) -> dict[str, str]:
    """GPUs with a pending remap → their remapped rows as text, GPUs with the same
    rows together (the condensed form has no rows: one group, no text)."""
    pending = parse_gpus(observed.remap_pending or "")
    rows = observed.remapped_rows or {}
    if not all(str(gpu) in rows and len(rows[str(gpu)]) == 2 for gpu in pending):
        return {observed.remap_pending or "": ""}
    groups: dict[tuple[int, ...], list[int]] = {}
    for gpu in pending:
        groups.setdefault(tuple(rows[str(gpu)]), []).append(gpu)
    return {
        format_gpus(gpus): f"{c} correctable, {u} uncorrectable rows remapped; "
        for (c, u), gpus in groups.items()
    }


def _over(counts: dict[str, int] | None, limit: int, text: str) -> list[str]:
    return [
        f"{gpu_label(gpus)}: {count} {text}"
        for gpus, count in sorted((counts or {}).items())
        if count > limit
    ]


def _failures(observed: MemoryHealthObserved, policy: MemoryHealthPolicy) -> list[str]:
    out: list[str] = []
    if observed.remap_failed:
        out.append(f"{gpu_label(observed.remap_failed)}: row remapping failed (replace the GPU)")
    if observed.remap_pending:
        out += [
            f"{gpu_label(gpus)}: row remap pending ({rows}reset needed)"
            for gpus, rows in _pending_groups(observed).items()
        ]
    out += _over(
        observed.volatile_uncorrected,
        policy.max_volatile_uncorrected,
        "uncorrected ECC errors since the driver loaded",
    )
    if policy.require_ecc and observed.ecc_off:
        out.append(f"{gpu_label(observed.ecc_off)}: ECC off")
    if policy.require_ecc and observed.ecc_pending_off:
        out.append(f"{gpu_label(observed.ecc_pending_off)}: ECC off after the next reset")
    if observed.retire_pending:
        out.append(f"{gpu_label(observed.retire_pending)}: page retirement pending (reset needed)")
    out += _over(observed.retired_pages, policy.max_retired_pages, "retired pages (replace)")
    return out


def judge(
    observed: MemoryHealthObserved, policy: MemoryHealthPolicy, summary: HardwareSummary
) -> CheckJudgement:
    expected: JsonValue = {
        "ecc": "on" if policy.require_ecc else "any",
        "maxVolatileUncorrected": policy.max_volatile_uncorrected,
        "warnAggregateUncorrected": policy.warn_aggregate_uncorrected,
        "maxRetiredPages": policy.max_retired_pages,
        "remap": "none pending or failed",
    }
    for text in (
        observed.ecc_off,
        observed.ecc_pending_off,
        observed.remap_pending,
        observed.remap_failed,
        observed.retire_pending,
    ):
        if text:
            parse_gpus(text)  # a malformed GPU set is an error, never a pass
    failing = _failures(observed, policy)
    warning = _over(
        observed.aggregate_uncorrected,
        policy.warn_aggregate_uncorrected,
        "uncorrected ECC errors in the GPU's lifetime",
    )
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing + warning)))
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warning)))
    notes = [f"{part} not read: {why}" for part, why in (observed.not_read or {}).items()]
    ok = f"ECC and memory healthy on {observed.gpus} GPU{'s' if observed.gpus != 1 else ''}"
    return CheckJudgement(CheckStatus.PASS, expected, clip("; ".join([ok, *notes])))


def condense(observed: MemoryHealthObserved) -> MemoryHealthObserved:
    update: dict[str, object] = {
        "remapped_rows": None,
        "not_read": notes_condensed(observed.not_read),
    }
    for name in ("volatile_uncorrected", "aggregate_uncorrected", "retired_pages"):
        counts = getattr(observed, name)
        if counts:
            update[name] = merged(counts)
    return observed.model_copy(update=update)


def claims(o: MemoryHealthObserved, _summary: HardwareSummary) -> Claims:
    """The GPUs are the report's."""
    out = Claims().count("gpus", o.gpus)
    for name, text in (
        ("eccOff", o.ecc_off),
        ("eccPendingOff", o.ecc_pending_off),
        ("remapPending", o.remap_pending),
        ("remapFailed", o.remap_failed),
        ("retirePending", o.retire_pending),
    ):
        out.ranges(name, text)
    for name, by_gpus in (
        ("volatileUncorrected", o.volatile_uncorrected),
        ("aggregateUncorrected", o.aggregate_uncorrected),
        ("remappedRows", o.remapped_rows),
        ("retiredPages", o.retired_pages),
    ):
        out.keys(name, by_gpus)
    return out


SPEC = CheckSpec(
    measuring=frozenset(),
    judging=frozenset(
        {
            "require_ecc",
            "max_volatile_uncorrected",
            "warn_aggregate_uncorrected",
            "max_retired_pages",
        }
    ),
    name="memory_health",
    title="Memory health",
    summary="ECC on (current and pending), no uncorrected ECC errors since the driver loaded, "
    "no row remap pending or failed, no page retirement pending (lifetime uncorrected warn)",
    reason=REASON,
    policy_model=MemoryHealthPolicy,
    observed_model=MemoryHealthObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    budget=fixed_phase("ECC, row remapping", 0.1, "NVML queries"),
    runbook=RunbookEntry(
        meaning=(
            "ECC off, uncorrected ECC errors since the driver loaded, a row remap pending or "
            "failed, page retirement pending"
        ),
        fix="[Memory and Xid faults](#memory-and-xid-faults)",
    ),
)
