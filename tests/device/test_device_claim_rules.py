"""The pure rules behind the device check's claims (issue 37, item 20), tested without
a GPU: what makes a claim proven, and how the run names the sandbox it ran in."""

import pytest
from device_claims import checks_measured, probe_run_proven, sandbox_kind


def test_a_required_skip_is_no_measurement() -> None:
    """every_check_measures: a required check that skipped quarantines the node, so it
    did not measure the hardware; an error never measures; an optional skip is named."""
    results = [
        {"check": "nvlink", "status": "skip", "required": True, "message": "no link count"},
        {"check": "pcie_link", "status": "pass", "required": True, "message": ""},
        {"check": "infiniband_ports", "status": "skip", "required": False, "message": "no HCA"},
        {"check": "gpu_config", "status": "error", "required": True, "message": "boom"},
    ]
    unmeasured = checks_measured(results)
    assert [r["check"] for r in unmeasured] == ["nvlink", "gpu_config"]
    assert checks_measured(results[1:3]) == []


@pytest.mark.parametrize(
    ("accepted", "reasons", "expect", "proven"),
    [
        (True, [], "accepted", True),
        # the device machines are healthy: a quarantine there is a false quarantine
        (False, ["NvlinkFailed (nvlink)"], "accepted", False),
        # a run told to expect a quarantine (a host known to be faulty) proves it
        (False, ["NvlinkFailed (nvlink)"], "quarantined", True),
        (False, [], "quarantined", False),  # quarantined without a named reason
        (True, [], "quarantined", False),
    ],
)
def test_the_probe_on_a_healthy_host_must_accept_it(
    accepted: bool, reasons: list[str], expect: str, proven: bool
) -> None:
    assert probe_run_proven(accepted=accepted, reasons=reasons, expect=expect) is proven


@pytest.mark.parametrize(
    ("proc_version", "cpuinfo", "dmi", "kind"),
    [
        ("Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016", "flags\t: fpu", "", "gvisor"),
        ("Linux version 6.8.0-1015-gcp (buildd@...)", "flags\t: fpu hypervisor sse",
         "Google Compute Engine", "vm (Google Compute Engine)"),
        ("Linux version 5.15.0-105-generic", "flags\t: fpu hypervisor", "", "vm"),
        ("Linux version 5.15.0-105-generic", "flags\t: fpu sse", "PowerEdge XE9680",
         "bare metal (PowerEdge XE9680)"),
        ("", "", "", "bare metal"),
    ],
)  # fmt: skip
def test_the_sandbox_is_named_so_its_artefacts_are_not_read_as_probe_defects(
    proc_version: str, cpuinfo: str, dmi: str, kind: str
) -> None:
    """gVisor reports a fixed 4.4.0 kernel dated 2016 in /proc/version; a VM has the
    ``hypervisor`` CPU flag (Linux arch/x86 cpufeatures, X86_FEATURE_HYPERVISOR); the
    DMI product name says which."""
    assert sandbox_kind(proc_version, cpuinfo, dmi) == kind
