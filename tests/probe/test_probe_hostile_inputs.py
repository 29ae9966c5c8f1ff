"""Inputs a hostile or careless user gives the probe (issue 11 item 11).

Binary files, huge ranges and counts, oversized and deeply nested files, and a
crash while the simulated hardware is being set up: each is one error line and
exit 2 (or a failed probe with exit 1), with the termination log written, and
nothing left behind in ``/dev/shm``.
"""

import errno
import tempfile
from pathlib import Path

import pytest
import yaml
from probe_scenarios import HEALTHY, fault, run_cli

from gpuaccept.contracts.report import decode_termination_message
from gpuaccept.probe import cli
from gpuaccept.probe.hardware.profile import load_profile
from gpuaccept.probe.hardware.simulated import SimulatedBackend
from gpuaccept.probe.inputs import MAX_INPUT_BYTES, InputError, load_policy, policy_from_json

# Not UTF-8: a UTF-16 byte-order mark, then bytes no UTF-8 text starts with.
BINARY = b"\xff\xfe\x00\x01gpus:\x00\x80\xc3\x28\n"


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gpuaccept probe: error: "), stderr
    return lines[0]


def _profile_with(tmp_path: Path, edit: dict[str, dict[str, object]]) -> Path:
    data = yaml.safe_load(HEALTHY.read_text())
    for section, fields in edit.items():
        data[section].update(fields)
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# --- binary files ------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--profile", "--policy"])
def test_binary_file_is_one_line_exit_2_and_a_termination_log(tmp_path: Path, flag: str) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(BINARY)
    log = tmp_path / "termination-log"
    args = [flag, binary] if flag == "--profile" else ["--profile", HEALTHY, flag, binary]
    proc = run_cli(*args, "--termination-log", log)
    assert proc.returncode == 2, proc.stderr
    assert _one_error_line(proc.stderr) == (
        f"gpuaccept probe: error: {binary}: not UTF-8 text: byte 0xff at offset 0"
    )
    report = decode_termination_message(log.read_text())
    assert [(r.check, r.status.value) for r in report.results] == [("probe", "error")]
    assert str(binary) in report.results[0].message


# --- counts and ranges are bounded when the profile is loaded ------------------


@pytest.mark.parametrize(
    ("cpulist", "needle"),
    [
        ("0-4000000000", "cpus.overrides.0-4000000000.[key]: CPU 4000000000 is not below 4096"),
        ("0-3,4096", "cpus.overrides.0-3,4096.[key]: CPU 4096 is not below 4096"),
        (
            "9" * 4000,
            "cpus.overrides.999999999999999999999999999999999999999….[key]: "
            "CPU 99999999999… is not below 4096",
        ),
        ("8-3", "cpus.overrides.8-3.[key]: range 8-3 runs downwards"),
    ],
)
def test_cpu_ranges_are_bounded_at_load_time(tmp_path: Path, cpulist: str, needle: str) -> None:
    path = _profile_with(tmp_path, {"cpus": {"overrides": {cpulist: "powersave"}}})
    with pytest.raises(InputError) as caught:
        load_profile(path)
    assert str(caught.value) == f"{path}: {needle}"


def test_the_widest_cpu_range_still_loads(tmp_path: Path) -> None:
    path = _profile_with(tmp_path, {"cpus": {"count": 4096, "overrides": {"0-4095": "powersave"}}})
    assert load_profile(path).cpus.overrides == {"0-4095": "powersave"}


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_bandwidths_are_finite(tmp_path: Path, value: str) -> None:
    path = tmp_path / "profile.yaml"
    data = yaml.safe_load(HEALTHY.read_text())
    data["gpus"]["h2dGBps"] = float(value.removeprefix("."))
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"gpus\.h2dGBps: .*finite"):
        load_profile(path)


# --- oversized and deeply nested files ----------------------------------------


def _padded(source: Path, size: int) -> str:
    """``source`` followed by a YAML comment, ``size`` bytes in all."""
    text = source.read_text()
    return text + "#" + "x" * (size - len(text.encode()) - 2) + "\n"


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(_padded(HEALTHY, MAX_INPUT_BYTES + 1))
    with pytest.raises(InputError, match=rf"^{big}: too large: over {MAX_INPUT_BYTES} bytes"):
        load_profile(big)
    with pytest.raises(InputError, match=rf"^{big}: too large"):
        load_policy(big)


