"""The committed CRDs are exactly what the contract models generate.

Plus pure checks of the generated schemas: the models' defaults and a realistic
status validate, and bad values are refused, by a small validator that follows
the Kubernetes structural-schema rules used here. The real proof, against a
real kube-apiserver, is tests/integration/test_crds.py.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept import cli
from gpuaccept.checks.gen import crds as crdgen
from gpuaccept.checks.policy import NodeAcceptancePolicySpec
from gpuaccept.contracts.nodeacceptance import (
    CheckSummary,
    Condition,
    ConditionStatus,
    KeyFigures,
    NodeAcceptancePolicyStatus,
    NodeAcceptanceSpec,
    NodeAcceptanceStatus,
    Phase,
    Reason,
)
from gpuaccept.contracts.report import (
    CheckResult,
    CheckStatus,
    HardwareMode,
    HardwareSummary,
    ProbeReport,
)

ROOT = Path(__file__).resolve().parents[2]
CRD_DIRS = [ROOT / "crds", ROOT / "charts" / "gpuaccept" / "crds"]
FIX = "run `make crds` and commit crds/ and charts/gpuaccept/crds/"


@pytest.mark.parametrize("directory", CRD_DIRS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_crds_match_the_models(directory: Path) -> None:
    expected = crdgen.rendered_files()
    present = {p.name for p in directory.glob("*.yaml")}
    assert present == set(expected), (
        f"{directory.relative_to(ROOT)} holds {sorted(present)}, the generator writes "
        f"{sorted(expected)}: {FIX}"
    )
    for name, text in expected.items():
        committed = (directory / name).read_text(encoding="utf-8")
        assert committed == text, (
            f"{directory.relative_to(ROOT) / name} is out of date with the contract models: {FIX}"
        )


def test_chart_and_top_level_crds_are_identical() -> None:
    top, chart = CRD_DIRS
    for path in sorted(top.glob("*.yaml")):
        assert (chart / path.name).read_bytes() == path.read_bytes(), (
            f"charts/gpuaccept/crds/{path.name} differs from crds/{path.name}: {FIX}"
        )


def test_cli_prints_every_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert crdgen.main([]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert {d["metadata"]["name"] for d in docs} == {
        "nodeacceptancepolicies.gpuaccept.io",
        "nodeacceptances.gpuaccept.io",
    }


def test_cli_writes_files(tmp_path: Path) -> None:
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(crdgen.rendered_files())


@pytest.mark.parametrize("command", ["crds", "docs"])
def test_without_the_generators_the_cli_says_where_to_run_them(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The images leave gpuaccept.checks.gen out (.dockerignore): one line, exit 2."""
    monkeypatch.setitem(sys.modules, "gpuaccept.checks.gen", None)
    monkeypatch.delitem(sys.modules, f"gpuaccept.checks.gen.{command}", raising=False)
    assert cli.main([command]) == 2
    assert capsys.readouterr().err == (
        f"gpuaccept {command}: a build-time command; run it from a source checkout "
        f"(make {command})\n"
    )


def test_the_images_leave_the_generators_out() -> None:
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert "checks/gpuaccept/checks/gen" in ignored


# --- a small structural-schema validator ---------------------------------------------


def _walk(schema: dict[str, Any], path: str, fn: Any) -> None:
    fn(schema, path)
    for name, sub in schema.get("properties", {}).items():
        _walk(sub, f"{path}.{name}", fn)
    if isinstance(schema.get("additionalProperties"), dict):
        _walk(schema["additionalProperties"], f"{path}[*]", fn)
    if "items" in schema:
        _walk(schema["items"], f"{path}[]", fn)


