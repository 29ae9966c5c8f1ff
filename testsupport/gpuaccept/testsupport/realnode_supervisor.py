"""The local real node's processes, in their own mount namespace — test support, not shipped.

``python -m gpuaccept.testsupport.realnode_supervisor NODE_DIR`` is what
``realnode up`` starts under ``unshare --mount --propagation private``
(docs/realnode.md). In that namespace it

1. bind-mounts files over the ``/proc/sys`` entries the kubelet would otherwise
   rewrite on the host (``KUBELET_SYSCTLS``: overcommit, panic on oops, ...),
   so that the kubelet reads the values it wants and the shared machine keeps
   its own;
2. starts containerd, the kubelet and the FAKE GPUs' plugin, the device plugin
   or the DRA kubelet plugin (:data:`GPU_PLUGINS`; their arguments are in
   ``NODE_DIR/state.json``, written by ``realnode up``), logs in
   ``NODE_DIR/logs/``;
3. waits for SIGTERM/SIGINT (``realnode down``) or for one of them to exit;
4. tears the node down: the GPUs' plugin and the kubelet stop, every process
   in the kubelet's ``kubepods`` cgroups is killed (the containers), containerd
   stops, the shims left in this namespace are killed, and the empty
   ``kubepods`` cgroups are removed. The namespace, and every mount made in it
   (container root filesystems, volumes, network namespaces), goes with the
   last process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from gpuaccept.testsupport.realnode_config import DEVICE_PLUGIN_DIR, KUBELET_SYSCTLS

__all__ = ["GPU_PLUGINS", "HOST_MNTNS_ENV", "kubepods_cgroups", "main"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"
STOP_TIMEOUT_S = 20.0
HOST_MNTNS_ENV = "GPUACCEPT_HOST_MNTNS"
# The FAKE GPUs' plugins (hack/node): one of them runs, the one state.json names.
GPU_PLUGINS = ("fakedeviceplugin", "fakedraplugin")


def log(message: str) -> None:
    print(f"realnode-supervisor: {message}", file=sys.stderr, flush=True)


def overlay_sysctls(sysctl_dir: Path) -> None:
    """Bind-mount a file holding the kubelet's value over each differing sysctl."""
    sysctl_dir.mkdir(parents=True, exist_ok=True)
    for name, wanted in KUBELET_SYSCTLS.items():
        target = Path("/proc/sys") / name
        if target.read_text().strip() == str(wanted):
            continue
        source = sysctl_dir / name.replace("/", ".")
        source.write_text(f"{wanted}\n")
        subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
        log(f"{target} reads {wanted} in the node's mount namespace (host value kept)")


def private_device_plugin_dir(node_dir: Path) -> None:
    """The kubelet's device plugin socket directory is fixed
    (``/var/lib/kubelet/device-plugins``, whatever ``--root-dir`` says): in this
    namespace it is the node directory's ``device-plugins``."""
    source = node_dir / "device-plugins"
    source.mkdir(parents=True, exist_ok=True)
    DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(source), str(DEVICE_PLUGIN_DIR)], check=True)


def kubepods_cgroups(root: Path = CGROUP_ROOT) -> list[Path]:
    """Every cgroup directory under ``kubepods`` in each v1 hierarchy, deepest first."""
    found: list[Path] = []
    for hierarchy in sorted(root.iterdir()) if root.is_dir() else []:
        top = hierarchy / KUBEPODS
        if top.is_dir() and not top.is_symlink():
            found += [top, *(p for p in top.rglob("*") if p.is_dir())]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _procs(cgroups: Sequence[Path]) -> set[int]:
    pids: set[int] = set()
    for cgroup in cgroups:
        try:
            pids |= {int(p) for p in (cgroup / "cgroup.procs").read_text().split()}
        except OSError:
            continue
    return pids


def kill_pods() -> int:
    """SIGKILL every process in the kubepods cgroups until none is left; how many."""
    killed: set[int] = set()
    for _ in range(50):
        pids = _procs(kubepods_cgroups())
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        killed |= pids
        time.sleep(0.1)
    return len(killed)


def remove_kubepods_cgroups() -> None:
    for cgroup in kubepods_cgroups():
        try:
            cgroup.rmdir()
        except OSError as error:
            log(f"cannot remove {cgroup}: {error}")


def own_mount_namespace() -> bool:
    """True when this process runs in another mount namespace than the one that
    started it (``realnode up`` passes its own in ``GPUACCEPT_HOST_MNTNS``)."""
    host = os.environ.get(HOST_MNTNS_ENV, "")
    return bool(host) and os.readlink("/proc/self/ns/mnt") != host


def same_namespace_pids() -> Iterator[int]:
    """Other processes in this mount namespace (the containerd shims); none when
    this process shares the host's namespace (never signal the whole machine)."""
    mine = os.readlink("/proc/self/ns/mnt")
    if not own_mount_namespace():
        return
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if os.readlink(entry / "ns" / "mnt") == mine:
                yield int(entry.name)
        except OSError:
            continue


def stop(process: subprocess.Popen[bytes], name: str) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log(f"{name} did not stop in {STOP_TIMEOUT_S:.0f}s: SIGKILL")
            process.kill()
            process.wait()
    log(f"{name} stopped (exit {process.returncode})")


class StopRequestedError(Exception):
    """SIGTERM or SIGINT: tear the node down."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise StopRequestedError(signal.Signals(signum).name)


def wait_for_socket(path: Path, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before {path} appeared")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear within {timeout_s:.0f}s")
        time.sleep(0.2)


def run(node_dir: Path) -> int:
    state = json.loads((node_dir / "state.json").read_text())
    commands: dict[str, list[str]] = state["commands"]
    logs = node_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if not own_mount_namespace():
        log("not in a mount namespace of its own: run me under `unshare --mount`")
        return 2
    overlay_sysctls(node_dir / "sysctl")
    private_device_plugin_dir(node_dir)
    started: list[tuple[str, subprocess.Popen[bytes]]] = []
    code = 0
    try:
        plugins = [name for name in GPU_PLUGINS if name in commands]
        for name in ("containerd", "kubelet", *plugins):
            with (logs / f"{name}.log").open("ab") as out:
                process = subprocess.Popen(commands[name], stdout=out, stderr=subprocess.STDOUT)
            started.append((name, process))
            log(f"started {name} (pid {process.pid})")
            if name == "containerd":
                wait_for_socket(Path(state["containerd_socket"]), process, 60.0)
        (node_dir / "supervisor.ready").write_text(
            json.dumps({name: p.pid for name, p in started}) + "\n"
        )
        while all(p.poll() is None for _, p in started):
            time.sleep(0.5)
        dead = [f"{name} (exit {p.returncode})" for name, p in started if p.poll() is not None]
        log("exited: " + ", ".join(dead))
        code = 1
    except StopRequestedError as why:
        log(f"{why}: stopping the node")
    except RuntimeError as error:
        log(f"cannot start the node: {error}")
        code = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        teardown(started)
    return code


def teardown(started: Sequence[tuple[str, subprocess.Popen[bytes]]]) -> None:
    by_name = dict(started)
    for name in (*GPU_PLUGINS, "kubelet"):
        if name in by_name:
            stop(by_name[name], name)
    log(f"killed {kill_pods()} container processes")
    if "containerd" in by_name:
        stop(by_name["containerd"], "containerd")
    for pid in same_namespace_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    remove_kubepods_cgroups()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: realnode_supervisor NODE_DIR", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
