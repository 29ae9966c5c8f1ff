"""The watch report contract: it parses strictly, and it always fits a termination
message (issue 23)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from gpuaccept.contracts.api import TERMINATION_MESSAGE_MAX_BYTES
from gpuaccept.contracts.watch_report import (
    DROPPABLE_GPU_FIELDS,
    EVENTS_MAX,
    WatchEnd,
    WatchGpu,
    WatchIbPort,
    WatchReport,
    WatchXid,
    decode_watch_message,
    encode_watch_message,
    fit_watch_report,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BASE: dict[str, Any] = {
    "apiVersion": "gpuaccept.io/v1alpha1",
    "kind": "WatchReport",
    "nodeName": "gpu-1",
    "bootID": "boot-1",
    "probeVersion": "0.1.0",
    "simulated": True,
    "startedAt": "2026-01-01T00:00:00Z",
    "endedAt": "2026-01-01T00:00:40Z",
    "windowS": 1800.0,
    "watchedS": 40.0,
    "endReason": "fatalXid",
    "endedEarly": True,
    "gpusExpected": 8,
    "gpusSeen": 8,
    "xids": [{"gpu": 3, "uuid": "GPU-3", "xid": 79, "firstS": 40.0, "lastS": 40.0, "count": 1}],
    "gpus": [{"index": 3, "uuid": "GPU-3", "lost": True}],
}


def _message(report: dict[str, Any]) -> str:
    return json.dumps(report, separators=(",", ":"))


def _uuid(i: int) -> str:
    return f"GPU-{i:08x}-1234-5678-9abc-def012345678"


def _worst(gpus: int, bursts: int) -> WatchReport:
    """Every field away from normal on every GPU, ``bursts`` Xid bursts, 253-char name."""
    return WatchReport(
        node_name="n" * 253,
        boot_id="b" * 36,
        probe_version="0.1.0",
        simulated=False,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=1800),
        window_s=1800,
        watched_s=1800,
        end_reason=WatchEnd.WINDOW,
        ended_early=False,
        gpus_expected=gpus,
        gpus_seen=gpus,
        xids=[
            WatchXid(
                gpu=i % gpus,
                uuid=_uuid(i % gpus),
                xid=[13, 31, 74, 79, 94, 45][i % 6],
                first_s=float(i * 7),
                last_s=float(i * 7 + 3),
                count=1 + i,
            )
            for i in range(bursts)
        ],
        gpus=[
            WatchGpu(
                index=i,
                uuid=_uuid(i),
                lost=True,
                ecc_uncorrected=12345,
                ecc_corrected=654321,
                remap_pending=True,
                remap_failed=True,
                recovery_action="drain_and_reset",
                nvlink_down=list(range(18)),
                nvlink_errors={"replay": 99999, "recovery": 9999, "crc": 999999},
                fabric="completed:degraded_bandwidth",
            )
            for i in range(gpus)
        ],
        ib_ports=[
            WatchIbPort(name=f"mlx5_{i}/1", state="DOWN" if i % 2 else "ACTIVE", rate_gbps=400)
            for i in range(8)
        ],
        not_read={"recoveryAction": "GPUs 0-7: driver 525.147.05: no field before R535"},
    )


def test_a_clean_report_decodes() -> None:
    report = decode_watch_message(_message(BASE))
    assert report.end_reason is WatchEnd.FATAL_XID
    gpu = report.gpu(3)
    assert gpu is not None
    assert gpu.lost
    assert report.xids[0].uuid == "GPU-3"
    assert report.gpus_lost() == 1


def test_round_trip_is_exact() -> None:
    report = _worst(2, 3)
    assert decode_watch_message(report.to_compact_json()) == report


def test_normal_values_are_left_out_on_the_wire_and_read_back() -> None:
    gpu = WatchGpu(index=0, uuid="GPU-0")
    assert json.loads(gpu.model_dump_json(by_alias=True, exclude_none=True)) == {
        "index": 0,
        "uuid": "GPU-0",
    }
    assert not gpu.faulty()
    assert WatchGpu(index=0, recovery_action="gpu_reset").faulty()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"endedEarly": False}, "endedEarly"),
        ({"endReason": "window"}, "endedEarly"),
        ({"endedAt": "2025-12-31T23:59:00Z"}, "before startedAt"),
        ({"gpusSeen": "8"}, "int"),
        ({"simulated": "true"}, "bool"),
        ({"gpus": [{"index": 1}, {"index": 1}]}, "twice"),
        ({"xids": [{"gpu": 1, "xid": 79, "firstS": 5, "lastS": 4}]}, "before firstS"),
        ({"xids": [{"gpu": 1, "xid": 79, "firstS": 5, "lastS": 6, "count": 0}]}, "count"),
        ({"gpus": [{"index": 1, "recoveryAction": "Reboot Now"}]}, "recoveryAction"),
        ({"apiVersion": "gpuaccept.io/v2"}, "apiVersion"),
        ({"gpus": [{"index": 1, "eccUncorrected": -1}]}, "eccUncorrected"),
    ],
)
def test_bad_reports_are_refused(change: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        decode_watch_message(_message({**BASE, **change}))


def test_a_probe_report_is_not_a_watch_report() -> None:
    with pytest.raises(ValueError, match="not a WatchReport"):
        decode_watch_message(_message({**BASE, "kind": "ProbeReport"}))


def test_a_key_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        decode_watch_message(_message(BASE)[:-1] + ',"gpusSeen":0}')


def test_a_field_from_a_newer_probe_is_ignored() -> None:
    assert decode_watch_message(_message({**BASE, "futureField": 1})).gpus_seen == 8


def test_no_device_access_is_no_evidence_of_lost_gpus() -> None:
    report = decode_watch_message(
        _message(
            {
                **BASE,
                "endReason": "noDeviceAccess",
                "gpusSeen": 0,
                "xids": [],
                "gpus": [],
            }
        )
    )
    assert report.gpus_lost() is None


def test_missing_gpus_count_as_lost() -> None:
    report = decode_watch_message(_message({**BASE, "gpusSeen": 7, "gpus": []}))
    assert report.gpus_lost() == 1


@pytest.mark.parametrize("gpus", [1, 8, 16])
def test_the_worst_report_fits_and_keeps_every_gpu_up_to_16(gpus: int) -> None:
    report = _worst(gpus, EVENTS_MAX)
    assert report.compact_size() > TERMINATION_MESSAGE_MAX_BYTES
    fitted = fit_watch_report(report)
    assert fitted.compact_size() <= TERMINATION_MESSAGE_MAX_BYTES
    assert fitted.gpus_left_out == 0
    assert [g.index for g in fitted.gpus] == list(range(gpus))
    # what decides a quarantine survives on every GPU
    assert all(g.lost and g.remap_failed and g.recovery_action != "none" for g in fitted.gpus)
    assert fitted.xids_dropped + len(fitted.xids) == EVENTS_MAX
    assert decode_watch_message(encode_watch_message(report)) == fitted


def test_64_gpus_fit_by_leaving_gpus_out_and_counting_them() -> None:
    fitted = fit_watch_report(_worst(64, EVENTS_MAX))
    assert fitted.compact_size() <= TERMINATION_MESSAGE_MAX_BYTES
    assert fitted.gpus_left_out + len(fitted.gpus) == 64
    assert fitted.gpus_left_out > 0
    assert fitted.ib_ports is None


def test_healthy_gpus_leave_before_faulty_ones() -> None:
    report = _worst(64, 0)
    healthy = [WatchGpu(index=i, uuid=_uuid(i)) for i in range(60)]
    report = report.model_copy(update={"gpus": healthy + list(report.gpus[60:])})
    fitted = fit_watch_report(report, limit=2500)
    assert {g.index for g in fitted.gpus if g.faulty()} == {60, 61, 62, 63}
    assert 0 < fitted.gpus_left_out < 60
    assert fitted.compact_size() <= 2500


def test_a_report_that_fits_is_left_alone() -> None:
    report = _worst(2, 3)
    assert report.compact_size() <= TERMINATION_MESSAGE_MAX_BYTES
    assert fit_watch_report(report) is report


def test_bursts_the_caller_ranks_first_are_kept_last_dropped() -> None:
    report = _worst(1, 40)
    fatal = [x for x in report.xids if x.xid == 79]
    fitted = fit_watch_report(report, keep_first=lambda x: 0 if x.xid == 79 else 1, limit=2500)
    assert fitted.xids_dropped > 0
    assert all(x in fitted.xids for x in fatal)
    # kept bursts stay in time order
    assert [x.first_s for x in fitted.xids] == sorted(x.first_s for x in fitted.xids)


def test_the_first_burst_of_each_gpu_and_xid_outlives_repeats() -> None:
    xids = [
        WatchXid(gpu=0, xid=13, first_s=float(i), last_s=float(i), count=1) for i in range(30)
    ] + [WatchXid(gpu=1, xid=45, first_s=100.0, last_s=100.0)]
    report = _worst(1, 0).model_copy(update={"xids": xids, "gpus": [], "ib_ports": None})
    fitted = fit_watch_report(report, limit=report.compact_size() - 200)
    assert (1, 45) in {(x.gpu, x.xid) for x in fitted.xids}
    assert fitted.xids[0].first_s == 0.0


def test_gpu_detail_goes_in_its_order_and_is_named() -> None:
    report = _worst(16, 0)
    fitted = fit_watch_report(report, limit=report.compact_size() - 100)
    assert fitted.detail_dropped == [DROPPABLE_GPU_FIELDS[0]]
    assert all(g.ecc_corrected == 0 and g.nvlink_errors for g in fitted.gpus)


def test_an_envelope_over_the_limit_raises() -> None:
    with pytest.raises(ValueError, match="envelope"):
        fit_watch_report(_worst(1, 0), limit=300)
