"""Upsert, insert, bulk_insert and delete against a pandas reference, on real Delta tables."""

from __future__ import annotations

import random

import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest

from runner.delta.spark_read import read_table as spark_read_table
from runner.pipeline import judge as judge_stage
from runner.pipeline import winners as merge_ops
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from runner.write import stored_bucket
from tests.delta_spark import delta_spark_ready, read_with_delta_spark
from tests.helpers import (
    NEVER_REWRITE,
    check_merge_place,
    merge_place,
    read_table,
    write_batch,
    write_spec,
)

DATA_COLUMNS = ["id", "city", "ts", "amount"]
CITIES = ["ams", "sf", "nyc"]


def _target(operation: str, table_type: str = "COPY_ON_WRITE", **extra) -> dict:
    mor = {"compaction": NEVER_REWRITE} if table_type == "MERGE_ON_READ" else {}
    return {
        "operation": operation,
        "table_type": table_type,
        **mor,
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
        "index": {"buckets": 4},
        **extra,
    }


class Reference:
    """The expected table, as rows in pandas, with Hudi's semantics spelled out simply."""

    def __init__(self) -> None:
        self.rows = pd.DataFrame(columns=DATA_COLUMNS)

    def _dedupe(self, batch: pd.DataFrame) -> pd.DataFrame:
        # greatest ts wins; ties go to the later row of the batch
        ordered = batch.assign(_pos=range(len(batch))).sort_values(["ts", "_pos"])
        return ordered.drop_duplicates(["city", "id"], keep="last").drop(columns="_pos")

    def upsert(self, batch: pd.DataFrame) -> None:
        for row in self._dedupe(batch).itertuples(index=False):
            same = (self.rows["id"] == row.id) & (self.rows["city"] == row.city)
            if same.any() and self.rows.loc[same, "ts"].max() > row.ts:
                continue  # event_time: the stored record is newer
            self.rows = self.rows[~same]
            if not row.deleted:
                self.rows = pd.concat([self.rows, pd.DataFrame([row])[DATA_COLUMNS]])

    def insert(self, batch: pd.DataFrame) -> None:
        self.rows = pd.concat([self.rows, batch[DATA_COLUMNS]])

    bulk_insert = insert

    def delete(self, batch: pd.DataFrame) -> None:
        keys = set(zip(batch["city"], batch["id"], strict=True))
        hit = [k in keys for k in zip(self.rows["city"], self.rows["id"], strict=True)]
        self.rows = self.rows[[not h for h in hit]]


def _random_batch(rng: random.Random, n: int, key_space: int, deletes: bool) -> pd.DataFrame:
    rows = []
    for _ in range(n):
        key = rng.randrange(key_space)
        rows.append(
            {
                "id": key,
                # the city is a function of the key, so a key lives in one partition
                "city": CITIES[key % len(CITIES)],
                "ts": rng.randrange(5),  # few values: many precombine ties and stale rows
                "amount": round(rng.uniform(0, 100), 2),
                "deleted": deletes and rng.random() < 0.15,
            }
        )
    return pd.DataFrame(rows)


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame[DATA_COLUMNS].astype({"id": "int64", "ts": "int64", "amount": "float64"})
    return out.sort_values(["id", "ts", "amount"]).reset_index(drop=True)


def test_random_sequence_matches_pandas_reference(spark, tmp_path, table_type, merged_on):
    _check_random_sequence(spark, tmp_path, table_type, merged_on)


def test_large_batches_and_buckets_take_their_own_paths_to_the_same_table(
    spark, tmp_path, monkeypatch
):
    """A batch Spark estimates large is counted by a Spark job instead of being collected
    whole, and a large bucket's stored rows are read twice (keys, then the kept rows row
    group by row group) instead of once: the same sequence gives the same table."""
    counted: list[int] = []

    def counting_job(judged):
        counted.append(1)
        return touched_groups(judged)

    touched_groups = judge_stage.touched_groups
    monkeypatch.setattr(judge_stage, "touched_groups", counting_job)
    monkeypatch.setattr(merge_ops, "ONE_PASS_MAX_BYTES", 0)
    monkeypatch.setattr(stored_bucket, "WHOLE_READ_MAX_BYTES", 0)
    _check_random_sequence(spark, tmp_path, "COPY_ON_WRITE", "driver")
    assert len(counted) == 5  # every run but the bulk_insert


