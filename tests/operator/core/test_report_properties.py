"""Property: whatever a probe pod ends with, the node is Accepted only on a valid,
consistent, passing report, and always ends decided or retrying, never stuck.

Reports are the real probe's (simulated profiles), mutated at the JSON level
(numbers, NaN and Infinity, strings, duplicated and missing checks, GPU counts,
hardware mode, node name, boot ID), and the pod ends with any exit code, phase
and reason. Everything runs through the pure core (:class:`world.World`) with
the real judge; the World's API server refuses a status that is not valid JSON,
as the real one does. Deterministic: ``derandomize=True``, no example database.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from world import BOOT, World, make_report, spec

from gpuaccept.checks.registry import CHECKS as REGISTERED
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core import OperatorConfig

PROPERTY = settings(
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

BASES = {
    "healthy": make_report,
    "pcie": lambda: make_report(failing=["pcie_link"]),
    "gpu-missing": lambda: make_report(failing=["gpu_count"]),
}


def wire(base: str) -> dict[str, Any]:
    report: ProbeReport = BASES[base]()
    data: dict[str, Any] = json.loads(report.to_compact_json())
    return data


# ---------------------------------------------------------------- mutations (JSON level)


def _result(data: dict[str, Any], check: str) -> dict[str, Any] | None:
    return next((r for r in data["results"] if r["check"] == check), None)


def set_observed(check: str, key: str, value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        result = _result(data, check)
        if result is not None and isinstance(result.get("observed"), dict):
            result["observed"][key] = value

    return mutate


def duplicate(check: str, status: str) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        result = _result(data, check)
        if result is not None:
            index = data["results"].index(result)
            data["results"].insert(index, {**result, "status": status})

    return mutate


def drop(check: str) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        data["results"] = [r for r in data["results"] if r["check"] != check]

    return mutate


def set_top(path: tuple[str, ...], value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def set_status(check: str, status: str) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        result = _result(data, check)
        if result is not None:
            result["status"] = status

    return mutate


CHECKS = [check.name for check in REGISTERED]  # every registered check can be mutated
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([math.nan, math.inf, -math.inf, 0, -1, 1e308]),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
# The top-level fields of each check's observed model, as they are on the wire.
OBSERVED_KEYS = {
    check.name: [f.alias or name for name, f in check.observed_model.model_fields.items()]
    for check in REGISTERED
}


@st.composite
def mutations(draw: st.DrawFn) -> Any:
    check = draw(st.sampled_from(CHECKS))
    return draw(
        st.one_of(
            st.builds(
                set_observed,
                st.just(check),
                st.sampled_from(OBSERVED_KEYS[check]),
                NUMBERS | JSON_VALUES,
            ),
            st.builds(
                duplicate, st.just(check), st.sampled_from(["pass", "fail", "warn", "error"])
            ),
            st.builds(drop, st.just(check)),
            st.builds(
                set_status,
                st.just(check),
                st.sampled_from(["pass", "fail", "warn", "error", "skip", "bogus"]),
            ),
            st.builds(set_top, st.just(("summary", "gpuCount")), st.integers(-1, 70) | NUMBERS),
            st.builds(set_top, st.just(("hardware",)), st.sampled_from(["real", "simulated", ""])),
            st.builds(set_top, st.just(("nodeName",)), st.sampled_from(["gpu-1", "gpu-2", ""])),
            st.builds(set_top, st.just(("bootID",)), st.sampled_from([BOOT, "boot-2"])),
            st.builds(set_top, st.just(("observed_extra",)), JSON_VALUES),
        )
    )


@dataclass
class Case:
    """One probe pod's end, as the operator sees it."""

    base: str = "healthy"
    mutations: list[Any] = field(default_factory=list)
    exit_code: int | None = 0
    phase: str = "Succeeded"
    reason: str = "Completed"
    node_gpus: int = 8
    accept_simulated: bool = True
    raw: str | None = None  # a message that is not the mutated report

    def message(self) -> str:
        if self.raw is not None:
            return self.raw
        data = wire(self.base)
        for mutate in self.mutations:
            mutate(data)
        return json.dumps(data, separators=(",", ":"))  # NaN/Infinity as a buggy probe writes


@st.composite
def cases(draw: st.DrawFn) -> Case:
    case = Case(
        base=draw(st.sampled_from(["healthy", "healthy", *sorted(BASES)])),
        mutations=draw(st.just([]) | st.lists(mutations(), min_size=1, max_size=3)),
        node_gpus=draw(st.sampled_from([8, 8, 8, 8, 4, 16])),
        accept_simulated=draw(st.integers(0, 4)) > 0,
    )
    if draw(st.integers(0, 3)) > 0:  # an honest pod end, by the probe's own verdict
        accepted = _probe_verdict(case.message())
        case.exit_code, case.phase = (0, "Succeeded") if accepted else (1, "Failed")
        case.reason = "Completed" if accepted else "Error"
    else:
        case.exit_code = draw(st.sampled_from([0, 1, 2, 137, 143, None]))
        case.phase = draw(st.sampled_from(["Succeeded", "Failed"]))
        case.reason = draw(st.sampled_from(["Completed", "Error", "DeadlineExceeded", "OOMKilled"]))
    if draw(st.integers(0, 9)) == 0:
        case.raw = draw(st.sampled_from(["", "not json", "{}", "x" * 5000])) or draw(st.text())
    return case