def _int_or_string_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return [f"{path}: must be an integer or a string"]
    errors: list[str] = []
    if isinstance(value, str) and not re.search(schema.get("pattern", ""), value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    low, high = schema.get("minimum", value), schema.get("maximum", value)
    if isinstance(value, int) and not low <= value <= high:
        errors.append(f"{path}: {value} out of range")
    return errors


def _string_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if len(value) > schema.get("maxLength", len(value)):
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if len(value) < schema.get("minLength", 0):
        errors.append(f"{path}: shorter than {schema['minLength']}")
    return errors


def _number_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
        errors.append(f"{path}: {value} below minimum {low}")
    if high is not None and value > high:
        errors.append(f"{path}: {value} above maximum {high}")
    return errors


def _array_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    if len(value) > schema.get("maxItems", len(value)):
        errors.append(f"{path}: more than {schema['maxItems']} items")
    for i, item in enumerate(value):
        errors += validate(schema["items"], item, f"{path}[{i}]")
    return errors


def _object_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    props = schema.get("properties")
    if props is not None:
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name}: Required value")
        for name, item in value.items():
            if name not in props:
                if not schema.get("x-kubernetes-preserve-unknown-fields"):
                    errors.append(f'{path}: unknown field "{name}"')
                continue
            errors += validate(props[name], item, f"{path}.{name}")
    elif "additionalProperties" in schema:
        for name, item in value.items():
            errors += validate(schema["additionalProperties"], item, f"{path}[{name}]")
    return errors


_IS_TYPE = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}
# The validations each type adds after its type and enum checks.
_TYPE_ERRORS = {
    "string": _string_errors,
    "integer": _number_errors,
    "number": _number_errors,
    "array": _array_errors,
    "object": _object_errors,
}


def validate(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Errors for ``value`` against a structural schema, with strict field validation
    (an unknown field is an error, as ``kubectl apply`` reports it)."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: null not allowed"]
    if schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema:
        return []
    if schema.get("x-kubernetes-int-or-string"):
        return _int_or_string_errors(schema, value, path)
    kind = schema["type"]
    if not _IS_TYPE[kind](value):
        return [f"{path}: expected {kind}, got {type(value).__name__}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    type_errors = _TYPE_ERRORS.get(kind)
    if type_errors is not None:
        errors += type_errors(schema, value, path)
    return errors


def _root(crd: dict[str, Any]) -> dict[str, Any]:
    root: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root


POLICY = _root(crdgen.policy_crd())
ACCEPTANCE = _root(crdgen.acceptance_crd())
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _obj(kind: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "gpuaccept.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def _full_dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True)
    return dumped


def sample_status() -> NodeAcceptanceStatus:
    report = ProbeReport(
        node_name="gpu-1",
        boot_id="b" * 36,
        probe_version="0.1.0",
        started_at=NOW,
        finished_at=NOW,
        hardware=HardwareMode.SIMULATED,
        summary=HardwareSummary(gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8),
        results=[
            CheckResult(
                check="nccl_allreduce",
                status=CheckStatus.FAIL,
                observed={"busbwGBps": 80.5, "sizes": [1, 2, None], "ok": False},
                expected=123.0,
                duration_s=1.5,
            )
        ],
    )
    return NodeAcceptanceStatus(
        phase=Phase.QUARANTINED,
        reason="LowBusBandwidth",
        reasons=[Reason(check="nccl_allreduce", reason="LowBusBandwidth")],
        checks=[CheckSummary(check="nccl_allreduce", status=CheckStatus.FAIL)],
        figures=KeyFigures.model_validate(
            {"busbwGBps": 80.5, "pcie": "Gen5x16", "driverVersion": "550.54.15"}
        ),
        policy="default",
        attempts=1,
        last_probe_time=NOW,
        probed_boot_id="b" * 36,
        applied_taints=["gpuaccept.io/quarantined"],
        report=report,
        conditions=[
            Condition(
                type="GPUAcceptance",
                status=ConditionStatus.FALSE,
                reason="LowBusBandwidth",
                last_transition_time=NOW,
            )
        ],
    )


@pytest.mark.parametrize("dump", ["full", "wire"])
def test_defaults_and_samples_validate(dump: str) -> None:
    def render(model: Any) -> dict[str, Any]:
        wire: dict[str, Any] = model.to_wire()
        return _full_dump(model) if dump == "full" else wire

    policy = _obj(
        "NodeAcceptancePolicy",
        render(NodeAcceptancePolicySpec()),
        render(NodeAcceptancePolicyStatus()),
    )
    assert validate(POLICY, policy) == []
    for status in (NodeAcceptanceStatus(), sample_status()):
        na = _obj("NodeAcceptance", render(NodeAcceptanceSpec(node_name="gpu-1")), render(status))
        assert validate(ACCEPTANCE, na) == []


def test_empty_policy_spec_is_valid() -> None:
    assert validate(POLICY, _obj("NodeAcceptancePolicy", {})) == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"maxQuarantined": "abc"}, ".spec.maxQuarantined"),
        ({"maxQuarantined": "150%"}, ".spec.maxQuarantined"),
        ({"maxQuarantined": -1}, ".spec.maxQuarantined"),
        ({"dryRun": "maybe"}, ".spec.dryRun"),
        ({"quarantine": {"taintEffect": "PreferNoSchedule"}}, ".spec.quarantine.taintEffect"),
        ({"reprobe": {"onPolicyChange": "Sometimes"}}, ".spec.reprobe.onPolicyChange"),
        ({"probeRun": {"timeoutSeconds": 5}}, ".spec.probeRun.timeoutSeconds"),
        ({"probe": {"pcieLink": {"minGeneration": 9}}}, ".spec.probe.pcieLink.minGeneration"),
        ({"probe": {"throttleReasons": {"failOn": ["idle"]}}}, ".spec.probe.throttleReasons"),
        ({"probe": {"throttleReasons": {"sampleSeconds": 0}}}, ".spec.probe.throttleReasons"),
        ({"probe": {"driverLibraries": {"driverVersions": {"min": "v550"}}}}, "driverVersions.min"),
        ({"nodeSelector": {"a": "not a label value"}}, ".spec.nodeSelector[a]"),
        ({"pendingTaintKey": "Bad Key"}, ".spec.pendingTaintKey"),
        ({"dryrun": True}, 'unknown field "dryrun"'),
    ],
)
def test_bad_policy_values_are_refused(spec: dict[str, Any], field: str) -> None:
    errors = validate(POLICY, _obj("NodeAcceptancePolicy", spec))
    assert errors, f"{spec} was accepted"
    assert any(field in e for e in errors), errors
    # The model refuses them too: the CRD is never looser than the contract here.
    with pytest.raises(ValueError, match=r"validation error"):
        NodeAcceptancePolicySpec.model_validate(spec)


