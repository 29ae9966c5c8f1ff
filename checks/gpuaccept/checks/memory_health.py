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

A GPU whose ECC mode NVML answers NotSupported has no ECC (NVML's reference,
``nvmlDeviceGetEccMode``: "Only applicable to devices with ECC"; nvidia-smi
prints ``ECC Mode: N/A``): named in ``eccUnsupported``, it fails when
``requireEcc``. Any other part NVML does not answer on a GPU is named in
``notRead`` (remapped rows and retired pages are each expected to be missing on
one GPU generation and are not named then). What was not read is not judged,
and never passes: the ECC mode, when ``requireEcc``, is an error (ECC on is not
shown); any other part a warning, the rest still judged (a GPU that answered
NotSupported to every read once passed).

observed::

    {"gpus": 8, "eccOff": "3", "volatileUncorrected": {"5": 2},
     "aggregateUncorrected": {"5": 2}, "remapPending": "5",
     "remappedRows": {"5": [0, 1]}, "remapFailed": "2",
     "retiredPages": {"1": 64}, "retirePending": "1",
     "eccUnsupported": "7", "notRead": {"eccMode": "GPU 6: NVML: Unknown Error"}}

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
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    ObservedModel,
    RunbookEntry,
    clip,
)
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
    ecc_unsupported: str | None = None  # GPUs whose ECC mode NVML answers NotSupported: no ECC
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
    if policy.require_ecc and observed.ecc_unsupported:
        out.append(
            f"{gpu_label(observed.ecc_unsupported)}: no ECC "
            "(NVML answers NotSupported for the ECC mode)"
        )
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
        observed.ecc_unsupported,
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
    not_read = observed.not_read or {}
    unread = [f"{part} not read: {why}" for part, why in not_read.items()]
    if failing:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(failing + warning)))
    if policy.require_ecc and "eccMode" in not_read:  # required, and not shown
        text = f"eccMode not read: {not_read['eccMode']}: ECC on is not shown"
        return CheckJudgement(CheckStatus.ERROR, expected, clip(text))
    if observed.ecc_unsupported:  # ECC not required: the GPUs have none to judge
        unread.insert(0, f"{gpu_label(observed.ecc_unsupported)}: no ECC")
    if unread:  # unjudged, never passed
        warning.append("not judged: " + "; ".join(unread))
    if warning:
        return CheckJudgement(CheckStatus.WARN, expected, clip("; ".join(warning)))
    ok = f"ECC and memory healthy on {observed.gpus} GPU{'s' if observed.gpus != 1 else ''}"
    return CheckJudgement(CheckStatus.PASS, expected, ok)


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
        ("eccUnsupported", o.ecc_unsupported),
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


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | meaning |
|-------|---------|---------|
| `requireEcc` | `true` | ECC on, current and pending (`nvmlDeviceGetEccMode`), on every GPU. |
| `maxVolatileUncorrected` | 0 | Uncorrected ECC errors since the driver loaded (`nvmlDeviceGetTotalEccErrors`, `NVML_VOLATILE_ECC`) above this fail the GPU. |
| `warnAggregateUncorrected` | 0 | Lifetime uncorrected ECC errors (`NVML_AGGREGATE_ECC`) above this warn. |
| `maxRetiredPages` | 60 | Retired pages (GPUs before Ampere) above this fail the GPU. |

Besides these thresholds, the check always fails on three things:

* **Remap pending** (`nvmlDeviceGetRemappedRows`, `isPending`): "GPU 5: row
  remap pending (0 correctable, 1 uncorrectable rows remapped; reset
  needed)". NVIDIA: the remap takes effect at the next GPU reset, and until
  then, unaffected applications run normally.
* **Remap failure** (`failureOccurred`): the bank is out of spare rows. This is
  the RMA condition in NVIDIA's row-remapping RMA policy.
* **Page retirement pending** (`nvmlDeviceGetRetiredPagesPendingStatus`, GPUs
  before Ampere only): it takes effect at the next driver reload or reset.

What NVML answers, and what healthy hardware shows:

* **ECC** is on by default on every data center GPU (H100, H200). Turning it
  off (`nvidia-smi -e 0`) shows as pending `off` until the next reset, which
  fails as "ECC off after the next reset". With ECC off there are no ECC
  counters, so they are not read.
* **Volatile uncorrected** counts start at 0 when the driver loads. A healthy
  node shows 0. Any uncorrected error has already cost some application its
  data (Xid 48, 94 or 95).
* **Aggregate uncorrected** counts cover the GPU's lifetime, including errors
  the GPU has since contained and remapped. A healthy, well-used H100 may
  show a few. They warn by default, and a policy can raise the threshold to
  silence them.
* **Remapped rows** on a healthy A100/H100/H200: a few correctable and
  uncorrectable remaps, none pending, no failure. NVIDIA's memory error guide
  describes this as the mechanism working as designed: each bank has spare
  rows, and the GPU needs replacement only when a remap fails. The counts are
  recorded only for GPUs with a pending or failed remap. The trap
  `h100-sxm-8gpu-old-row-remaps.yaml` (3 correctable and 1 uncorrectable
  remapped rows, none pending) is accepted, with the aggregate warning.
