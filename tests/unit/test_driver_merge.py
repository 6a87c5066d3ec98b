"""Where a batch is merged, and the driver's pick of each key's winner: no Spark needed."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from runner.pipeline.quality import FATE, RULE
from runner.pipeline.winners import split_verdicts, why_not_on_driver
from runner.spec.model import DriverMergeSpec, IndexSpec, KeyGenSpec, Target
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY
from runner.write.bucket_merge import ACTION, SEQ
from runner.write.driver_merge import mark_candidates

TARGET = Target(
    path="t",
    key_generator=KeyGenSpec("SIMPLE", ("id",), ("city",)),
    index=IndexSpec(4, ("id",)),
    precombine_field="ts",
)
BATCH = StructType([StructField("id", LongType()), StructField("ts", DoubleType())])
MIB = 2**20


def test_small_batches_merge_on_the_driver_and_large_ones_in_spark():
    assert why_not_on_driver(TARGET, BATCH, 1_000_000, 10_000 * MIB, "local[2]") is None
    assert why_not_on_driver(TARGET, BATCH, 1_000_001, 0, "local[2]") == (
        "1,000,001 rows to write, driver_merge.max_rows is 1,000,000"
    )
    off = dataclasses.replace(TARGET, driver_merge=DriverMergeSpec(max_rows=0))
    assert why_not_on_driver(off, BATCH, 1, 0, "local[2]") is not None


def test_a_batch_collected_whole_is_counted_as_the_counting_job_counts_it():
    """A small batch is collected with its verdicts in one job: the rows to write, their
    count per bucket and the rejected rows per fate and rule come from it on the driver."""
    batch = pa.table(
        {
            RECORD_KEY: ["1", "2", "3", "4", None, "6"],
            PARTITION_PATH: ["a", "a", "b", "a", None, "b"],
            BUCKET: pa.array([0, 0, 1, 0, None, 1], pa.int32()),
            "amount": [1.0, 2.0, -3.0, 4.0, 5.0, -6.0],
            FATE: [None, None, "quarantine", None, "fail", "quarantine"],
            RULE: [None, None, "positive", None, "key_generator", "positive, small"],
        }
    )

    rows, groups, verdicts = split_verdicts(batch)

    assert rows.column_names == [RECORD_KEY, PARTITION_PATH, BUCKET, "amount"]
    assert rows.column(RECORD_KEY).to_pylist() == ["1", "2", "4"]
    assert groups == {("a", 0): 3}
    assert verdicts.rows_read == 6
    assert verdicts.by_fate == {"quarantine": 2, "fail": 1}
    assert verdicts.by_rule == {"positive": 2, "small": 1, "key_generator": 1}


def test_on_a_cluster_a_large_rewrite_stays_on_the_executors():
    master = "spark://127.0.0.1:7077"
    assert why_not_on_driver(TARGET, BATCH, 100, 256 * MIB, master) is None
    assert why_not_on_driver(TARGET, BATCH, 100, 300 * MIB, master) == (
        "the touched buckets hold 300 MiB, driver_merge.max_stored_mib is 256 on a cluster"
    )


def test_a_precombine_field_pyarrow_cannot_order_as_spark_does_goes_to_spark():
    batch = StructType(
        [StructField("id", LongType()), StructField("ts", MapType(StringType(), LongType()))]
    )
    assert why_not_on_driver(TARGET, batch, 10, 0, "local[2]") == (
        "precombine_field ts is a map<string,bigint>"
    )
    insert = dataclasses.replace(TARGET, operation="insert")  # no winner to pick
    assert why_not_on_driver(insert, batch, 10, 0, "local[2]") is None


def _batch(keys: list[str], ts: list[float | None]) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "_partition_path": ["p"] * n,
            "_bucket": pa.array([0] * n, pa.int32()),
            "_record_key": keys,
            "ts": pa.array(ts, pa.float64()),
            SEQ: pa.array(range(n), pa.int64()),
            "row": range(n),
        }
    )


@pytest.mark.parametrize(
    ("ts", "winner"),
    [
        ([1.0, 3.0, 2.0], 1),  # the greatest value
        ([3.0, None, 3.0], 2),  # a tie goes to the later row; null is lowest
        ([float("inf"), float("nan"), 5.0], 1),  # NaN above every number, as in Spark
        ([None, None, None], 2),
    ],
)
def test_the_driver_picks_the_winner_sparks_window_picks(ts, winner):
    marked = mark_candidates(_batch(["k", "k", "k"], ts), "ts", dedupe=True)
    candidates = marked.filter(pa.compute.equal(marked.column(ACTION), "candidate"))
    assert candidates.column("row").to_pylist() == [winner]
    assert SEQ not in marked.column_names


def test_rows_come_out_in_key_order_and_without_dedupe_all_are_candidates():
    marked = mark_candidates(_batch(["b", "a", "b", "c"], [1.0] * 4), "ts", dedupe=False)
    assert marked.column("_record_key").to_pylist() == ["a", "b", "b", "c"]
    assert set(marked.column(ACTION).to_pylist()) == {"candidate"}
    deduped = mark_candidates(_batch(["b", "a", "b", "c"], [1.0] * 4), "ts", dedupe=True)
    assert deduped.column(ACTION).to_pylist() == [
        "candidate",
        "candidate",
        "duplicate",
        "candidate",
    ]


def test_a_delete_batch_without_the_precombine_column_keeps_one_row_per_key():
    batch = _batch(["b", "a", "b"], [1.0, 2.0, 3.0]).drop_columns(["ts"])
    marked = mark_candidates(batch, "ts", dedupe=True)
    assert marked.column(ACTION).to_pylist() == ["candidate", "candidate", "duplicate"]
    assert marked.column("row").to_pylist() == [1, 2, 0]  # ties: the later row wins


def test_a_key_in_two_buckets_has_a_winner_in_each():
    # a global key change (or a bucket count per partition) can put one record key in two
    # (partition path, bucket) groups: each group keeps its own winner
    batch = _batch(["k", "k", "k", "k"], [1.0, 2.0, 3.0, 4.0])
    batch = batch.set_column(0, "_partition_path", pa.array(["p", "q", "p", "q"]))
    batch = batch.set_column(1, "_bucket", pa.array([0, 0, 0, 1], pa.int32()))
    marked = mark_candidates(batch, "ts", dedupe=True)
    winners = marked.filter(pa.compute.equal(marked.column(ACTION), "candidate"))
    assert sorted(winners.column("row").to_pylist()) == [1, 2, 3]  # p/0: row 2 beats row 0
