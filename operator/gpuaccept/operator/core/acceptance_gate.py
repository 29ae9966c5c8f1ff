"""May this evidence accept the node now? (pure)

One gate for every path to an accepting verdict: a fresh probe, a stored report
judged again after a policy change or a relabel, and the fabric pass. An
accepting verdict goes through only when

* its report can still be trusted for the node as it is now
  (:func:`~gpuaccept.operator.core.report_trust.trusted_report`: node name, boot,
  GPU counts against allocatable and capacity; a pod's exit code and phase are
  checked by ``outcome_problem`` where there is a pod);
* the report covers every GPU the node has (the most of its allocatable and its
  capacity), whatever the policy's ``gpuCount`` says;
* the fabric test, where the policy runs it, is behind it or comes next
  (:func:`fabric_still_to_pass`);
* the limit lets it through (:func:`~gpuaccept.operator.core.capacity.take_out_allowed`,
  for verdicts that take a node out of service).

Trust problems are never a conviction here: a fresh probe retries the attempt, a
re-judge or a fabric verdict starts a new round (the probe then decides).
"""

from __future__ import annotations

from gpuaccept.checks.verdict import Verdict
from gpuaccept.contracts.nodeacceptance import FabricStatus
from gpuaccept.contracts.report import ProbeReport
from gpuaccept.operator.core.model import NodeView
from gpuaccept.operator.core.report_trust import REPORT_MISMATCH, ReportProblem, trusted_report

FABRIC_PASSED = "Passed"  # FabricStatus.verdict of a node whose pair passed
FABRIC_NO_PARTNER = "FabricNoPartner"  # accepted without a partner (onNoPartner: accept)


def node_gpus(node: NodeView) -> int:
    """The GPUs an accepting report must cover: the most of allocatable and capacity."""
    return max(node.gpus, node.gpu_capacity)


def coverage_problem(verdict: Verdict, report: ProbeReport, node: NodeView) -> ReportProblem | None:
    """An accepting verdict that does not cover every GPU of the node (None: it does)."""
    if verdict.accepted and report.summary.gpu_count != node_gpus(node):
        return ReportProblem(
            REPORT_MISMATCH,
            f"report covers {report.summary.gpu_count} of the node's {node_gpus(node)} GPUs",
        )
    return None


def acceptance_problem(
    verdict: Verdict, report: ProbeReport | None, node: NodeView, *, accept_simulated: bool
) -> ReportProblem | None:
    """Why ``verdict`` on ``report`` may not accept ``node`` now; None when it may (or
    when it does not accept: a failing verdict is not this gate's to stop)."""
    if not verdict.accepted:
        return None
    if report is None:
        return ReportProblem(REPORT_MISMATCH, "no report behind an accepting verdict")
    trusted = trusted_report(report, node, accept_simulated=accept_simulated)
    if isinstance(trusted, ReportProblem):
        return trusted
    return coverage_problem(verdict, report, node)


def fabric_still_to_pass(
    *, fabric_enabled: bool, new_probe: bool, fabric: FabricStatus | None
) -> bool:
    """Whether an accepting single-node verdict must go through the fabric test first:
    a new probe under a fabric policy always; a re-judged one unless the node's fabric
    test already passed (or it was accepted without a partner, as the policy allows)."""
    if not fabric_enabled:
        return False
    if new_probe:
        return True
    return fabric is None or fabric.verdict not in (FABRIC_PASSED, FABRIC_NO_PARTNER)
