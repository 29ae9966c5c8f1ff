"""What ``scripts/device-check.sh`` claims to prove on a GPU host, and its summary.

Standard library only: the script runs this with the host's Python even when the
project's own dependencies are missing, to say so in the summary.

Each claim is proven by one test in ``tests/device/test_device_probe.py``. The
test records its evidence (:func:`record`) before it asserts; a claim is proven
only when its test passed *and* its evidence says so. A claim whose test did not
run, was deselected or crashed is not proven, and the script exits non-zero.

    python3 tests/device/device_claims.py summary --outdir OUTDIR --exit-code N

writes ``OUTDIR/summary.json`` from ``OUTDIR/steps.tsv`` (one line per step of the
script: name, status, seconds, detail), ``OUTDIR/evidence/*.json`` and
``OUTDIR/device-tests.xml`` (pytest's JUnit XML), prints one line per claim,
and exits with the summary's exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "gpuaccept-device-check/1"
ENV_EVIDENCE_DIR = "GPUACCEPT_DEVICE_EVIDENCE"
TEST_MODULE = "tests/device/test_device_probe.py"
REAL_PATHS_MODULE = "tests/device/test_device_real_paths.py"


@dataclass(frozen=True)
class Claim:
    name: str
    test: str
    statement: str
    module: str = TEST_MODULE


CLAIMS = (
    Claim(
        "nvml_and_cuda_see_the_same_gpus",
        "test_nvml_enumerates_gpus",
        "NVML and CUDA (torch) see the same GPUs, matched by PCI bus id.",
    ),
    Claim(
        "driver_versions_are_read",
        "test_versions_agree",
        "The kernel module, NVML library and CUDA driver versions are read, "
        "and the kernel module's matches NVML's own report.",
    ),
    Claim(
        "probe_runs_on_real_hardware",
        "test_gpuaccept_probe_on_real_hardware",
        "`gpuaccept probe` measures the real hardware: its report parses, names real "
        "hardware and every GPU, no check errors, the termination log holds the same "
        "report, and the exit code is the verdict's (0 accepted, 1 quarantined for a "
        "named check, never a crash). The device machines are healthy, so the verdict "
        "must be accepted (GPUACCEPT_DEVICE_EXPECT=quarantined on a host known faulty).",
    ),
    Claim(
        "every_check_measures",
        "test_every_check_produces_a_result",
        "Every check but the all-reduce measures the real hardware: no error, and no "
        "skip of a required check (which would quarantine the node).",
    ),
    Claim(
        "gpu_busy_while_link_sampled",
        "test_gpu_busy_while_link_sampled",
        "While the probe's load runs and the PCIe link is sampled, NVML reports the GPU "
        "busy (utilisation at least 90 % in most samples) and the GPU_IDLE clock-event "
        "bit clear in every sample.",
    ),
    Claim(
        "copy_bandwidth_near_link_rate",
        "test_copy_bandwidth_near_link_rate",
        "Pinned host-to-device and device-to-host copies reach at least 60 % of the "
        "negotiated PCIe link's raw rate, and never more than the link can carry.",
    ),
    Claim(
        "clocks_under_load",
        "test_clocks_under_load",
        "Under the probe's load the SM clock runs at at least half its maximum "
        "(NVML's current against its maximum SM clock).",
    ),
    Claim(
        "per_gpu_throughput_measured",
        "test_per_gpu_throughput_matches_host_timing",
        "gpu_compute times the throttle load's bf16 matmuls (and fp8 where the GPU can) and "
        "gpu_memory_bandwidth a STREAM triad on every GPU; each GPU's figures agree within "
        "15 % with the same work timed on the host clock, and with one GPU the "
        "result says there is no sibling comparison.",
    ),
    Claim(
        "nccl_runs",
        "test_nccl_allreduce_on_real_gpus",
        "NCCL all-reduce through torch.distributed runs on every GPU of this host and "
        "is timed (one rank on a one-GPU host: no bandwidth claim).",
    ),
    # issue 13 item 3
    Claim(
        "peer_bandwidth_skips_or_measures",
        "test_peer_bandwidth_on_real_gpus",
        "On one GPU the GPU-to-GPU matrix skips, naming why; on two or more every ordered "
        "pair's peer copy is timed (above 0 GB/s) and each pair's peer access matches "
        "CUDA's own answer (torch.cuda.can_device_access_peer) and NVML's P2P status.",
    ),
    # the real paths of issue 22 (tests/device/test_device_real_paths.py)
    Claim(
        "xid_listener_watches_every_gpu",
        "test_xid_listener_registers_every_gpu_and_ends_clean",
        "The Xid listener registers every GPU for critical-Xid events, its waits time out "
        "without an error, and it ends without a problem (no dead listener).",
        REAL_PATHS_MODULE,
    ),
    Claim(
        "nvlink_counters_per_field",
        "test_nvlink_counters_read_or_not_supported_per_field",
        "Each NVLink error counter (replay, recovery, CRC flit, CRC data) of each link is "
        "read or answered NotSupported, per field, and the probe lists exactly NVML's "
        "NotSupported ones.",
        REAL_PATHS_MODULE,
    ),
    Claim(
        "recovery_action_and_fabric_state",
        "test_recovery_action_and_fabric_state_as_nvml_gives_them",
        "The recovery action (its field on R570 and later, the older reset-status fields "
        "226/227 on R560-R565, both recorded raw) and the fabric state are recorded as "
        "NVML gives them, and the probe reads the same recovery action.",
        REAL_PATHS_MODULE,
    ),
    Claim(
        "persistence_with_and_without_socket",
        "test_persistence_with_and_without_the_daemons_socket",
        "Persistence mode is read with nvidia-persistenced's socket reachable and again "
        "with its directory hidden (a private mount namespace): the evidence shows "
        "whether NVML's answer depends on the socket.",
        REAL_PATHS_MODULE,
    ),
    Claim(
        "probe_runs_as_non_root",
        "test_the_probe_as_non_root_with_the_pods_capabilities",
        "The probe run again as uid 65534 with no capabilities and no privilege escalation "
        "(the probe pod's security context) gives the same check results as root, none "
        "in error.",
        REAL_PATHS_MODULE,
    ),
    Claim(
        "watch_runs_as_the_pods_user",
        "test_the_watch_as_the_pods_user_without_capabilities",
        "`gpuaccept probe watch --window-s 20` as uid 65532 with no capabilities and no "
        "privilege escalation (the images' non-root uid) sees every GPU "
        "(gpusSeen) and reads every part (no notRead).",
        REAL_PATHS_MODULE,
    ),
)

NOT_TESTABLE_ON_ONE_GPU = (
    ("NVLink", "needs two or more GPUs linked by NVLink"),
    ("NVSwitch fabric", "the fabric manager and NVSwitch exist only on multi-GPU (HGX) nodes"),
    ("GPU pair matrix", "peer-to-peer bandwidth needs a pair of GPUs (peer_bandwidth skips)"),
    ("multi-GPU all-reduce", "busbw is 0 by definition with one rank; needs 2 or more GPUs"),
    ("NUMA spread", "one GPU sits on one NUMA node; the far-socket case needs GPUs on both"),
    ("InfiniBand", "no HCA and no network on this host"),
    ("Xid injection", "needs root on the host driver and a fault-injection build, not a VM"),
    ("8-GPU peers", "the all-pairs peer matrix of an HGX board needs its 8 GPUs"),
    ("the two-node pair", "the fabric test's all-reduce needs a second node and a network"),
)


def checks_measured(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results that did not measure the hardware: an error, or a skip of a required
    check (which quarantines the node, so it proves nothing about the probe measuring).
    An optional check's skip is named in its result and is not counted here."""
    return [
        r
        for r in results
        if r["status"] == "error" or (r["status"] == "skip" and r.get("required", True))
    ]


