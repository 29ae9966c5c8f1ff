"""Facts from outside the hardware that a measurement may need."""

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuaccept.probe.hardware.xid_events import XidLog


@dataclass
class ProbeContext:
    # The node's advertised nvidia.com/gpu (GPUACCEPT_EXPECTED_GPUS), if known.
    advertised_gpus: int | None = None
    # Called with a short progress note while a long measurement runs.
    progress: Callable[[str], None] = field(default=lambda _note: None)
    # The Xid listener the runner keeps open over every check (None outside a probe run).
    xids: XidLog | None = None
