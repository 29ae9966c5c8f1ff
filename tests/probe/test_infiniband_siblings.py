"""An InfiniBand port that trained below, or stays down beside, the same port of its
board's other HCAs fails, even where the rate reads the policy's minimum and no
port count is expected."""

import pytest
from probe_scenarios import PROFILES, default_policy, fault, probe

from gpuaccept.checks.infiniband_ports import SPEC as IB
from gpuaccept.checks.verdict import evaluate
from gpuaccept.contracts.report import CheckStatus
from gpuaccept.probe.hardware.infiniband import parse_lanes


@pytest.mark.parametrize(
    ("text", "lanes"),
    [
        ("400 Gb/sec (4X NDR)\n", (4, "NDR")),
        ("200 Gb/sec (2X NDR)\n", (2, "NDR")),
        ("200 Gb/sec (4X HDR)\n", (4, "HDR")),
        ("2.5 Gb/sec (1X SDR)\n", (1, "SDR")),
        ("100 Gb/sec\n", (None, None)),
    ],
)
def test_the_rate_file_names_width_and_speed(text: str, lanes: tuple[object, object]) -> None:
    assert parse_lanes(text) == lanes


@pytest.mark.parametrize(
    ("name", "port", "words"),
    [
        ("ib-ndr-2x-lanes", "mlx5_5/1 2X NDR", "a lane or speed fallback"),
        ("ib-ndr-hdr-fallback", "mlx5_5/1 4X HDR", "a lane or speed fallback"),
        ("ib-compute-port-down", "mlx5_5/1", "a dead cable"),
    ],
)
def test_the_false_accepts_fail(name: str, port: str, words: str) -> None:
    report = probe(fault(name))
    result = report.result("infiniband_ports")
    assert result is not None
    assert result.status is CheckStatus.FAIL
    assert port in result.message
    assert words in result.message
    # the condensed form (the termination message's) judges the same
    assert result.observed is not None
    condensed = IB.condense(IB.parse(result.observed))
    section = default_policy().section(IB)
    assert IB.judge(condensed, section, report.summary).status is CheckStatus.FAIL


def test_ndr200_by_design_with_unused_second_ports_passes() -> None:
    verdict = evaluate(probe(PROFILES / "h100-sxm-8gpu-ib-ndr200-dual-port.yaml"), default_policy())
    assert verdict.accepted, verdict.message


def test_with_a_port_count_the_count_judges_a_down_port() -> None:
    report = probe(fault("ib-compute-port-down"))
    result = report.result("infiniband_ports")
    assert result is not None
    assert result.observed is not None
    counted = default_policy().model_copy(deep=True)
    section = counted.section(IB).model_copy(update={"expected_up_ports": 7})
    judged = IB.judge(IB.parse(result.observed), section, report.summary)
    assert judged.status is CheckStatus.PASS  # 7 of 7 expected up: the administrator's word