def test_a_file_at_the_size_limit_loads(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    path.write_text(_padded(HEALTHY, MAX_INPUT_BYTES))
    assert path.stat().st_size == MAX_INPUT_BYTES
    assert load_profile(path).gpus.count == 8


def test_an_oversized_policy_through_the_cli_exits_2(tmp_path: Path) -> None:
    big = tmp_path / "policy.yaml"
    big.write_text("# " + "x" * 4 * 1024 * 1024 + "\n")
    proc = run_cli("--profile", HEALTHY, "--policy", big)
    assert proc.returncode == 2
    assert f"{big}: too large" in _one_error_line(proc.stderr)


def test_an_oversized_policy_in_the_environment_is_refused() -> None:
    with pytest.raises(InputError, match=r"^GPUACCEPT_POLICY: too large"):
        policy_from_json('{"x": "' + "y" * MAX_INPUT_BYTES + '"}')


def test_deeply_nested_yaml_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 30000 + "]" * 30000 + "\n")
    with pytest.raises(InputError, match=rf"^{deep}: not valid YAML: nested too deeply$"):
        load_profile(deep)


@pytest.mark.parametrize("text", ['{"a":' * 5000 + "1" + "}" * 5000, "[" * 5000 + "]" * 5000])
def test_deeply_nested_policy_json_is_one_line(text: str) -> None:
    with pytest.raises(InputError, match=r"^GPUACCEPT_POLICY: not valid JSON: nested too deeply$"):
        policy_from_json(text)


def test_expected_gpus_in_other_scripts_digits_exits_2() -> None:
    proc = run_cli("--profile", HEALTHY, env={"GPUACCEPT_EXPECTED_GPUS": "\u00b2"})
    assert proc.returncode == 2
    assert "GPUACCEPT_EXPECTED_GPUS: not a non-negative integer" in _one_error_line(proc.stderr)


# --- a crash while the simulated node is built leaves nothing in /dev/shm ------


class _FullDisk:
    """The temporary filesystem fills up after a few files of the simulated tree."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, files_before_full: int) -> None:
        self.created: list[Path] = []
        self.left = files_before_full
        real_mkdtemp = tempfile.mkdtemp
        real_write_text = Path.write_text

        def mkdtemp(*args: str | None, **kwargs: str | None) -> str:
            made = real_mkdtemp(*args, **kwargs)
            self.created.append(Path(made))
            return str(made)

        def write_text(path: Path, data: str, *args: object, **kwargs: object) -> int:
            if any(path.is_relative_to(tree) for tree in self.created):
                if self.left == 0:
                    raise OSError(errno.ENOSPC, "No space left on device", str(path))
                self.left -= 1
            return real_write_text(path, data, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
        monkeypatch.setattr(Path, "write_text", write_text)


def test_a_crash_while_building_the_simulated_node_removes_its_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    disk = _FullDisk(monkeypatch, files_before_full=20)
    profile = load_profile(fault("governor-powersave"))
    with pytest.raises(OSError, match="No space left on device"):
        SimulatedBackend(profile)
    assert len(disk.created) == 1
    assert not disk.created[0].exists(), f"{disk.created[0]} left behind"


def test_a_crash_while_building_the_simulated_node_is_a_failed_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    disk = _FullDisk(monkeypatch, files_before_full=3)
    log = tmp_path / "termination-log"
    code = cli.main(["--profile", str(HEALTHY), "--termination-log", str(log), "--node-name", "n"])
    assert code == 1
    stderr = capsys.readouterr().err.splitlines()
    assert len(stderr) == 1, stderr
    assert stderr[0].startswith("gpuaccept probe: probe failed: OSError: ")
    assert "No space left on device" in stderr[0]
    report = decode_termination_message(log.read_text())
    assert report.hardware.value == "simulated"
    assert report.results[0].status.value == "error"
    assert not disk.created[0].exists()
