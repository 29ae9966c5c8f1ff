"""Per-GPU throughput of a simulated node: the healthy figures of each model class
(when a profile gives none), the timer of the simulated load, and the triad.

The figures are modelled, not measured here (no GPU was available to this
project; docs/profile-format.md gives the derivation of each): bf16 and fp8 from
the published Maximum Achievable Matmul FLOPS of an H100 SXM (794.5 and 1402.6
TFLOPS at the best shape, github.com/stas00/ml-engineering, compute/accelerator)
scaled to the 8192³ shape and the part's power limit; memory bandwidth about
90 % of the datasheet peak, what a STREAM triad reaches on HBM.
"""

from dataclasses import dataclass, field

from gpuaccept.checks.gpu_models import gpu_model_class
from gpuaccept.probe.hardware.base import MatmulPrecision, PerGpuFigures, Unavailable
from gpuaccept.probe.hardware.profile import Gpu, HardwareProfile

SIM_MATRIX = 8192  # the real load's n


@dataclass(frozen=True)
class ModelThroughput:
    bf16_tflops: float
    fp8_tflops: float | None  # None: no fp8 tensor cores
    memory_gbps: float


# model class -> healthy figures (see the module docstring and docs/profile-format.md)
MODEL_THROUGHPUT: dict[str, ModelThroughput] = {
    "h100-sxm": ModelThroughput(bf16_tflops=742.0, fp8_tflops=1318.0, memory_gbps=3015.0),
    "h200-sxm": ModelThroughput(bf16_tflops=748.0, fp8_tflops=1326.0, memory_gbps=4320.0),
    "h100-nvl": ModelThroughput(bf16_tflops=604.0, fp8_tflops=1062.0, memory_gbps=3510.0),
    "h100-pcie": ModelThroughput(bf16_tflops=512.0, fp8_tflops=905.0, memory_gbps=1800.0),
    "h200-nvl": ModelThroughput(bf16_tflops=690.0, fp8_tflops=1220.0, memory_gbps=4320.0),
    "gh200": ModelThroughput(bf16_tflops=778.0, fp8_tflops=1440.0, memory_gbps=3600.0),
    "b200": ModelThroughput(bf16_tflops=1620.0, fp8_tflops=3050.0, memory_gbps=7200.0),
}


def model_figures(model: str) -> ModelThroughput | None:
    model_class = gpu_model_class(model)
    return MODEL_THROUGHPUT.get(model_class) if model_class is not None else None


def gpu_figure(profile: HardwareProfile, gpu: Gpu, what: str) -> float | None:
    """``what`` ("bf16", "fp8", "memory") of one GPU: its own, else its model's."""
    own = {"bf16": gpu.bf16_tflops, "fp8": gpu.fp8_tflops, "memory": gpu.memory_gbps}[what]
    if own is not None:
        return own
    model = model_figures(profile.gpus.model)
    if model is None:
        return None
    return {"bf16": model.bf16_tflops, "fp8": model.fp8_tflops, "memory": model.memory_gbps}[what]


def check_figures(profile: HardwareProfile, what: str, label: str) -> None:
    """Raise :class:`Unavailable` as the real backend would when no GPU has ``what``."""
    if profile.gpus.count and gpu_figure(profile, profile.gpus.gpu(0), what) is None:
        model = profile.gpus.model
        if what == "fp8":
            raise Unavailable(f"{model}: no fp8 matmul (the profile gives no fp8 figure)")
        raise Unavailable(f"{model}: the profile gives no {label} figure")


@dataclass
class SimulatedTimer:
    """The simulated :class:`~gpuaccept.probe.hardware.base.LoadTimer`: the profile's
    figures for the GPUs the load reached."""

    profile: HardwareProfile
    precision: MatmulPrecision
    lost_text: str  # what a GPU lost under the load reports
    matrix: int = SIM_MATRIX
    loaded: list[int] = field(default_factory=list)  # GPUs with a load thread
    started: bool = False

    def start(self) -> None:
        self.started = True

    def figures(self) -> PerGpuFigures:
        values: dict[int, float] = {}
        failed: dict[int, str] = {}
        for index in self.loaded:
            gpu = self.profile.gpus.gpu(index)
            figure = gpu_figure(self.profile, gpu, self.precision)
            if figure is None:  # a model without figures: the load runs, nothing is timed
                continue
            if gpu.lost == "hangs" or figure <= 0:
                failed[index] = "load: no timed matmul within 60 s"
            elif gpu.lost == "under_load":
                failed[index] = f"load: {self.lost_text}"
            else:
                values[index] = figure
        return PerGpuFigures(values, failed)


def triad(profile: HardwareProfile, lost_text: str) -> PerGpuFigures:
    """The profile's memory bandwidth of every GPU NVML still has."""
    values: dict[int, float] = {}
    failed: dict[int, str] = {}
    for index in range(profile.gpus.count):
        gpu = profile.gpus.gpu(index)
        if gpu.lost == "before":
            continue
        if gpu.lost == "hangs":
            failed[index] = "triad: hung: no completion within 60 s"
        elif gpu.lost == "under_load":
            failed[index] = f"triad: {lost_text}"
        else:
            values[index] = gpu_figure(profile, gpu, "memory") or 0.0
    return PerGpuFigures(values, failed)
