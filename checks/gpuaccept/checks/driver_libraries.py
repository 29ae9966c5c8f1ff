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
from gpuaccept.checks.spec import (
    CheckJudgement,
    CheckSpec,
    FailureOwnership,
    ObservedModel,
    RunbookEntry,
    clip,
)
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


# Its section of docs/policy.md (after the generated field table): the shipped figures
# and their sources, the rules in words. `make generate` writes it there.
DOCS = r"""
| field | default | `default-h100-h200.yaml` | meaning |
|-------|---------|------|---------|
| `driverVersions` | `{}` (any) | `{min: "535.104.05"}` | Allowed driver versions (the kernel module's, else NVML's), inclusive, compared component by component as integers. `max` holds at its own precision (`max: "550"` admits 550.54.15, i.e. 550.\*); for `min` a missing part counts as 0 (`min: "12.4.0"` admits 12.4). |
| `requiredCudaMajors` | `[]` | `[12]` | The CUDA majors the cluster's **workloads** are built for. The driver must serve each under NVIDIA's minor-version compatibility (table below): its CUDA version's major is at least that major, and the driver is at least that major's minimum. |
| `minCudaDriverVersion` | unset | unset | Lowest acceptable "CUDA version the driver supports" (`cuDriverGetVersion`; a missing part counts as 0). For workloads that need a newer driver's features (minor-version compatibility runs a newer 12.x runtime on an older 12.x driver "with a limited feature set": no PTX JIT of newer PTX, for example). |

**What is judged: the node.** The kernel module version
(`/proc/driver/nvidia/version`, else `/sys/module/nvidia/version`), the NVML
driver version (`nvmlSystemGetDriverVersion`), and the CUDA version the driver
supports (`cuDriverGetVersion` from the injected `libcuda.so.1`, else
`nvmlSystemGetCudaDriverVersion_v2`). NVML answering
`NVML_ERROR_LIB_RM_VERSION_MISMATCH` ("driver/library version mismatch": the
user-space driver was upgraded but the old kernel module is still loaded)
always fails. In the NVIDIA container toolkit's CDI mode the probe container
starts and sees this error itself; in the legacy mode (`nvidia-container-cli`)
the container never starts, and the operator reads the toolkit's message from
the pod's `StartError` ([operator.md](operator.md#probe-pods-that-never-ran)),
with the same reason `DriverLibrariesFailed`.

**What is reported, never judged: the probe image.** In a pod, `libcudart` and
`libnccl` come from the probe image's own wheels (the toolkit injects only the
driver's libraries: `libcuda`, `libnvidia-ml`), and `torch.version.cuda` and
`torch.cuda.nccl.version()` are compile-time constants of the torch build. The
probe reports the image's CUDA runtime and NCCL versions from the libraries it
actually loaded (`cudaRuntimeGetVersion`, `ncclGetVersion`, through ctypes on
the file mapped into the process), with the file name (`observed.image`). A
policy cannot judge them: the field `ncclVersions` was removed (the probe
refuses a policy file that still has it, naming the field; the CRD no longer
has it, so the API server drops it from a NodeAcceptancePolicy).

Checks removed because they cannot fire on a real node: "kernel module version
≠ NVML library version" (NVML refuses to initialise on such a node, which is
the mismatch error above) and "GPUs report different drivers" (one kernel
module serves every GPU; NVML's driver version is system-wide).

**The CUDA rule is NVIDIA's, not "runtime ≤ driver".** From CUDA 11 on, an
application built with any toolkit of a major release runs on a driver of at
least that major's minimum (minor-version compatibility), and every newer
driver runs it by backward compatibility. Sources: NVIDIA, *CUDA Compatibility*,
"Minor Version Compatibility" (table 1, "CUDA Toolkit 11.x, 12.x, and 13.x
Driver Version Ranges"), and the *CUDA Toolkit Release Notes*, "CUDA Toolkit
and Minimum Required Driver Version for CUDA Minor Version Compatibility":

| CUDA major | minimum driver (Linux x86_64) | driver reports CUDA | `requiredCudaMajors` passes when |
|---|---|---|---|
| 11.x | ≥ 450.80.02 | 11.x or newer | driver CUDA major ≥ 11 and driver ≥ 450.80.02 |
| 12.x | ≥ 525.60.13 | 12.0 or newer | driver CUDA major ≥ 12 and driver ≥ 525.60.13 |
| 13.x | ≥ 580 | 13.0 or newer | driver CUDA major ≥ 13 and driver ≥ 580 |

A "runtime ≤ driver" rule fails every healthy R580 node (CUDA 13.0) that runs a
probe image with torch built for CUDA 13.2. CUDA forward-compatibility packages
(`cuda-compat`) let a newer runtime run on an older data-center driver without
this rule at all; a node can have them and still be judged by its own driver.

Table tests on both sides of each boundary:
`tests/probe/test_probe_node_counts_versions.py` (525.60.13 / 525.60.12 and an
11.8 driver for 12.x; 580.65.06 / 575.57.08 for 13.x). Profiles under the
default policy: trap `h100-sxm-8gpu-r580-cuda13-image` (driver 580.82.07, CUDA
13.0, image runtime 13.2: accepted), trap `h100-sxm-8gpu-r535-cuda12-minor`
(535.104.05, CUDA 12.2, image runtime 12.4: accepted), fault `driver-cuda11`
(520.61.05, CUDA 11.8: no CUDA 12, quarantined).

**What the probe image needs.** The probe's own torch must run on the nodes it
probes: its CUDA major must be one the fleet's drivers serve (torch built for
CUDA 13.x needs R580 or newer; for a fleet on R535/R550 build the image with
CUDA 12.x wheels). The image must not set `NVIDIA_REQUIRE_CUDA` to its exact
CUDA version (the `nvidia/cuda` base images do): the container toolkit then
refuses to start it on a driver that reports an older minor version
("requirement error: unsatisfied condition: cuda>=13.2"), which minor-version
compatibility would run. So the image is built without a CUDA base image (the
wheels carry the runtime), or sets `NVIDIA_DISABLE_REQUIRE=true`. The operator
names that refusal `CudaRequirementRefused`.
"""  # noqa: E501


# Its section of the shipped default policy (8-GPU H100/H200 SXM nodes): `make generate`
# writes policies/default-h100-h200.yaml from it; each figure's source beside it.
SHIPPED = """\
driverVersions: {min: "535.104.05"}   # R535 production branch or newer
# The CUDA majors the cluster's workloads are built for (not the probe image's):
# 12.x runs on a driver >= 525.60.13 (minor-version compatibility), 13.x on >= 580.
requiredCudaMajors: [12]
"""


SPEC = CheckSpec(
    ownership=FailureOwnership(
        why="one kernel module and one set of user-space libraries serve every GPU",
        source="NVIDIA driver installation guide (the kernel module and libraries are per host)",
    ),
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
    shipped=SHIPPED,
    docs=DOCS,
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
