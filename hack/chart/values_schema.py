"""Writes the `defaultPolicy` part of charts/gpuaccept/values.schema.json from the
NodeAcceptancePolicy CRD's openAPIV3Schema (crds/, what `make crds` generates), so
that `helm install` refuses a misspelled or mistyped policy field with the CRD's
own rules. Reads the CRD YAML only (no gpuaccept import).

OpenAPI v3 (a CRD's structural schema) to JSON Schema (Helm's values schema):

- ``nullable: true``: the type (and an ``enum``) also allows null;
- ``x-kubernetes-int-or-string``: an integer or a string;
- ``exclusiveMinimum: true`` with ``minimum: x`` (OpenAPI 3.0) becomes
  ``exclusiveMinimum: x`` (JSON Schema), and the same for the maximum;
- ``x-kubernetes-validations`` (CEL) and the other ``x-kubernetes-*`` keys are
  dropped: the API server still applies them when the policy is created;
- an object with ``properties`` and no ``additionalProperties`` gets
  ``additionalProperties: false``: the API server would prune an unknown field
  silently, the values schema refuses it (a typo fails `helm install`).

The chart's own keys beside the spec (``enabled``, ``name``) and its
``nodeSelector`` (a key set to null drops a default one; at least one key) are
kept from CHART_KEYS below.

    python3 hack/chart/values_schema.py          rewrite values.schema.json
    python3 hack/chart/values_schema.py --check  exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "gpuaccept.io_nodeacceptancepolicies.yaml"
VALUES_SCHEMA = ROOT / "charts" / "gpuaccept" / "values.schema.json"

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Keys of values.defaultPolicy that are the chart's, not the CRD's.
CHART_KEYS: dict[str, Any] = {
    "enabled": {"type": "boolean", "description": "Install the default NodeAcceptancePolicy."},
    "name": {
        "type": "string",
        "pattern": DNS_SUBDOMAIN,
        "maxLength": 253,
        "minLength": 1,
        "description": "metadata.name of the policy.",
    },
}
NODE_SELECTOR: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {"type": ["string", "null"]},
    "minProperties": 1,
    "description": (
        "matchLabels of the governed nodes (at least one: a policy never governs every "
        "node); set a key to null to drop a default one."
    ),
}
DROPPED = {"x-kubernetes-validations", "x-kubernetes-preserve-unknown-fields"}


def to_json_schema(node: Any) -> Any:
    """One OpenAPI v3 schema node as JSON Schema (recursively)."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROPPED or key in {"nullable", "x-kubernetes-int-or-string"}:
            continue
        if key in {"properties", "patternProperties"}:
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in {"items", "additionalProperties", "not"} or key in {"anyOf", "oneOf", "allOf"}:
            out[key] = to_json_schema(value)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    _exclusive_bounds(out)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if node.get("nullable"):
        _allow_null(out)
    return out


def _exclusive_bounds(out: dict[str, Any]) -> None:
    """OpenAPI 3.0's ``exclusiveMinimum: true`` flag as JSON Schema's number."""
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(out.get(exclusive), bool) and out.pop(exclusive) and bound in out:
            out[exclusive] = out.pop(bound)


def _allow_null(out: dict[str, Any]) -> None:
    if "type" in out:
        out["type"] = [out["type"], "null"]
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    if "anyOf" in out:
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]


def policy_spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def default_policy_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """values.defaultPolicy: the chart's keys, then every field of the policy's spec."""
    spec = to_json_schema(policy_spec_schema(crd))
    properties = {**CHART_KEYS, **spec["properties"], "nodeSelector": NODE_SELECTOR}
    return {
        "type": "object",
        "additionalProperties": False,
        "description": (
            "The default NodeAcceptancePolicy: enabled, name, and any field of its spec "
            "(docs/policy.md). Generated from the CRD by hack/chart/values_schema.py."
        ),
        "properties": properties,
        "required": ["enabled", "name", "dryRun"],
    }


def rendered(schema_text: str, crd_text: str) -> str:
    """values.schema.json with its defaultPolicy generated from the CRD."""
    schema = json.loads(schema_text)
    schema["properties"]["defaultPolicy"] = default_policy_schema(yaml.safe_load(crd_text))
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when stale")
    args = parser.parse_args(argv)
    current = VALUES_SCHEMA.read_text()
    wanted = rendered(current, CRD.read_text())
    if args.check:
        if current != wanted:
            print(f"{VALUES_SCHEMA.relative_to(ROOT)}: stale; run make chart-docs")
            return 1
        return 0
    if current != wanted:
        VALUES_SCHEMA.write_text(wanted)
        print(f"wrote {VALUES_SCHEMA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
