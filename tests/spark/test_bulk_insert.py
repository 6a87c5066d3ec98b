"""bulk_insert in one pass without a shuffle: each input task writes its own files, so a
bucket may hold several base files of one file group; every later step folds or reads them.

(Rejected rows and the quarantine under bulk_insert: test_quality.py.)
"""

from __future__ import annotations

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runner.commands.compact import compact_table
from runner.commands.expand import expand_table
from runner.commands.inspect import inspect_table, render_report
from runner.commands.run import run_pipeline
from runner.errors import UserError
from runner.index.naming import parse_data_file_name
from runner.spec import load_spec
from runner.table.snapshot import open_table
from tests.helpers import (
    city_content,
    city_rows,
    city_target,
    file_bytes,
    write_batch,
    write_spec,
)

N = 3000


def _target(**extra) -> dict:
    return city_target(extra.pop("operation", "bulk_insert"), **extra)


@pytest.fixture
def three_tasks(spark, tmp_path):
    """The input as three parquet files, each read by its own Spark task."""
    inp = tmp_path / "in"
    inp.mkdir()
    frame = city_rows(range(N), 1)
    for i in range(3):
        part = frame.iloc[i::3]
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), inp / f"{i}.parquet")
    # a file costs more than a split holds, and is smaller than one: one split per file
    conf = {
        "spark.sql.files.maxPartitionBytes": "1048576",
        "spark.sql.files.openCostInBytes": "1048576",
    }
    saved = {k: spark.conf.get(k) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    yield frame.sort_values("id").reset_index(drop=True)
    for k, v in saved.items():
        spark.conf.set(k, v)


def test_each_task_writes_its_own_files_of_the_buckets_file_group(spark, tmp_path, three_tasks):
    spec = write_spec(tmp_path, _target())
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert (summary.rows_read, summary.inserted) == (N, N)
    assert summary.buckets_touched == 8  # 2 partitions x 4 buckets, not one per file

    groups = open_table(str(tmp_path / "table")).files_by_group()
    assert len(groups) == 8
    assert summary.files_added == sum(len(f) for f in groups.values()) == 24  # 3 tasks each
    for files in groups.values():  # one file group per bucket, one file per task
        names = [parse_data_file_name(f.path) for f in files]
        assert all(n is not None for n in names)
        assert len({n.file_id for n in names if n}) == 1
        assert len({n.write_token for n in names if n}) == 3
    pd.testing.assert_frame_equal(city_content(tmp_path / "table"), three_tasks)
    via_polars = pl.read_delta(str(tmp_path / "table")).to_pandas()
    assert sorted(via_polars["id"]) == list(range(N))
    report = inspect_table(str(tmp_path / "table"))
    assert report["buckets_with_several_files"] == 8
    assert "multi-file" in render_report(report)


def test_an_upsert_folds_a_buckets_base_files_into_one(spark, tmp_path, three_tasks):
    run_pipeline(load_spec(write_spec(tmp_path, _target())), spark=spark)
    upsert = write_spec(tmp_path, _target(operation="upsert"), name="up")
    write_batch(tmp_path, city_rows([2, 4], 2))  # sf rows; in one or two of its buckets
    summary = run_pipeline(load_spec(upsert), spark=spark)
    assert summary.updated == 2 and summary.files_removed == 3 * summary.buckets_touched

    groups = open_table(str(tmp_path / "table")).files_by_group()
    touched = [g for g, files in groups.items() if len(files) == 1]
    assert len(touched) == summary.buckets_touched
    expected = three_tasks.set_index("id")
    expected.loc[[2, 4], ["ts", "v"]] = [[2, "v2-2"], [2, "v2-4"]]
    pd.testing.assert_frame_equal(city_content(tmp_path / "table"), expected.reset_index())


@pytest.mark.parametrize("policy", ["multiple_rehash", "overwrite"])
def test_expansion_splits_buckets_of_several_files(spark, tmp_path, three_tasks, policy):
    spec = write_spec(tmp_path, _target())
    run_pipeline(load_spec(spec), spark=spark)
    _, summary = expand_table(load_spec(spec), 8, policy, spark=spark)
    assert summary is not None and summary.rows == N
    snapshot = open_table(str(tmp_path / "table"))
    assert {f.bucket for f in snapshot.files()} == set(range(8))
    pd.testing.assert_frame_equal(city_content(tmp_path / "table"), three_tasks)


def test_compaction_folds_a_bulk_loads_files_on_a_copy_on_write_table(spark, tmp_path, three_tasks):
    spec = write_spec(tmp_path, _target())
    run_pipeline(load_spec(spec), spark=spark)
    done = compact_table(load_spec(spec), spark=spark)
    assert (done.buckets, done.files_read) == (8, 24)
    groups = open_table(str(tmp_path / "table")).files_by_group()
    assert all(len(files) == 1 for files in groups.values())
    pd.testing.assert_frame_equal(city_content(tmp_path / "table"), three_tasks)


def test_a_partition_that_holds_data_is_refused_and_nothing_is_written(spark, tmp_path):
    spec = write_spec(tmp_path, _target())
    write_batch(tmp_path, city_rows(range(0, 100, 2), 1))  # sf only
    run_pipeline(load_spec(spec), spark=spark)
    before = file_bytes(tmp_path / "table")
    write_batch(tmp_path, city_rows(range(100, 200), 1, city=["sf"] * 50 + ["nyc"] * 50))
    with pytest.raises(UserError, match=r"empty partitions.*'sf'.*use operation insert"):
        run_pipeline(load_spec(spec), spark=spark)
    assert file_bytes(tmp_path / "table") == before  # nyc's files were removed too
    assert not (tmp_path / "table" / "nyc").exists()
    # a batch of new partitions only goes in
    write_batch(tmp_path, city_rows(range(100, 150), 1, city=["nyc"] * 50))
    assert run_pipeline(load_spec(spec), spark=spark).inserted == 50