def _check_random_sequence(spark, tmp_path, table_type: str, merged_on: str) -> None:
    rng = random.Random(20261122)
    ref = Reference()
    steps = [
        ("bulk_insert", 60, False),
        ("upsert", 50, True),
        ("insert", 10, False),
        ("upsert", 40, True),
        ("delete", 15, False),
        ("upsert", 40, True),
    ]
    with_dvs = 0
    for i, (operation, n, deletes) in enumerate(steps):
        batch = _random_batch(rng, n, key_space=40, deletes=deletes)
        if operation == "bulk_insert":
            batch = batch.drop_duplicates(["id"])  # bulk_insert keeps duplicates, like Hudi
        extra = {"delete_marker": "deleted"} if operation == "upsert" else {}
        target = _target(operation, table_type, **extra, **merge_place(merged_on))
        if operation != "upsert":
            target.pop("precombine_field")
            batch = batch.drop(columns="deleted")
        spec = write_spec(tmp_path, target, name=f"step{i}")
        write_batch(tmp_path, batch)
        summary = run_pipeline(load_spec(spec), spark=spark)
        getattr(ref, operation)(batch.assign(deleted=batch.get("deleted", False)))
        assert summary.rows_read == len(batch)
        if operation != "bulk_insert":
            check_merge_place(summary, merged_on)
        with_dvs += summary.buckets_with_deletion_vectors

        expected = _normalized(ref.rows)
        got = _normalized(read_table(tmp_path / "table"))
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj=f"after step {i}")
    via_spark = spark_read_table(spark, str(tmp_path / "table")).toPandas()
    pd.testing.assert_frame_equal(_normalized(via_spark), expected, check_dtype=False)
    via_polars = pl.read_delta(str(tmp_path / "table")).to_pandas()
    pd.testing.assert_frame_equal(_normalized(via_polars), expected, check_dtype=False)
    assert (with_dvs > 0) == (table_type == "MERGE_ON_READ")
    # delta-spark, the protocol's reference reader (tests/delta_spark.py says when it is
    # missing; test_reference_reader.py then skips and says why)
    if delta_spark_ready(spark) is None:
        via_delta_spark = pd.DataFrame(read_with_delta_spark(spark, tmp_path / "table"))
        pd.testing.assert_frame_equal(_normalized(via_delta_spark), expected, check_dtype=False)


def test_upsert_counts_and_merge_modes(spark, tmp_path, table_type, merged_on):
    spec = write_spec(tmp_path, _target("upsert", table_type, **merge_place(merged_on)))
    write_batch(
        tmp_path,
        pd.DataFrame(
            {"id": [1, 2, 2], "city": ["ams"] * 3, "ts": [5, 1, 3], "amount": [1.0, 2.0, 3.0]}
        ),
    )
    first = run_pipeline(load_spec(spec), spark=spark)
    assert (first.inserted, first.updated, first.duplicates_dropped) == (2, 0, 1)
    check_merge_place(first, merged_on)

    # id 1 arrives older than stored: event_time keeps the stored row
    write_batch(
        tmp_path,
        pd.DataFrame({"id": [1, 2], "city": ["ams"] * 2, "ts": [4, 3], "amount": [10.0, 20.0]}),
    )
    second = run_pipeline(load_spec(spec), spark=spark)
    assert (second.inserted, second.updated, second.stale_skipped) == (0, 1, 1)
    table = read_table(tmp_path / "table").set_index("id")
    assert table.loc[1, "amount"] == 1.0 and table.loc[2, "amount"] == 20.0

    # commit_time: the incoming record always wins
    spec = write_spec(
        tmp_path, _target("upsert", table_type, merge_mode="commit_time", **merge_place(merged_on))
    )
    write_batch(tmp_path, pd.DataFrame({"id": [1], "city": ["ams"], "ts": [0], "amount": [99.0]}))
    third = run_pipeline(load_spec(spec), spark=spark)
    assert third.updated == 1
    assert read_table(tmp_path / "table").set_index("id").loc[1, "amount"] == 99.0


def test_insert_filter_dupes_drops_batch_and_stored_duplicates(spark, tmp_path, table_type):
    spec = write_spec(tmp_path, _target("insert", table_type))
    write_batch(
        tmp_path,
        pd.DataFrame({"id": [1, 2], "city": ["ams"] * 2, "ts": [1, 1], "amount": [1.0, 2.0]}),
    )
    run_pipeline(load_spec(spec), spark=spark)
    spec = write_spec(tmp_path, _target("insert", table_type, filter_dupes=True))
    write_batch(
        tmp_path,
        pd.DataFrame(
            {"id": [2, 3, 3], "city": ["ams"] * 3, "ts": [1, 1, 2], "amount": [5.0, 6.0, 7.0]}
        ),
    )
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert (summary.inserted, summary.duplicates_dropped) == (1, 2)
    table = read_table(tmp_path / "table")
    assert sorted(table["id"]) == [1, 2, 3]
    assert table.set_index("id").loc[3, "amount"] == 7.0  # the greater ts of the batch