def probe_run_proven(*, accepted: bool, reasons: list[str], expect: str) -> bool:
    """``gpuaccept probe`` on the host: the device machines are healthy, so by default
    (``expect`` "accepted") a quarantine is a false one and the claim is not proven; a
    run on a host known to be faulty sets GPUACCEPT_DEVICE_EXPECT=quarantined and then
    needs a quarantine with a named reason."""
    if expect == "quarantined":
        return not accepted and bool(reasons)
    return accepted


# gVisor's sentry reports this fixed kernel in /proc/version (its uname is 4.4.0)
GVISOR_KERNEL = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016"


def sandbox_kind(proc_version: str, cpuinfo: str, dmi_product: str) -> str:
    """What the run ran in, so that a sandbox's artefacts (gVisor's NVML proxy, a VM's
    PCIe and topology) are not read as probe defects: gvisor, vm, or bare metal, with
    the DMI product name where there is one."""
    product = f" ({dmi_product.strip()})" if dmi_product.strip() else ""
    if proc_version.strip().startswith(GVISOR_KERNEL):
        return "gvisor"
    flags = {
        word
        for line in cpuinfo.splitlines()
        if line.startswith("flags")
        for word in line.partition(":")[2].split()
    }
    if "hypervisor" in flags:  # X86_FEATURE_HYPERVISOR: the CPU says it runs under one
        return f"vm{product}"
    return f"bare metal{product}"


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")[:200_000]
    except OSError:
        return ""


