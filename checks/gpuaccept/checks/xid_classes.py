"""In-service Xid classes: what an Xid seen on an Accepted node, outside any probe,
says about the node (sources in docs/policy.md, "In-service Xid classes").

The acceptance check (:mod:`gpuaccept.checks.xid_errors`) judges Xids raised while the
probe itself loads the GPUs, so any critical Xid there is the node's. In service the
GPUs run someone else's job, and most Xids are that job's: the class decides whether
the event is evidence about the hardware at all.

* ``fatal``: the GPU or its memory failed; quarantine on the first occurrence, and the
  watch ends its window at once (48 double-bit ECC, 64 remap/retirement failure, 79
  fallen off the bus, 95 uncontained ECC, 140 unrecovered ECC).
* ``repeated``: a hardware signal that a single occurrence does not prove (74 NVLink,
  62 and 119/120 internal/GSP errors): N bursts on the same GPU within a window.
* ``memory``: a memory-state report (63 remap recorded, 94 contained ECC, 92 high
  single-bit rate): never judged on the event; the remap pending/failed flags NVML
  reports at the end of the window decide.
* ``application``: the job's fault (13 graphics engine exception, 31 MMU fault, 43
  channel stopped, 45 preemptive cleanup, 68 video decoder, 109 context switch
  timeout): never a quarantine; the same one repeatedly on the same GPU marks a
  suspect.
* ``unclassified``: any other Xid: recorded and named, never judged.
"""

from enum import StrEnum


class XidClass(StrEnum):
    FATAL = "fatal"
    REPEATED = "repeated"
    MEMORY = "memory"
    APPLICATION = "application"
    UNCLASSIFIED = "unclassified"


# Xid -> class. NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/)
# gives each Xid its resolution bucket; docs/policy.md cites the row of each.
XID_CLASSES: dict[int, XidClass] = {
    48: XidClass.FATAL,
    64: XidClass.FATAL,
    79: XidClass.FATAL,
    95: XidClass.FATAL,
    140: XidClass.FATAL,
    62: XidClass.REPEATED,
    74: XidClass.REPEATED,
    119: XidClass.REPEATED,
    120: XidClass.REPEATED,
    63: XidClass.MEMORY,
    92: XidClass.MEMORY,
    94: XidClass.MEMORY,
    13: XidClass.APPLICATION,
    31: XidClass.APPLICATION,
    43: XidClass.APPLICATION,
    45: XidClass.APPLICATION,
    68: XidClass.APPLICATION,
    109: XidClass.APPLICATION,
}


def xid_class(xid: int) -> XidClass:
    """The in-service class of ``xid`` (``unclassified`` when the table does not name it)."""
    return XID_CLASSES.get(xid, XidClass.UNCLASSIFIED)


def xids_of(cls: XidClass) -> list[int]:
    """Every Xid of class ``cls``, ascending."""
    return sorted(x for x, c in XID_CLASSES.items() if c is cls)


def default_fatal_xids() -> list[int]:
    """The Xids that end a watch window at once when the operator names none."""
    return xids_of(XidClass.FATAL)
