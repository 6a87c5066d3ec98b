"""schema_evolution full: renames, drops and widenings rewritten into the table's files, on
both table types, then upserts, a compaction and an expansion; every table read back with
delta-rs, Polars and delta-spark (which all read it: no column mapping, no type widening
feature) and compared with a pandas reference."""

from __future__ import annotations

import json
from datetime import date, datetime

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from runner.actions.compact import compact_table
from runner.actions.expand import ExpansionRequest, expand_table
from runner.errors import BadRecordsError, UserError
from runner.pipeline.context import RunOptions
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.delta_spark import delta_spark_ready, read_with_delta_spark
from tests.helpers import file_bytes, log_actions, write_batch, write_spec

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("city", pa.string()),
        ("ts", pa.int64()),
        ("amount", pa.int32()),
        ("note", pa.string()),
    ]
)


def _target(table_type: str, **extra) -> dict:
    return {
        "operation": "upsert",
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"partition_fields": "city"},
        "index": {"buckets": 2},
        "table_type": table_type,
        "schema_evolution": "full",
        **extra,
    }


def _rows(ids, ts: int) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame(
        {
            "id": ids,
            "city": ["ams" if i % 2 else "sf" for i in ids],
            "ts": [ts] * len(ids),
            "amount": [i * 10 for i in ids],
            "note": [f"n{i}" for i in ids],
        }
    )


def _loaded(spark, tmp_path, table_type: str, **extra) -> pd.DataFrame:
    """A table of 20 rows, then an upsert of 5 (a merge-on-read table gets deletion
    vectors), written before the spec asks for any change; its content."""
    spec = write_spec(tmp_path, _target(table_type))
    write_batch(tmp_path, _rows(range(20), 1), SCHEMA)
    run_pipeline(load_spec(spec), spark=spark)
    write_batch(tmp_path, _rows(range(0, 10, 2), 2), SCHEMA)
    run_pipeline(load_spec(spec), spark=spark)
    return (
        _rows(range(20), 1)
        .set_index("id")
        .assign(ts=[2 if i < 10 and i % 2 == 0 else 1 for i in range(20)])
        .reset_index()
    )


def _check_readers(spark, table, expected: pd.DataFrame) -> None:
    """delta-rs (both of its readers), Polars and delta-spark read `expected`."""
    columns = list(expected.columns)

    def same(frame: pd.DataFrame, who: str) -> None:
        got = frame[columns].sort_values("id").reset_index(drop=True)
        want = expected.sort_values("id").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_dtype=False, obj=who)

    delta = DeltaTable(str(table))
    assert not delta.protocol().reader_features or "typeWidening" not in (
        delta.protocol().reader_features or []
    )
    same(
        pa.table(delta.scan().read_all()).to_pandas() if _dv(delta) else delta.to_pandas(),
        "delta-rs",
    )
    same(pl.read_delta(str(table)).to_pandas(), "polars")
    if delta_spark_ready(spark) is None:
        same(pd.DataFrame(read_with_delta_spark(spark, table)), "delta-spark")


