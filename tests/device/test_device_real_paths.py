"""The real-hardware paths the simulator cannot show, each proven or refuted on a GPU.

Run by ``scripts/device-check.sh`` on a GPU host (``GPUACCEPT_DEVICE=1``); deselected
everywhere else. One GPU is enough for every claim here; each records its evidence
(read from NVML directly, not from the probe's code) before it asserts:

* the Xid listener registers every GPU and ends without a problem;
* each NVLink counter of each link is read or answered NotSupported, per field, and
  the probe's reading agrees with NVML's;
* the recovery action and the fabric state, as NVML gives them and as the probe reads
  them (the state masked to nvml.h's unsigned char);
* persistence mode read with and without nvidia-persistenced's socket reachable (a
  child in a private mount namespace with the socket's directory hidden);
* the probe run again as a non-root user with no capabilities (what the probe pod
  has: runAsNonRoot, capabilities drop ALL, no privilege escalation).
"""

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
from device_claims import ENV_EVIDENCE_DIR, record

from gpuaccept.contracts.report import CheckStatus, ProbeReport
from gpuaccept.contracts.watch_report import WatchReport
from gpuaccept.probe.hardware.base import GpuInfo, Unavailable
from gpuaccept.probe.hardware.nvml_health import (
    read_reset_status,
    recovery_action_field_id,
    reset_status_field_ids,
)
from gpuaccept.probe.hardware.nvml_links import FABRIC_STATES, NVLINK_COUNTER_PARTS, nvlink_count
from gpuaccept.probe.hardware.persistenced import SOCKET_PATHS, socket_reachable
from gpuaccept.probe.hardware.real import RealBackend

pytestmark = pytest.mark.device
REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
# The checks the non-root run measures: every NVML and sysfs path, without the long load.
NON_ROOT_CHECKS = "driver_libraries,gpu_count,cpu_governor,nvlink,nvswitch_fabric,gpu_config,gpu_numa,infiniband_ports,xid_errors,memory_health"  # noqa: E501


@pytest.fixture(scope="module")
def hw() -> Iterator[RealBackend]:
    backend = RealBackend()
    assert backend.gpus(), backend.gpu_problem()
    yield backend
    backend.close()


def _handle(gpu: GpuInfo) -> Any:
    if gpu.uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    assert gpu.bus_id is not None
    return pynvml.nvmlDeviceGetHandleByPciBusId(gpu.bus_id)


def test_xid_listener_registers_every_gpu_and_ends_clean(hw: RealBackend) -> None:
    gpus = [g.index for g in hw.gpus() if g.problem is None]
    with hw.xid_listener() as log:
        log.phase = "device-check"
        time.sleep(3.0)  # six waits of 500 ms: each must time out, not fail
    record(
        "test_xid_listener_registers_every_gpu_and_ends_clean",
        proven=list(log.watched) == gpus and not log.unwatched and log.problem is None
        and log.died is None,
        gpus=gpus, watched=list(log.watched), unwatched=log.unwatched, problem=log.problem,
        died=log.died, listened_s=log.seconds, events=[e.xid for e in log.events()],
    )  # fmt: skip
    assert list(log.watched) == gpus, log.unwatched
    assert log.problem is None
    assert log.died is None


def _raw_counter(handle: Any, link: int, counter: int) -> str:
    try:
        return f"ok:{int(pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))}"
    except pynvml.NVMLError as exc:
        return "NotSupported" if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED else f"error:{exc}"


def test_nvlink_counters_read_or_not_supported_per_field(hw: RealBackend) -> None:
    evidence: dict[str, Any] = {}
    proven = True
    for gpu in hw.gpus():
        handle = _handle(gpu)
        try:
            count = nvlink_count(pynvml, handle, gpu.index)
        except Unavailable as exc:
            evidence[str(gpu.index)] = {"linkCount": f"Unavailable: {exc}"}
            continue
        links = hw.nvlink(gpu.index)
        # only the active links: the probe reads no counter of an inactive one, and NVML
        # may answer anything there
        raw = {
            name: sorted({_raw_counter(handle, link, c).partition(":")[0] for link in links.active})
            for c, name in NVLINK_COUNTER_PARTS.items()
        }
        raw_not_supported = sorted(n for n, answers in raw.items() if answers == ["NotSupported"])
        raw_errors = sorted(n for n, answers in raw.items() if "error" in answers)
        probe_not_supported = set(links.not_supported)
        if "recovery" in raw_not_supported and "recovery" in (links.errors or {}):
            probe_not_supported.add("recovery")  # Blackwell: read from the recovery field
        agrees = links.active == () or (
            sorted(probe_not_supported) == raw_not_supported
            and sorted(links.not_read) == raw_errors  # an odd counter is listed, not fatal
        )
        proven = proven and agrees
        evidence[str(gpu.index)] = {
            "linkCount": count, "active": len(links.active), "rawAnswers": raw,
            "probeNotSupported": list(links.not_supported), "probeNotRead": list(links.not_read),
            "probeCounters": sorted((links.errors or {}).keys()),
        }  # fmt: skip
    record("test_nvlink_counters_read_or_not_supported_per_field", proven=proven, gpus=evidence)
    assert proven, evidence


