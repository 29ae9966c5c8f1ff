"""The policy contract's own rules, beyond what the CRD's JSON schema can say."""

import pytest
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from gpuaccept.checks.policy import NodeAcceptancePolicySpec, ProbePolicy
from gpuaccept.checks.registry import CHECKS
from gpuaccept.contracts.policy_fields import VersionRange


@pytest.mark.parametrize(
    ("low", "high"),
    [("600", "500"), ("550.54.15", "550.54.14"), ("551.1", "550"), ("2.21.5", "2.3")],
)
def test_version_range_min_above_max_is_rejected(low: str, high: str) -> None:
    with pytest.raises(ValidationError) as info:
        VersionRange.model_validate({"min": low, "max": high})
    (error,) = info.value.errors(include_url=False)
    assert error["type"] == "value_error"
    assert str(error["ctx"]["error"]) == (
        f"min {low} is above max {high}: no version is in this range"
    )


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("500", "600"),
        ("550.54.15", "550.54.15"),  # one version exactly
        ("2.3", "2.21.5"),  # compared as numbers, not text
        ("550.54", "550"),  # max "550" is 550.*
        (None, "500"),
        ("600", None),
        (None, None),
    ],
)
def test_version_range_in_order_or_open_is_accepted(low: str | None, high: str | None) -> None:
    bounds = VersionRange.model_validate({"min": low, "max": high})
    assert (bounds.min, bounds.max) == (low, high)


@pytest.mark.parametrize(
    ("low", "high", "version", "inside"),
    [
        (None, "2.21", "2.21.5", True),  # max at its own precision: 2.21.*
        (None, "2.21", "2.22.0", False),
        (None, "2.21.5", "2.21", True),  # 2.21 is 2.21.0
        ("12.4.0", None, "12.4", True),  # a missing part counts as 0
        ("12.4.1", None, "12.4", False),
        ("2.21", "2.21", "2.21.5", True),
        ("2.21", "2.21", "2.20.9", False),
        ("550.54.15", "550.54.15", "550.54.15", True),
        ("550.54.15", "550.54.15", "550.54.14", False),
        ("12.9", None, "12.10", True),  # numbers, not text
    ],
)
def test_version_range_contains(
    low: str | None, high: str | None, version: str, inside: bool
) -> None:
    assert VersionRange.model_validate({"min": low, "max": high}).contains(version) is inside


def test_a_policy_with_every_check_disabled_is_refused() -> None:
    sections = {to_camel(check.name): {"enabled": False} for check in CHECKS}
    with pytest.raises(ValidationError, match="every check is disabled"):
        NodeAcceptancePolicySpec.model_validate({"probe": sections})


def test_empty_range_is_rejected_where_a_policy_carries_it() -> None:
    for field in ("driverVersions",):
        with pytest.raises(ValidationError) as info:
            NodeAcceptancePolicySpec.model_validate(
                {"probe": {"driverLibraries": {field: {"min": "600", "max": "500"}}}}
            )
        (error,) = info.value.errors(include_url=False)
        assert error["loc"] == ("probe", "driverLibraries", field)


def test_range_bounds_are_inclusive() -> None:
    bounds = ProbePolicy.model_validate(
        {"driverLibraries": {"driverVersions": {"min": "550", "max": "550.54.15"}}}
    ).driver_libraries.driver_versions
    assert bounds.contains("550.54.15")
    assert bounds.contains("550")
    assert not bounds.contains("550.54.16")
    assert not bounds.contains("549.99")


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ({"pendingTaintKey": "node.kubernetes.io/unschedulable"}, "pendingTaintKey", "belong to"),
        ({"quarantine": {"taintKey": "nvidia.com/gpu"}}, "quarantine.taintKey", "belong to"),
        ({"quarantine": {"labels": {"k8s.io/x": "y"}}}, "quarantine.labels.k8s.io/x", "belong to"),
        ({"quarantine": {"taintKey": "gpuaccept.io/" + "q" * 64}}, "quarantine", "pattern"),
        ({"pendingTaintKey": ".".join(["a" * 60] * 5) + "/p"}, "pendingTaintKey", "than 253"),
        ({"nodeSelector": {}}, "nodeSelector", "at least 1"),
    ],
)
def test_keys_the_operator_would_write_are_checked(
    spec: dict[str, object], field: str, says: str
) -> None:
    with pytest.raises(ValidationError) as info:
        NodeAcceptancePolicySpec.model_validate(spec)
    (error,) = info.value.errors(include_url=False)
    assert ".".join(str(p) for p in error["loc"]).startswith(field)
    assert says in error["msg"]


def test_owned_keys_elsewhere_and_63_character_names_are_fine() -> None:
    spec = NodeAcceptancePolicySpec.model_validate(
        {
            "pendingTaintKey": "example.com/" + "p" * 63,
            "quarantine": {"labels": {"gpu.example.com/bad": "yes"}},
            "nodeSelector": {"nvidia.com/gpu.present": "true"},  # reading is fine
        }
    )
    assert spec.pending_taint_key.endswith("p" * 63)
