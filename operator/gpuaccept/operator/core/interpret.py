"""One typed interpreter for a plan's actions.

The real executor (``gpuaccept.operator.executor``) and the unit tests'
in-memory world both implement :class:`ActionInterpreter`; :func:`interpret`
dispatches with ``match`` and ``assert_never``, so a new action without a
branch here, or a method in an interpreter, fails ``mypy --strict``.
"""

from __future__ import annotations

from typing import Protocol, assert_never

from gpuaccept.operator.core.model import (
    Action,
    CreateNodeAcceptance,
    CreateProbePod,
    CreateResourceClaim,
    DeleteFenceRule,
    DeleteNodeAcceptance,
    DeleteProbePod,
    DeleteResourceClaim,
    DrainNode,
    EmitEvent,
    PatchNAStatus,
    PatchNodeCondition,
    PatchNodeTaintsLabels,
    RemoveReprobeAnnotation,
    WriteFenceRule,
)


class ActionInterpreter(Protocol):
    """Carries out one action of each kind (the API calls, or a simulation of them)."""

    def create_node_acceptance(self, action: CreateNodeAcceptance) -> None: ...
    def patch_na_status(self, action: PatchNAStatus) -> None: ...
    def patch_node_taints_labels(self, action: PatchNodeTaintsLabels) -> None: ...
    def patch_node_condition(self, action: PatchNodeCondition) -> None: ...
    def remove_reprobe_annotation(self, action: RemoveReprobeAnnotation) -> None: ...
    def create_probe_pod(self, action: CreateProbePod) -> None: ...
    def delete_probe_pod(self, action: DeleteProbePod) -> None: ...
    def create_resource_claim(self, action: CreateResourceClaim) -> None: ...
    def delete_resource_claim(self, action: DeleteResourceClaim) -> None: ...
    def write_fence_rule(self, action: WriteFenceRule) -> None: ...
    def delete_fence_rule(self, action: DeleteFenceRule) -> None: ...
    def delete_node_acceptance(self, action: DeleteNodeAcceptance) -> None: ...
    def emit_event(self, action: EmitEvent) -> None: ...
    def drain_node(self, action: DrainNode) -> None: ...


def interpret(interpreter: ActionInterpreter, action: Action) -> None:  # noqa: PLR0912 (one branch per kind)
    """Carry out ``action`` with ``interpreter``; every kind has exactly one branch."""
    match action:
        case CreateNodeAcceptance():
            interpreter.create_node_acceptance(action)
        case PatchNAStatus():
            interpreter.patch_na_status(action)
        case PatchNodeTaintsLabels():
            interpreter.patch_node_taints_labels(action)
        case PatchNodeCondition():
            interpreter.patch_node_condition(action)
        case RemoveReprobeAnnotation():
            interpreter.remove_reprobe_annotation(action)
        case CreateProbePod():
            interpreter.create_probe_pod(action)
        case DeleteProbePod():
            interpreter.delete_probe_pod(action)
        case CreateResourceClaim():
            interpreter.create_resource_claim(action)
        case DeleteResourceClaim():
            interpreter.delete_resource_claim(action)
        case WriteFenceRule():
            interpreter.write_fence_rule(action)
        case DeleteFenceRule():
            interpreter.delete_fence_rule(action)
        case DeleteNodeAcceptance():
            interpreter.delete_node_acceptance(action)
        case EmitEvent():
            interpreter.emit_event(action)
        case DrainNode():
            interpreter.drain_node(action)
        case _:
            assert_never(action)
