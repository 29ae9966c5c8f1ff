"""Where a capture's replay differs from its owner's word, and why (issue 38).

Read by tests/probe/test_capture_replay.py (which fails on any other difference)
and by :mod:`.table` (docs/probe.md's corpus table).
"""

# What shows that a fault's check failed for that fault (its message).
FAULT_EVIDENCE = {
    "remapped_rows_pending": r"row remap pending",
    "hw_power_brake_slowdown": r"hw_power_brake \d+% of samples",
    "infiniband_ports_down": r"\bdown\b",
    "nvlink_down": r"inactive|down",
    "fabric_unhealthy": r"unhealthy",
    "fabric_status_error": r"status",
    "xid_119": r"Xid 119",
    "pcie_downtrained": r"Gen ?1|2\.5",
}

# Outcomes that differ from the owner's word, and why: (check, what happened, cause).
# "37.N" is item N of issue 37; "38.Cn" a candidate defect this corpus found (issue 38's
# report), not yet filed.
DIFFERENCES: dict[str, tuple[str, str, str]] = {
    "gpud-h100-ib-three-ports-down": (
        "infiniband_ports",
        "warn (firmware not compared: ibstat prints no board_id), not fail for the three "
        "down ports",
        "the down ports are ConnectX-6 Dx Ethernet ports; all 8 InfiniBand ports are up, and the "
        "default policy expects no port count (infiniband_ports.expectedUpPorts: None)",
    ),
    "gpud-h100-ib-two-ports-down": (
        "infiniband_ports",
        "warn (firmware not compared: ibstat prints no board_id), not fail for the two down ports",
        "every port is Ethernet (RoCE); the down ports are two ConnectX-7 ports (mlx5_5, "
        "mlx5_11), phys state Disabled, which the judge does not count as down on a live "
        "board (administratively disabled), whatever the board_id",
    ),
    "azhpc-diagnostics-73-v100-sxm2-nvlink-inactive": (
        "nvlink",
        "not replayable: the capture has no error counters",
        "the replay judges nvlink only with the counters (nvidia-smi nvlink -e); the reader "
        "keeps the inactive links it read (test_nvlink_reader_keeps_the_inactive_links_it_read)",
    ),
    "dra-driver-626-fabric-unhealthy": (
        "nvswitch_fabric",
        "not replayable: the quote has no GPU name, without which RealBackend opens no GPU",
        "the reader alone flags it (test_fabric_reader_on_quoted_faults)",
    ),
    "azhpc-images-506-fabric-insufficient-resources": (
        "nvswitch_fabric",
        "not replayable: the quote has no GPU name",
        "the reader alone reads status 23 (test_fabric_reader_on_quoted_faults)",
    ),
    "gpud-h100-xid-119-gsp-timeout": (
        "xid_errors",
        "not replayable: the Xid is in the kernel log from before any probe",
        "38.C2: the probe sees Xids only as NVML events while it runs; an Xid logged before it "
        "is seen only through the recovery action / reset status, which this capture lacks",
    ),
    "jan-183-rtx4090-riser-pcie-downgraded": (
        "pcie_link",
        "not replayable: pcie_link measures under load",
        "the capture is lspci's LnkSta at an unknown load; the owner's own thread doubts it",
    ),
}
