"""Whether a stored report may be judged again under a policy, or must be measured
again. Pure.

A re-judge applies new thresholds to what the probe observed. It cannot apply
settings that change what the probe measures (sizes, durations, what it runs:
each check's :attr:`~gpuaccept.checks.spec.CheckSpec.measuring` fields), nor
judge a check the report has no result of (turned on since), nor judge again a
result the probe compacted (``observed: null``, its status kept) under a section
that changed. Each of those starts a new round instead of a verdict: a policy
change never convicts a node on evidence it did not measure.

:func:`probed_sections` is what the operator stores with a report (digests of the
sections it was measured under); :func:`remeasure_reason` compares it with the
current policy.
"""

import hashlib
import json
from collections.abc import Mapping, Sequence

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.checks.spec import AnyCheckSpec
from gpuaccept.contracts.nodeacceptance import ProbedSection
from gpuaccept.contracts.report import CheckStatus, ProbeReport

DIGEST_CHARS = 16


def _digest(values: Mapping[str, object]) -> str:
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


MEMO_POLICIES = 8  # the policies whose digests are kept (a fleet has a few)
# id(policy) -> (the policy, its digests by check): a policy is frozen, so the same
# object has the same digests; holding it keeps its id from being reused
_MEMO: dict[int, tuple[ProbePolicy, dict[tuple[str, tuple[str, ...]], ProbedSection]]] = {}


def _digests_of(policy: ProbePolicy) -> dict[tuple[str, tuple[str, ...]], ProbedSection]:
    entry = _MEMO.get(id(policy))
    if entry is not None and entry[0] is policy:
        return entry[1]
    if len(_MEMO) >= MEMO_POLICIES:
        _MEMO.pop(next(iter(_MEMO)), None)  # the oldest
    digests: dict[tuple[str, tuple[str, ...]], ProbedSection] = {}
    _MEMO[id(policy)] = (policy, digests)
    return digests


def section_digests(check: AnyCheckSpec, policy: ProbePolicy) -> ProbedSection:
    """Digests of ``check``'s section in ``policy``: its measuring fields, and all of it
    (computed once per policy object and check: every verdict stores them)."""
    key = (check.name, tuple(sorted(check.measuring)))
    digests = _digests_of(policy)
    found = digests.get(key)
    if found is None:
        dumped = policy.section(check).model_dump(mode="json")
        measured = {name: dumped[name] for name in key[1]}
        found = ProbedSection(measured=_digest(measured), section=_digest(dumped))
        digests[key] = found
    return found


def probed_sections(
    policy: ProbePolicy, checks: Sequence[AnyCheckSpec] = CHECKS
) -> dict[str, ProbedSection]:
    """What a report measured under ``policy`` is stored with: each enabled check's digests."""
    out: dict[str, ProbedSection] = {}
    for check in checks:
        switch = policy.switch(check.name)
        if switch is None or switch.enabled:
            out[check.name] = section_digests(check, policy)
    return out


def remeasure_reason(
    report: ProbeReport,
    probed: Mapping[str, ProbedSection] | None,
    policy: ProbePolicy,
    checks: Sequence[AnyCheckSpec] = CHECKS,
) -> str | None:
    """Why ``report`` must be measured again rather than judged under ``policy``, or None.

    ``probed`` is what was stored with it (None: a report stored before digests were;
    then only a missing or a compacted result asks for a new measurement).
    """
    for check in checks:
        switch = policy.switch(check.name)
        if switch is not None and not switch.enabled:
            continue
        result = report.result(check.name)
        if result is None:
            return f"{check.name}: no result in the stored report (enabled since it was measured)"
        now = section_digests(check, policy)
        then = probed.get(check.name) if probed is not None else None
        if probed is not None and then is None:
            return f"{check.name}: enabled since the stored report was measured"
        if then is not None and then.measured != now.measured:
            return f"{check.name}: what the probe measures changed (a measuring setting)"
        compacted = result.observed is None and result.status not in (
            CheckStatus.ERROR,
            CheckStatus.SKIP,
        )
        if compacted and (then is None or then.section != now.section):
            return f"{check.name}: the stored result was compacted; its section changed"
    return None
