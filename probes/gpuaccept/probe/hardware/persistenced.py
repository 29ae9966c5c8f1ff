"""Whether nvidia-persistenced's socket is reachable from the probe.

With nvidia-persistenced running, NVML asks the daemon over its socket whether a
GPU is in persistence mode; a process that cannot reach the socket (a container
without it mounted, or one SELinux denies it to) reads persistence mode as Off
although it is on (NVIDIA/dgx-selinux pull request 3: "When nvidia-smi is run
within a docker container the Persistence Mode is reported as 'Off' even when
Persistence Mode is on ... nvidia-smi tries to communicate with
nvidia-persistenced through the socket at /var/run/nvidia-persistenced/socket";
apptainer/singularity issue 3565; NVIDIA/nvidia-container-toolkit issue 136). The
container toolkit mounts the socket into the container when the host has it
(libnvidia-container's ``persistenced`` IPC), so a pod without it either runs on a
host without the daemon or cannot see it: NVML's "Off" then tells nothing.
"""

import contextlib
import socket
from pathlib import Path

SOCKET_PATHS = (
    Path("/var/run/nvidia-persistenced/socket"),
    Path("/run/nvidia-persistenced/socket"),
)


def socket_reachable(paths: tuple[Path, ...] = SOCKET_PATHS, timeout_s: float = 0.5) -> bool:
    """True when one of ``paths`` is a Unix socket this process can connect to."""
    for path in paths:
        with (
            contextlib.suppress(OSError),
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock,
        ):
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            return True
    return False