def test_recovery_action_and_fabric_state_as_nvml_gives_them(hw: RealBackend) -> None:
    driver = str(pynvml.nvmlSystemGetDriverVersion())
    field_id = recovery_action_field_id(driver)
    reset_fields = reset_status_field_ids(driver)
    evidence: dict[str, Any] = {
        "driver": driver, "recoveryActionFieldId": field_id, "resetStatusFieldIds": reset_fields,
    }  # fmt: skip
    proven = True
    for gpu in hw.gpus():
        handle = _handle(gpu)
        entry: dict[str, Any] = {}
        if field_id is not None:
            value = pynvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
            entry["rawRecoveryAction"] = [int(value.nvmlReturn), int(value.value.uiVal)]
        try:
            entry["probeRecoveryAction"] = hw.gpu_recovery_action(gpu.index)
        except Unavailable as exc:
            entry["probeRecoveryAction"] = f"Unavailable: {exc}"
        if field_id is not None and entry["rawRecoveryAction"][0] == 0:
            proven = proven and entry["probeRecoveryAction"] == entry["rawRecoveryAction"][1]
        # the older reset-status fields (226, 227), read on every driver as evidence of
        # what they answer there (deprecated from R570; the probe's source before it)
        old = pynvml.nvmlDeviceGetFieldValues(handle, [226, 227])
        entry["rawResetStatus"] = [[int(v.nvmlReturn), int(v.value.uiVal)] for v in old]
        if reset_fields is not None and entry["rawResetStatus"][0][0] == 0:
            expected = read_reset_status(pynvml, handle, gpu.index, reset_fields)
            proven = proven and entry["probeRecoveryAction"] == expected
        try:
            fabric = hw.gpu_fabric(gpu.index)
            entry["probeFabric"] = [fabric.state, fabric.status, list(fabric.conditions)]
        except Unavailable as exc:
            entry["probeFabric"] = f"Unavailable: {exc}"
        try:
            info = pynvml.c_nvmlGpuFabricInfo_t()
            pynvml.nvmlDeviceGetGpuFabricInfo(handle, info)
            entry["rawFabricState"] = int(info.state)  # unsigned char in nvml.h
        except (pynvml.NVMLError, AttributeError) as exc:
            entry["rawFabricState"] = f"{type(exc).__name__}: {exc}"
        # the fabric state the probe reports is NVML's (its low byte), where both answered
        if isinstance(entry["rawFabricState"], int) and isinstance(entry["probeFabric"], list):
            raw_state = FABRIC_STATES.get(entry["rawFabricState"] & 0xFF)
            proven = proven and entry["probeFabric"][0] == raw_state
        evidence[str(gpu.index)] = entry
    record("test_recovery_action_and_fabric_state_as_nvml_gives_them", proven=proven, **evidence)
    assert proven, evidence


_PERSISTENCE = (
    "import json, pynvml; pynvml.nvmlInit(); "
    "print(json.dumps([int(pynvml.nvmlDeviceGetPersistenceMode("
    "pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(pynvml.nvmlDeviceGetCount())]))"
)


