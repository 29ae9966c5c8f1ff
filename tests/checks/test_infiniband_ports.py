"""infiniband_ports: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import json

import pytest
from judge_table import Case, assert_row, condense_json, ids, judge_json
from pydantic import JsonValue

from gpuaccept.checks.infiniband_ports import SPEC as INFINIBAND
from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.report import CheckStatus, HardwareSummary
from gpuaccept.probe.hardware.infiniband import (
    IbHca,
    IbPort,
    InfinibandView,
)
from gpuaccept.probe.measure import ProbeContext
from gpuaccept.probe.measure.infiniband_ports import measure

SUMMARY = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8)


def policy(**sections: dict[str, object]) -> ProbePolicy:
    return ProbePolicy.model_validate(sections)


def port(name: str, **fields: JsonValue) -> dict[str, JsonValue]:
    """A healthy NDR port, with ``fields`` (wire names) changed."""
    healthy: dict[str, JsonValue] = {
        "port": name,
        "state": "ACTIVE",
        "physState": "LinkUp",
        "rateGbps": 400,
        "linkLayer": "InfiniBand",
        "linkDowned": 0,
        "symbolError": 0,
    }
    return {**healthy, **fields}


def ib_observed(
    ports: list[dict[str, JsonValue]],
    *,
    mode: str = "shared",
    firmware: dict[str, str] | None = None,
) -> JsonValue:
    """What the measure function makes of these ports (one HCA per port)."""
    hcas = []
    for p in ports:
        hca, number = str(p["port"]).split("/")
        ib_port = IbPort(
            hca=hca,
            port=int(number),
            state=str(p["state"]),
            phys_state=str(p["physState"]),
            rate_gbps=float(str(p["rateGbps"])),
            link_layer=str(p["linkLayer"]),
            link_downed=int(str(p["linkDowned"])),
            symbol_error=int(str(p["symbolError"])),
        )
        fw = (firmware or {}).get(hca, "28.39.1002")
        hcas.append(IbHca(name=hca, fw_ver=fw, board_id="MT_0000000838", ports=(ib_port,)))

    class View:
        def infiniband(self) -> InfinibandView:
            return InfinibandView(hcas=tuple(hcas), netns_mode=mode)  # type: ignore[arg-type]

        def sleep(self, seconds: float) -> None:
            """The ports read the same however long the probe waits."""

    return measure(View(), INFINIBAND.policy_model(), ProbeContext()).to_observed()  # type: ignore[arg-type]


EIGHT = [port(f"mlx5_{i}/1") for i in range(8)]


IB_EXPECT_8 = policy(infinibandPorts={"expectedUpPorts": 8, "linkLayer": "InfiniBand"})


IB_DEFAULTS = policy(
    infinibandPorts={
        "linkLayer": "InfiniBand",
        "minRateGbps": 200,
        "linkDownedWarn": 1,
        "symbolErrorWarn": 1,
    }
)


@pytest.mark.parametrize(
    ("observed", "probe_policy", "status", "needle"),
    [
        (ib_observed([]), IB_DEFAULTS, CheckStatus.PASS, "none expected"),
        (ib_observed([]), IB_EXPECT_8, CheckStatus.FAIL, "no InfiniBand/RoCE HCA"),
        (ib_observed([], mode="exclusive"), IB_EXPECT_8, CheckStatus.PASS, "count not judged"),
        (ib_observed(EIGHT), IB_EXPECT_8, CheckStatus.PASS, "8 InfiniBand ports up on 8 HCAs"),
        (
            ib_observed([*EIGHT[:7], port("mlx5_7/1", state="DOWN", physState="Polling")]),
            IB_EXPECT_8,
            CheckStatus.FAIL,
            "7 of 8 InfiniBand ports up (ACTIVE, LinkUp); down: (mlx5_7/1)",
        ),
        # a down port without an expected count: healthy (an unused port)
        (
            ib_observed([*EIGHT[:7], port("mlx5_7/1", state="DOWN", physState="Disabled")]),
            IB_DEFAULTS,
            CheckStatus.PASS,
            "7 InfiniBand ports up",
        ),
        (
            ib_observed([*EIGHT[:7], port("mlx5_7/1", state="ARMED")]),
            IB_DEFAULTS,
            CheckStatus.FAIL,
            "LinkUp but not ACTIVE (mlx5_7/1 ARMED)",
        ),
        (
            ib_observed([*EIGHT[:7], port("mlx5_7/1", rateGbps=100)]),
            IB_DEFAULTS,
            CheckStatus.FAIL,
            "rate 100 < 200 Gb/s (mlx5_7/1)",
        ),
        # a slow Ethernet storage port is not judged when linkLayer is InfiniBand
        (
            ib_observed([*EIGHT, port("mlx5_8/1", rateGbps=100, linkLayer="Ethernet")]),
            IB_DEFAULTS,
            CheckStatus.PASS,
            "min 400 Gb/s",
        ),
        (
            ib_observed([*EIGHT, port("mlx5_8/1", rateGbps=100, linkLayer="Ethernet")]),
            policy(infinibandPorts={"minRateGbps": 200}),
            CheckStatus.FAIL,
            "rate 100 < 200",
        ),
        (
            ib_observed(EIGHT, firmware={"mlx5_3": "28.36.1010"}),
            IB_DEFAULTS,
            CheckStatus.FAIL,
            "mlx5_3 28.36.1010",
        ),
        (
            ib_observed(EIGHT, firmware={"mlx5_3": "28.36.1010"}),
            policy(infinibandPorts={"requireSameFirmware": False}),
            CheckStatus.PASS,
            "8 ports up",
        ),
        (
            ib_observed([*EIGHT[:7], port("mlx5_7/1", linkDowned=3)]),
            IB_DEFAULTS,
            CheckStatus.WARN,
            "link_downed 3 >= 1 (mlx5_7/1)",
        ),
        (
            ib_observed([*EIGHT[:7], port("mlx5_7/1", symbolError=70)]),
            policy(infinibandPorts={"symbolErrorFail": 50}),
            CheckStatus.FAIL,
            "symbol_error 70 >= 50 (mlx5_7/1)",
        ),
    ],
)
def test_infiniband_judge(
    observed: JsonValue, probe_policy: ProbePolicy, status: CheckStatus, needle: str
) -> None:
    judged = judge_json(INFINIBAND, observed, probe_policy, SUMMARY)
    assert judged.status is status, judged.message
    assert needle in judged.message, judged.message
    condensed = judge_json(INFINIBAND, condense_json(INFINIBAND, observed), probe_policy, SUMMARY)
    assert condensed.status is judged.status, condensed.message


def test_infiniband_condensed_is_small_with_sixteen_bad_ports() -> None:
    bad = [
        port(f"mlx5_{i}/1", state="INIT", rateGbps=100, linkDowned=9, symbolError=900)
        for i in range(16)
    ]
    observed = ib_observed(bad, firmware={"mlx5_3": "28.36.1010", "mlx5_9": "28.30.1000"})
    judged = judge_json(INFINIBAND, observed, IB_DEFAULTS, SUMMARY)
    assert judged.status is CheckStatus.FAIL
    condensed = condense_json(INFINIBAND, observed)
    # every kind of failure at once, 16 HCAs: one name per kind is kept
    assert len(json.dumps(condensed, separators=(",", ":"))) <= 330


EXPECT_8 = {"expectedUpPorts": 8, "linkLayer": "InfiniBand"}
CASES = [
    Case("no-hca-none-expected", ib_observed([]), CheckStatus.PASS, "none expected",
         shipped=True),
    Case("no-hca-eight-expected", ib_observed([]), CheckStatus.FAIL, "no InfiniBand/RoCE HCA",
         section=EXPECT_8, shipped=True),
    Case("eight-up", ib_observed(EIGHT), CheckStatus.PASS, "8 InfiniBand ports up on 8 HCAs",
         section=EXPECT_8, shipped=True),
    Case("one-down", ib_observed([*EIGHT[:7], port("mlx5_7/1", state="DOWN", physState="Polling")]),
         CheckStatus.FAIL, "7 of 8 InfiniBand ports up", section=EXPECT_8, shipped=True),
    Case("link-downed-warns", ib_observed([*EIGHT[:7], port("mlx5_7/1", linkDowned=3)]),
         CheckStatus.WARN, shipped=True),
    Case("slow-rate", ib_observed([*EIGHT[:7], port("mlx5_7/1", rateGbps=100)]),
         CheckStatus.FAIL, shipped=True),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(INFINIBAND, case)
