"""A chained pipeline's input from its source table's change data feed: each key's last
change since the checkpoint, deletes included.

The changes of the versions after the checkpoint (runner/delta/change_feed.py) are read
with pyarrow on the driver: a run reads what a few source commits changed, not the table.
Pre-images are left out, and of a key's changes (its `_record_key` and `_partition_path` in
the source) only the last one is kept: the newest version's, and in a version the post-image
or insert over a delete (a key moved within its history). What stays carries the change
feed's columns: `_change_type` (insert, update_postimage, delete), `_commit_version` and
`_commit_timestamp`. A `delete` row is the deleted row as it was stored; the pipeline turns
it into a delete of its key (runner/pipeline/cdc_columns.py is_delete). A source table
keeping a history (SCD type 2) has several rows per key: every change but the pre-images
is handed on then.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import structlog
from pyspark.sql import DataFrame, SparkSession

from runner.delta.change_feed import ChangePlan, read_changes
from runner.storage.location import locate
from runner.storage.meta_columns import CHANGE_TYPE, COMMIT_VERSION, PARTITION_PATH, RECORD_KEY

log = structlog.get_logger(__name__)

_ROW = "__runner_row"


def read_source_changes(spark: SparkSession, uri: str, plan: ChangePlan) -> DataFrame:
    """The source's changes in `plan`, one per key, as a DataFrame."""
    from pyspark.sql.pandas.types import from_arrow_schema

    changes = last_changes(read_changes(locate(uri), plan))
    log.info(
        "source_changes_read",
        source=uri,
        versions=f"{plan.first}..{plan.last}",
        rows=changes.num_rows,
        deletes=pc.sum(pc.equal(changes.column(CHANGE_TYPE), "delete")).as_py() or 0,
    )
    schema = from_arrow_schema(changes.schema)
    if not changes.num_rows:
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(changes, schema=schema)


def last_changes(changes: pa.Table) -> pa.Table:
    """Each key's last change, pre-images left out; every one but the pre-images when the
    rows have no record key (not a runner table) or a key has several live rows."""
    changes = changes.filter(pc.not_equal(changes.column(CHANGE_TYPE), "update_preimage"))
    names = changes.column_names
    if RECORD_KEY not in names or PARTITION_PATH not in names or not changes.num_rows:
        return changes
    # in a version a key's delete comes before its insert or post-image: rank them so
    rank = pc.if_else(pc.equal(changes.column(CHANGE_TYPE), "delete"), 0, 1)
    order = pc.sort_indices(
        pa.table(
            {
                "version": changes.column(COMMIT_VERSION),
                "rank": rank,
                _ROW: pa.array(np.arange(changes.num_rows)),
            }
        ),
        sort_keys=[("version", "ascending"), ("rank", "ascending"), (_ROW, "ascending")],
    )
    ordered = changes.take(order).append_column(_ROW, pa.array(np.arange(changes.num_rows)))
    if _keeps_history(ordered):
        return ordered.drop_columns([_ROW])
    last = ordered.group_by([RECORD_KEY, PARTITION_PATH]).aggregate([(_ROW, "max")])
    kept = pc.sort_indices(last.column(f"{_ROW}_max"))
    return ordered.take(last.column(f"{_ROW}_max").take(kept)).drop_columns([_ROW])


def _keeps_history(changes: pa.Table) -> bool:
    """A key with two live changes in one version: the source keeps several rows per key."""
    upserts = changes.filter(pc.not_equal(changes.column(CHANGE_TYPE), "delete"))
    per_version = upserts.group_by([RECORD_KEY, PARTITION_PATH, COMMIT_VERSION]).aggregate(
        [(_ROW, "count")]
    )
    return bool(len(per_version) and pc.max(per_version.column(f"{_ROW}_count")).as_py() > 1)
