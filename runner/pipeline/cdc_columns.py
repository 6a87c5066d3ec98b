"""The Spark side of a change feed (target.cdc): the checks on the batch's columns, each
event's delete flag, and the history columns SCD type 2 adds to the table. The events are
applied per bucket by the writer (runner/write/cdc_apply.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import BooleanType, StringType, StructType

from runner.errors import UserError
from runner.spec.debezium import unstored
from runner.spec.model import Target
from runner.storage.meta_columns import CHANGE_TYPE
from runner.write.driver_merge import orderable


def check_feed_columns(schema: StructType, target: Target) -> None:
    """The feed's columns are in the batch with types the writer can use, and the history
    columns are not (the runner computes them)."""
    cdc = target.cdc
    if cdc is None:
        return
    names = schema.fieldNames()
    sequence = schema[cdc.sequence_by].dataType  # in the batch: checked as the precombine field
    try:
        arrow = to_arrow_type(sequence, timezone="UTC")
    except TypeError:  # a type Arrow has no match for
        arrow = pa.null()
    if not orderable(arrow) or isinstance(sequence, BooleanType):
        raise UserError(
            f"cdc.sequence_by '{cdc.sequence_by}' is a {sequence.simpleString()}, which cannot "
            "order events; use a number, string, date or timestamp column"
        )
    op = cdc.operation_column
    if op is not None:
        if op not in names:
            raise UserError(
                f"cdc.operation_column '{op}' is not in the input; its columns are: "
                f"{', '.join(names)}"
            )
        if not isinstance(schema[op].dataType, StringType):
            raise UserError(
                f"cdc.operation_column '{op}' must be a string column, not "
                f"{schema[op].dataType.simpleString()}; cast it in the transform"
            )
    if target.keeps_history:
        given = [c for c in target.scd.history_columns if c in names]
        if given:
            raise UserError(
                f"the input has column(s) {', '.join(given)}, which SCD type 2 computes; "
                "rename them in the transform, or name the history columns otherwise "
                "(target.scd.start_column, end_column, current_column)"
            )


def with_history_columns(batch: DataFrame, target: Target) -> DataFrame:
    """SCD type 2: the batch with the table's history columns, empty (the writer fills
    them): the start and end of a version are sequence_by values."""
    if not target.keeps_history:
        return batch
    assert target.cdc is not None
    sequence = batch.schema[target.cdc.sequence_by].dataType
    scd = target.scd
    return batch.select(
        "*",
        F.lit(None).cast(sequence).alias(scd.start_column),
        F.lit(None).cast(sequence).alias(scd.end_column),
        F.lit(None).cast("boolean").alias(scd.current_column),
    )


def is_delete(target: Target, columns: Sequence[str] = ()) -> Column | None:
    """True for an event that deletes its key; None when no row deletes (no delete marker,
    no operation column, no change feed's `_change_type` among `columns`: a chained
    pipeline's source hands on its deletes so, runner/sources/delta_changes.py)."""
    cdc = target.cdc
    handed_on = F.col(CHANGE_TYPE) == "delete" if CHANGE_TYPE in columns else None
    if cdc is not None:
        if cdc.operation_column is None:
            return F.coalesce(handed_on, F.lit(False)) if handed_on is not None else None
        return F.coalesce(F.col(cdc.operation_column).isin(*cdc.delete_values), F.lit(False))
    marker = F.coalesce(F.col(target.delete_marker), F.lit(False)) if target.delete_marker else None
    if handed_on is not None:
        handed_on = F.coalesce(handed_on, F.lit(False))
        return handed_on if marker is None else marker | handed_on
    return marker


def not_stored(target: Target, columns: Sequence[str]) -> list[str]:
    """Input columns (of `columns`) that say what to do with a row, or are a Debezium
    event's metadata (runner/spec/debezium.py), and are not stored."""
    handed_on = [CHANGE_TYPE]  # a chained source's change type (runner/sources/delta_changes.py)
    if target.cdc is not None:
        op = target.cdc.operation_column
        says = [op] if op else handed_on
    else:
        says = [target.delete_marker, *handed_on] if target.delete_marker else handed_on
    metadata = unstored(columns) if target.fed_by_debezium else []
    return list(dict.fromkeys([*says, *metadata]))
