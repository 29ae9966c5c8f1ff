"""Bad profile and policy files: one line naming the file, the field and the reason; exit 2."""

import json
from pathlib import Path

import pytest
import yaml
from probe_scenarios import DEFAULT_POLICY_FILE, HEALTHY, REPO, run_cli
from pydantic import ValidationError

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.probe.hardware.profile import Gpu, GpuOverride, load_profile
from gpuaccept.probe.inputs import InputError, default_policy, load_policy, policy_from_json


def healthy_data() -> dict[str, object]:
    data = yaml.safe_load(HEALTHY.read_text())
    assert isinstance(data, dict)
    return data


def write(tmp_path: Path, data: object, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def mutate(change: str) -> dict[str, object]:
    data = healthy_data()
    gpus = data["gpus"]
    driver = data["driver"]
    cpus = data["cpus"]
    assert isinstance(gpus, dict)
    assert isinstance(driver, dict)
    assert isinstance(cpus, dict)
    if change == "misspelled":
        gpus["pcieMaxWidht"] = gpus.pop("pcieMaxWidth")
    elif change == "wrong-type":
        gpus["count"] = "eight"
    elif change == "float-version":
        driver["cudaDriverVersion"] = 12.4
    elif change == "missing":
        del driver["cudaDriverVersion"]
    elif change == "bad-reason":
        gpus["clockEventReasons"] = {"load": ["hw_slowdwn"]}
    elif change == "override-range":
        gpus["overrides"] = {9: {"h2dGBps": 1.0}}
    elif change == "override-bound":
        gpus["overrides"] = {3: {"pcieMaxWidth": 64}}
    elif change == "override-misspelled":
        gpus["overrides"] = {3: {"h2dGbps": 1.0}}
    elif change == "override-model":
        gpus["overrides"] = {3: {"model": "NVIDIA H100 80GB HBM3"}}
    elif change == "unknown-top":
        data["gpu"] = {}
    elif change == "bad-cpulist":
        cpus["overrides"] = {"0-3;5": "powersave"}
    return data


PROFILE_CASES = {
    "misspelled": ("gpus.pcieMaxWidht", "unknown field"),
    "wrong-type": ("gpus.count", "valid integer"),
    "float-version": ("driver.cudaDriverVersion", "valid string"),
    "missing": ("driver.cudaDriverVersion", "required field is missing"),
    "bad-reason": ("gpus.clockEventReasons.load.0", "hw_slowdwn"),
    "override-range": ("gpus", "GPU index 9 is not below count 8"),
    "override-bound": ("gpus.overrides.3.pcieMaxWidth", "less than or equal to 32"),
    "override-misspelled": ("gpus.overrides.3.h2dGbps", "unknown field"),
    "override-model": ("gpus.overrides.3.model", "unknown field"),
    "unknown-top": ("gpu", "unknown field"),
    "bad-cpulist": ("cpus.overrides.0-3;5.[key]", "pattern"),
}


@pytest.mark.parametrize("case", PROFILE_CASES)
def test_bad_profile_error_names_file_and_field(tmp_path: Path, case: str) -> None:
    path = write(tmp_path, mutate(case))
    field, reason = PROFILE_CASES[case]
    with pytest.raises(InputError) as info:
        load_profile(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {field}: "), message
    assert reason in message


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpus: [unclosed\n", "not valid YAML at line"),
        ("- just\n- a list\n", "(top level): expected a mapping, got list"),
        ("", "(top level): expected a mapping, got NoneType"),
    ],
)
def test_unparseable_profiles(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(InputError, match=None) as info:
        load_profile(write(tmp_path, text))
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_every_gpu_field_can_be_overridden_with_the_same_bounds() -> None:
    """``GpuOverride`` is derived from ``Gpu``: a field added to ``Gpu`` is overridable,
    and a bad value reads the same reason as the ``gpus`` default would."""
    assert set(GpuOverride.model_fields) == set(Gpu.model_fields)
    for name, field in Gpu.model_fields.items():
        override = GpuOverride.model_fields[name]
        assert (override.alias, override.metadata) == (field.alias, field.metadata), name
        assert override.default is None, name
    bad = {"pcieMaxGeneration": 9, "h2dGBps": -1, "xids": [0], "computeMode": "shared"}
    for key, value in bad.items():
        with pytest.raises(ValidationError) as as_default:
            Gpu.model_validate({"h2dGBps": 50, "d2hGBps": 50, key: value})
        with pytest.raises(ValidationError) as as_override:
            GpuOverride.model_validate({key: value})
        assert [e["msg"] for e in as_override.value.errors()] == [
            e["msg"] for e in as_default.value.errors()
        ], key


def test_missing_profile_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load_profile(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: file not found"


def test_default_policy_file_loads() -> None:
    policy = load_policy(DEFAULT_POLICY_FILE)
    assert policy.pcie_link.min_h2d_gbps == 40
    assert policy.nccl_allreduce.min_busbw_for("NVIDIA H200") == 320
    assert policy.nccl_allreduce.min_busbw_for("NVIDIA H100 80GB HBM3") == 320
    assert policy.nccl_allreduce.min_busbw_for("NVIDIA H100 NVL") is None
    assert policy.nccl_allreduce.max_message_bytes == 8 << 30


def test_packaged_default_policy_is_the_shipped_file() -> None:
    packaged = REPO / "probes" / "gpuaccept" / "probe" / "policies" / "default-h100-h200.yaml"
    # One file: the probe package links to policies/ (the wheel gets its content).
    assert packaged.is_symlink()
    assert packaged.resolve() == DEFAULT_POLICY_FILE.resolve()
    assert default_policy() == load_policy(DEFAULT_POLICY_FILE)
    assert default_policy() != ProbePolicy()


def test_policy_accepts_a_nodeacceptancepolicy_manifest(tmp_path: Path) -> None:
    manifest = {
        "apiVersion": "gpuaccept.io/v1alpha1",
        "kind": "NodeAcceptancePolicy",
        "metadata": {"name": "h100"},
        "spec": {"probe": {"gpuCount": {"expected": 4}}},
    }
    assert load_policy(write(tmp_path, manifest, "p.yaml")).gpu_count.expected == 4
    bad = {**manifest, "spec": {"probe": {"gpuCount": {"expectd": 4}}}}
    with pytest.raises(InputError) as info:
        load_policy(write(tmp_path, bad, "p.yaml"))
    assert "(spec.probe): gpuCount.expectd: unknown field" in str(info.value)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (
            {"pcieLink": {"minH2DGBps": "fast"}},
            "pcieLink.minH2DGBps: Input should be a valid number",
        ),
        (
            {"cpuGovernor": {"requiredGovernr": "performance"}},
            "cpuGovernor.requiredGovernr: unknown field",
        ),
        ({"throttleReasons": {"failOn": ["hw_slow"]}}, "throttleReasons.failOn.0: Input should be"),
        (
            {"driverLibraries": {"driverVersions": {"min": "r550"}}},
            "driverLibraries.driverVersions.min",
        ),
    ],
)
def test_bad_policy_files(tmp_path: Path, data: dict[str, object], needle: str) -> None:
    path = write(tmp_path, data, "policy.yaml")
    with pytest.raises(InputError) as info:
        load_policy(path)
    assert str(info.value).startswith(f"{path}: ")
    assert needle in str(info.value)


def test_policy_from_env_json() -> None:
    assert policy_from_json(json.dumps({"gpuCount": {"expected": 2}})).gpu_count.expected == 2
    assert policy_from_json("{}") == ProbePolicy()
    with pytest.raises(InputError, match="GPUACCEPT_POLICY: not valid JSON"):
        policy_from_json("{nope")
    with pytest.raises(InputError, match=r"GPUACCEPT_POLICY: gpuCount\.expected: "):
        policy_from_json('{"gpuCount": {"expected": -1}}')


# --- through the CLI: exit code 2 and a one-line error --------------------------


def _error_line(stderr: str) -> str:
    """The whole of stderr, which must be one error line (no usage block)."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gpuaccept probe: error: "), stderr
    return lines[0]


def test_cli_misspelled_profile_field_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path, mutate("misspelled"))
    log = tmp_path / "termination-log"
    proc = run_cli("--profile", path, "--termination-log", log)
    assert proc.returncode == 2
    assert _error_line(proc.stderr) == (
        f"gpuaccept probe: error: {path}: gpus.pcieMaxWidht: unknown field"
    )
    assert proc.stdout == ""
    # fail safe: a report is written even so, and it can never be accepted
    assert '"status":"error"' in log.read_text()


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--profile", "/nonexistent/p.yaml"], {}, "/nonexistent/p.yaml: file not found"),
        (["--policy", "/nonexistent/pol.yaml"], {}, "/nonexistent/pol.yaml: file not found"),
        (
            [],
            {"GPUACCEPT_PROFILE": "/nonexistent/env.yaml"},
            "/nonexistent/env.yaml: file not found",
        ),
        (
            ["--profile", str(HEALTHY)],
            {"GPUACCEPT_POLICY": "[1"},
            "GPUACCEPT_POLICY: not valid JSON",
        ),
        (
            ["--profile", str(HEALTHY)],
            {"GPUACCEPT_EXPECTED_GPUS": "eight"},
            "GPUACCEPT_EXPECTED_GPUS",
        ),
        (
            ["--profile", str(HEALTHY), "--checks", "pcie,gpu_count"],
            {},
            "--checks: unknown check pcie",
        ),
        (["--output", "yaml"], {}, "argument --output: invalid choice"),
        (["--bogus"], {}, "unrecognized arguments: --bogus"),
        (
            ["--expected-gpus", "abc"],
            {},
            "gpuaccept probe: error: argument --expected-gpus: invalid int value: 'abc'",
        ),
        (["--expected-gpus"], {}, "argument --expected-gpus: expected one argument"),
    ],
)
def test_cli_bad_input_exits_2(args: list[str], env: dict[str, str], needle: str) -> None:
    proc = run_cli(*args, env=env)
    assert proc.returncode == 2, proc.stderr
    assert needle in _error_line(proc.stderr)


def test_cli_bad_policy_file_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path, {"ncclAllreduce": {"minBusbwGBps": "lots"}}, "policy.yaml")
    proc = run_cli("--profile", HEALTHY, "--policy", path)
    assert proc.returncode == 2
    assert f"{path}: ncclAllreduce.minBusbwGBps: Input should be a valid number" in _error_line(
        proc.stderr
    )


def test_cli_empty_version_range_exits_2(tmp_path: Path) -> None:
    path = write(
        tmp_path, {"driverLibraries": {"driverVersions": {"min": "600", "max": "500"}}}, "bad.yaml"
    )
    proc = run_cli("--profile", HEALTHY, "--policy", path)
    assert proc.returncode == 2
    assert _error_line(proc.stderr) == (
        f"gpuaccept probe: error: {path}: driverLibraries.driverVersions: "
        "min 600 is above max 500: no version is in this range"
    )
    assert proc.stdout == ""
