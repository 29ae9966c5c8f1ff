"""The simulated probe sees only the GPUs its container was given
(``NVIDIA_VISIBLE_DEVICES``, probe/hardware/simulated_visible.py): a claim for fewer
GPUs than the node's pool publishes is seen as fewer GPUs, and gpu_count judges them
against the published count (issue 39)."""

from __future__ import annotations

from pathlib import Path

import pytest
from probe_scenarios import HEALTHY, PROFILES

from gpuaccept.contracts.probe_invocation import (
    ENV_EXPECTED_GPU_UUIDS,
    ENV_EXPECTED_GPUS,
    ENV_NODE_GPU_CAPACITY,
    ENV_NODE_NAME,
)
from gpuaccept.contracts.report import ProbeReport, decode_termination_message
from gpuaccept.probe.cli import main
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend, simulated_uuid
from gpuaccept.probe.hardware.simulated_visible import (
    ENV_VISIBLE_DEVICES,
    VisibleDevicesError,
    given_profile,
    visible_gpus,
)

NODE = "gpu-dra-visible"
UUIDS: list[str | None] = [simulated_uuid(NODE, i) for i in range(8)]
PCIE_X8 = PROFILES / "faults" / "pcie-x8.yaml"  # GPU 3's link at x8


@pytest.mark.parametrize(
    ("value", "given"),
    [
        (None, (0, 1, 2, 3, 4, 5, 6, 7)),  # unset: a stand-in that gives every GPU
        ("all", (0, 1, 2, 3, 4, 5, 6, 7)),
        (" all ", (0, 1, 2, 3, 4, 5, 6, 7)),
        ("none", ()),
        ("void", ()),  # the DRA driver's CDI edits: the devices come as device nodes
        ("", ()),
        ("3", (3,)),
        ("5,1", (1, 5)),  # the host's order, whatever the variable's
        ("2,2", (2,)),
        (f"{UUIDS[6]},{UUIDS[0]}", (0, 6)),  # the device plugin's uuid strategy
        (f"4, {UUIDS[7]}", (4, 7)),
    ],
)
def test_the_gpus_given_as_the_container_toolkit_reads_the_variable(
    value: str | None, given: tuple[int, ...]
) -> None:
    assert visible_gpus(value, UUIDS) == given


@pytest.mark.parametrize(
    "value", ["8", "-1", "FAKE-GPU-0", "GPU-00000000-0000-0000-0000-000000000000", "1,,2", "0;1"]
)
def test_a_gpu_the_node_does_not_have_is_refused(value: str) -> None:
    with pytest.raises(VisibleDevicesError, match=ENV_VISIBLE_DEVICES):
        visible_gpus(value, UUIDS)


def test_uuids_unknown_only_indices_name_gpus() -> None:
    assert visible_gpus("1", [None, None]) == (1,)
    with pytest.raises(VisibleDevicesError):
        visible_gpus(str(UUIDS[0]), [None, None])


def test_the_given_gpus_are_renumbered_with_their_overrides_the_bus_stays_whole() -> None:
    profile = load_profile(PCIE_X8)
    assert 3 in profile.gpus.overrides
    given = given_profile(profile, (2, 3))
    assert given.gpus.count == 2
    assert given.gpus.pci_count == 8  # the host's PCI bus is not namespaced
    assert given.gpus.overrides == {1: profile.gpus.overrides[3]}
    assert given_profile(profile, (0, 1)).gpus.overrides == {}
    assert given_profile(profile, tuple(range(8))) is profile


def test_the_backend_names_the_given_gpus_by_their_host_uuids() -> None:
    profile = load_profile(PCIE_X8)
    backend = SimulatedBackend(given_profile(profile, (2, 3)), node_name=NODE, host_indices=(2, 3))
    try:
        gpus = backend.gpus()
        assert [g.index for g in gpus] == [0, 1]
        assert [g.uuid for g in gpus] == [UUIDS[2], UUIDS[3]]
        assert backend.pci_gpu_count() == 8
        assert backend.pcie_link(1).width == 8  # host GPU 3, the one at x8
        assert backend.pcie_link(0).width == 16
    finally:
        backend.close()


def _probe(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    visible: str | None,
    published: int = 8,
) -> tuple[int, ProbeReport]:
    """``gpuaccept probe`` of the healthy profile on a DRA node whose pool publishes
    ``published`` GPUs (what the operator passes), its container given ``visible``."""
    term_log = tmp_path / "termination-log"
    monkeypatch.setenv(ENV_NODE_NAME, NODE)
    monkeypatch.setenv(ENV_EXPECTED_GPUS, str(published))
    monkeypatch.setenv(ENV_NODE_GPU_CAPACITY, str(published))
    monkeypatch.setenv(ENV_EXPECTED_GPU_UUIDS, ",".join(str(u) for u in UUIDS[:published]))
    if visible is None:
        monkeypatch.delenv(ENV_VISIBLE_DEVICES, raising=False)
    else:
        monkeypatch.setenv(ENV_VISIBLE_DEVICES, visible)
    code = main(
        ["--profile", str(HEALTHY), "--checks", "gpu_count", "--termination-log", str(term_log)]
    )
    return code, decode_termination_message(term_log.read_text())


def _gpu_count(report: ProbeReport) -> tuple[str, str]:
    (result,) = [r for r in report.results if r.check == "gpu_count"]
    return result.status.value, result.message


def test_a_claim_for_the_whole_pool_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, report = _probe(tmp_path, monkeypatch, ",".join(str(u) for u in UUIDS))
    assert code == 0
    status, message = _gpu_count(report)
    assert status == "pass", message
    assert message.startswith("8 of 8 GPUs visible")


def test_a_claim_for_fewer_gpus_than_the_pool_is_seen_as_fewer_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, report = _probe(tmp_path, monkeypatch, ",".join(str(u) for u in UUIDS[:6]))
    assert code == 1
    status, message = _gpu_count(report)
    assert status == "fail"
    assert message.startswith("the probe was given 8 GPUs but NVML sees 6; 6 of 8 GPUs visible")
    (result,) = [r for r in report.results if r.check == "gpu_count"]
    assert isinstance(result.observed, dict)
    assert result.observed["missing"] == sorted(str(u) for u in UUIDS[6:])
    assert result.observed["visible"] == 6


def test_no_gpu_given_is_no_gpu_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, report = _probe(tmp_path, monkeypatch, "void")
    assert code == 1
    status, message = _gpu_count(report)
    assert (status, message) == (
        "fail",
        "no GPU found (no GPU given to the container (NVIDIA_VISIBLE_DEVICES))",
    )


def test_a_device_not_on_the_node_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV_VISIBLE_DEVICES, "FAKE-GPU-0")
    assert main(["--profile", str(HEALTHY), "--checks", "gpu_count"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert ENV_VISIBLE_DEVICES in err[0]
