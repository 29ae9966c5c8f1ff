"""A capture's simulated twin: the profile (``tests/capture-profiles/<capture>.yaml``)
that claims the capture's platform, and the readings both give (issue 38 item 4).

:func:`real_readings` runs the unchanged ``RealBackend`` on the capture's replay
(:mod:`.replay`) and :func:`simulated_readings` the ``SimulatedBackend`` on the
profile; each asks the backend's measuring functions (``gpus``, ``clock_event_reasons``,
``sm_clock``, ``gpu_settings``, ``memory_health``, ``gpu_fabric``, ``nvlink``,
``pcie_link``, ``versions``, ``infiniband``) and flattens their answers to one
``{field: value}`` map. A field is read only where the capture holds its input, so
the two maps name the same fields. :func:`replayed_checks` and
:func:`simulated_checks` do the same for the replayable checks' results (status and
observed values).

The capture is one instant of an idle or loaded GPU; the profile states an idle and a
loaded GPU. Where a capture's reading is compared, both of the profile's states must
give it: the replay holds the capture's instant for the probe's whole load window.
"""

import dataclasses
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import BY_NAME
from gpuaccept.probe.hardware.base import GpuFailedError, NoSuchInterface, Unavailable
from gpuaccept.probe.hardware.infiniband import InfinibandView
from gpuaccept.probe.hardware.profile import HardwareProfile, load_profile
from gpuaccept.probe.hardware.real import RealBackend
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.hardware.sysfs import SysfsError
from gpuaccept.probe.measure.context import ProbeContext
from gpuaccept.probe.runner import hardware_summary, measuring_order, run_check
from gpuaccept.testsupport.captures import fake_nvml, replay
from gpuaccept.testsupport.captures.model import (
    ABSENT,
    NOT_AVAILABLE,
    GpuCapture,
    IbHcaCapture,
    Missing,
    NodeCapture,
)

Readings = dict[str, Any]
# What a backend could not answer (the reading itself, compared like any other)
NOT_ANSWERED = "not answered"

_SETTINGS = {  # GpuSettings field → the capture's field that holds its input
    "power_limit_mw": "power_limit_mw",
    "default_power_limit_mw": "default_power_limit_mw",
    "persistence": "persistence",
    "mig_current": "mig_mode",
    "mig_pending": "mig_mode",
    "compute_mode": "compute_mode",
}


def profile_path(captures: Path, name: str) -> Path:
    return captures.parent / "capture-profiles" / f"{name}.yaml"


