"""The errors a hardware read raises, which every measurement handles: the lowest layer
of the hardware package, so that a reader (nvml_errors, xid_events, ...) can raise them
without importing :mod:`.base` (which imports the readers)."""


class Unavailable(Exception):  # noqa: N818 - reads as "the hardware is unavailable"
    """The hardware cannot answer this question; the check result is ``skip``."""


class NoSuchInterface(Unavailable):
    """This platform has no such interface at all (no cpufreq driver on a host whose
    firmware owns the P-states, no NVLink on a PCIe card): a fact about the node,
    which the measurement records and its judge passes or warns on with the reason;
    not a read that failed (that is an error, or a partial read)."""


class GpuFailedError(Exception):
    """One GPU failed (NVML ``GPU_IS_LOST``, fallen off the bus...) at one step.

    A measurement records the GPU as failed, by name, and goes on with the others.
    """

    def __init__(self, gpu: int, step: str, detail: str) -> None:
        super().__init__(f"GPU {gpu}: {step}: {detail}")
        self.gpu = gpu
        self.step = step
        self.detail = detail


class PeerCopyFailedError(Exception):
    """A copy between one pair of GPUs raised an error that names neither GPU as lost
    (enabling peer access: cudaErrorTooManyPeers past 8 peers without NVSwitch, ...):
    that pair's failure, not the whole check's."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class GpuHungError(GpuFailedError):
    """A wait on one GPU passed its own deadline (below the probe pod's)."""

    def __init__(self, gpu: int, step: str, deadline_s: float) -> None:
        super().__init__(gpu, step, f"hung: no completion within {deadline_s:g} s")
        self.deadline_s = deadline_s
