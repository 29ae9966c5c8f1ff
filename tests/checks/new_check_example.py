"""The worked example of docs/architecture.md, "Adding a check": a new check,
``gpu_model_allowed`` (every GPU is a model the cluster allows), as the six
hand-written parts it takes, each as the text of its file. It asks the hardware
backend nothing new (``hardware.gpus()``: NVML's ``nvmlDeviceGetName``), so it needs
no new hardware question. tests/checks/test_adding_a_check.py writes them into a
copy of the repository's layout and removes each in turn."""

NAME = "gpu_model_allowed"

# 1. the judging module: checks/gpuaccept/checks/gpu_model_allowed.py
JUDGING_MODULE = '''\
"""``gpu_model_allowed``: every GPU is a model the cluster allows (NVML's name)."""

from pydantic import Field

from gpuaccept.checks.claims import Claims
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, RunbookEntry
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckStatus, HardwareSummary


class GpuModelAllowedPolicy(CheckSwitch):
    allowed_models: list[str] = Field(
        default_factory=list, description="NVML names a GPU may have; empty: any."
    )


class GpuModelAllowedObserved(ObservedModel):
    models: list[str]  # one per GPU, in index order


def judge(
    observed: GpuModelAllowedObserved, section: GpuModelAllowedPolicy, _summary: HardwareSummary
) -> CheckJudgement:
    allowed = section.allowed_models
    others = sorted({m for m in observed.models if allowed and m not in allowed})
    status = CheckStatus.FAIL if others else CheckStatus.PASS
    message = f"not allowed: {', '.join(others)}" if others else "every GPU allowed"
    return CheckJudgement(status, {"allowedModels": allowed}, message)


def claims(observed: GpuModelAllowedObserved, _summary: HardwareSummary) -> Claims:
    return Claims().per_gpu("models", observed.models)


SHIPPED = """\\
allowedModels: [NVIDIA H100 80GB HBM3, NVIDIA H200]   # the GPUs this policy's figures are for
"""

DOCS = """\\
The shipped list names the two SXM parts the other thresholds of this policy are
for (NVML's names, as `nvmlDeviceGetName` returns them).
"""

SPEC = CheckSpec(
    name="gpu_model_allowed",
    title="GPU model",
    summary="every GPU is a model the policy allows",
    reason="GpuModelAllowedFailed",
    policy_model=GpuModelAllowedPolicy,
    observed_model=GpuModelAllowedObserved,
    judge=judge,
    runbook=RunbookEntry(meaning="a GPU of another model", fix="move the node to its own pool"),
    budget=fixed_phase("GPU names", 0.1, "one NVML query per GPU"),
    measuring=frozenset(),
    judging=frozenset({"allowed_models"}),
    claims=claims,
    shipped=SHIPPED,
    docs=DOCS,
)
'''

# 2. its line in checks/gpuaccept/checks/registry.py (after the last registered check)
REGISTRY_LINE = "        gpu_model_allowed.SPEC,\n"
REGISTRY_IMPORT = "    gpu_model_allowed,\n"

# 3. the measuring function: probes/gpuaccept/probe/measure/gpu_model_allowed.py
MEASURING_MODULE = """\
from gpuaccept.checks.gpu_model_allowed import GpuModelAllowedObserved, GpuModelAllowedPolicy
from gpuaccept.probe.hardware.base import HardwareBackend
from gpuaccept.probe.measure.context import ProbeContext


def measure(
    hardware: HardwareBackend, policy: GpuModelAllowedPolicy, context: ProbeContext
) -> GpuModelAllowedObserved:
    return GpuModelAllowedObserved(models=[gpu.name for gpu in hardware.gpus()])
"""

# 4. the judge table: tests/checks/test_gpu_model_allowed.py
JUDGE_TABLE = """\
from judge_table import Case

from gpuaccept.contracts.report import CheckStatus

H100 = "NVIDIA H100 80GB HBM3"
CASES = [
    Case("any-model-by-default", {"models": ["NVIDIA A100-SXM4-80GB"]}, CheckStatus.PASS),
    Case("allowed", {"models": [H100] * 8}, CheckStatus.PASS, shipped=True),
    Case(
        "another-model",
        {"models": ["NVIDIA A100-SXM4-80GB"] * 8},
        CheckStatus.FAIL,
        "not allowed: NVIDIA A100-SXM4-80GB",
        shipped=True,
    ),
]
"""

# 5. a fault profile: profiles/faults/gpu-model-a100.yaml, the healthy H100 profile
# with another model (made from it by the test: the GPU lines of the healthy one)
FAULT_PROFILE = "profiles/faults/gpu-model-a100.yaml"
FAULT_EXPECT = (
    "expect: {accepted: false, check: gpu_model_allowed, reason: GpuModelAllowedFailed}\n"
)
FAULT_MODEL = "  model: NVIDIA A100-SXM4-80GB\n"

# 6. its fault in the everything-wrong fixture (the 16-GPU worst case for the report's
# size): there, a model the shipped list does not name
EVERYTHING_WRONG = "tests/fixtures/profiles/h200-16gpu-everything-wrong.yaml"
EVERYTHING_WRONG_MODEL = "  model: NVIDIA H200 NVL\n"