def _dv(table: DeltaTable) -> bool:
    return "deletionVectors" in (table.protocol().reader_features or [])


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_rename_then_an_upsert_that_names_the_new_column(spark, tmp_path, table_type):
    expected = _loaded(spark, tmp_path, table_type)
    table = tmp_path / "table"
    spec = write_spec(tmp_path, _target(table_type, rename={"amount": "total"}))
    renamed = SCHEMA.set(3, pa.field("total", pa.int32()))
    batch = _rows([3, 40], 5).rename(columns={"amount": "total"})
    write_batch(tmp_path, batch, renamed)
    summary = run_pipeline(load_spec(spec), spark=spark)

    (rewrite,) = summary.schema_rewrites
    assert rewrite["changes"] == ["amount renamed total"]
    assert rewrite["version"] == summary.version - 1
    files = [a.get("add") or a.get("remove") for a in log_actions(table, rewrite["version"])]
    files = [f for f in files if f]
    assert files and all(f["dataChange"] is False for f in files)  # no row changed
    assert (summary.updated, summary.inserted) == (1, 1)
    expected = expected.rename(columns={"amount": "total"}).set_index("id")
    expected.loc[3] = batch.set_index("id").loc[3]
    expected.loc[40] = batch.set_index("id").loc[40]
    _check_readers(spark, table, expected.reset_index())

    # the entry stays in the spec: the next run finds the rename done and rewrites nothing
    write_batch(tmp_path, batch.assign(ts=6), renamed)
    assert run_pipeline(load_spec(spec), spark=spark).schema_rewrites == []


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_drop_then_a_compaction(spark, tmp_path, table_type):
    expected = _loaded(spark, tmp_path, table_type).drop(columns=["note"])
    table = tmp_path / "table"
    spec = write_spec(tmp_path, _target(table_type, drop=["note"]))
    batch = _rows([5], 7).drop(columns=["note"])
    write_batch(tmp_path, batch, SCHEMA.remove(4))
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.schema_rewrites[0]["changes"] == ["note dropped"]
    schema = json.loads(DeltaTable(str(table)).schema().to_json())
    assert [f["name"] for f in schema["fields"] if not f["name"].startswith("_")] == [
        "id", "city", "ts", "amount"
    ]  # fmt: skip
    expected = expected.set_index("id")
    expected.loc[5] = batch.set_index("id").loc[5]
    compact_table(load_spec(spec), spark=spark)
    _check_readers(spark, table, expected.reset_index())


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_widening_rewrites_the_files_so_every_reader_reads_them(spark, tmp_path, table_type):
    expected = _loaded(spark, tmp_path, table_type)
    table = tmp_path / "table"
    spec = write_spec(tmp_path, _target(table_type))
    wide = SCHEMA.set(3, pa.field("amount", pa.int64()))
    batch = _rows([2, 50], 9).assign(amount=[2**40, 2**41])
    write_batch(tmp_path, batch, wide)
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.schema_rewrites[0]["changes"] == ["amount widened to long"]
    assert summary.columns_added == []  # the rewrite made the change: nothing left to add
    fields = json.loads(DeltaTable(str(table)).schema().to_json())["fields"]
    assert [f["type"] for f in fields if f["name"] == "amount"] == ["long"]
    expected = expected.set_index("id")
    expected.loc[2] = batch.set_index("id").loc[2]
    expected.loc[50] = batch.set_index("id").loc[50]
    _check_readers(spark, table, expected.reset_index())

    expand_table(load_spec(spec), ExpansionRequest(4), spark=spark)  # an expansion after it
    _check_readers(spark, table, expected.reset_index())


def test_refusals_leave_the_table_as_it_was(spark, tmp_path):
    _loaded(spark, tmp_path, "COPY_ON_WRITE")
    table = tmp_path / "table"
    before = file_bytes(table)
    renamed = SCHEMA.set(3, pa.field("total", pa.int32()))
    write_batch(tmp_path, _rows([1], 9).rename(columns={"amount": "total"}), renamed)

    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", rename={"amount": "total"}))
    with pytest.raises(UserError, match=r"a dry run cannot merge this batch.*amount renamed total"):
        run_pipeline(load_spec(spec), spark=spark, options=RunOptions(dry_run=True))
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", rename={"price": "cost"}))
    with pytest.raises(UserError, match=r"rename price -> cost: the table .* has neither"):
        run_pipeline(load_spec(spec), spark=spark)
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", drop=["_commit_time"]))
    with pytest.raises(UserError, match="cannot change _commit_time"):
        run_pipeline(load_spec(spec), spark=spark)

    # checked before anything is rewritten: a producer that still sends the old name, a
    # dropped column still in the input, a rejected record
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", rename={"amount": "total"}))
    write_batch(tmp_path, _rows([1], 9), SCHEMA)
    with pytest.raises(UserError, match=r"input has column\(s\) amount, which target.drop"):
        run_pipeline(load_spec(spec), spark=spark)
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", drop=["note"]))
    with pytest.raises(UserError, match=r"input has column\(s\) note, which target.drop"):
        run_pipeline(load_spec(spec), spark=spark)
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", drop=["note"], on_schema_mismatch="fail"))
    bad = _rows([1], 9).drop(columns="note").assign(amount=["abc"])
    write_batch(tmp_path, bad)
    with pytest.raises(BadRecordsError, match="string value 'abc' is not a valid integer"):
        run_pipeline(load_spec(spec), spark=spark)
    assert file_bytes(table) == before


@pytest.mark.parametrize("point", ["after_bucket_file", "before_commit"])
def test_a_failed_rewrite_leaves_the_table_as_it_was(spark, tmp_path, monkeypatch, point):
    """The rewrite is a table change of its own (runner/actions/table_change.py): a failure
    before its commit, the first of the run, leaves every file and the log as they were."""
    expected = _loaded(spark, tmp_path, "MERGE_ON_READ")
    table = tmp_path / "table"
    before = file_bytes(table)
    spec = write_spec(tmp_path, _target("MERGE_ON_READ", drop=["note"]))
    write_batch(tmp_path, _rows([5], 7).drop(columns="note"), SCHEMA.remove(4))
    monkeypatch.setenv("RUNNER_FAULT", point)
    with pytest.raises(Exception, match=f"injected fault at {point}"):
        run_pipeline(load_spec(spec), spark=spark)
    assert file_bytes(table) == before  # the rewrite's files are removed
    monkeypatch.delenv("RUNNER_FAULT")
    run_pipeline(load_spec(spec), spark=spark)
    _check_readers(
        spark,
        table,
        expected.drop(columns="note").assign(ts=lambda f: f["ts"].where(f["id"] != 5, 7)),
    )


