"""scripts/capture-node.sh on a synthetic node (stand-in commands on PATH, a sysfs tree):
it writes a folder in the corpus format, masks the identifiers, and the replay reads
the folder (issue 38)."""

import os
import subprocess
from pathlib import Path

import yaml

from gpuaccept.testsupport.captures import corpus, replay

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "capture-node.sh"
UUID = "GPU-3b84c06a-611d-8e07-2726-44a868f646fe"
SERIAL = "1652823054212"
HOST = "gpu-node-17"

Q = f"""
==============NVSMI LOG==============

Timestamp                                 : Thu Dec  4 10:00:00 2026
Driver Version                            : 570.124.06
CUDA Version                              : 12.8

Attached GPUs                             : 1
GPU 00000000:19:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Persistence Mode                      : Enabled
    Serial Number                         : {SERIAL}
    GPU UUID                              : {UUID}
    PCI
        Bus Id                            : 00000000:19:00.0
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : 5
            Link Width
                Max                       : 16x
                Current                   : 16x
    Clocks Event Reasons
        Idle                              : Active
        HW Slowdown                       : Not Active
"""
QX = f"""<?xml version="1.0" ?>
<nvidia_smi_log>
    <driver_version>570.124.06</driver_version>
    <cuda_version>12.8</cuda_version>
    <attached_gpus>1</attached_gpus>
    <gpu id="00000000:19:00.0">
        <product_name>NVIDIA H100 80GB HBM3</product_name>
        <serial>{SERIAL}</serial>
        <uuid>{UUID}</uuid>
    </gpu>
</nvidia_smi_log>
"""
IBSTAT = """CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tHardware version: 0
\tNode GUID: 0x946dae0300cde72c
\tSystem image GUID: 0x946dae0300cde72c
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tBase lid: 75
\t\tLMC: 0
\t\tSM lid: 334
\t\tCapability mask: 0xa751e848
\t\tPort GUID: 0x946dae0300cde72c
\t\tLink layer: InfiniBand
"""
LSPCI = """19:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tCapabilities: <access denied>
"""
NUMACTL = f"available: 2 nodes (0-1)\nnode 0 cpus: 0 1\n# {HOST}\n"


def _fake_bin(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    outputs = tmp / "outputs"
    outputs.mkdir()
    for name, text in {
        "q": Q,
        "qx": QX,
        "ibstat": IBSTAT,
        "lspci": LSPCI,
        "numactl": NUMACTL,
    }.items():
        (outputs / name).write_text(text)
    scripts = {
        "nvidia-smi": f"""case "$*" in
  "-q") cat {outputs}/q ;;
  "-q -x") cat {outputs}/qx ;;
  *) echo "not on this node" >&2; exit 6 ;;
esac""",
        "ibstat": f"cat {outputs}/ibstat",
        "lspci": f'[ "$3" = "10de:" ] && cat {outputs}/lspci',
        "numactl": f"cat {outputs}/numactl",
        "hostname": f"echo {HOST}",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def _sysfs(tmp: Path) -> Path:
    port = tmp / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for name, text in {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "400 Gb/sec (4X NDR)",
        "link_layer": "InfiniBand",
    }.items():
        (port / name).write_text(text + "\n")
    (port.parents[1] / "board_id").write_text("MT_0000000838\n")
    return tmp / "sys"


def _run(tmp: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{_fake_bin(tmp)}:/usr/bin:/bin",
        "SYSFS": str(_sysfs(tmp)),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_writes_a_masked_folder_the_replay_reads(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    done = _run(tmp_path, out)
    assert done.returncode == 0, done.stderr
    files = {p.name for p in out.iterdir()}
    assert files == {
        "nvidia-smi-q.txt",
        "nvidia-smi-q-x.xml",
        "ibstat.txt",
        "lspci-vvv-nvidia.txt",
        "numactl-H.txt",
        "sys-class-infiniband.txt",
        "source.yaml",
    }
    everything = "".join((out / f).read_text() for f in files if f != "source.yaml")
    for secret in (UUID, SERIAL, HOST, "946dae0300cde72c"):
        assert secret not in everything
    assert "GPU-00000000-0000-0000-0000-000000000001" in (out / "nvidia-smi-q.txt").read_text()
    assert "GPU-00000000-0000-0000-0000-000000000001" in (out / "nvidia-smi-q-x.xml").read_text()
    assert "Node GUID: 0x0000000000000001" in (out / "ibstat.txt").read_text()
    assert (
        "mlx5_0/1 | 4: ACTIVE | 5: LinkUp | 400 Gb/sec (4X NDR)"
        in (out / "sys-class-infiniband.txt").read_text()
    )
    source = yaml.safe_load((out / "source.yaml").read_text())
    assert set(source["files"]) == files - {"source.yaml"}
    assert source["driver"] == "570.124.06"
    assert len(source["masked"]) == 4
    assert any("nvlink -s" in entry for entry in source["not_captured"])
    assert corpus.read_source(out).owner_state == "unknown"
    capture = corpus.load(out)
    assert [g.name for g in capture.gpus] == ["NVIDIA H100 80GB HBM3"]
    outcome = replay.replay(capture)
    assert outcome.results["throttle_reasons"].status.value == "pass"
    assert outcome.results["infiniband_ports"].status.value == "pass"


def test_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    out.mkdir()
    (out / "x").write_text("x")
    done = _run(tmp_path, out)
    assert done.returncode == 2
    assert "is not empty" in done.stderr