def _probe_verdict(message: str) -> bool:
    try:
        report = ProbeReport.model_validate_json(message)
        policy = spec().probe
        return evaluate(report, policy).accepted
    except Exception:
        return False


# ---------------------------------------------------------------- the oracle


def _int_field(observed: object, key: str) -> object:
    return observed.get(key) if isinstance(observed, dict) else None


def trustworthy_and_passing(case: Case, message: str) -> bool:
    """What must hold for the node to be Accepted, computed independently of the core."""
    if len(message.encode()) > TERMINATION_MESSAGE_MAX_BYTES:
        return False
    try:
        report = ProbeReport.model_validate_json(message)  # the contract
    except ValueError:
        return False
    if (report.node_name, report.boot_id) != ("gpu-1", BOOT):
        return False
    if report.hardware.value == "simulated" and not case.accept_simulated:
        return False
    gpus = report.summary.gpu_count
    if gpus != case.node_gpus:
        return False
    count = report.result("gpu_count")
    if count is not None and isinstance(count.observed, dict):
        if _int_field(count.observed, "visible") != gpus:
            return False
        if _int_field(count.observed, "allocatable") not in (None, case.node_gpus):
            return False
    allreduce = report.result("nccl_allreduce")
    if (
        allreduce is not None
        and isinstance(allreduce.observed, dict)
        and _int_field(allreduce.observed, "ranks") != gpus
    ):
        return False
    try:
        passing = evaluate(report, spec().probe).accepted
    except Exception:
        return False
    ended_well = (case.exit_code, case.phase) == (0, "Succeeded")
    return passing and ended_well and case.reason != "DeadlineExceeded"


def refuse_invalid_json(status: NodeAcceptanceStatus) -> str | None:
    """The API server refuses a body that is not JSON (NaN, Infinity)."""
    try:
        json.dumps(status.to_wire(), allow_nan=False)
    except ValueError as error:
        return f"400 invalid JSON patch: {error}"
    return None


def run(case: Case) -> World:
    world = World(
        config=OperatorConfig(accept_simulated_reports=case.accept_simulated),
        refuse_status=refuse_invalid_json,
    )
    assert world.node is not None
    world.node = type(world.node)(**{**world.node.__dict__, "gpus": case.node_gpus})
    world.settle()
    assert world.status.phase == Phase.PROBING
    world.finish_pod(
        case.message(), exit_code=case.exit_code or 0, phase=case.phase, reason=case.reason
    )
    if case.exit_code is None:  # no exit code recorded at all
        pod = world.current_pod()
        world.pods[pod.name] = type(pod)(**{**pod.__dict__, "exit_code": None})
    world.settle()
    return world


ISSUE_CASES = [
    # NaN in an observed value (busbwGBps: NaN): the status write failed forever.
    Case(mutations=[set_observed("nccl_allreduce", "busbwGBps", math.nan)]),
    Case(mutations=[set_observed("pcie_link", "h2dGBps", [math.inf] * 8)]),
    # nccl_allreduce reported as fail, then pass: the last one won.
    Case(mutations=[duplicate("nccl_allreduce", "fail")]),
    # exit 1, exit 137 and DeadlineExceeded with a passing report were Accepted.
    Case(exit_code=1, phase="Failed", reason="Error"),
    Case(exit_code=137, phase="Failed", reason="OOMKilled"),
    Case(exit_code=137, phase="Failed", reason="DeadlineExceeded"),
    # 4 of 4 GPUs on a node that advertises 8.
    Case(
        mutations=[
            set_top(("summary", "gpuCount"), 4),
            set_observed("gpu_count", "visible", 4),
            set_observed("gpu_count", "allocatable", 4),
            set_observed("nccl_allreduce", "ranks", 4),
        ]
    ),
    # hardware: simulated, on an operator not told to accept it.
    Case(accept_simulated=False),
]


def _with_examples(test: Any) -> Any:
    for case in ISSUE_CASES:
        test = example(case)(test)
    return test


@PROPERTY
@_with_examples
@given(cases())
def test_accepted_only_on_a_trustworthy_passing_report_and_never_stuck(case: Case) -> None:
    message = case.message()
    world = run(case)
    st_ = world.status
    trusted = trustworthy_and_passing(case, message)
    event(f"{st_.phase.value} {st_.reason}")
    # Accepted if and only if the report is valid, consistent and passing.
    assert (st_.phase == Phase.ACCEPTED) == trusted, (st_.phase, st_.reason, st_.message)
    # Decided, or retrying: Pending with a next attempt, the pod deleted.
    assert st_.phase in (Phase.ACCEPTED, Phase.QUARANTINED, Phase.PENDING), st_.phase
    assert world.pods == {}
    if st_.phase == Phase.PENDING:
        assert st_.next_attempt_time is not None
        assert "gpuaccept.io/pending" in world.taint_keys()
        world.advance(3600)
        world.settle()
        assert world.status.phase == Phase.PROBING  # the retry starts: not stuck
    assert world.status_write_error is None or world.status.phase == Phase.PROBING


def test_the_issue_cases_never_accept() -> None:
    for case in ISSUE_CASES:
        world = run(case)
        assert world.status.phase != Phase.ACCEPTED, case
        assert world.status.phase == Phase.PENDING, (case, world.status)
