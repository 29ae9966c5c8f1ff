"""What a simulated node's pods do (kubelet stand-in, test support): run the
containers' commands as processes (the default), hang, or complete with a given
exit code and termination message without a process. :func:`prepared_reports`
is the scale mode: every pod completes with a prepared probe report;
:func:`fabric_pairs_from_profiles` adds fabric pairs to it, each pair's busbw
computed from its two nodes' profiles."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuaccept.checks.fabric_allreduce import CHECK as FABRIC_CHECK
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
    encode_termination_message,
)

FABRIC_PAIR_LABEL = "gpuaccept.io/fabric-pair"
FABRIC_RANK_LABEL = "gpuaccept.io/fabric-rank"
FABRIC_FIRST_ANNOTATION = "gpuaccept.io/fabric-first"
FABRIC_SECOND_ANNOTATION = "gpuaccept.io/fabric-second"


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


@dataclass(frozen=True)
class CompleteAfterPod:
    """Start (phase Running, with a pod IP), wait until the stand-in has seen the pod
    ``pod`` (same namespace), then complete as :class:`Complete` does: the rank-0 pod
    of a fabric pair in scale mode, which cannot finish before its partner exists."""

    pod: str
    exit_code: int = 0
    message: str = ""


Behaviour = (
    RunProcess
    | Hang
    | Complete
    | CompleteAfterPod
    | StartFailure
    | ImagePullFailure
    | SandboxFailure
)


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


def fabric_report(node_name: str, boot_id: str, rank: int, busbw_gbps: float) -> str:
    """A fabric pod's report as ``gpuaccept probe fabric`` writes it for a simulated
    node, with ``busbw_gbps`` as the pair's figure."""
    now = datetime.now(UTC)
    observed = {
        "backend": "gloo", "source": "loopback", "nodes": 2, "nodeRank": rank,
        "localRanks": 1, "ranks": 2, "busbwGBps": busbw_gbps, "timing": "host-batch-mean",
    }  # fmt: skip
    result = CheckResult(
        check=FABRIC_CHECK,
        status=CheckStatus.PASS,
        observed=observed,
        message=f"fabric busbw {busbw_gbps:g} GB/s over 2 ranks on 2 nodes (scale mode)",
        duration_s=0.0,
    )
    report = ProbeReport(
        node_name=node_name,
        boot_id=boot_id,
        probe_version="scale-mode",
        started_at=now,
        finished_at=now,
        hardware=HardwareMode.SIMULATED,
        summary=HardwareSummary(gpu_count=1),
        results=[result],
    )
    return encode_termination_message(report)


def fabric_pairs_from_profiles(
    busbw_of: Callable[[str], float | None], otherwise: Behaviour | BehaviourHook
) -> BehaviourHook:
    """Scale mode for fabric pairs: a pair's pods complete, without a process, with the
    lower of the two nodes' ``interNode.busbwGBps`` (a pair runs at the pace of its
    slower node); the rank-0 pod only once its partner pod exists. Other pods do
    ``otherwise``."""

    def hook(p: PodInfo) -> Behaviour:
        meta = p.pod.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if FABRIC_PAIR_LABEL not in labels:
            return otherwise if not callable(otherwise) else otherwise(p)
        first = str(annotations.get(FABRIC_FIRST_ANNOTATION, ""))
        second = str(annotations.get(FABRIC_SECOND_ANNOTATION, ""))
        figures = [busbw_of(first), busbw_of(second)]
        known = [f for f in figures if f is not None]
        busbw = min(known) if len(known) == len(figures) else 0.0
        rank = 1 if labels.get(FABRIC_RANK_LABEL) == "1" else 0
        message = fabric_report(p.node_name, p.boot_id, rank, busbw)
        if rank == 1:
            return Complete(message=message)
        return CompleteAfterPod(pod=p.name[:-1] + "1", message=message)

    return hook


def reported_wall_s(message: str) -> float:
    """The ``wallS`` of a probe report's JSON text; 0 when it has none (or is no report)."""
    try:
        value = json.loads(message).get("wallS")
    except (ValueError, AttributeError):
        return 0.0
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0