def _answer(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except (Unavailable, GpuFailedError, NoSuchInterface, SysfsError) as exc:
        return f"{NOT_ANSWERED}: {type(exc).__name__}"


def _opened(capture: NodeCapture) -> list[tuple[int, GpuCapture]]:
    """The GPUs RealBackend opens: every one with a name (replay.missing_inputs)."""
    if any(gpu.name is ABSENT for gpu in capture.gpus):
        return []
    return list(enumerate(capture.gpus))


def _memory_fields(gpu: GpuCapture) -> list[str]:
    fields = []
    if gpu.ecc_mode is not ABSENT:
        fields.append("ecc_mode")
    ecc_on = not isinstance(gpu.ecc_mode, Missing) and gpu.ecc_mode[0]
    if ecc_on and gpu.volatile_uncorrected is not ABSENT:
        fields.append("volatile_uncorrected")
    if ecc_on and gpu.aggregate_uncorrected is not ABSENT:
        fields.append("aggregate_uncorrected")
    if gpu.remapped_rows is not ABSENT:
        fields.append("remapped_rows")
        if gpu.remapped_rows is NOT_AVAILABLE and ABSENT not in (
            gpu.retired_single_bit,
            gpu.retired_double_bit,
        ):
            fields.append("retired_pages")
        if gpu.remapped_rows is NOT_AVAILABLE and gpu.retired_pending is not ABSENT:
            fields.append("retire_pending")
    return fields


def _infiniband(view: InfinibandView, held: tuple[IbHcaCapture, ...]) -> Readings:
    """The HCAs in the order the reader lists them (``ib.names`` their names), each
    port as the checks read it. The lanes and their speed only where the capture holds
    the rate's text (ibstatus: ``200 Gb/sec (4X HDR)``; ibstat prints the number alone);
    the board_id (PSID) and the error counters never (neither tool prints them)."""
    with_text = {
        f"{hca.name}/{port.port}"
        for hca in held
        for port in hca.ports
        if isinstance(port.rate_text, str)
    }
    out: Readings = {"ib.names": tuple(hca.name for hca in view.hcas)}
    for n, hca in enumerate(view.hcas):
        out[f"ib.hca{n}.fw_ver"] = hca.fw_ver
        for port in hca.ports:
            p = f"ib.hca{n}.port{port.port}."
            for name in ("state", "phys_state", "rate_gbps", "link_layer"):
                out[p + name] = getattr(port, name)
            if port.name in with_text:
                out[p + "width"] = port.width
                out[p + "speed"] = port.speed
    out["ib.not_read"] = view.not_read
    return out


def _gpu_readings(
    backend: Any, index: int, gpu: GpuCapture, loaded: Callable[[], Any] | None
) -> Readings:
    """One GPU's readings from ``backend``; ``loaded`` (the simulation): the GPU's clock
    reasons and SM clock are read both idle and under load."""
    out: Readings = {}
    p = f"gpu{index}."
    if gpu.clock_event_reasons is not ABSENT:
        out[p + "clock_event_reasons"] = _answer(lambda: backend.clock_event_reasons(index))
    # RealBackend.sm_clock reads the clock and its maximum together
    sm_clock = ABSENT not in (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz)
    if sm_clock:
        out[p + "sm_clock_max_mhz"] = _answer(lambda: backend.sm_clock(index)[1])
    if all(getattr(gpu, source) is not ABSENT for source in _SETTINGS.values()):
        # one reading of all six: RealBackend.gpu_settings needs every answer
        settings = _answer(lambda: backend.gpu_settings(index))
        for name in _SETTINGS:
            out[p + name] = getattr(settings, name, settings)
    memory = _answer(lambda: backend.memory_health(index))
    for name in _memory_fields(gpu):
        out[p + name] = getattr(memory, name, memory)
    if gpu.fabric is not ABSENT:
        out[p + "fabric"] = _answer(lambda: dataclasses.astuple(backend.gpu_fabric(index)))
    if gpu.pcie_gen is not ABSENT and gpu.pcie_width is not ABSENT:
        link = _answer(lambda: backend.pcie_link(index))
        out[p + "pcie_generation"] = getattr(link, "generation", link)
        out[p + "pcie_width"] = getattr(link, "width", link)
        if gpu.pcie_gen_max is not ABSENT and gpu.pcie_width_max is not ABSENT:
            out[p + "pcie_max_generation"] = getattr(link, "max_generation", link)
            out[p + "pcie_max_width"] = getattr(link, "max_width", link)
    # the replay holds the capture's instant for the load window (replay's module doc)
    with (loaded or nullcontext)():
        if gpu.clock_event_reasons is not ABSENT:
            out[p + "clock_event_reasons.loaded"] = _answer(
                lambda: backend.clock_event_reasons(index)
            )
        if sm_clock:
            out[p + "sm_clock_mhz.loaded"] = _answer(lambda: backend.sm_clock(index)[0])
    return out


def _node_readings(
    backend: Any, capture: NodeCapture, loaded: Callable[[], Any] | None
) -> Readings:
    out: Readings = {}
    opened = _opened(capture)
    gpus = backend.gpus()
    if opened:
        out["gpus.names"] = tuple(g.name for g in gpus)[: len(opened)]
        if capture.complete_gpu_list:
            out["gpus.count"] = len(gpus)
    if isinstance(capture.driver, str) and opened:
        out["driver"] = backend.versions().nvml_driver
    for index, gpu in opened:
        out.update(_gpu_readings(backend, index, gpu, loaded))
        if gpu.nvlink_active is not ABSENT:
            out.update(_nvlink_readings(backend, index, capture))
    if not isinstance(capture.infiniband, Missing):
        out.update(_infiniband(backend.infiniband(), capture.infiniband))
    return out


def _nvlink_readings(backend: Any, index: int, capture: NodeCapture) -> Readings:
    """The link count and the active links. RealBackend.nvlink gives them only with
    the error counters, which no capture holds (issue 37 item 2): the replay's are
    what its NVML answers, through the calls RealBackend's reader makes."""
    p = f"gpu{index}."
    if isinstance(backend, SimulatedBackend):
        links = _answer(lambda: backend.nvlink(index))
        return {
            p + "nvlink_count": getattr(links, "count", links),
            p + "nvlink_active": getattr(links, "active", links),
        }
    nvml = fake_nvml.module(capture)
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    field = nvml.nvmlDeviceGetFieldValues(handle, [fake_nvml.FIELD_NVLINK_COUNT])[0]
    count = field.value.uiVal
    active = tuple(
        link for link in range(count) if nvml.nvmlDeviceGetNvLinkState(handle, link) == 1
    )
    return {p + "nvlink_count": count, p + "nvlink_active": active}


@contextmanager
def _real(capture: NodeCapture) -> Iterator[RealBackend]:
    with tempfile.TemporaryDirectory(prefix="gpuaccept-capture-") as tmp:
        sysfs, proc = replay.build_tree(capture, Path(tmp))
        with replay.installed(fake_nvml.module(capture)):
            hardware = RealBackend(sysfs_root=sysfs, proc_root=proc, persistenced_sockets=())
            try:
                yield hardware
            finally:
                hardware.close()


@contextmanager
def _simulated(profile: HardwareProfile) -> Iterator[SimulatedBackend]:
    backend = SimulatedBackend(profile)
    try:
        yield backend
    finally:
        backend.close()


def real_readings(capture: NodeCapture) -> Readings:
    with _real(capture) as hardware:
        return _node_readings(hardware, capture, None)


def simulated_readings(profile: HardwareProfile, capture: NodeCapture) -> Readings:
    with _simulated(profile) as backend:
        return _node_readings(backend, capture, backend.gpu_load)


def replayed_checks(outcome: replay.Outcome) -> dict[str, tuple[str, Any]]:
    return {
        name: (result.status.value, result.observed) for name, result in outcome.results.items()
    }


def simulated_checks(
    profile: HardwareProfile, names: list[str], policy: ProbePolicy | None = None
) -> dict[str, tuple[str, Any]]:
    """``names`` run on the profile as the replay runs them: each on its own context."""
    policy = policy or ProbePolicy()
    checks = [BY_NAME[name] for name in names]
    out: dict[str, tuple[str, Any]] = {}
    with _simulated(profile) as backend:
        summary = hardware_summary(backend)
        for check in measuring_order(checks):
            result = run_check(check, backend, policy, ProbeContext(), summary)
            out[check.name] = (result.status.value, result.observed)
    return out


def load_twin(captures: Path, name: str) -> HardwareProfile:
    return load_profile(profile_path(captures, name))
