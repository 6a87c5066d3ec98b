"""bulk_insert in one pass without a shuffle: each input task writes its own files, so a
bucket may hold several base files of one file group; every later step folds or reads them.

(Rejected rows and the quarantine under bulk_insert: test_quality.py.)
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from runner.actions.compact import compact_table
from runner.actions.expand import ExpansionRequest, expand_table
from runner.commands.inspect import inspect_table, render_report
from runner.delta.snapshot import open_table
from runner.errors import UserError
from runner.index.naming import parse_data_file_name
from runner.index.string_hash import spark_string_hash
from runner.jvm.session import session_settings
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from runner.write import bulk_writer
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
    with session_settings(spark, conf):  # unset after, as a spec that never set them
        yield frame.sort_values("id").reset_index(drop=True)


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
    _, summary = expand_table(load_spec(spec), ExpansionRequest(8, policy), spark=spark)
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


def _typed_rows(n: int) -> pa.Table:
    """city_target rows with a column of most types the writer reads itself, nulls in each."""
    rng = np.random.default_rng(7)
    ids = np.arange(n)
    some = rng.random(n) < 0.1  # nulls
    stamps = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(ids * 7919, unit="ms")
    return pa.table(
        {
            "id": ids,
            "city": np.where(ids % 3 == 0, "ams", np.where(ids % 3 == 1, "sf", "nyc")),
            "ts": np.ones(n, dtype=np.int64),
            "v": pa.array([f"{x:040x}" for x in rng.integers(0, 2**62, n)], mask=some),
            "at": pa.array(stamps, pa.timestamp("ms", tz="UTC"), mask=some),
            "day": pa.array((ids % 9000).astype("datetime64[D]"), pa.date32(), mask=some),
            "price": pa.array(
                [Decimal(int(i)) / 100 for i in ids], pa.decimal128(12, 2), mask=some
            ),
            "score": pa.array(np.where(ids % 97 == 0, np.nan, ids / 7), mask=some),
            "ok": pa.array(ids % 2 == 0, mask=some),
            "tags": pa.array([[int(i), int(i) + 1] for i in ids], pa.list_(pa.int32())),
            "point": pa.array([{"x": float(i), "y": -float(i)} for i in ids]),
        }
    )


def _same_rows(table_path, expected: pa.Table) -> None:
    """The table holds `expected`'s rows, with keys and partition paths Spark computed, each
    in its key's bucket and in that bucket's files."""
    stored = DeltaTable(str(table_path)).to_pyarrow_table().sort_by("id")
    assert stored.column("_record_key").to_pylist() == [str(i) for i in range(len(expected))]
    assert stored.column("_partition_path").to_pylist() == expected.column("city").to_pylist()
    assert len(pc.unique(stored.column("_commit_seqno"))) == len(expected)
    count = city_target("bulk_insert")["index"]["buckets"]
    buckets = [spark_string_hash((str(i),)) % count for i in range(len(expected))]
    assert stored.column("_bucket").to_pylist() == buckets
    for f in open_table(str(table_path)).files():
        in_file = pq.read_table(table_path / f.path, columns=["_bucket"]).column("_bucket")
        assert set(in_file.to_pylist()) == {parse_data_file_name(f.path).bucket}  # type: ignore[union-attr]
    data = stored.select(expected.column_names)
    want = expected.cast(data.schema).to_pandas()  # Spark's types: timestamps in microseconds
    pd.testing.assert_frame_equal(data.to_pandas(), want)


# Spark's split settings: (max partition bytes, open cost), and the number of input files
LAYOUTS = {
    "one file over several tasks": ("262144", "262144", 1),
    "several files in one task": ("134217728", "1", 6),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_writers_read_the_rows_from_a_parquet_source_themselves(spark, tmp_path, layout):
    split_bytes, open_cost, files = LAYOUTS[layout]
    rows = _typed_rows(12_000)
    (tmp_path / "in").mkdir()
    for i in range(files):
        part = rows.slice(i * rows.num_rows // files, rows.num_rows // files)
        pq.write_table(part, tmp_path / "in" / f"{i}.parquet", row_group_size=1000)
    spec = write_spec(tmp_path, _target())
    conf = {"spark.sql.files.maxPartitionBytes": split_bytes}
    conf["spark.sql.files.openCostInBytes"] = open_cost
    with session_settings(spark, conf):
        summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_from == "the source files"
    assert "rows from    the source files" in summary.render()
    assert summary.inserted == rows.num_rows
    _same_rows(tmp_path / "table", rows)
    tokens = {
        parse_data_file_name(f.path).write_token  # type: ignore[union-attr]
        for f in open_table(str(tmp_path / "table")).files()
    }
    assert len(tokens) > 1  # the rows were written by several tasks
    assert files == 1 or len(tokens) < files  # ... each of several files, or of one


@pytest.mark.parametrize(
    "change, why",
    [
        ({"transform": {"sql": "SELECT * FROM src"}}, "a transform's result"),
        ({"schema": "id bigint, city string, ts bigint, v string, n bigint"}, "declares a schema"),
        ({}, "column n is uint32 in the files and int64 in Spark"),
    ],
)
def test_rows_come_through_spark_when_the_writers_cannot_read_them_alike(
    spark, tmp_path, change, why
):
    rows = pa.Table.from_pandas(city_rows(range(50), 1), preserve_index=False)
    rows = rows.append_column("n", pa.array(range(50), pa.uint32()))
    (tmp_path / "in").mkdir()
    pq.write_table(rows, tmp_path / "in" / "batch.parquet")
    transform = change.pop("transform", None)
    extra = {"transform": transform} if transform else {}
    spec = write_spec(tmp_path, _target(), **extra)
    if change:  # a source setting
        text = yaml.safe_load(spec.read_text())
        text["sources"][0].update(change)
        spec.write_text(yaml.safe_dump(text))
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.rows_from is not None and summary.rows_from.startswith("Spark (")
    assert why in summary.rows_from
    _same_rows(tmp_path / "table", rows.set_column(4, "n", rows.column("n").cast(pa.int64())))


def test_rows_come_through_spark_when_a_bucket_id_does_not_fit_a_rows_place(
    spark, tmp_path, monkeypatch
):
    monkeypatch.setattr(bulk_writer, "PLACE_BUCKETS", 2)  # the table has 4 buckets
    rows = pa.Table.from_pandas(city_rows(range(50), 1), preserve_index=False)
    (tmp_path / "in").mkdir()
    pq.write_table(rows, tmp_path / "in" / "batch.parquet")
    summary = run_pipeline(load_spec(write_spec(tmp_path, _target())), spark=spark)
    assert summary.rows_from == "Spark (bucket ids up to 3, past the 1 a place holds)"
    _same_rows(tmp_path / "table", rows)
