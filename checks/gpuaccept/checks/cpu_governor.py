"""``cpu_governor``: every online CPU runs the required cpufreq governor.

The probe reads ``<sysfs>/devices/system/cpu/cpuN/cpufreq/scaling_governor``
through its hardware backend. A kernel with no cpufreq driver at all (no CPU has a
``cpufreq`` directory: VMs, and servers whose BIOS owns the P-states under a
maximum-performance profile) is a platform without the interface, not a failed
read: the observed value says so (``noCpufreq``) and the judge applies
``withoutCpufreq`` (default ``pass``: no OS governor can slow those CPUs down).
A sysfs that cannot be read at all is an error.

observed (no driver: ``{"cpus": 0, "count": {}, "noCpufreq": "…"}``):
``{"cpus": 64, "count": {"performance": 60, "powersave": 4},
"list": {"performance": "4-63", "powersave": "0-3"}}`` (``list`` is dropped
when condensed; cpulists longer than 96 characters are clipped).
"""

from enum import StrEnum

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims
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

REASON = "CpuGovernorFailed"
CPULIST_MAX = 96


class WithoutCpufreq(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


class CpuGovernorPolicy(CheckSwitch):
    required_governor: str = Field(
        default="performance",
        pattern=r"^[a-z_]{1,32}$",
        description="The cpufreq scaling_governor every online CPU must run.",
    )
    # Source: the kernel's cpufreq documentation (admin-guide/pm/cpufreq.rst): without a
    # scaling driver the CPUs run as the platform firmware sets them; BIOS "maximum
    # performance" profiles (OS control of P-states off) load none. docs/policy.md.
    without_cpufreq: WithoutCpufreq = Field(
        default=WithoutCpufreq.PASS,
        description="The result when the kernel has no cpufreq driver (no CPU has a cpufreq "
        "directory): the firmware owns the P-states, no governor can hold the CPUs low.",
    )


class CpuGovernorObserved(ObservedModel):
    cpus: int = Field(ge=0)
    count: dict[str, int]  # governor -> CPUs on it
    cpu_lists: dict[str, str] | None = Field(default=None, alias="list")  # detail: cpulists
    no_cpufreq: str | None = Field(default=None, max_length=200)  # why: no cpufreq driver


def judge(
    observed: CpuGovernorObserved, policy: CpuGovernorPolicy, summary: HardwareSummary
) -> CheckJudgement:
    required = policy.required_governor
    expected: JsonValue = {"governor": required}
    if observed.no_cpufreq is not None:
        status = {
            WithoutCpufreq.PASS: CheckStatus.PASS,
            WithoutCpufreq.WARN: CheckStatus.WARN,
            WithoutCpufreq.FAIL: CheckStatus.FAIL,
        }[policy.without_cpufreq]
        return CheckJudgement(
            status,
            {"governor": required, "withoutCpufreq": str(policy.without_cpufreq)},
            clip(
                f"no cpufreq driver ({observed.no_cpufreq}): the firmware owns the P-states, "
                "no governor to judge"
            ),
        )
    offending = {g: n for g, n in observed.count.items() if g != required}
    if not offending:
        return CheckJudgement(CheckStatus.PASS, expected, f"all {observed.cpus} CPUs on {required}")
    lists = observed.cpu_lists or {}
    details = "; ".join(
        f"{g} on CPU {lists[g]}" if g in lists else f"{g} on {n} CPUs" for g, n in offending.items()
    )
    bad = sum(offending.values())
    return CheckJudgement(
        CheckStatus.FAIL,
        expected,
        clip(f"{bad} of {observed.cpus} CPUs not on {required}: {details}"),
    )


def condense(observed: CpuGovernorObserved) -> CpuGovernorObserved:
    return observed.model_copy(update={"cpu_lists": None})


def claims(_observed: CpuGovernorObserved, _summary: HardwareSummary) -> Claims:
    """Governors are per CPU: nothing about the GPUs."""
    return Claims()


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = """\
| field | default | meaning |
|-------|---------|---------|
| `requiredGovernor` | `performance` | Every online CPU's `scaling_governor` (sysfs) must be this. The failure names the offending CPUs. |
| `withoutCpufreq` | `pass` | The result when the kernel has no cpufreq driver (no CPU has a `cpufreq` directory). A sysfs that cannot be read at all is an error, not this. |

Why `withoutCpufreq: pass`: `cpuX/cpufreq` exists only while a cpufreq driver is
registered (the kernel's sysfs ABI, `Documentation/ABI/testing/sysfs-devices-system-cpu`);
servers whose BIOS owns the P-states (a "maximum performance" power profile, OS
control of P-states off) and many VMs load none, and then no OS governor can hold
the CPUs low (`Documentation/admin-guide/pm/cpufreq.rst`: the scaling driver is
what talks to the hardware). Before, such a node skipped a required check and was
quarantined (`CheckSkipped`) while running at full speed. Trap:
`profiles/h100-sxm-8gpu-bios-pstates.yaml`.

Why `performance`: it holds each CPU at its highest frequency (the kernel's
cpufreq documentation, `Documentation/admin-guide/pm/cpufreq.rst`, governor
`performance`), which is what the operational checklist in the project's
background reading asks of GPU nodes; `powersave`, `schedutil` and `ondemand`
let the data-loader and NCCL proxy threads run at low clocks. A platform that
tunes otherwise sets its own governor here.
"""  # noqa: E501


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
requiredGovernor: performance
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why="the host's CPUs feed every GPU",
        source="kernel `Documentation/admin-guide/pm/cpufreq.rst` (a host policy per CPU)",
    ),
    measuring=frozenset(),
    judging=frozenset({"required_governor", "without_cpufreq"}),
    name="cpu_governor",
    title="CPU governor",
    summary="every online CPU runs the required cpufreq governor (`performance`)",
    reason=REASON,
    policy_model=CpuGovernorPolicy,
    observed_model=CpuGovernorObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
    budget=fixed_phase("cpufreq governor of every CPU", 0.1, "one sysfs file per CPU (224)"),
    runbook=RunbookEntry(
        meaning="CPUs not on the required governor (e.g. `powersave`)",
        fix="set `performance` (tuned / BIOS)",
    ),
)
