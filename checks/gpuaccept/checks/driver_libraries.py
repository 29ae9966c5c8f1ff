"""``driver_libraries``: the node's NVIDIA driver works and supports the CUDA
versions the cluster's workloads need.

Judged (the node's facts):
* NVML answered "driver/library version mismatch" (``LIB_RM_VERSION_MISMATCH``:
  the kernel module and the user-space driver differ; in the toolkit's CDI mode
  the container starts and NVML fails inside it; in the legacy mode the
  container never starts, see docs/operator.md);
* the driver version (the kernel module's, ``/proc/driver/nvidia/version`` or
  ``/sys/module/nvidia/version``, else NVML's) is inside ``driverVersions``;
* the CUDA version the driver supports (``cuDriverGetVersion`` /
  ``nvmlSystemGetCudaDriverVersion``) is at least ``minCudaDriverVersion``;
* for every CUDA major in ``requiredCudaMajors``, the driver serves that
  major under NVIDIA's minor-version compatibility: its CUDA major is at least
  that major and its version at least the branch in :data:`MINOR_VERSION_MINIMUM_DRIVER`
  (any 12.x runtime on a driver >= 525.60.13, 13.x on >= 580).

Reported, never judged (the probe image's facts): the CUDA runtime and the NCCL
library the probe loaded, each with the library file it came from. In a pod
both come from the probe image's own wheels (the container toolkit injects only
the driver's libraries), so they say nothing about the node.

A value the policy constrains but the hardware could not report gives
``skip`` (unless something already failed).

observed: ``{"kernelModule": "580.82.07", "nvmlDriver": "580.82.07",
"nvmlMismatch": false, "cudaDriver": "13.0", "image": {"cudaRuntime": "13.2",
"cudaRuntimeLibrary": "libcudart.so.13", "nccl": "2.27.7", "ncclLibrary":
"libnccl.so.2"}}`` (unknown values omitted; ``image`` is dropped when condensed:
it is never judged, and the report's summary keeps both versions; so is
``nvmlMismatch`` when false).
"""

from dataclasses import dataclass, field

from pydantic import Field, JsonValue

from gpuaccept.checks.claims import Claims
from gpuaccept.checks.phase_estimate import fixed_phase
from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, RunbookEntry, clip
from gpuaccept.contracts.policy_fields import (
    CheckSwitch,
    Version,
    VersionRange,
    version_at_least,
    version_tuple,
)
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "DriverLibrariesFailed"

# NVIDIA, CUDA Toolkit release notes, "CUDA Toolkit and Minimum Required Driver
# Version for CUDA Minor Version Compatibility" (Linux x86_64), and the CUDA
# Compatibility guide, "Minor Version Compatibility": a runtime of CUDA major M
# runs, with a limited feature set, on a driver of at least this version.
MINOR_VERSION_MINIMUM_DRIVER: dict[int, str] = {
    11: "450.80.02",
    12: "525.60.13",
    13: "580",
}


class DriverLibrariesPolicy(CheckSwitch):
    driver_versions: VersionRange = Field(
        default=VersionRange(),
        description="Admitted NVIDIA driver versions (the kernel module and NVML's driver).",
    )
    min_cuda_driver_version: Version | None = Field(
        default=None,
        description="The lowest CUDA version the driver must support (cuDriverGetVersion), "
        "e.g. for workloads that need a newer driver's features.",
    )
    required_cuda_majors: list[int] = Field(
        default_factory=list,
        max_length=8,
        description="CUDA majors the cluster's workloads are built for; the driver must "
        "serve each under NVIDIA's minor-version compatibility (12: driver >= 525.60.13, "
        "13: >= 580).",
    )


class ImageLibraries(ObservedModel):
    """The probe image's own CUDA runtime and NCCL (reported, never judged)."""

    cuda_runtime: str | None = Field(default=None, max_length=16)  # cudaRuntimeGetVersion
    cuda_runtime_library: str | None = Field(default=None, max_length=64)
    nccl: str | None = Field(default=None, max_length=16)  # ncclGetVersion
    nccl_library: str | None = Field(default=None, max_length=64)


class DriverLibrariesObserved(ObservedModel):
    kernel_module: str | None = None  # /proc/driver/nvidia/version, /sys/module/nvidia/version
    nvml_driver: str | None = None  # nvmlSystemGetDriverVersion
    # NVML said "driver/library version mismatch"; absent when condensed and false
    nvml_mismatch: bool | None = None
    cuda_driver: str | None = None  # the highest CUDA the driver supports
    image: ImageLibraries | None = None


@dataclass
class _Findings:
    """What the judge found so far: failures, and values it could not verify."""

    failures: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _expected(p: DriverLibrariesPolicy) -> dict[str, JsonValue]:
    expected: dict[str, JsonValue] = {}
    if p.driver_versions.min or p.driver_versions.max:
        expected["driver"] = p.driver_versions.describe()
    if p.min_cuda_driver_version:
        expected["minCudaDriver"] = p.min_cuda_driver_version
    if p.required_cuda_majors:
        expected["cudaMajors"] = list(p.required_cuda_majors)
    return expected