def test_delete_counts_missing_keys(spark, tmp_path, table_type):
    spec = write_spec(tmp_path, _target("bulk_insert", table_type))
    write_batch(
        tmp_path,
        pd.DataFrame({"id": [1, 2, 3], "city": ["ams"] * 3, "ts": [1] * 3, "amount": [1.0] * 3}),
    )
    run_pipeline(load_spec(spec), spark=spark)
    target = {k: v for k, v in _target("delete", table_type).items() if k != "precombine_field"}
    spec = write_spec(tmp_path, target)
    write_batch(tmp_path, pd.DataFrame({"id": [2, 9], "city": ["ams", "ams"]}))
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert (summary.deleted, summary.deletes_missing) == (1, 1)
    assert sorted(read_table(tmp_path / "table")["id"]) == [1, 3]


@pytest.mark.parametrize("operation", ["upsert", "insert"])
def test_unchanged_buckets_are_not_rewritten(spark, tmp_path, operation, table_type):
    spec = write_spec(tmp_path, _target(operation, table_type))
    write_batch(
        tmp_path,
        pd.DataFrame({"id": range(40), "city": ["ams"] * 40, "ts": [1] * 40, "amount": [1.0] * 40}),
    )
    first = run_pipeline(load_spec(spec), spark=spark)
    assert first.buckets_touched == 4
    if operation == "upsert":
        # every row arrives older than stored: nothing changes, nothing is committed
        write_batch(
            tmp_path,
            pd.DataFrame({"id": [0, 1], "city": ["ams"] * 2, "ts": [0, 0], "amount": [5.0, 5.0]}),
        )
        again = run_pipeline(load_spec(spec), spark=spark)
        assert again.version is None and again.stale_skipped == 2 and again.files_added == 0


def test_non_partitioned_table_keeps_files_at_the_root(spark, tmp_path, table_type):
    target = {
        "operation": "upsert",
        "table_type": table_type,
        **({"compaction": NEVER_REWRITE} if table_type == "MERGE_ON_READ" else {}),
        "record_key": ["id", "kind"],
        "precombine_field": "ts",
        "key_generator": {"type": "NON_PARTITIONED"},
        "index": {"buckets": 3, "hash_fields": ["id"]},
    }
    spec = write_spec(tmp_path, target)
    frame = pd.DataFrame({"id": [1, 2, 3, 1], "kind": ["a", "a", "b", "b"], "ts": [1, 1, 1, 1]})
    write_batch(tmp_path, frame)
    run_pipeline(load_spec(spec), spark=spark)
    write_batch(tmp_path, frame.assign(ts=2).head(1))
    assert run_pipeline(load_spec(spec), spark=spark).updated == 1
    table = read_table(tmp_path / "table")
    assert set(table["_partition_path"]) == {""} and len(table) == 4
    assert sorted(table["_record_key"]) == [
        "id:1,kind:a",
        "id:1,kind:b",
        "id:2,kind:a",
        "id:3,kind:b",
    ]
    files = list((tmp_path / "table").rglob("*.parquet"))
    assert all(p.parent == tmp_path / "table" for p in files)
    # the key filters: in every data file of a merge-on-read table, in none of a copy-on-write
    # one (its rewrites read whole files)
    footers = [pq.read_metadata(p).metadata or {} for p in files]
    with_filter = [b"runner.key_filter" in f for f in footers]
    assert with_filter == [table_type == "MERGE_ON_READ"] * len(files)


@pytest.mark.parametrize(
    "values",
    [
        # NaN orders above every number in Spark, null below; equal values tie
        [1.5, float("nan"), None, float("inf"), 1.5, -0.0, float("nan"), None],
        ["b", "B", None, "é", "b", "", "ab", None],
        [3, None, 3, -7, 2**40, None, 0, 3],
    ],
    ids=["double", "string", "long"],
)
def test_the_driver_keeps_the_rows_a_spark_job_keeps(spark, tmp_path, values):
    """Each key's winner (greatest precombine, ties to the later row) is the same on both."""
    n = 400
    batch = pd.DataFrame(
        {
            "id": [i % 37 for i in range(n)],
            "city": [CITIES[i % 37 % 3] for i in range(n)],
            "ts": [values[(i * 7) % len(values)] for i in range(n)],
            "amount": [float(i) for i in range(n)],  # which row of a key won
        }
    )
    write_batch(tmp_path, batch)
    tables = {}
    for place in ("driver", "spark"):
        target = {**_target("upsert"), "path": place, **merge_place(place)}
        if isinstance(values[0], str):  # text order is what this case compares
            target["precombine_string_order"] = True
        summary = run_pipeline(load_spec(write_spec(tmp_path, target)), spark=spark)
        check_merge_place(summary, place)
        assert summary.inserted == 37 and summary.duplicates_dropped == n - 37
        tables[place] = (
            read_table(tmp_path / place)[["id", "amount"]].sort_values("id").reset_index(drop=True)
        )
    pd.testing.assert_frame_equal(tables["driver"], tables["spark"])
