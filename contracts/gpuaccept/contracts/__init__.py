"""The shared contract between the probe agent and the operator.

Everything here is plain data (pydantic v2 models and constants) with no heavy
dependency: the operator image imports it without torch or NVML, and the probe
image emits reports that validate against it.
"""

from gpuaccept.contracts.api import GROUP, VERSION
from gpuaccept.contracts.nodeacceptance import NodeAcceptanceStatus, Phase
from gpuaccept.contracts.report import CheckResult, CheckStatus, ProbeReport

__all__ = [
    "GROUP",
    "VERSION",
    "CheckResult",
    "CheckStatus",
    "NodeAcceptanceStatus",
    "Phase",
    "ProbeReport",
]
