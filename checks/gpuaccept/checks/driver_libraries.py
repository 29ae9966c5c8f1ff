"""``driver_libraries``: the driver, CUDA and NCCL fit together and the policy.

Fails when
* NVML reports "driver/library version mismatch", or the kernel module
  (``/proc/driver/nvidia/version``) and the NVML library versions differ;
* GPUs disagree on the driver version;
* the CUDA runtime (torch's) needs a newer CUDA than the driver supports;
* the driver, the CUDA driver or the NCCL version is outside the policy.

A value the policy constrains but the hardware could not report gives
``skip`` (unless something already failed).

observed: ``{"kernelModule": "550.54.15", "nvmlLibrary": "550.54.15",
"nvmlMismatch": false, "gpuDrivers": ["550.54.15"], "cudaDriver": "12.4",
"cudaRuntime": "12.4", "nccl": "2.21.5"}`` (unknown values omitted).
"""

from dataclasses import dataclass, field

from pydantic import Field, JsonValue

from gpuaccept.checks.spec import CheckJudgement, CheckSpec, ObservedModel, clip
from gpuaccept.contracts.policy import (
    CheckSwitch,
    Version,
    VersionRange,
    version_at_least,
    version_tuple,
)
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

REASON = "DriverLibrariesFailed"


class DriverLibrariesPolicy(CheckSwitch):
    driver_versions: VersionRange = Field(
        default=VersionRange(),
        description="Admitted NVIDIA driver versions (kernel module, NVML and every GPU).",
    )
    nccl_versions: VersionRange = Field(
        default=VersionRange(), description="Admitted NCCL versions (the probe image's)."
    )
    min_cuda_driver_version: Version | None = Field(
        default=None,
        description="Lowest CUDA version the driver must support (e.g. 12.4), besides the "
        "probe image's CUDA runtime, which it must always support; unset: no extra bound.",
    )


class DriverLibrariesObserved(ObservedModel):
    kernel_module: str | None = None  # /proc/driver/nvidia/version
    nvml_library: str | None = None
    nvml_mismatch: bool = False  # NVML said "driver/library version mismatch"
    gpu_drivers: list[str] | None = None  # the distinct versions the GPUs report
    cuda_driver: str | None = None  # the highest CUDA the driver supports
    cuda_runtime: str | None = None  # torch's CUDA
    nccl: str | None = None


def _major_minor(version: str) -> tuple[int, ...]:
    return version_tuple(version)[:2]


@dataclass
class _Findings:
    """What the judge found so far: failures, and values it could not verify."""

    failures: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _expected(p: DriverLibrariesPolicy) -> dict[str, JsonValue]:
    expected: dict[str, JsonValue] = {}
    if p.driver_versions.min or p.driver_versions.max:
        expected["driver"] = p.driver_versions.describe()
    if p.nccl_versions.min or p.nccl_versions.max:
        expected["nccl"] = p.nccl_versions.describe()
    if p.min_cuda_driver_version:
        expected["minCudaDriver"] = p.min_cuda_driver_version
    expected["cuda"] = "runtime<=driver"
    return expected


def _driver(observed: DriverLibrariesObserved) -> str | None:
    """The driver version: the kernel module's, else the GPUs', else NVML's."""
    gpu_drivers = observed.gpu_drivers or []
    return (
        observed.kernel_module
        or (gpu_drivers[0] if gpu_drivers else None)
        or (observed.nvml_library)
    )


def _check_consistency(observed: DriverLibrariesObserved, found: _Findings) -> None:
    """The kernel module, NVML and the GPUs agree on one driver."""
    kernel, library = observed.kernel_module, observed.nvml_library
    gpu_drivers = observed.gpu_drivers or []
    if observed.nvml_mismatch:
        found.failures.append("NVML: driver/library version mismatch")
    if kernel and library and version_tuple(kernel) != version_tuple(library):
        found.failures.append(f"kernel module {kernel} != NVML library {library}")
    if len(set(gpu_drivers)) > 1:
        found.failures.append(f"GPUs disagree on the driver: {', '.join(sorted(set(gpu_drivers)))}")


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
    """The CUDA runtime fits the driver, and the driver's CUDA the policy."""
    cuda_driver, cuda_runtime = observed.cuda_driver, observed.cuda_runtime
    if cuda_driver and cuda_runtime:
        if _major_minor(cuda_runtime) > _major_minor(cuda_driver):
            found.failures.append(
                f"CUDA runtime {cuda_runtime} needs a newer driver "
                f"(driver supports CUDA {cuda_driver})"
            )
    else:
        found.unknown.append("CUDA driver" if not cuda_driver else "CUDA runtime")
    if (
        p.min_cuda_driver_version
        and cuda_driver
        and not version_at_least(cuda_driver, p.min_cuda_driver_version)
    ):
        found.failures.append(f"CUDA driver {cuda_driver} < {p.min_cuda_driver_version}")


def _check_nccl_range(
    nccl: str | None, p: DriverLibrariesPolicy, constrained: bool, found: _Findings
) -> None:
    if not constrained:
        return
    if nccl is None:
        found.unknown.append("NCCL version")
    elif not p.nccl_versions.contains(nccl):
        found.failures.append(f"NCCL {nccl} outside {p.nccl_versions.describe()}")


def judge(
    observed: DriverLibrariesObserved, policy: DriverLibrariesPolicy, summary: HardwareSummary
) -> CheckJudgement:
    expected = _expected(policy)
    driver = _driver(observed)
    found = _Findings()
    _check_consistency(observed, found)
    _check_driver_range(driver, policy, "driver" in expected, found)
    _check_cuda(observed, policy, found)
    _check_nccl_range(observed.nccl, policy, "nccl" in expected, found)
    if found.failures:
        return CheckJudgement(CheckStatus.FAIL, expected, clip("; ".join(found.failures)))
    if found.unknown:
        return CheckJudgement(
            CheckStatus.SKIP, expected, clip(f"cannot verify: {', '.join(found.unknown)} unknown")
        )
    return CheckJudgement(
        CheckStatus.PASS,
        expected,
        clip(
            f"driver {driver}, CUDA {observed.cuda_driver} (runtime {observed.cuda_runtime}), "
            f"NCCL {observed.nccl}"
        ),
    )


SPEC = CheckSpec(
    name="driver_libraries",
    title="Driver and libraries",
    summary="kernel module = NVML library, CUDA runtime <= driver, driver/NCCL/CUDA "
    "versions inside the policy",
    reason=REASON,
    policy_model=DriverLibrariesPolicy,
    observed_model=DriverLibrariesObserved,
    judge=judge,
)