def record(test: str, *, proven: bool, **evidence: Any) -> None:
    """Write ``test``'s evidence where the script collects it (nowhere without one),
    and print it for the test's own output."""
    payload = {"test": test, "proven": proven, "evidence": evidence}
    print(json.dumps(payload, indent=None, default=str))
    directory = os.environ.get(ENV_EVIDENCE_DIR)
    if directory:
        path = Path(directory) / f"{test}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def junit_outcomes(xml_path: Path) -> dict[str, str]:
    """``{test function name: passed|failed|error|skipped}`` from pytest's JUnit XML
    (the name without parameters; a parametrized test counts as passed only when
    every case passed)."""
    if not xml_path.is_file():
        return {}
    try:
        root = ET.parse(xml_path).getroot()
    except ET.ParseError:
        return {}
    outcomes: dict[str, str] = {}
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    for case in root.iter("testcase"):
        name = case.get("name", "").split("[", 1)[0]
        outcome = "passed"
        for child, label in (("error", "error"), ("failure", "failed"), ("skipped", "skipped")):
            if case.find(child) is not None:
                outcome = label
                break
        if rank[outcome] >= rank[outcomes.get(name, "passed")]:
            outcomes[name] = outcome
    return outcomes


def read_steps(path: Path) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    if not path.is_file():
        return steps
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split("\t", 3)
        if len(parts) == 4:
            name, status, seconds, detail = parts
            steps.append(
                {"step": name, "status": status, "seconds": int(seconds or 0), "detail": detail}
            )
    return steps


def claim_results(outdir: Path) -> list[dict[str, Any]]:
    outcomes = junit_outcomes(outdir / "device-tests.xml")
    results: list[dict[str, Any]] = []
    for claim in CLAIMS:
        evidence_file = outdir / "evidence" / f"{claim.test}.json"
        evidence: dict[str, Any] = {}
        recorded = False
        if evidence_file.is_file():
            try:
                payload = json.loads(evidence_file.read_text())
                evidence = payload.get("evidence", {})
                recorded = payload.get("proven") is True
            except (ValueError, AttributeError):
                evidence = {"unreadable": str(evidence_file)}
        outcome = outcomes.get(claim.test, "not run")
        results.append(
            {
                "claim": claim.name,
                "statement": claim.statement,
                "test": f"{claim.module}::{claim.test}",
                "test_outcome": outcome,
                "proven": outcome == "passed" and recorded,
                "evidence": evidence,
            }
        )
    return results


def build_summary(outdir: Path, exit_code: int, facts: dict[str, Any]) -> dict[str, Any]:
    claims = claim_results(outdir)
    steps = read_steps(outdir / "steps.tsv")
    missing_file = outdir / "missing.txt"
    missing = missing_file.read_text().split() if missing_file.is_file() else []
    proven = bool(claims) and all(c["proven"] for c in claims) and not missing
    return {
        "schema": SCHEMA,
        **facts,
        "proven": proven,
        "exit_code": 0 if proven and exit_code == 0 else (exit_code or 1),
        "steps": steps,
        "missing": missing,
        "claims": claims,
        "not_testable_on_one_gpu": [
            {"what": what, "why": why} for what, why in NOT_TESTABLE_ON_ONE_GPU
        ],
    }


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="device_claims.py")
    sub = parser.add_subparsers(dest="command", required=True)
    summary = sub.add_parser("summary", help="write OUTDIR/summary.json and print it")
    summary.add_argument("--outdir", type=Path, required=True)
    summary.add_argument("--exit-code", type=int, required=True)
    summary.add_argument("--fact", action="append", default=[], help="KEY=VALUE")
    sub.add_parser("not-testable", help="print what one GPU cannot test")
    sub.add_parser("sandbox", help="print what this host is: gvisor, vm or bare metal")
    args = parser.parse_args(argv)
    if args.command == "sandbox":
        print(
            sandbox_kind(
                _read("/proc/version"),
                _read("/proc/cpuinfo"),
                _read("/sys/class/dmi/id/product_name"),
            )
        )
        return 0
    if args.command == "not-testable":
        for what, why in NOT_TESTABLE_ON_ONE_GPU:
            print(f"  not tested on one GPU: {what} ({why})")
        return 0
    facts = dict(fact.split("=", 1) for fact in args.fact if "=" in fact)
    result = build_summary(args.outdir, args.exit_code, facts)
    (args.outdir / "summary.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    for claim in result["claims"]:
        mark = "PROVEN    " if claim["proven"] else "NOT PROVEN"
        print(f"  {mark} {claim['claim']} ({claim['test_outcome']})")
        if claim["test_outcome"] == "not run":  # what it would prove on a GPU
            print(f"      would prove: {claim['statement']}")
    print(
        f"  {'all claims proven' if result['proven'] else 'NOT every claim proven'}; "
        f"exit code {result['exit_code']}; {args.outdir / 'summary.json'}"
    )
    return int(result["exit_code"])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
