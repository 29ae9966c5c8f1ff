"""How the probe is invoked: the contract between the probe CLI, the pod the
operator builds, and the kubelet stand-in that runs that pod in tests.

``gpuaccept probe [FLAGS]`` reads the environment variables below, writes its
compact report to the termination log given by :data:`FLAG_TERMINATION_LOG`
(the pod's ``terminationMessagePath``), and exits with one of the exit codes.
"""

from enum import IntEnum
from typing import Final

# Environment variables the probe reads.
ENV_NODE_NAME: Final = "NODE_NAME"  # the node (downward API spec.nodeName)
ENV_POLICY: Final = "GPUACCEPT_POLICY"  # the ProbePolicy as JSON text
# The node's allocatable nvidia.com/gpu: what the probe pod requests (so NVML sees at most these).
ENV_EXPECTED_GPUS: Final = "GPUACCEPT_EXPECTED_GPUS"
# The node's capacity nvidia.com/gpu (healthy and unhealthy devices of the device plugin).
ENV_NODE_GPU_CAPACITY: Final = "GPUACCEPT_NODE_GPU_CAPACITY"
# A DRA node: the UUIDs of the GPUs its pool publishes, comma-separated (the claim's).
ENV_EXPECTED_GPU_UUIDS: Final = "GPUACCEPT_EXPECTED_GPU_UUIDS"
# The GPU feature discovery label nvidia.com/gpu.count, when the node has it.
ENV_GFD_GPU_COUNT: Final = "GPUACCEPT_GFD_GPU_COUNT"
# The GPU feature discovery label nvidia.com/gpu.replicas (time-slicing or MPS sharing:
# the device plugin then advertises GPUs x replicas), when the node has it.
ENV_GFD_GPU_REPLICAS: Final = "GPUACCEPT_GFD_GPU_REPLICAS"
ENV_PROFILE: Final = "GPUACCEPT_PROFILE"  # simulate this hardware profile (tests, demo)
ENV_BOOT_ID: Final = "GPUACCEPT_BOOT_ID"  # the boot ID to report (simulated nodes)
# Simulated nodes: take the profile's durations x this factor (0, the default: no waiting).
ENV_SIM_TIME_SCALE: Final = "GPUACCEPT_SIM_TIME_SCALE"
ENV_SYSFS_ROOT: Final = "GPUACCEPT_SYSFS_ROOT"  # real hardware: sysfs root (default /sys)
ENV_PROC_ROOT: Final = "GPUACCEPT_PROC_ROOT"  # real hardware: procfs root (default /proc)

# Where the pod's report goes: the container's terminationMessagePath.
TERMINATION_LOG_PATH: Final = "/dev/termination-log"

# Command-line flags of ``gpuaccept probe``.
FLAG_PROFILE: Final = "--profile"
FLAG_POLICY: Final = "--policy"
FLAG_OUTPUT: Final = "--output"
FLAG_CHECKS: Final = "--checks"
FLAG_TERMINATION_LOG: Final = "--termination-log"
FLAG_NODE_NAME: Final = "--node-name"
FLAG_EXPECTED_GPUS: Final = "--expected-gpus"
FLAG_SYSFS_ROOT: Final = "--sysfs-root"
FLAG_PROC_ROOT: Final = "--proc-root"


class ProbeExit(IntEnum):
    """The probe's exit codes."""

    ACCEPTED = 0
    QUARANTINED = 1  # or not a GPU node, or the probe failed
    USAGE = 2  # bad usage or a bad input file


# ``gpuaccept probe fabric``: one node's half of a two-node all-reduce (docs/fabric.md).
FABRIC_SUBCOMMAND: Final = "fabric"
ENV_POD_IP: Final = "GPUACCEPT_POD_IP"  # the pod's IP (downward API status.podIP): bind here
# The pair's secret, the same in both pods of a pair (the operator's, per pair): the ranks
# meet under it in the rendezvous store, so a peer without it never joins (docs/fabric.md).
ENV_FABRIC_NONCE: Final = "GPUACCEPT_FABRIC_NONCE"
FLAG_RENDEZVOUS_ADDRESS: Final = "--rendezvous-address"  # the rank-0 pod's IP
FLAG_RENDEZVOUS_PORT: Final = "--rendezvous-port"
FLAG_NODES: Final = "--nodes"
FLAG_NODE_RANK: Final = "--node-rank"
FLAG_LOCAL_RANKS: Final = "--local-ranks"  # one per GPU of this node
FLAG_BIND_ADDRESS: Final = "--bind-address"
FLAG_MIN_BUSBW: Final = "--min-busbw-gbps"
FLAG_ALLOW_SOCKET_TRANSPORT: Final = "--allow-socket-transport"  # fabric.requireRdma: false
FLAG_MAX_MESSAGE_BYTES: Final = "--max-message-bytes"
FLAG_RENDEZVOUS_TIMEOUT: Final = "--rendezvous-timeout-s"
FLAG_DEADLINE: Final = "--deadline-s"
DEFAULT_RENDEZVOUS_PORT: Final = 29500  # torch.distributed's customary MASTER_PORT


# Environment a platform team may not set on probe and fabric pods (the chart's
# probe.env and fabric.env, the operator's --probe-env and --fabric-pods): what the
# probe reads about its node and its run (every GPUACCEPT_ name, NODE_NAME), which
# GPUs it is given and sees (the report is held to the node's GPUs), and what code
# runs. A pod with one of these set would report on a run the operator did not ask for.
RESERVED_ENV_PREFIX: Final = "GPUACCEPT_"
RESERVED_ENV: Final = frozenset(
    {
        ENV_NODE_NAME,
        # the container toolkit's and CUDA's choice and order of devices
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        # the programs and libraries the probe is
        "PATH",
        "PYTHONPATH",
        "PYTHONHOME",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
    }
)


def reserved_env(name: str) -> bool:
    """Whether ``name`` is the probe's to set (see :data:`RESERVED_ENV`)."""
    return name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIX)


# ``gpuaccept probe watch``: one in-service watch window (docs/probe.md, "gpuaccept probe
# watch"). It reads ENV_NODE_NAME, ENV_BOOT_ID, ENV_PROFILE, ENV_SIM_TIME_SCALE and
# ENV_NODE_GPU_CAPACITY (the GPUs the node should have: the report's gpusExpected) like
# the probe, writes a WatchReport (contracts/watch_report.py) to --termination-log, and
# exits WatchExit. Its pod requests no GPU: the operator sets NVIDIA_VISIBLE_DEVICES=all.
WATCH_SUBCOMMAND: Final = "watch"
FLAG_WINDOW: Final = "--window-s"  # default contracts.watch_report.DEFAULT_WINDOW_S
# Xids that end the window at once (comma-separated; default: the fatal-on-first class of
# checks/xid_classes.py). The operator passes its policy's list.
FLAG_FATAL_XIDS: Final = "--fatal-xids"
# Events of one Xid on one GPU less than this many seconds apart are one burst (default:
# contracts.watch_report.BURST_MERGE_S). The operator passes its policy's
# inService.xid.burstMergeSeconds, the gap its ledger merges with.
FLAG_BURST_MERGE: Final = "--burst-merge-s"


class WatchExit(IntEnum):
    """``gpuaccept probe watch``'s exit codes: the report says what was seen either way."""

    QUIET = 0  # the window ran out, or the watch saw no GPU (the report says which)
    EARLY = 1  # ended early on a fatal event, a lost GPU or a failed listener
    USAGE = 2  # bad usage or a bad input file
