"""The probe agent: measures one GPU node and reports what it found.

``gpuaccept probe`` (see :mod:`gpuaccept.probe.cli`) runs the checks in
:mod:`gpuaccept.probe.checks` against a hardware backend
(:mod:`gpuaccept.probe.hardware`), writes a :class:`~gpuaccept.contracts.report.ProbeReport`
and judges it with :func:`gpuaccept.probe.verdict.evaluate`.

Importing this package (or the check registry, or the verdict) never imports
torch or NVML: the operator re-judges stored reports with it.
"""

PROBE_VERSION = "0.1.0"
