"""The write stage: the new files of each touched bucket, one result row per bucket.

A merge runs the table type's bucket write (runner/write/bucket_write.py) either in a Spark
job (mapInArrow over the batch shuffled by bucket) or on driver threads over the batch
collected as Arrow; a re-merge after another writer's commit writes the clashing buckets
again. A bulk_insert's tasks write the rows they read, with no shuffle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import structlog
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from runner import faults
from runner.delta.schema import SchemaPlan
from runner.delta.snapshot import Group
from runner.jvm.session import ARROW_BATCH_ROWS, ARROW_BATCH_ROWS_SETTING, session_settings
from runner.pipeline.bucket_plan import BucketPlan
from runner.pipeline.context import RunContext
from runner.pipeline.winners import (
    bulk_keys,
    bulk_rows,
    dedupes,
    driver_frame,
    incoming_rows,
    merge_settings,
    write_frame,
)
from runner.sources.splits import balanced_split_settings
from runner.storage.key_filter import written_for
from runner.storage.meta_columns import BUCKET, PARTITION_PATH
from runner.storage.parquet_rows import ParquetRows
from runner.write.bucket_write import WriteRequest, bucket_write, written_files
from runner.write.bulk_writer import BULK_RESULT_SCHEMA, PLACE_BITS, BulkJob
from runner.write.driver_merge import mark_candidates, write_on_driver
from runner.write.field_merge import merger_error_in
from runner.write.uncommitted import remove_files
from runner.write.writer import RESULT_SCHEMA

# Spark measures the Arrow batch it is filling after every row unless the byte limit is
# exactly Int.MaxValue (BatchedPythonArrowInput): a fifth of the JVM's time in a bulk load's
# key stream. Those rows are a few narrow columns, so a row limit bounds a batch alone: the
# spec's, where it is one (a limit of 0 or less, or past MAX_NARROW_BATCH_ROWS, gets the
# runner's ARROW_BATCH_ROWS). Whole rows, which can be wide, keep the byte limit.
MAX_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
MAX_NARROW_BATCH_ROWS = 1_000_000

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class MergeInput:
    """What every write round of a merge reads: the rows to write and their schema."""

    spark: SparkSession
    keyed: DataFrame  # the batch's rows to write (no rejected row)
    schema: SchemaPlan


def write_buckets(
    ctx: RunContext,
    merge: MergeInput,
    plan: BucketPlan,
    collected: pa.Table | None = None,
    round_: int = 0,
) -> list[Row]:
    """A new file for each bucket of `plan` whose rows change; one result row each.
    A merge on the driver takes the `collected` rows of the batch when it has them;
    `round_` is 0 for the write, 1, 2, ... for each re-merge."""
    target, spark = ctx.target, merge.spark
    incoming = incoming_rows(merge.keyed, target, merge.schema, ctx.instant)
    request = WriteRequest(
        ctx.table,
        ctx.instant,
        merge.schema.file_schema,
        plan.file_ids(),
        stored={g: plan.stored[g] for g in plan.groups if g in plan.stored},
        merge=merge_settings(target),
        change_feed=plan.change_feed,
        fault=faults.requested(),
        file_group_bytes=target.group_bytes,
    )
    job = bucket_write(target).job(request)
    if plan.on_driver:
        if collected is None:
            collected = driver_frame(incoming, merge.schema).toArrow()
        marked = mark_candidates(collected, target.precombine_field, dedupes(target))
        sizes = {g: sum(f.size for f in files) for g, files in plan.stored.items()}
        written = write_on_driver(job, marked, plan.threads, round_, lambda g: sizes.get(g, 0))
        results = [Row(**r) for r in written]
    else:
        shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
        partitions = max(1, min(len(plan.groups), shuffle))
        frame = write_frame(incoming, target, merge.schema, partitions=partitions)
        try:
            results = frame.mapInArrow(job, _struct(RESULT_SCHEMA)).collect()
        except Exception as failure:
            theirs = merger_error_in(failure)  # the user's merger, in a Spark task
            if theirs is None:
                raise
            raise theirs from failure
    added = [f for r in results for f in written_files(r)]
    log.info("files_written", files=len(added), bytes=sum(f.size for f in added))
    return results


def rewrite_buckets(
    ctx: RunContext,
    merge: MergeInput,
    plan: BucketPlan,
    results: Sequence[Row],
    round_: int,
) -> list[Row]:
    """A re-merge: the buckets of `plan` (a subset of the write's, with their files as the
    other writer left them) written again; their first results' files are removed, and
    every other bucket keeps its result."""
    again = set(plan.groups)
    keys = [f"{pp}\x00{bucket}" for pp, bucket in again]
    subset = merge.keyed.where(
        F.concat_ws("\x00", F.col(PARTITION_PATH), F.col(BUCKET).cast("string")).isin(keys)
    )
    redone = write_buckets(ctx, MergeInput(merge.spark, subset, merge.schema), plan, None, round_)
    superseded = [
        path
        for r in results
        if _group(r) in again
        for path in (*(f.path for f in written_files(r)), r.dv_path, r.cdc_path)
        if path
    ]
    remove_files(ctx.table, superseded)
    return [r for r in results if _group(r) not in again] + redone


def write_bulk(
    ctx: RunContext,
    judged: DataFrame,
    schema: SchemaPlan,
    occupied: frozenset[str],
    source_columns: tuple[str, ...] | None,
) -> list[Row]:
    """bulk_insert without filter_dupes: each task writes its rows' buckets and counts the
    rows set aside (runner/write/bulk_writer.py). With `source_columns`, the tasks read
    those columns of the rows from the source files themselves."""
    job = BulkJob(
        ctx.table,
        ctx.instant,
        schema.file_schema,
        occupied,
        faults.requested(),
        ParquetRows(source_columns, most_rows=1 << PLACE_BITS) if source_columns else None,
        key_filters=written_for(ctx.target.table_type),
    )
    frame = bulk_keys(judged) if source_columns else bulk_rows(judged, schema)
    with session_settings(judged.sparkSession, bulk_job_settings(judged, bool(source_columns))):
        return frame.mapInArrow(job, _struct(BULK_RESULT_SCHEMA)).collect()


def bulk_job_settings(judged: DataFrame, keys_only: bool) -> dict[str, str]:
    """The Spark settings of a bulk load's one job: its input in equal tasks, a multiple of
    the cores (runner/sources/splits.py), large ones for a stream of keys alone, and its
    Arrow batches then bounded by their rows only."""
    spark = judged.sparkSession
    settings = balanced_split_settings(spark, judged, streamed=keys_only)
    if not keys_only:
        return settings
    rows = int(spark.conf.get(ARROW_BATCH_ROWS_SETTING) or 0)
    rows = rows if 0 < rows <= MAX_NARROW_BATCH_ROWS else ARROW_BATCH_ROWS
    return settings | {MAX_BATCH_BYTES: str(2**31 - 1), ARROW_BATCH_ROWS_SETTING: str(rows)}


def _group(result: Row) -> Group:
    return (result.partition_path, result.bucket)


def _struct(schema: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
