"""peer_bandwidth: its judge table (a row per branch,
with the policy section that decides it) and
its judge's other tests."""

import pytest
from judge_table import Case, assert_row, ids

from gpuaccept.checks.peer_bandwidth import (
    SPEC,
    PeerAccessRule,
    PeerBandwidthObserved,
    PeerBandwidthPolicy,
    judge,
)
from gpuaccept.checks.peer_bandwidth import SPEC as PEER
from gpuaccept.contracts.report import CheckStatus, HardwareSummary

H100 = HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=4)


PCIE = HardwareSummary(gpu_model="NVIDIA H100 PCIe", gpu_count=4)


def matrix(n: int, value: float, **pairs: float) -> list[list[float]]:
    rows = [[0.0 if s == d else value for d in range(n)] for s in range(n)]
    for key, gbps in pairs.items():
        s, d = (int(x) for x in key.removeprefix("p").split("_"))
        rows[s][d] = gbps
    return rows


def observed(
    n: int = 4,
    value: float = 380.0,
    path: str = "N",
    no_access: dict[str, str] | None = None,
    **pairs: float,
) -> PeerBandwidthObserved:
    return PeerBandwidthObserved(
        gpus=n,
        paths=["".join("-" if s == d else path for d in range(n)) for s in range(n)],
        gbps=matrix(n, value, **pairs),
        no_peer_access=no_access,
    )


def with_h2d(o: PeerBandwidthObserved, gbps: float) -> PeerBandwidthObserved:
    """``o`` with every GPU's H2D rate (what pcie_link measured)."""
    return o.model_copy(update={"h2d_gbps": [gbps] * o.gpus})


