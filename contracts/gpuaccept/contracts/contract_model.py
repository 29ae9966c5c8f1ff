"""Common configuration for every contract model."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ContractModel(BaseModel):
    """Strict, immutable, camelCase on the wire (as Kubernetes objects are).

    Unknown fields are an error, so a misspelled field in a policy or a report
    is reported instead of silently ignored. NaN and Infinity are refused in
    every number: a NaN threshold compares false both ways (it would pass
    everything), and the API server refuses a status that carries one.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        allow_inf_nan=False,
    )

    def to_wire(self) -> dict[str, object]:
        """The JSON-compatible dict as it travels (aliases, no unset optionals)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
