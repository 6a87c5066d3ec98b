"""Hudi's write semantics as one DataFrame: every row of the touched buckets, with an `_action`.

Incoming rows and the stored rows of the buckets they touch are unioned, hash-partitioned by
(partition path, bucket) and looked at through one window per (partition path, bucket, record
key). The bucket is a function of the key, so the window needs no second shuffle and the rows
arrive at the writer grouped by bucket and sorted by key.

Actions: insert, update, keep are written; duplicate, stale, deleted, delete_missing are
counted; replaced, delete_hit, delete_dup only disappear.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from runner.ops.keys import BUCKET, PARTITION_PATH, RECORD_KEY
from runner.spec.model import Target
from runner.table.schema import SchemaPlan
from runner.table.writer import ACTION

SRC = "__runner_src"  # 1 incoming, 0 stored
SEQ = "__runner_seq"  # input order, for ties
DELETE = "__runner_delete"


def _incoming() -> Column:
    return F.col(SRC) == 1


def _stored() -> Column:
    return F.col(SRC) == 0


def incoming_rows(keyed: DataFrame, target: Target, plan: SchemaPlan, instant: str) -> DataFrame:
    """The batch in file layout plus the helper columns the merge needs."""
    marker = F.coalesce(F.col(target.delete_marker), F.lit(False)) if target.delete_marker else None
    data = [] if target.operation == "delete" else plan.data_columns
    return keyed.select(
        F.lit(instant).alias("_commit_time"),
        F.lit(None).cast("string").alias("_commit_seqno"),
        RECORD_KEY,
        PARTITION_PATH,
        BUCKET,
        *data,
        F.lit(1).alias(SRC),
        F.monotonically_increasing_id().alias(SEQ),
        (marker if marker is not None else F.lit(False)).alias(DELETE),
    )


def stored_rows(stored: DataFrame) -> DataFrame:
    return stored.select(
        "*", F.lit(0).alias(SRC), F.lit(-1).cast("long").alias(SEQ), F.lit(False).alias(DELETE)
    )


def _key_window() -> Window:
    return Window.partitionBy(PARTITION_PATH, BUCKET, RECORD_KEY)


def _rank(target: Target) -> Column:
    """1 for the batch's winner per key: greatest precombine, ties to the later input row."""
    order = [F.col(SRC).desc()]
    if target.precombine_field:
        order.append(F.col(target.precombine_field).desc_nulls_last())
    order.append(F.col(SEQ).desc())
    return F.row_number().over(_key_window().orderBy(*order))


def _any(condition: Column) -> Column:
    return F.max(F.when(condition, 1).otherwise(0)).over(_key_window()) == 1


def _upsert_actions(df: DataFrame, target: Target) -> DataFrame:
    w = _key_window()
    df = df.withColumn("__runner_rank", _rank(target)).withColumn(
        "__runner_has_stored", _any(_stored())
    )
    winner = _incoming() & (F.col("__runner_rank") == 1)
    if target.merge_mode == "commit_time" or not target.precombine_field:
        wins = F.lit(True)
    else:
        pc = F.col(target.precombine_field)
        stored_pc = F.max(F.when(_stored(), pc)).over(w)
        wins = ~F.col("__runner_has_stored") | stored_pc.isNull() | (pc >= stored_pc)
    df = df.withColumn("__runner_wins", winner & F.coalesce(wins, F.lit(False)))
    df = df.withColumn("__runner_key_won", _any(F.col("__runner_wins"))).withColumn(
        "__runner_key_deleted", _any(F.col("__runner_wins") & F.col(DELETE))
    )
    action = (
        F.when(_incoming() & (F.col("__runner_rank") > 1), "duplicate")
        .when(_incoming() & ~F.col("__runner_wins"), "stale")
        .when(
            _incoming() & F.col(DELETE),
            F.when(F.col("__runner_has_stored"), "delete_hit").otherwise("delete_missing"),
        )
        .when(_incoming(), F.when(F.col("__runner_has_stored"), "update").otherwise("insert"))
        .when(F.col("__runner_key_deleted"), "deleted")
        .when(F.col("__runner_key_won"), "replaced")
        .otherwise("keep")
    )
    return df.withColumn(ACTION, action)


def _insert_actions(df: DataFrame, target: Target) -> DataFrame:
    if not target.filter_dupes:
        return df.withColumn(ACTION, F.when(_incoming(), "insert").otherwise("keep"))
    df = df.withColumn("__runner_rank", _rank(target)).withColumn(
        "__runner_has_stored", _any(_stored())
    )
    action = (
        F.when(
            _incoming() & ((F.col("__runner_rank") > 1) | F.col("__runner_has_stored")), "duplicate"
        )
        .when(_incoming(), "insert")
        .otherwise("keep")
    )
    return df.withColumn(ACTION, action)


def _delete_actions(df: DataFrame, target: Target) -> DataFrame:
    df = df.withColumn("__runner_rank", _rank(target)).withColumn(
        "__runner_has_stored", _any(_stored())
    )
    df = df.withColumn("__runner_has_incoming", _any(_incoming()))
    action = (
        F.when(_incoming() & (F.col("__runner_rank") > 1), "delete_dup")
        .when(
            _incoming(),
            F.when(F.col("__runner_has_stored"), "delete_hit").otherwise("delete_missing"),
        )
        .when(F.col("__runner_has_incoming"), "deleted")
        .otherwise("keep")
    )
    return df.withColumn(ACTION, action)


_ACTIONS = {
    "upsert": _upsert_actions,
    "insert": _insert_actions,
    "delete": _delete_actions,
    "bulk_insert": lambda df, target: df.withColumn(ACTION, F.lit("insert")),
}


def write_frame(
    incoming: DataFrame,
    stored: DataFrame | None,
    target: Target,
    plan: SchemaPlan,
    partitions: int,
) -> DataFrame:
    """Rows to hand to the writer: grouped by (partition path, bucket), sorted by key."""
    rows = incoming
    if stored is not None:
        rows = rows.unionByName(stored_rows(stored), allowMissingColumns=True)
    rows = rows.repartition(partitions, PARTITION_PATH, BUCKET)
    rows = _ACTIONS[target.operation](rows, target)
    return rows.sortWithinPartitions(PARTITION_PATH, BUCKET, RECORD_KEY).select(
        *plan.file_schema.names, ACTION
    )
