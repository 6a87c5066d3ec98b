"""Record fields as Spark columns: how key generators and the bucket index read a (possibly
dotted, nested) input field, in one place below both."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from runner.errors import UserError
from runner.spec.model import PipelineSpec

INPUT_COLUMNS = "the input's columns"


def columns_of(spec: PipelineSpec) -> str:
    """Which columns a run's batch has, for messages: a field missing from them is fixed in
    the transform, or in the source when there is none."""
    if spec.transform_sql:
        return "the transform's output columns"
    return f"the columns of source '{spec.sources[0].name}'"


def check_fields(
    schema: StructType, fields: tuple[str, ...], role: str, where: str = INPUT_COLUMNS
) -> None:
    """Fail early, with the available names, when a configured field is not in the input.

    `role` names what the field is to the spec (record key, partition, ...), `where` which
    columns were looked in (INPUT_COLUMNS, or columns_of(spec))."""
    for name in fields:
        current: StructType | None = schema
        parent = ""
        for part in name.split("."):
            if not isinstance(current, StructType) or part not in current.fieldNames():
                names = current.fieldNames() if isinstance(current, StructType) else []
                raise UserError(missing_field(role, name, [parent + n for n in names], where))
            current = current[part].dataType  # type: ignore[assignment]
            parent += f"{part}."


def missing_field(role: str, name: str, names: list[str], where: str) -> str:
    """The message for a field the spec names (`name`, as `role`) that is not among `names`
    (`where` says whose they are)."""
    listed = ", ".join(names) or "none"
    return f"the {role} field '{name}' is not among {where}: {listed}{case_hint(name, names)}"


def case_hint(name: str, names: list[str]) -> str:
    """A pointer to the name that differs from `name` only in case, or nothing."""
    other = next((n for n in names if n != name and n.lower() == name.lower()), None)
    return f"; did you mean '{other}'? names differ only in case" if other else ""


def field_value(name: str) -> Column:
    """A (possibly dotted, nested) field as a column."""
    return F.col(".".join(f"`{p}`" for p in name.split(".")))


def field_string(name: str) -> Column:
    """The string form of a field value (Hudi stringifies values with toString())."""
    return field_value(name).cast("string")
