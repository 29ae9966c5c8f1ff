"""``requireMax`` judges a GPU's PCIe link against the best it can train at in its
system: a Gen5 GPU in a Gen4 server is at its best at Gen4 (NVML's max generation is
"possible with this device and system"), while a x8 slot or riser still fails (the
width is the GPU's own). Issue 37, item 8."""

from probe_scenarios import PROFILES, default_policy, probe

from gpuaccept.checks.pcie_link import SPEC as PCIE
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware.profile import HardwareProfile, load_profile

GEN4_HOST = PROFILES / "platform" / "h100-pcie-8gpu-gen4-host.yaml"


def gen4_platform() -> ProbePolicy:
    """The default policy with a Gen4 platform's floors (Gen4 x16 copies 25-26 GB/s)."""
    policy = default_policy()
    section = policy.section(PCIE).model_copy(
        update={"min_generation": 4, "min_h2d_gbps": 20, "min_d2h_gbps": 20}
    )
    return policy.model_copy(update={"pcie_link": section})


def with_gpu(profile: HardwareProfile, gpu: int, **fields: object) -> HardwareProfile:
    spec = profile.gpus
    overrides = dict(spec.overrides)
    base = overrides.get(gpu)
    changed = base.model_copy(update=fields) if base is not None else None
    if changed is None:
        changed = type(next(iter(overrides.values()))).model_validate(fields)
    overrides[gpu] = changed
    return profile.model_copy(update={"gpus": spec.model_copy(update={"overrides": overrides})})


def test_a_gen5_gpu_in_a_gen4_host_is_at_its_best() -> None:
    report = probe(GEN4_HOST, gen4_platform())
    result = report.result("pcie_link")
    assert result is not None
    assert result.status is CheckStatus.PASS, result.message
    assert "capped by the platform at Gen4, their own Gen5" in result.message
    assert result.observed is not None
    assert result.observed["maxGen"] == [4] * 8
    assert result.observed["deviceMaxGen"] == [5] * 8
    verdict = evaluate(report, gen4_platform())
    assert verdict.accepted, verdict.message


def test_the_default_policy_fails_it_by_its_gen5_floors_not_by_require_max() -> None:
    result = probe(GEN4_HOST).result("pcie_link")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "Gen4 < Gen5" in result.message
    assert "below max" not in result.message


def test_a_x8_riser_in_the_gen4_host_still_fails() -> None:
    profile = with_gpu(load_profile(GEN4_HOST), 3, pcie_load={"generation": 4, "width": 8})
    result = probe(profile, gen4_platform()).result("pcie_link")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "GPU 3 below max width" in result.message


def test_a_gen4_link_in_a_gen5_host_still_fails() -> None:
    profile = with_gpu(
        load_profile(GEN4_HOST),
        5,
        pcie_system_max_generation=5,
        pcie_load={"generation": 4, "width": 16},
    )
    result = probe(profile, gen4_platform()).result("pcie_link")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert "GPU 5 below max generation under load" in result.message
