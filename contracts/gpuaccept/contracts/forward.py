"""Reading what a newer release stored (forward-compatible reads).

The contract models refuse unknown fields, so that a misspelled field in a
policy is reported. What the operator reads back from the cluster, a
NodeAcceptance's status and the report stored in it, may instead have been
written by a newer release (before a rollback) that added fields: those are
dropped, and the rest is read as it was, never reset. Only unknown fields are
dropped: a known field with a bad value still fails.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)
MAX_ROUNDS = 8  # unknown fields nested in unknown-free objects: one round per depth at most


def _without(data: Any, loc: tuple[int | str, ...]) -> Any:
    """``data`` without the item at ``loc`` (copied along the path only)."""
    if not loc:
        return data
    head, rest = loc[0], loc[1:]
    if isinstance(data, dict) and head in data:
        copy = dict(data)
        if rest:
            copy[head] = _without(data[head], rest)
        else:
            del copy[head]
        return copy
    if isinstance(data, list) and isinstance(head, int) and 0 <= head < len(data) and rest:
        copy_list = list(data)
        copy_list[head] = _without(data[head], rest)
        return copy_list
    return data


def read_forward(model: type[Model], data: Any) -> Model:
    """``model`` validated from ``data``, fields it does not know dropped.
    Raises :class:`~pydantic.ValidationError` for anything else."""
    for _ in range(MAX_ROUNDS):
        try:
            return model.model_validate(data)
        except ValidationError as error:
            unknown = [e["loc"] for e in error.errors() if e["type"] == "extra_forbidden"]
            if not unknown:
                raise
            for loc in unknown:
                data = _without(data, tuple(loc))
    return model.model_validate(data)
