"""``scripts/device-check.sh`` without a GPU: it says claim by claim what it would
prove, and returns one tarball (a device run returns at most 8 files)."""

import sys
import tarfile
from pathlib import Path

import pytest
from device_claims import CLAIMS, NOT_TESTABLE_ON_ONE_GPU
from test_device_check_script import run_script, summary

DEVICE_FILES_MAX = 8
REAL_PATHS = {
    "xid_listener_watches_every_gpu",
    "nvlink_counters_per_field",
    "recovery_action_and_fabric_state",
    "persistence_with_and_without_socket",
    "probe_runs_as_non_root",
}


def test_the_real_paths_are_claims_and_what_one_gpu_cannot_test_is_listed() -> None:
    assert {c.name for c in CLAIMS} >= REAL_PATHS
    assert {"8-GPU peers", "NVSwitch fabric", "InfiniBand", "the two-node pair"} <= {
        what for what, _why in NOT_TESTABLE_ON_ONE_GPU
    }


def test_without_a_gpu_each_claim_says_what_it_would_prove_and_one_tarball_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVICE_CHECK_PACK", "1")
    out = tmp_path / "out"
    proc = run_script(out, python=Path(sys.executable), wheels=tmp_path / "none")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for claim in CLAIMS:
        assert f"NOT PROVEN {claim.name} (not run)" in proc.stdout
        assert f"would prove: {claim.statement}" in proc.stdout
    left = sorted(p.name for p in out.iterdir())
    assert left == ["device-check.tar.gz", "summary.json"]
    assert len(left) <= DEVICE_FILES_MAX
    with tarfile.open(out / "device-check.tar.gz") as packed:
        names = set(packed.getnames())
    assert {"summary.json", "steps.tsv", "machine.txt"} <= names
    assert not summary(out)["proven"]
