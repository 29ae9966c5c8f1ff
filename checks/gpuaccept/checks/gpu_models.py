"""GPU model classes: the names NVML really reports, mapped to a form factor.

NVML's ``nvmlDeviceGetName`` gives the marketing name, and it does not say
"SXM": an H100 SXM5 reports ``NVIDIA H100 80GB HBM3`` and an H200 SXM reports
``NVIDIA H200``, while the PCIe/NVL parts add a suffix (``NVIDIA H100 NVL``,
``NVIDIA H200 NVL``, ``NVIDIA H100 PCIe``). Those parts link at most pairs or
fours of GPUs with NVLink bridges (or not at all), so an 8-GPU all-reduce on
them runs largely over PCIe: they must never get SXM limits. A policy keyed by
class (``h100-sxm``) therefore matches only the exact names listed here; an
exact NVML name as a key still wins. docs/policy.md lists the table and the
logs the names come from.
"""

import re
from dataclasses import dataclass

from gpuaccept.contracts.report import HardwareSummary


@dataclass(frozen=True)
class GpuModelClass:
    name: str  # the policy key, e.g. "h100-sxm"
    pattern: str  # full match against the NVML name
    description: str


GPU_MODEL_CLASSES: tuple[GpuModelClass, ...] = (
    GpuModelClass("h100-sxm", r"NVIDIA H100 80GB HBM3", "H100 SXM5 80 GB (HGX H100)"),
    GpuModelClass("h100-pcie", r"NVIDIA H100 PCIe", "H100 PCIe 80 GB"),
    GpuModelClass("h100-nvl", r"NVIDIA H100 NVL", "H100 NVL 94 GB (PCIe, NVLink bridge pairs)"),
    GpuModelClass("h200-sxm", r"NVIDIA H200", "H200 SXM 141 GB (HGX H200)"),
    GpuModelClass("h200-nvl", r"NVIDIA H200 NVL", "H200 NVL 141 GB (PCIe, NVLink bridges)"),
    GpuModelClass("gh200", r"NVIDIA GH200 .*", "GH200 Grace Hopper superchip"),
    GpuModelClass("b200", r"NVIDIA B200", "B200 (HGX B200)"),
)


def gpu_model_class(nvml_name: str | None) -> str | None:
    """The class of an NVML device name, or ``None`` for a name not in the table
    (including a ``mixed: …`` summary)."""
    if nvml_name is None:
        return None
    name = " ".join(nvml_name.split())
    for model_class in GPU_MODEL_CLASSES:
        if re.fullmatch(model_class.pattern, name):
            return model_class.name
    return None


# The classes whose 8-GPU baseboards carry NVSwitches (HGX H100/H200: 4 third-generation
# NVSwitches; HGX B200: 2). The same NVML name also runs on boards without them: the
# HGX H100 4-GPU board links its GPUs directly (6 NVLinks per pair), and a pod may be
# given a slice of an 8-GPU board. docs/policy.md ("What the board has").
NVSWITCH_CLASSES = frozenset({"h100-sxm", "h200-sxm", "b200"})
FULL_BOARD_GPUS = 8


def without_nvswitch(summary: HardwareSummary) -> str | None:
    """Why the NVSwitch expectations of the GPUs' model class do not hold on this node
    (its PCI bus has no NVSwitch: a 4-GPU HGX board), or None when they do, or when the
    bus was not read (an older report: the class decides, as before)."""
    if gpu_model_class(summary.gpu_model) not in NVSWITCH_CLASSES:
        return None
    if summary.nvswitch_devices == 0:
        return "no NVSwitch on the PCI bus (GPUs linked directly, e.g. an HGX 4-GPU board)"
    return None


def not_a_full_board(summary: HardwareSummary) -> str | None:
    """Why the 8-GPU figures of an NVSwitch class (the all-reduce busbw) do not apply:
    no NVSwitch, or fewer GPUs than the board (a slice of it); None when they do."""
    no_switch = without_nvswitch(summary)
    if no_switch is not None:
        return no_switch
    if gpu_model_class(summary.gpu_model) in NVSWITCH_CLASSES and (
        summary.gpu_count < FULL_BOARD_GPUS
    ):
        return f"{summary.gpu_count} of the board's {FULL_BOARD_GPUS} GPUs (a slice of it)"
    return None


def per_model_value(
    by_model: dict[str, float], nvml_name: str | None, default: float | None
) -> float | None:
    """``by_model[exact NVML name]``, else ``by_model[class]``, else ``default``."""
    if nvml_name is not None and nvml_name in by_model:
        return by_model[nvml_name]
    model_class = gpu_model_class(nvml_name)
    if model_class is not None and model_class in by_model:
        return by_model[model_class]
    return default
