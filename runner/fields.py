"""Record fields as Spark columns: how key generators and the bucket index read a (possibly
dotted, nested) input field, in one place below both."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from runner.errors import UserError


def check_fields(schema: StructType, fields: tuple[str, ...], role: str) -> None:
    """Fail early, with the available names, when a configured field is not in the input."""
    for name in fields:
        current: StructType | None = schema
        for part in name.split("."):
            if not isinstance(current, StructType) or part not in current.fieldNames():
                available = ", ".join(schema.fieldNames())
                raise UserError(
                    f"{role} field '{name}' is not in the input; its columns are: {available}"
                )
            current = current[part].dataType  # type: ignore[assignment]


def field_value(name: str) -> Column:
    """A (possibly dotted, nested) field as a column."""
    return F.col(".".join(f"`{p}`" for p in name.split(".")))


def field_string(name: str) -> Column:
    """The string form of a field value (Hudi stringifies values with toString())."""
    return field_value(name).cast("string")
