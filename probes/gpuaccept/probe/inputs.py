"""Reading the probe's input files, with one-line errors.

Every error names the file, the field and the reason on one line, e.g.::

    profiles/bad.yaml: gpus.pcieMaxWidht: unknown field

and the CLI exits with code 2.
"""

import json
import os
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpuaccept.checks.policy import ProbePolicy
from gpuaccept.contracts.api import POLICY_KIND
from gpuaccept.contracts.probe_invocation import ENV_SIM_TIME_SCALE

M = TypeVar("M", bound=BaseModel)


class InputError(Exception):
    """A bad input file or value; the message is one line."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def shorten(text: str, limit: int = 40) -> str:
    """``text``, or its start and ``…`` when longer than ``limit`` (a hostile key or
    value must not make the error line megabytes long)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_validation_error(source: str, exc: ValidationError) -> str:
    """``source: field.path: reason`` for the first error (+ how many more)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = ".".join(shorten(str(part)) for part in first["loc"]) or "(top level)"
    if first["type"] == "extra_forbidden":
        reason = "unknown field"
    elif first["type"] == "missing":
        reason = "required field is missing"
    elif first["type"] == "value_error" and "error" in first.get("ctx", {}):
        reason = str(first["ctx"]["error"])  # a model validator's own message
    else:
        value = first.get("input")
        shown = (
            shorten(repr(value), 80)
            if isinstance(value, str | int | float | bool)
            else type(value).__name__
        )
        reason = f"{first['msg']} (got {shown})"
    more = (
        f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
        if len(errors) > 1
        else ""
    )
    return _one_line(f"{source}: {loc}: {reason}{more}")


MAX_INPUT_BYTES = 64 * 1024
"""The largest profile or policy the probe reads (the shipped ones are near 1 KiB)."""


def _read_bounded(path: Path) -> bytes:
    """At most :data:`MAX_INPUT_BYTES` of ``path``; a longer file is an error, also
    when it has no size (``/dev/zero``, a pipe)."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{path}: too large: over {MAX_INPUT_BYTES} bytes, the input file limit")
    return data


def decode_text(data: bytes, source: str) -> str:
    """UTF-8 text, or a one-line error naming the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{source}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        ) from None


def parse_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load`` with one-line errors, deep nesting included."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "invalid YAML"
        raise InputError(_one_line(f"{source}: not valid YAML{where}: {problem}")) from None
    except RecursionError:
        raise InputError(f"{source}: not valid YAML: nested too deeply") from None


def read_structured_file(path: Path) -> Any:
    """YAML (or JSON, which is YAML) from ``path``: at most :data:`MAX_INPUT_BYTES`
    of UTF-8 text."""
    return parse_yaml(decode_text(_read_bounded(path), str(path)), str(path))


def validate(model: type[M], data: Any, source: str) -> M:
    if not isinstance(data, dict):
        raise InputError(f"{source}: (top level): expected a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(describe_validation_error(source, exc)) from None


def _probe_policy_data(data: Any, source: str) -> tuple[Any, str]:
    """Accept a bare ProbePolicy, or a NodeAcceptancePolicy manifest (its ``spec.probe``)."""
    if isinstance(data, dict) and data.get("kind") == POLICY_KIND:
        spec = data.get("spec") or {}
        if not isinstance(spec, dict):
            raise InputError(f"{source}: spec: expected a mapping")
        return spec.get("probe") or {}, f"{source} (spec.probe)"
    return data, source


def load_policy(path: Path) -> ProbePolicy:
    data = read_structured_file(path)
    if data is None:
        return ProbePolicy()
    data, source = _probe_policy_data(data, str(path))
    return validate(ProbePolicy, data, source)


DEFAULT_POLICY_RESOURCE = "policies/default-h100-h200.yaml"


def default_policy() -> ProbePolicy:
    """What ``gpuaccept probe`` judges with when given no policy: the H100/H200
    figures of ``policies/default-h100-h200.yaml``, packaged with the probe.

    (An empty ``spec.probe`` in a NodeAcceptancePolicy means the contract's own
    defaults instead; the operator always passes its policy to the probe.)
    """
    resource = files("gpuaccept.probe").joinpath(DEFAULT_POLICY_RESOURCE)
    data = yaml.safe_load(resource.read_text())
    return validate(ProbePolicy, data, f"gpuaccept.probe/{DEFAULT_POLICY_RESOURCE}")


def policy_from_json(text: str, source: str = "GPUACCEPT_POLICY") -> ProbePolicy:
    if len(text.encode("utf-8", "surrogateescape")) > MAX_INPUT_BYTES:
        raise InputError(f"{source}: too large: over {MAX_INPUT_BYTES} bytes, the input file limit")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: not valid JSON: {exc.msg} at char {exc.pos}") from None
    except RecursionError:
        raise InputError(f"{source}: not valid JSON: nested too deeply") from None
    data, source = _probe_policy_data(data, source)
    return validate(ProbePolicy, data, source)


def env_count(name: str) -> int | None:
    """A count from the environment (None: unset or empty; InputError: not a count)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit():  # "²".isdigit() is true, int("²") fails
        raise InputError(f"{name}: not a non-negative integer (got {raw!r})")
    return int(raw)


MAX_SIM_TIME_SCALE = 10.0


def sim_time_scale() -> float:
    """How much of its profile's durations a simulated probe really takes (env
    :data:`ENV_SIM_TIME_SCALE`; 0 or unset: none, it only reports them)."""
    raw = os.environ.get(ENV_SIM_TIME_SCALE, "").strip()
    if not raw:
        return 0.0
    try:
        scale = float(raw)
    except ValueError:
        scale = -1.0
    if not 0 <= scale <= MAX_SIM_TIME_SCALE:  # NaN fails both
        raise InputError(
            f"{ENV_SIM_TIME_SCALE}: not a number from 0 to {MAX_SIM_TIME_SCALE:g} (got {raw!r})"
        )
    return scale
