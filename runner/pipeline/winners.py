"""The Spark half of a write: the batch, shuffled by bucket, with each key's winner marked.

Incoming rows are hash-partitioned by (partition path, bucket) and ranked per key by one
window: the greatest precombine value wins, ties go to the later input row. The window reuses
that partitioning (the bucket is a function of the key), and its sort leaves each task's rows
grouped by bucket and ordered by key, as the writer wants them. Stored rows are not shuffled:
the writer reads each bucket's file next to its incoming rows (runner/write/stored_bucket.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StructType

from runner.delta.schema import SchemaPlan
from runner.delta.snapshot import Group
from runner.pipeline.cdc_columns import is_delete
from runner.pipeline.quality import FATE, RULE, Verdicts, bucket_counts_and_verdicts
from runner.spec.model import Target
from runner.storage.meta_columns import (
    BUCKET,
    COMMIT_SEQNO,
    COMMIT_TIME,
    PARTITION_PATH,
    RECORD_KEY,
)
from runner.write import bulk_writer
from runner.write.bucket_merge import ACTION, DELETE, SEQ, MergeSettings
from runner.write.driver_merge import orderable


def merge_settings(target: Target) -> MergeSettings:
    return MergeSettings(
        operation=target.operation,
        precombine_field=target.precombine_field,
        merge_mode=target.merge_mode,
        filter_dupes=target.filter_dupes,
        merger=target.merger,
        cdc=target.cdc,
        scd=target.scd if target.cdc else None,
        # a change feed's events are compared by their sequence (runner/write/cdc_apply.py)
        skip_unchanged=target.skip_unchanged and target.cdc is None,
    )


def incoming_rows(
    keyed: DataFrame, target: Target, plan: SchemaPlan, instant: str, extra: Sequence[str] = ()
) -> DataFrame:
    """The batch in file layout plus the helper columns the merge needs (and `extra`)."""
    marker = is_delete(target, keyed.columns)
    data = plan.data_columns if target.operation != "delete" else []
    return keyed.select(
        F.lit(instant).alias(COMMIT_TIME),
        F.lit(None).cast("string").alias(COMMIT_SEQNO),
        RECORD_KEY,
        PARTITION_PATH,
        BUCKET,
        *data,
        F.monotonically_increasing_id().alias(SEQ),
        (marker if marker is not None else F.lit(False)).alias(DELETE),
        *extra,
    )


def single_pass(target: Target) -> bool:
    """bulk_insert keeping every row, unsorted, needs neither stored rows nor a shuffle:
    each input task writes its own rows (runner/write/bulk_writer.py). Sorted by key
    (target.bulk_insert_sort), it is a merge into empty buckets: shuffled by bucket, each
    bucket's rows written sorted in file groups as a new bucket's first files are."""
    return (
        target.operation == "bulk_insert"
        and not target.filter_dupes
        and target.bulk_insert_sort == "none"
    )


def bulk_rows(judged: DataFrame, plan: SchemaPlan) -> DataFrame:
    """The batch's columns with their verdicts, each task's rows sorted by bucket only
    (no exchange: the sort is local, as in Spark's own partitioned writes). The writer adds
    `_commit_time` and `_commit_seqno`: a constant need not cross the Arrow hand-off."""
    return judged.select(
        RECORD_KEY, PARTITION_PATH, BUCKET, *plan.data_columns, bulk_verdict()
    ).sortWithinPartitions(PARTITION_PATH, BUCKET)


def bulk_keys(judged: DataFrame) -> DataFrame:
    """What only Spark may compute of each row, and where the row is in its source file,
    in file order: the writer reads the rows themselves (runner/sources/file_rows.py). The
    bucket travels inside the row's place (bulk_writer.SOURCE_PLACE)."""
    place = F.col(BUCKET).cast("long") * (1 << bulk_writer.PLACE_BITS) + F.col(
        "_metadata.row_index"
    )
    return judged.select(
        F.col("_metadata.file_path").alias(bulk_writer.SOURCE_FILE),
        place.alias(bulk_writer.SOURCE_PLACE),
        RECORD_KEY,
        PARTITION_PATH,
        bulk_verdict(),
    )


def bulk_verdict() -> Column:
    """Null for a row to write; else its fate and rule(s) in one string."""
    fate_and_rule = F.concat_ws(bulk_writer.VERDICT_SEPARATOR, F.col(FATE), F.col(RULE))
    return F.when(F.col(FATE).isNotNull(), fate_and_rule).alias(bulk_writer.VERDICT)


def dedupes(target: Target) -> bool:
    """Whether the batch keeps one row per key (the winner), or every row."""
    return target.operation in ("upsert", "delete") or target.filter_dupes


def driver_frame(incoming: DataFrame, plan: SchemaPlan, extra: Sequence[str] = ()) -> DataFrame:
    """The rows a merge on the driver collects: as write_frame's, unshuffled and unranked;
    runner/write/driver_merge.py picks the winners (SEQ breaks ties as the window does)."""
    columns = [c for c in plan.file_schema.names if c in incoming.columns]
    return incoming.select(*columns, DELETE, SEQ, *extra)


# A batch Spark estimates at most this large (its source files' bytes, for a file source) is
# collected to the driver in one job, verdicts included: its bucket counts and verdicts are
# then counted there, not in a Spark aggregation of their own (about 0.1 s, a tenth of a
# small upsert). A larger batch keeps the counting job: collecting one that turns out too
# large for a merge on the driver would cost more than the job saves.
ONE_PASS_MAX_BYTES = 32 * 2**20


def one_pass_frame(
    judged: DataFrame, target: Target, plan: SchemaPlan, instant: str
) -> DataFrame | None:
    """Every row of a batch small enough to collect whole (see ONE_PASS_MAX_BYTES), as
    driver_frame has it, with its verdict columns; None for a batch that may be larger or
    that no merge on the driver takes."""
    if target.driver_merge.max_rows == 0:
        return None
    if estimated_bytes(judged) > ONE_PASS_MAX_BYTES:
        return None
    verdict = (FATE, RULE)
    return driver_frame(incoming_rows(judged, target, plan, instant, verdict), plan, verdict)


def estimated_bytes(frame: DataFrame) -> int:
    """Spark's estimate of a frame's size (its source files' bytes, for a file source)."""
    return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))