def test_persistence_with_and_without_the_daemons_socket() -> None:
    env = {**os.environ}
    visible = subprocess.run(
        [sys.executable, "-c", _PERSISTENCE], capture_output=True, text=True, env=env,
        timeout=60, check=False,
    )  # fmt: skip
    hide = (
        " ".join(f"mount -t tmpfs none {p.parent};" for p in SOCKET_PATHS if p.parent.is_dir())
        or "true;"
    )
    hidden = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"{hide} exec {sys.executable} -c '{_PERSISTENCE}'"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    ) if shutil.which("unshare") else None  # fmt: skip
    with_socket = json.loads(visible.stdout) if visible.returncode == 0 else visible.stderr
    without = (
        json.loads(hidden.stdout)
        if hidden is not None and hidden.returncode == 0
        else (hidden.stderr if hidden is not None else "no unshare")
    )
    gpus = len(RealBackend().gpus())

    def is_modes(read: Any) -> bool:  # one NVML persistence mode (0 or 1) per GPU
        return isinstance(read, list) and len(read) == gpus and set(read) <= {0, 1}

    record(
        "test_persistence_with_and_without_the_daemons_socket",
        proven=is_modes(with_socket) and is_modes(without),
        socket_reachable=socket_reachable(), socket_paths=[str(p) for p in SOCKET_PATHS],
        persistence_with_socket=with_socket, persistence_without_socket=without,
        differs=with_socket != without,
    )  # fmt: skip
    assert is_modes(with_socket), with_socket
    assert is_modes(without), without


def _probe_json(prefix: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "gpuaccept.cli", "probe", "--checks", NON_ROOT_CHECKS,
         "--output", "json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip


def test_the_probe_as_non_root_with_the_pods_capabilities(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    for name in ("GPUACCEPT_PROFILE", "GPUACCEPT_POLICY"):
        env.pop(name, None)
    as_root = _probe_json([], env)
    tmp_path.chmod(0o777)
    setpriv = [
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
    ]  # fmt: skip
    as_nobody = _probe_json(setpriv, env) if shutil.which("setpriv") else None
    statuses: dict[str, dict[str, str]] = {}
    for who, proc in (("root", as_root), ("nobody", as_nobody)):
        if proc is not None and proc.returncode in (0, 1):
            report = ProbeReport.model_validate_json(proc.stdout)
            statuses[who] = {r.check: r.status.value for r in report.results}
    directory = os.environ.get(ENV_EVIDENCE_DIR)
    if directory and as_nobody is not None:
        (Path(directory) / "probe-non-root.json").write_text(as_nobody.stdout)
    errors = [c for c, s in statuses.get("nobody", {}).items() if s == CheckStatus.ERROR.value]
    same = statuses.get("nobody") == statuses.get("root")
    record(
        "test_the_probe_as_non_root_with_the_pods_capabilities",
        proven="nobody" in statuses and not errors and same,
        statuses=statuses, errors=errors,
        stderr=(as_nobody.stderr[-2000:] if as_nobody is not None else "no setpriv"),
    )  # fmt: skip
    assert "nobody" in statuses, as_nobody.stderr if as_nobody is not None else "no setpriv"
    assert not errors, statuses
    assert statuses["nobody"] == statuses.get("root"), statuses


WATCH_UID = 65532  # the images' non-root uid (charts/gpuaccept/values.yaml runAsUser)


def test_the_watch_as_the_pods_user_without_capabilities(tmp_path: Path) -> None:
    """``gpuaccept probe watch --window-s 20`` as uid 65532 with no capabilities: it sees
    every GPU and reads every part (no ``notRead``)."""
    env = {**os.environ, "HOME": str(tmp_path)}
    for name in ("GPUACCEPT_PROFILE", "GPUACCEPT_POLICY"):
        env.pop(name, None)
    tmp_path.chmod(0o777)
    gpus = len(RealBackend().gpus())
    setpriv = [
        "setpriv", f"--reuid={WATCH_UID}", f"--regid={WATCH_UID}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
    ]  # fmt: skip
    command = [*setpriv, sys.executable, "-m", "gpuaccept.cli", "probe", "watch",
               "--window-s", "20", "--expected-gpus", str(gpus)]  # fmt: skip
    proc = None
    if shutil.which("setpriv"):
        proc = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=REPO, timeout=90, check=False
        )
    report = None
    if proc is not None and proc.returncode in (0, 1) and proc.stdout.strip():
        report = WatchReport.model_validate_json(proc.stdout.strip().splitlines()[-1])
    proven = report is not None and report.gpus_seen == gpus and not report.not_read
    record(
        "test_the_watch_as_the_pods_user_without_capabilities",
        proven=proven,
        exit_code=None if proc is None else proc.returncode,
        gpus=gpus,
        gpus_seen=None if report is None else report.gpus_seen,
        not_read=None if report is None else report.not_read,
        stderr=(proc.stderr[-2000:] if proc is not None else "no setpriv"),
    )
    assert report is not None, proc.stderr if proc is not None else "no setpriv"
    assert report.gpus_seen == gpus, report
    assert not report.not_read, report.not_read
