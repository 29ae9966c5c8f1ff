"""The profiles, policies and probe runs the probe tests share.

A plain module, so the tests also run with ``--noconftest``."""

import os
import subprocess
import sys
from pathlib import Path

from pydantic import JsonValue

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.spec import AnyCheckSpec, CheckJudgement
from gpuaccept.contracts.report import HardwareSummary, ProbeReport
from gpuaccept.probe.hardware.base import PerGpuFigures
from gpuaccept.probe.hardware.profile import HardwareProfile, load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.inputs import load_policy
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.context import NodeGpuCounts
from gpuaccept.probe.runner import RunSetup, run_probe

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
FIXTURES = REPO / "tests" / "fixtures"
DEFAULT_POLICY_FILE = REPO / "policies" / "default-h100-h200.yaml"
HEALTHY = PROFILES / "h100-sxm-8gpu-healthy.yaml"
IDLE_DOWNSHIFT = PROFILES / "h100-sxm-8gpu-idle-downshift.yaml"
H200_16 = PROFILES / "h200-16gpu-healthy.yaml"
WORST_16 = FIXTURES / "profiles" / "h200-16gpu-everything-wrong.yaml"
COLLAPSE_64 = FIXTURES / "profiles" / "h100-64gpu-collapse.yaml"


def _fault_checks() -> dict[str, str]:
    """Each fault profile and the one check it must fail (its ``expect.check``)."""
    out: dict[str, str] = {}
    for path in sorted((PROFILES / "faults").glob("*.yaml")):
        expect = load_profile(path).expect
        if expect is not None and expect.check is not None:
            out[path.stem] = expect.check
    return out


FAULTS: dict[str, str] = _fault_checks()
HEALTHY_PROFILES = [HEALTHY, IDLE_DOWNSHIFT, H200_16]


def fault(name: str) -> Path:
    return PROFILES / "faults" / f"{name}.yaml"


def default_policy() -> ProbePolicy:
    return load_policy(DEFAULT_POLICY_FILE)


def probe(
    profile: Path | HardwareProfile,
    policy: ProbePolicy | None = None,
    *,
    node_name: str = "gpu-node-1",
    advertised: int | None = None,
) -> ProbeReport:
    """A full simulated probe run, in process."""
    loaded = load_profile(profile) if isinstance(profile, Path) else profile
    hardware = SimulatedBackend(loaded)
    try:
        node = loaded.node
        context = ProbeContext(
            node_gpus=NodeGpuCounts(
                allocatable=advertised if advertised is not None else node.allocatable,
                capacity=node.gpu_capacity,
                labelled=node.gfd_gpu_count,
                replicas=node.gfd_gpu_replicas,
            )
        )
        run = RunSetup(node_name=node_name, boot_id=None, context=context)
        return run_probe(hardware, policy or default_policy(), run)
    finally:
        hardware.close()


def gpuaccept_command() -> list[str]:
    script = Path(sys.executable).parent / "gpuaccept"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gpuaccept.cli"]


def run_cli(
    *args: str | Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``gpuaccept probe ARGS`` in a subprocess, with a clean probe environment."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith("GPUACCEPT_") and k != "NODE_NAME"
    }
    base.update(env or {})
    return subprocess.run(
        [*gpuaccept_command(), "probe", *map(str, args)],
        capture_output=True,
        text=True,
        env=base,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )


def judge_json(
    check: AnyCheckSpec, observed: JsonValue, policy: ProbePolicy, summary: HardwareSummary
) -> CheckJudgement:
    """Judge a report's ``observed`` value as the verdict does: parse, then judge."""
    return check.judge(check.parse(observed), policy.section(check), summary)


def condense_json(check: AnyCheckSpec, observed: JsonValue) -> JsonValue:
    """The condensed ``observed`` value as the compact report writes it."""
    return check.condense(check.parse(observed)).to_observed()


class UntimedLoad:
    """A load timer that timed nothing: for tests that replace the real backend's load
    (torch without CUDA here) to sample NVML fakes alone."""

    matrix = 0

    def start(self) -> None:
        return None

    def figures(self) -> PerGpuFigures:
        return PerGpuFigures({})