def split_verdicts(rows: pa.Table) -> tuple[pa.Table, dict[Group, int], Verdicts]:
    """A batch from one_pass_frame, collected: the rows to write (verdict columns dropped),
    their count per (partition path, bucket), and the rejected rows per fate and rule, as
    the counting job would have found them."""
    counts = rows.group_by([PARTITION_PATH, BUCKET, FATE, RULE], use_threads=False).aggregate(
        [([], "count_all")]
    )
    groups, verdicts = bucket_counts_and_verdicts(
        (r[PARTITION_PATH], r[BUCKET], r[FATE], r[RULE], r["count_all"]) for r in counts.to_pylist()
    )
    kept = rows.filter(pc.is_null(rows.column(FATE))).drop_columns([FATE, RULE])
    return kept, groups, verdicts


def why_not_on_driver(
    target: Target, batch: StructType, rows: int, stored_bytes: int, master: str
) -> str | None:
    """Why the batch goes through a Spark write job instead of a merge on the driver
    (runner/write/driver_merge.py); None: it is merged on the driver."""
    limits = target.driver_merge
    if rows > limits.max_rows:
        return f"{rows:,} rows to write, driver_merge.max_rows is {limits.max_rows:,}"
    local = master.startswith("local")
    if not local and stored_bytes > limits.max_stored_mib * 2**20:
        return (
            f"the touched buckets hold {stored_bytes / 2**20:,.0f} MiB, "
            f"driver_merge.max_stored_mib is {limits.max_stored_mib:,} on a cluster"
        )
    pre = target.precombine_field
    if dedupes(target) and pre and pre in batch.names:
        spark_type = batch[pre].dataType
        try:
            arrow_type = to_arrow_type(spark_type, timezone="UTC")
        except TypeError:  # a type Arrow has no match for
            arrow_type = pa.null()
        if not orderable(arrow_type):
            return f"precombine_field {pre} is a {spark_type.simpleString()}"
    return None


def _newest_first(target: Target) -> list[Column]:
    """A key's rows, newest first: greatest precombine, ties to the later input row."""
    order = [F.col(target.precombine_field).desc_nulls_last()] if target.precombine_field else []
    return [*order, F.col(SEQ).desc()]


def _winner(target: Target) -> Column:
    """True for the batch's winner per key, its newest row."""
    window = Window.partitionBy(PARTITION_PATH, BUCKET, RECORD_KEY).orderBy(*_newest_first(target))
    return F.row_number().over(window) == 1


def write_frame(
    incoming: DataFrame, target: Target, plan: SchemaPlan, partitions: int
) -> DataFrame:
    """Rows for the writer: grouped by (partition path, bucket), sorted by key, marked
    `candidate` or `duplicate` (insert and bulk_insert keep every row unless filter_dupes)."""
    rows = incoming.repartition(partitions, PARTITION_PATH, BUCKET)
    action = (
        F.when(_winner(target), "candidate").otherwise("duplicate")
        if dedupes(target)
        else F.lit("candidate")
    )
    columns = [c for c in plan.file_schema.names if c in incoming.columns]
    # a merge of fields (runner/write/field_merge.py) reads each key's rows newest first
    newest_first = _newest_first(target) if merge_settings(target).merges_fields else []
    return (
        rows.withColumn(ACTION, action)
        .sortWithinPartitions(PARTITION_PATH, BUCKET, RECORD_KEY, *newest_first)
        .select(*columns, DELETE, ACTION)
    )
