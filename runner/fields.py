"""Record fields as Spark columns: how key generators and the bucket index read a (possibly
dotted, nested) input field, in one place below both."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType, TimestampNTZType, TimestampType

from runner.errors import UserError
from runner.spec.model import PipelineSpec

INPUT_COLUMNS = "the input's columns"
_UNNAMED = re.compile(r"_c\d+")  # Spark's names for a CSV file's columns without a header


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
    hint = case_hint(name, names) or header_hint(names)
    return f"the {role} field '{name}' is not among {where}: {listed}{hint}"


def header_hint(names: list[str]) -> str:
    """What to set when `names` are Spark's for a CSV file read without its header (_c0,
    _c1, ...; Hudi's CSV source reads none either unless told), or nothing."""
    if not names or not all(_UNNAMED.fullmatch(n) for n in names):
        return ""
    return (
        "; those are Spark's names for the columns of a CSV file read without its header: "
        "set the source's options.header: true (or declare its schema:)"
    )


def case_hint(name: str, names: list[str]) -> str:
    """A pointer to the name that differs from `name` only in case, or nothing."""
    other = next((n for n in names if n != name and n.lower() == name.lower()), None)
    return f"; did you mean '{other}'? names differ only in case" if other else ""


def field_value(name: str) -> Column:
    """A (possibly dotted, nested) field as a column."""
    return F.col(".".join(f"`{p}`" for p in name.split(".")))


def field_type(schema: StructType, name: str) -> DataType:
    """The type of a (possibly dotted, nested) field of `schema` (checked to exist)."""
    current: DataType = schema
    for part in name.split("."):
        assert isinstance(current, StructType)
        current = current[part].dataType
    return current


@dataclass(frozen=True)
class FieldStrings:
    """The strings a batch's field values become in record keys, partition paths and the
    bucket hash: one form for all three, so a key read back hashes to its bucket.

    Hudi stringifies the value its Avro conversion gives (toString()), which Spark's cast
    matches except for timestamps: `timestamp` and `timestamp_ntz` values are their epoch
    microseconds (`1483005240000000`), as Hudi's insert and upsert write them, unless
    `logical_timestamps` (Hudi's keygenerator.consistent.logical.timestamp.enabled) renders
    a `timestamp` as java.sql.Timestamp prints it (`2016-12-29 09:54:00.0`, in the session
    time zone where Hudi uses the JVM's). Without a schema every value is Spark's cast.
    """

    schema: StructType | None = None
    logical_timestamps: bool = False

    def __call__(self, name: str) -> Column:
        value = field_value(name)
        data_type = field_type(self.schema, name) if self.schema is not None else None
        if isinstance(data_type, TimestampType):
            if self.logical_timestamps:
                text = value.cast("string")  # the fraction without trailing zeros, as Java
                return F.when(text.contains("."), text).otherwise(F.concat(text, F.lit(".0")))
            return F.unix_micros(value).cast("string")
        if isinstance(data_type, TimestampNTZType):
            return epoch_micros_ntz(value).cast("string")
        return value.cast("string")


CAST_STRINGS = FieldStrings()  # every value as Spark casts it: no schema at hand


def epoch_micros_ntz(value: Column) -> Column:
    """Microseconds from 1970-01-01 00:00 to a TIMESTAMP_NTZ wall time (no time zone)."""
    return F.timestamp_diff("MICROSECOND", F.expr("TIMESTAMP_NTZ'1970-01-01 00:00:00'"), value)
