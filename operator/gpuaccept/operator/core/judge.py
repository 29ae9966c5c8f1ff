"""The core's :data:`~gpuaccept.operator.core.model.Judge`: the checks' pure ``evaluate``.

No torch, no NVML, no probe: :mod:`gpuaccept.checks` only. The core records the
:class:`~gpuaccept.checks.verdict.Verdict` it returns as it is.
"""

from __future__ import annotations

from gpuaccept.checks.verdict import evaluate
from gpuaccept.operator.core.model import Judge

judge: Judge = evaluate