def test_bad_acceptance_values_are_refused() -> None:
    assert validate(ACCEPTANCE, _obj("NodeAcceptance", {})) == [".spec.nodeName: Required value"]
    bad_phase = validate(ACCEPTANCE, _obj("NodeAcceptance", {"nodeName": "n"}, {"phase": "Gone"}))
    assert any(".status.phase" in e for e in bad_phase)


def test_schemas_are_structural() -> None:
    """Every node has a type (or is int-or-string / preserve-unknown-fields), and no
    construct the API server refuses in a structural schema is left."""
    forbidden = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "patternProperties", "title"}

    def check(node: dict[str, Any], path: str) -> None:
        assert not forbidden & node.keys(), f"{path}: {forbidden & node.keys()}"
        assert (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        ), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        # Only the policy spec's switches are stored defaults (crdgen's docstring).
        switches = {".spec.dryRun", ".spec.paused", ".spec.includeControlPlane"}
        assert "default" not in node or path in switches, f"{path}: defaults live in the models"

    for crd in crdgen.all_crds().values():
        _walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "", check)


def test_taints_differ_rule_mirrors_the_model() -> None:
    rule = crdgen.policy_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]["x-kubernetes-validations"][0]["rule"]
    assert "'gpuaccept.io/pending'" in rule
    assert "'gpuaccept.io/quarantined'" in rule
    with pytest.raises(ValueError, match="must differ"):
        NodeAcceptancePolicySpec.model_validate({"pendingTaintKey": "gpuaccept.io/quarantined"})


