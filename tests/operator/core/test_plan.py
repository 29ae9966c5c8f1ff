"""The plan's action ordering and the one action interpreter."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from world import World

from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus
from gpuaccept.operator.core import (
    CreateProbePod,
    DeleteProbePod,
    Plan,
    RemoveReprobeAnnotation,
)
from gpuaccept.operator.core.interpret import ActionInterpreter
from gpuaccept.operator.core.model import Action, PatchNAStatus, order_rank


def test_remove_reprobe_annotation_is_moved_last_and_the_rest_keep_their_order() -> None:
    status = PatchNAStatus("gpu-1", "1", NodeAcceptanceStatus())
    pod = CreateProbePod("p", {})
    plan = Plan.ordered([RemoveReprobeAnnotation("gpu-1"), status, pod, DeleteProbePod("q")])
    assert plan.actions == (status, pod, DeleteProbePod("q"), RemoveReprobeAnnotation("gpu-1"))


def test_a_plan_out_of_order_is_refused() -> None:
    with pytest.raises(ValueError, match="out of order"):
        Plan(actions=(RemoveReprobeAnnotation("gpu-1"), DeleteProbePod("q")))


def test_every_action_kind_has_an_interpreter_method() -> None:
    kinds = typing.get_args(Action)
    methods = {
        name
        for name, value in vars(ActionInterpreter).items()
        if callable(value) and not name.startswith("_")
    }
    assert len(methods) == len(kinds)
    assert order_rank(RemoveReprobeAnnotation("n")) == 1
    assert order_rank(DeleteProbePod("q")) == 0


def test_a_reprobe_request_while_backing_off_removes_the_annotation_last() -> None:
    world = World()
    world.settle()
    world.finish_pod(None, exit_code=2, phase="Failed")
    world.settle()  # a failed attempt: backing off
    assert world.node is not None
    world.node = dataclasses.replace(world.node, annotations={"gpuaccept.io/reprobe": ""})
    world.advance(10_000)  # the next attempt starts in the same pass
    plan = world.plan()
    assert isinstance(plan.actions[-1], RemoveReprobeAnnotation)
    assert len(plan.actions) > 1
