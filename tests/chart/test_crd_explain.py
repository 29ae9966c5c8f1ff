"""`kubectl explain` explains: every field of the NodeAcceptancePolicy spec has a
description in the generated CRD, and each field with a model default names it
(the API server's own `kubectl explain` output is checked in
tests/integration/test_crds.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from gpuaccept.checks.gen import crds as crdgen
from gpuaccept.checks.policy import NodeAcceptancePolicySpec

Schema = dict[str, Any]


def _spec_schema() -> Schema:
    crd = crdgen.policy_crd()
    spec: Schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def _fields(node: Schema, path: str = "spec") -> Iterator[tuple[str, Schema]]:
    for name, sub in (node.get("properties") or {}).items():
        yield f"{path}.{name}", sub
        yield from _fields(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _fields(node["additionalProperties"], f"{path}.*")


def test_every_policy_field_has_a_description() -> None:
    fields = dict(_fields(_spec_schema()))
    assert len(fields) >= 60, "the walk found too few fields: update this test"
    missing = sorted(path for path, schema in fields.items() if not schema.get("description"))
    assert not missing, f"fields without a description (add Field(description=...)): {missing}"


def _model_defaults(model: type[BaseModel], path: str = "spec") -> Iterator[tuple[str, object]]:
    for name, field in model.model_fields.items():
        wire = f"{path}.{field.alias or name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _model_defaults(annotation, wire)
        elif field.default is not None and field.default_factory is None:
            yield wire, field.default


def test_every_scalar_default_is_in_the_description() -> None:
    fields = dict(_fields(_spec_schema()))
    defaults = dict(_model_defaults(NodeAcceptancePolicySpec))
    assert "spec.paused" in defaults
    assert "spec.probeRun.timeoutSeconds" in defaults
    for path, default in defaults.items():
        assert "Default: " in fields[path]["description"], (path, default)


@pytest.mark.parametrize("field", ["dryRun", "paused", "includeControlPlane"])
def test_switches_default_on_the_server(field: str) -> None:
    assert _spec_schema()["properties"][field]["default"] is False


def test_thresholds_keep_their_defaults_in_the_models() -> None:
    """Only the switches are stored defaults: an unset probeRun.timeoutSeconds must
    stay unset (it means the operator's --probe-timeout)."""
    spec = _spec_schema()
    stored = sorted(path for path, schema in _fields(spec) if "default" in schema)
    assert stored == ["spec.dryRun", "spec.includeControlPlane", "spec.paused"]