def test_changes_read_across_a_rename_keep_their_values(spark, tmp_path):
    """A change data feed's files written before a rename have the old name: `runner read
    --since` (and a chained pipeline's delta source, which reads them the same way) gives
    their values under the new name, not nulls; a dropped column is left out."""
    from runner.commands.read import read_rows

    target = _target("COPY_ON_WRITE", change_data_feed=True)
    spec = write_spec(tmp_path, target)
    write_batch(tmp_path, _rows(range(4), 1), SCHEMA)
    first = run_pipeline(load_spec(spec), spark=spark)
    write_batch(tmp_path, _rows([1], 2).assign(amount=11), SCHEMA)
    run_pipeline(load_spec(spec), spark=spark)

    spec = write_spec(tmp_path, {**target, "rename": {"amount": "total"}, "drop": ["note"]})
    renamed = SCHEMA.set(3, pa.field("total", pa.int32())).remove(4)
    write_batch(tmp_path, _rows([2], 3).rename(columns={"amount": "total"}).drop(columns="note"),
                renamed)  # fmt: skip
    run_pipeline(load_spec(spec), spark=spark)

    changes = read_rows(str(tmp_path / "table"), since=first.instant).rows.to_pandas()
    got = changes[["id", "total", "_change_type"]].sort_values(["id", "_change_type"])
    assert got.values.tolist() == [
        [1, 11, "update_postimage"],
        [1, 10, "update_preimage"],
        [2, 20, "update_postimage"],
        [2, 20, "update_preimage"],
    ]
    assert "note" not in changes.columns and "amount" not in changes.columns


def test_a_date_widened_to_timestamp_ntz_gets_the_feature_every_reader_needs(spark, tmp_path):
    """delta-rs and Polars refuse a timestamp_ntz column without the timestampNtz table
    feature: the rewrite's commit adds it."""
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE"))
    dated = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()),
                       ("day", pa.date32())])  # fmt: skip
    rows = pd.DataFrame({"id": [1, 2], "city": ["ams", "sf"], "ts": [1, 1]})
    write_batch(tmp_path, rows.assign(day=[date(2024, 1, 2)] * 2), dated)
    run_pipeline(load_spec(spec), spark=spark)
    timed = dated.set(3, pa.field("day", pa.timestamp("us")))
    write_batch(tmp_path, rows.iloc[:1].assign(ts=2, day=[datetime(2024, 3, 4, 5, 6)]), timed)
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.schema_rewrites[0]["changes"] == ["day widened to timestamp_ntz"]
    table = tmp_path / "table"
    assert "timestampNtz" in (DeltaTable(str(table)).protocol().reader_features or [])
    expected = pd.DataFrame(
        {"id": [1, 2], "city": ["ams", "sf"], "ts": [2, 1],
         "day": [datetime(2024, 3, 4, 5, 6), datetime(2024, 1, 2)]}
    )  # fmt: skip
    _check_readers(spark, table, expected)


def test_a_new_timestamp_ntz_column_gets_the_feature_too(spark, tmp_path):
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", schema_evolution="add"))
    write_batch(tmp_path, _rows([1], 1), SCHEMA)
    run_pipeline(load_spec(spec), spark=spark)
    later = SCHEMA.append(pa.field("seen", pa.timestamp("us")))
    write_batch(tmp_path, _rows([2], 1).assign(seen=[datetime(2024, 5, 6, 7, 8)]), later)
    assert run_pipeline(load_spec(spec), spark=spark).columns_added == ["seen"]
    expected = _rows([1, 2], 1).assign(seen=[None, datetime(2024, 5, 6, 7, 8)])
    _check_readers(spark, tmp_path / "table", expected)


def test_a_failure_after_the_rewrite_says_the_rewrite_stays(spark, tmp_path, monkeypatch):
    """The rewrite is a version of its own: a write that fails after it leaves it committed
    (no row changed), and the error says so."""
    import runner.pipeline.run as run_module

    expected = _loaded(spark, tmp_path, "COPY_ON_WRITE").drop(columns=["note"])
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", drop=["note"]))
    write_batch(tmp_path, _rows([5], 7).drop(columns="note"), SCHEMA.remove(4))

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(run_module, "write_buckets", broken)
    with pytest.raises(OSError, match="disk full") as failed:
        run_pipeline(load_spec(spec), spark=spark)
    (note,) = failed.value.__notes__
    assert "schema rewrite (note dropped) was committed as version 3" in note
    _check_readers(spark, tmp_path / "table", expected)  # every row, without note