def test_printer_columns() -> None:
    def columns(crd: dict[str, Any]) -> dict[str, str]:
        cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        return {c["name"].upper(): c["jsonPath"] for c in cols if not c.get("priority")}

    policy = columns(crdgen.policy_crd())
    assert list(policy) == [
        "READY",
        "MATCHED",
        "ACCEPTED",
        "QUARANTINED",
        "PENDING",
        "HELD",
        "WOULD-ACCEPT",
        "WOULD-QUARANTINE",
        "STALLED",
        "BREAKER",
        "DRYRUN",
        "PAUSED",
        "AGE",
    ]
    # the dry run's answer at a glance (issue 25)
    assert policy["READY"] == '.status.conditions[?(@.type=="Ready")].status'
    assert policy["WOULD-QUARANTINE"] == ".status.wouldQuarantine"
    na = columns(crdgen.acceptance_crd())
    # the key figures' columns come from the registry, in their declared order (README's)
    assert list(na) == [
        "PHASE",
        "REASON",
        "HELD",
        "FAILING",
        "FENCED",
        "BUSBW",
        "PCIE",
        "FABRIC",
        "DRIVER",
        "PROBED",
        "AGE",
    ]
    assert na["HELD"] == ".status.heldAction"
    assert na["FAILING"] == ".status.reasons[0].reason"
    assert na["FENCED"] == ".status.fenced"  # "1/8": GPUs fenced of the node's (issue 40)
    assert na["PROBED"] == ".status.lastProbeTime"
    assert na["FABRIC"] == ".status.fabric.summary"  # empty unless the policy enables fabric
    # Every printer column points at a field that exists in the schema.
    for crd in (crdgen.policy_crd(), crdgen.acceptance_crd()):
        root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for col in crd["spec"]["versions"][0]["additionalPrinterColumns"]:
            node = root
            # an index or a filter (reasons[0], conditions[?(@.type=="Ready")]) is one
            # item of the array: its fields are the items' fields
            path = re.sub(r"\[[^\]]*\]", ".[]", col["jsonPath"])
            for part in path.lstrip(".").split("."):
                if part in {"creationTimestamp"}:
                    break
                node = node["items"] if part == "[]" else node["properties"][part]


def test_unsupported_schema_is_reported() -> None:
    with pytest.raises(crdgen.UnsupportedSchemaError):
        crdgen.structural({"oneOf": [{"type": "string"}, {"type": "integer"}]}, {})


def test_structural_conversion_rules() -> None:
    """The mapping rules on a synthetic model, independent of today's contract."""
    from typing import Annotated, Literal  # noqa: PLC0415

    from pydantic import BaseModel, Field, JsonValue  # noqa: PLC0415

    class Inner(BaseModel):
        """Inner docstring."""

        flag: bool = True

    class Sample(BaseModel):
        optional: int | None = Field(default=None, ge=1)
        count_or_percent: Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=r"^\d+%$")]
        positive: float = Field(gt=0)
        constant: Literal["x"] = "x"
        choice: Literal["a", "b"] = "a"
        inner: Inner = Field(default_factory=Inner, description="field description wins")
        anything: JsonValue = None
        mapping: dict[str, int] = Field(default_factory=dict)
        items: list[Inner] = Field(default_factory=list, max_length=3)

    schema = crdgen.model_schema(Sample)
    props = schema["properties"]
    assert schema["required"] == ["count_or_percent", "positive"]
    assert props["optional"] == {"type": "integer", "minimum": 1, "nullable": True}
    assert props["count_or_percent"] == {
        "x-kubernetes-int-or-string": True,
        "minimum": 0,
        "pattern": r"^\d+%$",
    }
    assert props["positive"] == {"type": "number", "minimum": 0, "exclusiveMinimum": True}
    # A model default is named in the description (kubectl explain), not stored.
    assert props["constant"] == {"type": "string", "enum": ["x"], "description": 'Default: "x".'}
    assert props["choice"]["enum"] == ["a", "b"]
    assert props["inner"]["description"] == "field description wins"
    assert props["inner"]["properties"] == {
        "flag": {"type": "boolean", "description": "Default: true."}
    }
    assert props["anything"] == {"x-kubernetes-preserve-unknown-fields": True, "nullable": True}
    assert props["mapping"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["items"]["maxItems"] == 3
    assert props["items"]["items"]["description"] == "Inner docstring."
    assert "title" not in str(schema)
    assert "'default':" not in str(schema)


def test_unmappable_unions_fail_loudly() -> None:
    from pydantic import BaseModel  # noqa: PLC0415

    class Bad(BaseModel):
        value: int | float

    with pytest.raises(crdgen.UnsupportedSchemaError):
        crdgen.model_schema(Bad)
