"""What the kubelet stand-in (test support) gives a container and takes from it:
``$(VAR)`` expansion, downward-API field references, and the termination message
as the kubelet reads it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuaccept.contracts.probe_invocation import TERMINATION_LOG_PATH
from gpuaccept.testsupport.standin_nodes import SimNode

# Limits from pkg/kubelet/container/runtime.go (k8s v1.37).
MAX_TERMINATION_MESSAGE_BYTES = 4 * 1024
MAX_TERMINATION_LOG_BYTES = 2 * 1024
MAX_TERMINATION_LOG_LINES = 80
DEFAULT_TERMINATION_MESSAGE_PATH = TERMINATION_LOG_PATH


class StartError(Exception):
    """A container could not be started (exit code 128, reason StartError)."""


def truncate_termination_message(data: bytes) -> str:
    """The kubelet keeps the *last* 4096 bytes of the termination-message file
    (tail.ReadAtMost in pkg/kubelet/kuberuntime); invalid UTF-8 is replaced."""
    return data[-MAX_TERMINATION_MESSAGE_BYTES:].decode("utf-8", errors="replace")


def log_tail_message(log_path: Path) -> str:
    """FallbackToLogsOnError: last 80 lines, at most the last 2048 bytes."""
    try:
        data = log_path.read_bytes()
    except OSError as e:
        return f"Error on reading termination message from logs: {e}"
    lines = data.splitlines(keepends=True)[-MAX_TERMINATION_LOG_LINES:]
    return b"".join(lines)[-MAX_TERMINATION_LOG_BYTES:].decode("utf-8", errors="replace")


_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(s: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined vars are replaced, ``$$`` is a literal ``$``,
    undefined references stay as they are."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR_REF.sub(repl, s)


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: Mapping[str, Any], path: str, node: SimNode, pod_ip: str | None = None) -> str:
    """A downward-API field; ``pod_ip`` is the pod's own address (the node's by default)."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    ip = node.address or "127.0.0.1"
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": ip,
        "status.hostIPs": ip,
        "status.podIP": pod_ip or ip,
        "status.podIPs": pod_ip or ip,
    }
    if path in simple:
        return str(simple[path])
    m = _LABEL_REF.match(path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    raise ValueError(f"unsupported fieldRef {path!r}")
