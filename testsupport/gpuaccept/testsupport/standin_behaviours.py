"""What a simulated node's pods do (kubelet stand-in, test support): run the
containers' commands as processes (the default), hang, or complete with a given
exit code and termination message without a process. :func:`prepared_reports`
is the scale mode: every pod completes with a prepared probe report."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunProcess:
    """Run the containers' commands as local processes (the default)."""


@dataclass(frozen=True)
class Hang:
    """Start the pod (phase Running) and never finish: only the deadline or deletion ends it."""


@dataclass(frozen=True)
class Complete:
    """Run no process: after ``delay_s``, every container terminates with this exit code and
    termination message (raw; truncated like the kubelet would)."""

    exit_code: int = 0
    message: str = ""
    delay_s: float = 0.0


@dataclass(frozen=True)
class StartFailure:
    """The runtime cannot start the container (e.g. the NVIDIA container toolkit's
    prestart hook fails): the container ends ``terminated.reason: StartError``,
    exit code 128, with the runtime's ``message``; the pod ends Failed."""

    message: str


@dataclass(frozen=True)
class ImagePullFailure:
    """The image cannot be pulled: the container waits in ``ErrImagePull`` with
    ``message`` until the pod is deleted or its deadline passes."""

    message: str = "failed to pull and unpack image: not found"


@dataclass(frozen=True)
class SandboxFailure:
    """The pod sandbox cannot be created (e.g. no runtime handler for the pod's
    RuntimeClass): a ``FailedCreatePodSandBox`` event with ``message``, and the
    container waits in ``ContainerCreating`` until deletion or the deadline."""

    message: str = (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get "
        'sandbox runtime: no runtime for "nvidia" is configured'
    )


Behaviour = RunProcess | Hang | Complete | StartFailure | ImagePullFailure | SandboxFailure


@dataclass(frozen=True)
class PodInfo:
    """What a :data:`BehaviourHook` gets to decide on a pod."""

    namespace: str
    name: str
    uid: str
    node_name: str
    boot_id: str
    profile: str | None
    pod: Mapping[str, Any]


BehaviourHook = Callable[[PodInfo], Behaviour]


def prepared_reports(
    report: Callable[[str, str], str],
    *,
    exit_code: int = 0,
    delay_s: float = 0.0,
    time_scale: float | None = None,
) -> BehaviourHook:
    """Scale mode: complete each pod with ``report(node_name, boot_id)`` as its
    termination message and ``exit_code``, without starting a process: after
    ``delay_s``, or with ``time_scale`` after the report's own ``wallS`` x that
    factor (a pod lasts as long as the probe it stands for, scaled)."""

    def hook(p: PodInfo) -> Behaviour:
        message = report(p.node_name, p.boot_id)
        delay = delay_s if time_scale is None else reported_wall_s(message) * time_scale
        return Complete(exit_code=exit_code, message=message, delay_s=delay)

    return hook


def reported_wall_s(message: str) -> float:
    """The ``wallS`` of a probe report's JSON text; 0 when it has none (or is no report)."""
    try:
        value = json.loads(message).get("wallS")
    except (ValueError, AttributeError):
        return 0.0
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0
