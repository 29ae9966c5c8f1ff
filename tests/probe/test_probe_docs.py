"""The docs name every field of the formats they describe."""

from probe_scenarios import REPO
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.contracts.policy_fields import CheckSwitch
from gpuaccept.contracts.report import CheckResult, HardwareSummary, ProbeReport
from gpuaccept.probe.hardware import profile

DOCS = REPO / "docs"


def wire_names(model: type[BaseModel]) -> set[str]:
    return {f.alias or to_camel(name) for name, f in model.model_fields.items()}


def test_profile_doc_names_every_field() -> None:
    text = (DOCS / "profile-format.md").read_text()
    models: list[type[BaseModel]] = [
        profile.HardwareProfile,
        profile.Node,
        profile.Gpus,
        profile.Driver,
        profile.Allreduce,
        profile.InterNode,
        profile.Cpus,
        profile.ClockEventReasons,
        profile.Link,
    ]
    missing = {n for m in models for n in wire_names(m) if f"`{n}`" not in text}
    assert not missing


def test_report_doc_names_every_field() -> None:
    text = (DOCS / "report-format.md").read_text()
    names = wire_names(ProbeReport) | wire_names(HardwareSummary) | wire_names(CheckResult)
    assert not {n for n in names if f"`{n}`" not in text}
    assert not {c.name for c in CHECKS if f"`{c.name}`" not in text}


def test_policy_doc_names_every_probe_field() -> None:
    text = (DOCS / "policy.md").read_text()
    missing = set()
    for name, field in ProbePolicy.model_fields.items():
        section = field.annotation
        assert isinstance(section, type)
        assert issubclass(section, CheckSwitch)
        if f"### `{to_camel(name)}`" not in text:
            missing.add(to_camel(name))
        missing |= {n for n in wire_names(section) if f"`{n}`" not in text}
    assert not missing
    assert "## Operator fields" in text


def test_report_doc_names_every_watch_report_field() -> None:
    from gpuaccept.contracts.watch_report import (  # noqa: PLC0415
        WatchEnd,
        WatchGpu,
        WatchIbPort,
        WatchReport,
        WatchXid,
    )

    text = (DOCS / "report-format.md").read_text()
    names = set().union(*(wire_names(m) for m in (WatchReport, WatchXid, WatchGpu, WatchIbPort)))
    assert not {n for n in names if f"`{n}`" not in text}
    assert not {e.value for e in WatchEnd if f"`{e.value}`" not in text}
