"""Values cast one by one to the table's types (target.on_schema_mismatch fail or quarantine).

An input column whose type the table does not take (a string where the table stores a long,
a long where it stores an int) is cast to the table's type in the plan, value by value. A
value that does not fit is never written as a null: TYPE_ERROR says which column, which
value and why, and the row gets the spec's fate (runner/pipeline/quality.py add_verdicts).

A value fits when Spark's try_cast gives a value and, for a number, a date or a time, that
value cast back gives the input again: an overflow gives null, and 1.5 cast to a long (1),
a decimal rounded, a time dropped from a timestamp come back different. A string fits when
it parses as the table's type and says no more than the value holds (no digits past a
decimal's scale, no time of day for a date, no number past a double's range). Which types
may be cast at all is runner/delta/schema_evolution.py `castable`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from runner.delta.schema_evolution import ValueCast

TYPE_ERROR = "__runner_type_error"  # null, or why a value of the row does not fit its column
UNCAST = "__runner_uncast_"  # + a column's name: its input value, as the quarantine records it
_TEXT_TYPES = ("string", "binary")
_SHOWN_CHARS = 80  # of a value, in the reason


def cast_to_table(batch: DataFrame, casts: Sequence[ValueCast]) -> DataFrame:
    """`batch` with each cast column in the table's type (null where the value does not
    fit), its input value kept beside it, and TYPE_ERROR."""
    if not casts:
        return batch
    columns: dict[str, Column] = {}
    errors = []
    for cast in casts:
        value = F.col(f"`{cast.column}`")
        converted = value.try_cast(cast.to_type)
        fits = converted.isNotNull()
        if cast.from_type not in _TEXT_TYPES:
            fits = fits & converted.cast(cast.from_type).eqNullSafe(value)
        else:
            fits = fits & _text_kept(cast.to_type, value, converted)
        errors.append(F.when(value.isNotNull() & ~fits, _reason(cast, value)))
        columns[UNCAST + cast.column] = value
        columns[cast.column] = F.when(fits, converted)
    columns[TYPE_ERROR] = F.nullif(F.concat_ws("; ", *errors), F.lit(""))
    # one withColumns: every expression reads the input's columns, before any is replaced
    return batch.withColumns(columns)


def _text_kept(to_type: str, text: Column, converted: Column) -> Column:
    """A text that parses may still lose what it says: digits past a decimal's scale
    ("1.239" for decimal(5,2)), a time of day for a date, a number past a double's range
    (1e400, read as infinity)."""
    if to_type.startswith("decimal"):
        exact = text.try_cast("decimal(38,18)")
        return exact.isNull() | (converted.cast("decimal(38,18)") == exact)
    if to_type == "date":
        moment = text.try_cast("timestamp_ntz")
        return moment.isNull() | (converted.cast("timestamp_ntz") == moment)
    if to_type in ("double", "float"):
        infinite = converted.cast("double").isin(float("inf"), float("-inf"))
        said = F.lower(F.trim(text)).rlike("^[+-]?inf(inity)?$")
        return ~infinite | said
    return F.lit(True)


def _reason(cast: ValueCast, value: Column) -> Column:
    """`column n: long value '1099511627776' does not fit the table's integer (...)`"""
    text = value.cast("string")
    long_text = F.concat(F.substring(text, 1, _SHOWN_CHARS), F.lit("..."))
    shown = F.when(F.length(text) > _SHOWN_CHARS, long_text).otherwise(text)
    why = (
        f"is not a valid {cast.to_type}"
        if cast.from_type in _TEXT_TYPES
        else f"does not fit the table's {cast.to_type} (out of range, or it would lose digits)"
    )
    prefix = f"column {cast.column}: {cast.from_type} value '"
    return F.concat(F.lit(prefix), shown, F.lit(f"' {why}"))
