"""A bulk load's input split into as many equal tasks as a multiple of the cores
(runner/sources/splits.py), where Spark's own packing leaves one task to run alone."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from runner.delta.snapshot import open_table
from runner.index.naming import parse_data_file_name
from runner.jvm.session import session_settings
from runner.pipeline.run import run_pipeline
from runner.sources.splits import (
    BULK_TASK_BYTES,
    MAX_PARTITION_BYTES,
    balanced_split_settings,
    split_settings,
)
from runner.spec import load_spec
from tests.helpers import city_rows, city_target, write_spec

FILES = 20


def _equal_files(directory, rows_per_file: int = 200) -> None:
    directory.mkdir()
    for i in range(FILES):
        ids = range(i * rows_per_file, (i + 1) * rows_per_file)
        frame = pa.Table.from_pandas(city_rows(ids, 1), preserve_index=False)
        pq.write_table(frame, directory / f"{i:02d}.parquet")


def _rows_per_task(frame) -> list[int]:
    counts = frame.groupBy(F.spark_partition_id().alias("task")).count().collect()
    return sorted(r["count"] for r in counts)


def test_equal_files_make_one_equal_task_per_core_where_spark_leaves_a_task_alone(spark, tmp_path):
    _equal_files(tmp_path / "in")
    frame = spark.read.parquet(str(tmp_path / "in"))
    cores = spark.sparkContext.defaultParallelism
    even = [FILES * 200 // cores] * cores
    # files this small are packed by their open cost (4 MiB each); without it, by their
    # bytes, as large files are: Spark's own packing then leaves a task to run alone
    for open_cost in ("0", "4194304"):
        with session_settings(spark, {"spark.sql.files.openCostInBytes": open_cost}):
            if open_cost == "0":
                assert len(_rows_per_task(frame)) % cores != 0
            with session_settings(spark, balanced_split_settings(spark, frame, streamed=False)):
                assert _rows_per_task(frame) == even, open_cost


def test_a_spec_that_sets_the_task_size_keeps_it(spark, tmp_path):
    _equal_files(tmp_path / "in")
    frame = spark.read.parquet(str(tmp_path / "in"))
    with session_settings(spark, {MAX_PARTITION_BYTES: "1048576"}):
        assert balanced_split_settings(spark, frame, streamed=False) == {}


def test_a_bulk_load_writes_a_buckets_file_per_core_not_per_spark_split(spark, tmp_path):
    _equal_files(tmp_path / "in")
    spec = write_spec(tmp_path, city_target("bulk_insert"))
    with session_settings(spark, {"spark.sql.files.openCostInBytes": "0"}):  # as above
        summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.inserted == FILES * 200
    rows: Counter[str] = Counter()
    for f in open_table(str(tmp_path / "table")).files():
        rows[parse_data_file_name(f.path).write_token] += f.num_records  # type: ignore[union-attr]
    cores = spark.sparkContext.defaultParallelism
    assert sorted(rows.values()) == [FILES * 200 // cores] * cores


def test_task_sizes_for_large_small_and_many_files():
    mib = 2**20
    # 300 MiB on 2 cores at 128 MiB a task: Spark's packing would give 128, 128 and 44
    many = split_settings([mib] * 300, cores=2, max_task_bytes=128 * mib, open_cost=0)
    assert int(many[MAX_PARTITION_BYTES]) == 75 * mib + mib // 2  # 4 tasks of 75 files
    # 4 files of 10 MiB, each counted 14: tasks of 2 (28 MiB) up to a size of 28 + 6 - 1
    four = split_settings([10 * mib] * 4, cores=2, max_task_bytes=128 * mib, open_cost=4 * mib)
    assert int(four[MAX_PARTITION_BYTES]) == 31 * mib
    # one file of 1 GiB on 8 cores: cut into 8 pieces of a share each, not 6 of 1.5 shares
    one = split_settings([1024 * mib], cores=8, max_task_bytes=128 * mib, open_cost=4 * mib)
    assert int(one[MAX_PARTITION_BYTES]) == 128 * mib + mib // 2
    assert split_settings([], cores=2, max_task_bytes=128 * mib, open_cost=0) == {}


def test_a_streamed_load_of_gigabytes_makes_one_task_per_core_not_one_per_128_mib():
    """TPC-H SF10's 20 source files of ~105 MiB: one wave of 2 tasks of 10 files, so each
    bucket gets 2 base files, where Spark's task size made 20 tasks (and 20 files a bucket)."""
    mib = 2**20
    sizes = [105 * mib] * 20
    spark_size = split_settings(sizes, cores=2, max_task_bytes=128 * mib, open_cost=4 * mib)
    assert int(spark_size[MAX_PARTITION_BYTES]) < 109 * mib + 105 * mib  # a file a task
    load = split_settings(sizes, cores=2, max_task_bytes=BULK_TASK_BYTES, open_cost=4 * mib)
    # each file counted 109 MiB: 10 fit a task of 1,140.5 MiB, the 11th does not
    assert int(load[MAX_PARTITION_BYTES]) == 1090 * mib + 101 * mib // 2
