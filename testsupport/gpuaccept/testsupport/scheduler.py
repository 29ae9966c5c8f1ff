"""The real kube-scheduler against the test control plane (test support).

The local control plane (``hack/controlplane``) runs kube-apiserver and etcd only:
nothing places a pod that does not name its node. A DRA node's probe pod is placed
by the scheduler, which allocates its ResourceClaim (its DynamicResources plugin,
GA and on by default since Kubernetes 1.34) and binds it; the kubelet stand-in runs
it once its claim is allocated and reserved for it. So the tests that need claim
allocation run ``.bin/kube-scheduler`` (built from ``hack/node`` at the control
plane's Kubernetes version, ``make .bin/kube-scheduler``), as the real node does
(:mod:`gpuaccept.testsupport.realnode`), with the admin's kubeconfig and no leader
election, for as long as they need it.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from gpuaccept.testsupport.controlplane import ControlPlane, bin_dir


def scheduler_binary() -> Path:
    path = bin_dir() / "kube-scheduler"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: make .bin/kube-scheduler (hack/node)")
    return path


def scheduler_command(cp: ControlPlane) -> list[str]:
    return [
        str(scheduler_binary()),
        f"--kubeconfig={cp.kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
    ]


@contextlib.contextmanager
def kube_scheduler(cp: ControlPlane, log_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """kube-scheduler for the duration of the block, its log in ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "kube-scheduler.log").open("ab") as out:
        process = subprocess.Popen(
            scheduler_command(cp), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