def _driver(observed: DriverLibrariesObserved) -> str | None:
    """The driver version: the kernel module's, else NVML's."""
    return observed.kernel_module or observed.nvml_driver


def serves_cuda_major(driver: str, cuda_driver: str, major: int) -> str | None:
    """Why a driver ``driver`` supporting CUDA ``cuda_driver`` cannot run a CUDA
    ``major``.x runtime, or None when it can (NVIDIA's minor-version compatibility;
    a newer driver runs an older major by backward compatibility)."""
    if version_tuple(cuda_driver)[0] < major:
        return f"driver supports CUDA {cuda_driver}, workloads need CUDA {major}.x"
    minimum = MINOR_VERSION_MINIMUM_DRIVER.get(major)
    if minimum is not None and not version_at_least(driver, minimum):
        return f"CUDA {major}.x needs driver >= {minimum}, found {driver}"
    return None


def _check_driver_range(
    driver: str | None, p: DriverLibrariesPolicy, constrained: bool, found: _Findings
) -> None:
    if not constrained:
        return
    if driver is None:
        found.unknown.append("driver version")
    elif not p.driver_versions.contains(driver):
        found.failures.append(f"driver {driver} outside {p.driver_versions.describe()}")


def _check_cuda(
    observed: DriverLibrariesObserved, p: DriverLibrariesPolicy, found: _Findings
) -> None:
    """The CUDA version the driver supports against the policy's needs."""
    cuda_driver, driver = observed.cuda_driver, _driver(observed)
    if not (p.min_cuda_driver_version or p.required_cuda_majors):
        return
    if cuda_driver is None or driver is None:
        found.unknown.append("CUDA driver version" if cuda_driver is None else "driver version")
        return
    if p.min_cuda_driver_version and not version_at_least(cuda_driver, p.min_cuda_driver_version):
        found.failures.append(f"CUDA driver {cuda_driver} < {p.min_cuda_driver_version}")
    for major in sorted(set(p.required_cuda_majors)):
        why = serves_cuda_major(driver, cuda_driver, major)
        if why is not None:
            found.failures.append(why)


def judge(
    observed: DriverLibrariesObserved, policy: DriverLibrariesPolicy, summary: HardwareSummary
) -> CheckJudgement:
    expected = _expected(policy)
    driver = _driver(observed)
    found = _Findings()
    if observed.nvml_mismatch:
        found.failures.append(
            "NVML: driver/library version mismatch (kernel module "
            f"{observed.kernel_module or '?'} does not match the user-space driver)"
        )
    _check_driver_range(driver, policy, "driver" in expected, found)
    _check_cuda(observed, policy, found)
    outcome: JsonValue = expected or None
    if found.failures:
        return CheckJudgement(CheckStatus.FAIL, outcome, clip("; ".join(found.failures)))
    if found.unknown:
        return CheckJudgement(
            CheckStatus.SKIP, outcome, clip(f"cannot verify: {', '.join(found.unknown)} unknown")
        )
    if driver is None:
        return CheckJudgement(CheckStatus.SKIP, outcome, "no driver version reported")
    return CheckJudgement(
        CheckStatus.PASS,
        outcome,
        clip(f"driver {driver}, supports CUDA {observed.cuda_driver or '?'}"),
    )


def condense(observed: DriverLibrariesObserved) -> DriverLibrariesObserved:
    """Without the image's libraries (never judged, and in the report's summary) and
    without ``nvmlMismatch`` when it is false."""
    return observed.model_copy(
        update={"image": None, "nvml_mismatch": observed.nvml_mismatch or None}
    )


def claims(_observed: DriverLibrariesObserved, _summary: HardwareSummary) -> Claims:
    """Versions only: nothing about the GPUs or a figure."""
    return Claims()


SPEC = CheckSpec(
    measuring=frozenset(),
    judging=frozenset({"driver_versions", "min_cuda_driver_version", "required_cuda_majors"}),
    name="driver_libraries",
    title="Driver and libraries",
    summary="NVML works (no driver/library mismatch), the driver's version and the CUDA it "
    "supports meet the policy (minor-version compatibility per CUDA major)",
    reason=REASON,
    policy_model=DriverLibrariesPolicy,
    observed_model=DriverLibrariesObserved,
    judge=judge,
    condense=condense,
    claims=claims,
    budget=fixed_phase(
        "versions: kernel module, NVML, cuDriverGetVersion",
        0.2,
        "a few file reads and library calls",
    ),
    runbook=RunbookEntry(
        meaning=(
            "kernel module and user-space driver differ (NVML's mismatch in the probe, or the "
            "container toolkit's `nvml error: driver/library version mismatch` before it started:"
            " the message says which), the driver cannot serve a CUDA major in "
            "`requiredCudaMajors`, or its version is outside the allowed range"
        ),
        fix=(
            "reboot (or reload the module) after a driver upgrade; upgrade the driver branch for "
            "the CUDA the workloads need"
        ),
    ),
)