@pytest.mark.parametrize(
    ("o", "summary", "policy", "status", "message"),
    [
        (observed(), H100, PeerBandwidthPolicy(), "pass", "4 GPUs, nvlink: median 380, min 380"),
        (
            observed(p2_1=180.0),
            H100,
            PeerBandwidthPolicy(),
            "fail",
            "GPU 2\u21921: 180 GB/s, 53 % below the node median 380",
        ),
        # 5 % below the median: within the default 10 %
        (observed(p2_1=361.0), H100, PeerBandwidthPolicy(), "pass", "min 361"),
        # every pair below the model's minimum: the median rule sees nothing, the minimum does
        (observed(value=250.0), H100, PeerBandwidthPolicy(), "fail", "250 GB/s < 300"),
        # a model without a minimum, PCIe paths not compared by default
        (observed(value=20.0, path="P", p0_1=5.0), PCIE, PeerBandwidthPolicy(), "pass", "pcie"),
        # peer access missing on an NVLink pair
        (
            observed(no_access={"nvlink": "1<>2"}),
            PCIE,
            PeerBandwidthPolicy(),
            "fail",
            "no peer access on 1<>2 (NVML: NVLink P2P",
        ),
        # NVML: the chipset cannot: not required by default, required under "all"
        (
            observed(path="C", value=20.0, no_access={"chipset_not_supported": "*"}),
            PCIE,
            PeerBandwidthPolicy(),
            "pass",
            "(chipset_not_supported: not required)",
        ),
        (
            observed(path="C", value=20.0, no_access={"chipset_not_supported": "*"}),
            PCIE,
            PeerBandwidthPolicy(peer_access_required=PeerAccessRule.ALL),
            "fail",
            "no peer access on *",
        ),
        # on an HGX model every pair must have it, whatever NVML says
        (
            observed(path="C", no_access={"chipset_not_supported": "0>1"}),
            H100,
            PeerBandwidthPolicy(min_gbps_by_model={}),
            "fail",
            "no peer access on 0>1",
        ),
        (
            observed(no_access={"ok": "0>1"}, path="P"),
            PCIE,
            PeerBandwidthPolicy(peer_access_required=PeerAccessRule.NVLINK),
            "pass",
            "(ok: not required)",
        ),
        # the host-staged floor: peer access over PCIe slower than half the slower GPU's
        # H2D is worse than no P2P (ACS redirecting P2P through the root complex)
        (
            with_h2d(observed(value=10.0, path="P"), 53.6),
            PCIE,
            PeerBandwidthPolicy(),
            "fail",
            "below the host-staged rate 26.8 GB/s",
        ),
        (
            with_h2d(observed(value=40.0, path="P", p1_2=12.0), 53.6),
            PCIE,
            PeerBandwidthPolicy(),
            "fail",
            "GPU 1\u21922: 12.0 GB/s with peer access over PCIe",
        ),
        # healthy PCIe P2P: nvbandwidth on PCIe Gen4 A6000s, 21.8-26.4 GB/s at ~25 H2D
        (
            with_h2d(observed(value=21.8, path="P"), 25.0),
            PCIE,
            PeerBandwidthPolicy(),
            "pass",
            "above the host-staged floor (lowest GPU 0\u21921 21.8 >= 12.5)",
        ),
        # staged pairs (no peer access) are not held to the floor: that is their path
        (
            with_h2d(
                observed(path="C", value=20.0, no_access={"chipset_not_supported": "*"}), 53.6
            ),
            PCIE,
            PeerBandwidthPolicy(),
            "pass",
            "host: median 20",
        ),
        # NVLink pairs neither
        (with_h2d(observed(), 53.6), H100, PeerBandwidthPolicy(), "pass", "nvlink: median 380"),
        # a pair whose copy raised: that pair fails, named; its 0 is no figure
        (
            observed(p0_3=0.0, p3_0=0.0).model_copy(
                update={"failed_pairs": {"RuntimeError: peer mapping resources exhausted": "0<>3"}}
            ),
            H100,
            PeerBandwidthPolicy(),
            "fail",
            "peer copy failed on 0<>3: RuntimeError: peer mapping resources exhausted",
        ),
        # the matrix must cover the node, and carry its figures
        (observed(), H100.model_copy(update={"gpu_count": 8}), PeerBandwidthPolicy(), "fail",
         "the matrix covers 4 GPUs, the node has 8"),
        (PeerBandwidthObserved(gpus=4), H100, PeerBandwidthPolicy(), "fail",
         "neither gbps nor weakest"),
    ],
)  # fmt: skip
def test_peer_bandwidth_judge(
    o: PeerBandwidthObserved,
    summary: HardwareSummary,
    policy: PeerBandwidthPolicy,
    status: str,
    message: str,
) -> None:
    judgement = judge(o, policy, summary)
    assert (judgement.status.value, message in judgement.message) == (status, True), judgement
    condensed = SPEC.condense(o)
    assert condensed.gbps is None
    again = judge(SPEC.parse(condensed.to_observed()), policy, summary)
    assert again.status == judgement.status, again.message


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"gpus": 2, "gbps": [[0.0, 1.0]]}, "gpus x gpus"),
        ({"gpus": 2, "paths": ["-N", "N"]}, "paths must be"),
        ({"gpus": 2, "noPeerAccess": {"ok": "0>5"}}, "beyond 2"),
        ({"gpus": 2, "noPeerAccess": {"ok": "0-1"}}, "not a GPU pair"),
    ],
)
def test_malformed_observed_is_refused(bad: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SPEC.parse(bad)  # type: ignore[arg-type]


def test_condensed_keeps_the_weakest_pair_and_the_median_per_path() -> None:
    condensed = SPEC.condense(observed(p2_1=180.0, p3_0=200.0)).to_observed()
    assert condensed == {"gpus": 4, "weakest": {"nvlink": [380.0, 2, 1, 180.0]}}


CASES = [
    Case("every-pair-fast", observed(), CheckStatus.PASS, "4 GPUs, nvlink: median 380",
         summary=H100),
    Case("one-slow-pair", observed(p2_1=180.0), CheckStatus.FAIL,
         "GPU 2\u21921: 180 GB/s, 53 % below the node median 380", summary=H100),
    Case("within-the-median-band", observed(p2_1=361.0), CheckStatus.PASS, "min 361",
         summary=H100),
    Case("below-the-model-minimum", observed(value=250.0), CheckStatus.FAIL, "250 GB/s < 300",
         summary=H100, shipped=True),
    Case("policy-minimum-lowered", observed(value=250.0), CheckStatus.PASS,
         section={"minGBpsByModel": {"h100-sxm": 200}}, summary=H100, shipped=True),
    Case("no-peer-access-on-nvlink", observed(no_access={"nvlink": "1<>2"}), CheckStatus.FAIL,
         "no peer access on 1<>2", summary=H100),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_table(case: Case) -> None:
    """The table: observed, the policy section, the expected status and message."""
    assert_row(PEER, case)