* **Retired pages** apply only to GPUs before Ampere. On Ampere and later,
  NVML answers NotSupported, because row remapping replaced page retirement,
  and the probe does not name it. A GPU that supports neither is named under
  `notRead.remappedRows`.
  The 60-page line is from NVIDIA's dynamic page retirement document (its RMA
  guidance for page-retirement GPUs). The copy of that document reachable
  while this was written did not show the figure, so confirm it against the
  current version before relying on it. The driver retires at most 64 pages
  per GPU.

* **No ECC.** `nvmlDeviceGetEccMode` is "only applicable to devices with
  ECC" (NVML API reference; the cuda-python binding's
  `device_get_ecc_mode` repeats it): a GPU without ECC (GeForce, TITAN)
  answers NotSupported, and nvidia-smi prints `ECC Mode: Current N/A`, as the
  corpus's TITAN V (`gpud-titanv-r560`) and RTX 3060 Laptop
  (`netdata-rtx3060-laptop-r515`) do, with their ECC counters and remapped rows
  N/A too. Such GPUs are named in `eccUnsupported` and fail when `requireEcc`
  ("no ECC"), like ECC off. A healthy H100, H200 or A100 reads ECC `Enabled`,
  counters as numbers, remapped rows as numbers (NVML reference,
  `nvmlDeviceGetRemappedRows`: "For Ampere or newer fully supported devices")
  and retired pages N/A.
* **MIG.** "On MIG-enabled GPUs with active instances, querying the number of
  remapped rows is not supported" (NVML reference, `nvmlDeviceGetRemappedRows`);
  the corpus's A100 in MIG mode (`netdata-a100-sxm4-40gb-mig-passthrough-r510`)
  also prints its volatile uncorrectable counts N/A. Those parts are not read,
  so the check warns there (below).

A part NVML cannot answer on a GPU (NotSupported, or another error) is named
in `notRead` ("GPUs 0-7: NotSupported"). What was not read is not judged and
is never a pass (a TITAN V that answered NotSupported to every read once
passed): the check **warns** "not judged: …", and the other parts are
still judged (a failure among them fails). The ECC mode is the exception when
`requireEcc`: left unread by an error other than NotSupported, ECC on is not
shown, and the check is an **error** (`ProbeError`), not a warning. A GPU NVML
has lost is named under `notRead.all` (a warning here): it fails
`throttle_reasons` and `pcie_link` by name, and this check does not judge it
twice.
"""  # noqa: E501


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
requireEcc: true          # current and pending ECC mode on
maxVolatileUncorrected: 0 # any uncorrected ECC error since the driver loaded fails
warnAggregateUncorrected: 0   # lifetime uncorrected errors (already remapped) warn
maxRetiredPages: 60       # page-retirement GPUs: NVIDIA's RMA threshold
"""


def failing_gpus(
    observed: MemoryHealthObserved, policy: MemoryHealthPolicy
) -> frozenset[int] | None:
    """The GPUs a failure names: ECC, remapping and retired pages are one GPU's own
    memory (docs/policy.md, "Per-GPU verdicts"). None where a count over its limit is
    the condensed form's merge of several GPUs (which of them is over is not kept)."""
    sets = [observed.remap_failed, observed.remap_pending, observed.retire_pending]
    if policy.require_ecc:
        sets += [observed.ecc_off, observed.ecc_pending_off, observed.ecc_unsupported]
    out = {gpu for text in sets if text for gpu in parse_gpus(text)}
    for counts, limit in (
        (observed.volatile_uncorrected, policy.max_volatile_uncorrected),
        (observed.retired_pages, policy.max_retired_pages),
    ):
        for key, count in (counts or {}).items():
            gpus = parse_gpus(key)
            if count > limit and len(gpus) > 1:
                return None
            if count > limit:
                out |= set(gpus)
    return frozenset(out)


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why=(
            "ECC mode, uncorrected errors, row remapping and retired pages are one GPU's HBM;"
            " a pending remap needs that GPU's reset, a remap failure that GPU's replacement."
            " A merged count of the condensed form (several GPUs, the largest count) is the "
            "node's"
        ),
        source=(
            "NVML `nvmlDeviceGetRemappedRows`, `nvmlDeviceGetEccMode` (per device); NVIDIA "
            '"GPU memory error management" (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt)'
        ),
    ),
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
    failing_gpus=failing_gpus,
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    budget=fixed_phase("ECC, row remapping", 0.1, "NVML queries"),
    runbook=RunbookEntry(
        meaning=(
            "ECC off, uncorrected ECC errors since the driver loaded, a row remap pending or "
            "failed, page retirement pending"
        ),
        fix="[Memory and Xid faults](#memory-and-xid-faults)",
    ),
)
