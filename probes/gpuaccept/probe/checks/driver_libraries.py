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

from pydantic import JsonValue

from gpuaccept.contracts.policy import ProbePolicy, version_at_least, version_tuple
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.checks.base import (
    BadObservationError,
    Judgement,
    Observation,
    ProbeContext,
    as_object,
    clip,
    opt_str,
)
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable


def _major_minor(version: str) -> tuple[int, ...]:
    return version_tuple(version)[:2]


class DriverLibraries:
    name = "driver_libraries"
    title = "Driver and libraries"
    reason = "DriverLibrariesFailed"

    def measure(
        self, hardware: HardwareBackend, policy: ProbePolicy, context: ProbeContext
    ) -> Observation:
        v = hardware.versions()
        observed: dict[str, JsonValue] = {}
        if v.kernel_module:
            observed["kernelModule"] = v.kernel_module
        if v.nvml_library:
            observed["nvmlLibrary"] = v.nvml_library
        observed["nvmlMismatch"] = v.nvml_mismatch
        if v.gpu_drivers:
            observed["gpuDrivers"] = list[JsonValue](sorted(set(v.gpu_drivers)))
        for key, value in (
            ("cudaDriver", v.cuda_driver),
            ("cudaRuntime", v.cuda_runtime),
            ("nccl", v.nccl),
        ):
            if value:
                observed[key] = value
        if not v.nvml_mismatch and not (v.kernel_module or v.nvml_library or v.gpu_drivers):
            note = f" ({'; '.join(v.notes)})" if v.notes else ""
            raise Unavailable(clip(f"no NVIDIA driver found{note}"))
        return Observation(observed)

    def judge(
        self, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
    ) -> Judgement:
        obj = as_object(observed)
        p = policy.driver_libraries
        kernel = opt_str(obj, "kernelModule")
        library = opt_str(obj, "nvmlLibrary")
        mismatch = obj.get("nvmlMismatch", False)
        if not isinstance(mismatch, bool):
            raise BadObservationError("observed.nvmlMismatch must be a boolean")
        drivers_raw = obj.get("gpuDrivers", [])
        if not isinstance(drivers_raw, list) or not all(isinstance(d, str) for d in drivers_raw):
            raise BadObservationError("observed.gpuDrivers must be a list of strings")
        gpu_drivers = [d for d in drivers_raw if isinstance(d, str)]
        cuda_driver = opt_str(obj, "cudaDriver")
        cuda_runtime = opt_str(obj, "cudaRuntime")
        nccl = opt_str(obj, "nccl")

        expected: dict[str, JsonValue] = {}
        if p.driver_versions.min or p.driver_versions.max:
            expected["driver"] = p.driver_versions.describe()
        if p.nccl_versions.min or p.nccl_versions.max:
            expected["nccl"] = p.nccl_versions.describe()
        if p.min_cuda_driver_version:
            expected["minCudaDriver"] = p.min_cuda_driver_version
        expected["cuda"] = "runtime<=driver"

        failures: list[str] = []
        unknown: list[str] = []
        if mismatch:
            failures.append("NVML: driver/library version mismatch")
        if kernel and library and version_tuple(kernel) != version_tuple(library):
            failures.append(f"kernel module {kernel} != NVML library {library}")
        if len(set(gpu_drivers)) > 1:
            failures.append(f"GPUs disagree on the driver: {', '.join(sorted(set(gpu_drivers)))}")
        driver = kernel or (gpu_drivers[0] if gpu_drivers else None) or library
        if "driver" in expected:
            if driver is None:
                unknown.append("driver version")
            elif not p.driver_versions.contains(driver):
                failures.append(f"driver {driver} outside {p.driver_versions.describe()}")
        if cuda_driver and cuda_runtime:
            if _major_minor(cuda_runtime) > _major_minor(cuda_driver):
                failures.append(
                    f"CUDA runtime {cuda_runtime} needs a newer driver "
                    f"(driver supports CUDA {cuda_driver})"
                )
        else:
            unknown.append("CUDA driver" if not cuda_driver else "CUDA runtime")
        if (
            p.min_cuda_driver_version
            and cuda_driver
            and not version_at_least(cuda_driver, p.min_cuda_driver_version)
        ):
            failures.append(f"CUDA driver {cuda_driver} < {p.min_cuda_driver_version}")
        if "nccl" in expected:
            if nccl is None:
                unknown.append("NCCL version")
            elif not p.nccl_versions.contains(nccl):
                failures.append(f"NCCL {nccl} outside {p.nccl_versions.describe()}")
        if failures:
            return Judgement(CheckStatus.FAIL, expected, clip("; ".join(failures)))
        if unknown:
            return Judgement(
                CheckStatus.SKIP, expected, clip(f"cannot verify: {', '.join(unknown)} unknown")
            )
        return Judgement(
            CheckStatus.PASS,
            expected,
            clip(f"driver {driver}, CUDA {cuda_driver} (runtime {cuda_runtime}), NCCL {nccl}"),
        )

    def condense(self, observed: JsonValue) -> JsonValue:
        return observed


CHECK = DriverLibraries()
