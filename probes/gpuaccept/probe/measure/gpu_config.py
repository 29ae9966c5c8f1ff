"""Measures :mod:`gpuaccept.checks.gpu_config`: power limits, persistence, MIG, compute
mode, and the clocks ``throttle_reasons`` sampled under load (no second load)."""

from dataclasses import dataclass, field

from gpuaccept.checks.gpu_config import GpuConfigObserved, GpuConfigPolicy
from gpuaccept.checks.gpu_ranges import format_gpus, group
from gpuaccept.probe.hardware.base import (
    GpuFailedError,
    GpuSettings,
    HardwareBackend,
    Unavailable,
)
from gpuaccept.probe.measure.context import LoadClocks, ProbeContext

FAILURE_MAX = 120


@dataclass
class _Settings:
    """The GPUs' settings as the observed value lists them."""

    enforced: dict[int, int] = field(default_factory=dict)
    default: dict[int, int] = field(default_factory=dict)
    persistence_off: list[int] = field(default_factory=list)
    mig_enabled: list[int] = field(default_factory=list)
    mig_pending: dict[int, str] = field(default_factory=dict)
    compute: dict[int, str] = field(default_factory=dict)
    unsupported: dict[str, list[int]] = field(default_factory=dict)

    def add(self, gpu: int, s: GpuSettings) -> None:
        if s.power_limit_mw is None or s.default_power_limit_mw is None:
            self.unsupported.setdefault("powerLimit", []).append(gpu)
        self.enforced[gpu] = round((s.power_limit_mw or 0) / 1000)
        self.default[gpu] = round((s.default_power_limit_mw or 0) / 1000)
        if s.persistence is None:
            self.unsupported.setdefault("persistence", []).append(gpu)
        elif not s.persistence:
            self.persistence_off.append(gpu)
        if s.mig_current is None:
            self.unsupported.setdefault("mig", []).append(gpu)
        else:
            if s.mig_current:
                self.mig_enabled.append(gpu)
            if s.mig_pending is not None and s.mig_pending != s.mig_current:
                self.mig_pending[gpu] = "enabled" if s.mig_pending else "disabled"
        if s.compute_mode is None:
            self.unsupported.setdefault("computeMode", []).append(gpu)
        elif s.compute_mode != "default":
            self.compute[gpu] = s.compute_mode


def _under_load(load: LoadClocks | None, gpus: list[int]) -> dict[str, object]:
    """The clock fields of the observed value, from the throttle_reasons samples."""
    if load is None:
        return {}
    # GPUs without clock samples (failed while sampled) are not judged here
    unsampled = {g for g in gpus if g not in load.sm_clock_fraction}
    return {
        "load_samples": load.samples,
        "app_clocks_fraction": group(
            {g: round(f, 2) for g, f in load.app_clocks_fraction.items() if f > 0}
        )
        or None,
        "sm_clock_fraction": group(
            {g: round(f, 2) for g, f in load.sm_clock_fraction.items() if g in gpus}
        )
        or None,
        "limited": format_gpus(load.limited | unsampled) or None,
    }


def measure(
    hardware: HardwareBackend, policy: GpuConfigPolicy, context: ProbeContext
) -> GpuConfigObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to read the configuration of")
    settings = _Settings()
    failed: dict[str, str] = {}
    for gpu in gpus:
        try:
            if gpu.problem:
                raise GpuFailedError(gpu.index, "enumeration", gpu.problem)
            settings.add(gpu.index, hardware.gpu_settings(gpu.index))
        except GpuFailedError as exc:
            failed[str(gpu.index)] = f"{exc.step}: {exc.detail}"[:FAILURE_MAX]
            settings.enforced[gpu.index] = settings.default[gpu.index] = 0
    observed = GpuConfigObserved(
        gpus=len(gpus),
        power_limit_w=group(settings.enforced),
        default_power_limit_w=group(settings.default),
        persistence_off=format_gpus(settings.persistence_off) or None,
        mig_enabled=format_gpus(settings.mig_enabled) or None,
        mig_pending=group(settings.mig_pending) or None,
        compute_modes=group(settings.compute) or None,
        unsupported={item: format_gpus(g) for item, g in settings.unsupported.items()} or None,
        failed_gpus=failed or None,
        persistenced_socket=hardware.persistenced_socket() if settings.persistence_off else None,
    )
    return observed.model_copy(update=_under_load(context.under_load, [g.index for g in gpus]))
