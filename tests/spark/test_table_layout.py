"""The table on disk: file names, bucket function, per-bucket commits, failures, refusals."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from runner.commands.keys import preview_keys
from runner.delta.spark_read import read_table as spark_read_table
from runner.errors import BadRecordsError, SchemaChangeError, TableMismatchError, UserError
from runner.faults import InjectedFault
from runner.index.naming import FILE_NAME_RE
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import (
    keys_target,
    live_paths,
    log_actions,
    read_table,
    write_batch,
    write_spec,
)
from tests.reference import bucket_of

BUCKETS = 8


def _target(**extra) -> dict:
    return {
        "operation": "upsert",
        "record_key": ["id", "kind"],
        "precombine_field": "ts",
        "key_generator": {
            "type": "COMPLEX",
            "partition_fields": ["country", "day"],
            "hive_style_partitioning": True,
        },
        "index": {"buckets": BUCKETS, "hash_fields": ["id"]},
        **extra,
    }


def _batch(ids, country="nl", day="2026-01-01", ts=1) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame(
        {
            "id": ids,
            "kind": ["a"] * len(ids),
            "country": [country] * len(ids),
            "day": [day] * len(ids),
            "ts": [ts] * len(ids),
            "v": [float(i) for i in ids],
        }
    )


@pytest.fixture
def loaded(spark, tmp_path):
    """A table with two partitions of 200 rows each."""
    spec = write_spec(tmp_path, _target())
    write_batch(tmp_path, pd.concat([_batch(range(200)), _batch(range(200), country="us")]))
    run_pipeline(load_spec(spec), spark=spark)
    return spec


def test_every_file_follows_the_layout_and_the_bucket_function(loaded, tmp_path):
    table = DeltaTable(str(tmp_path / "table"))
    paths = table.file_uris()
    assert len(paths) == 2 * BUCKETS
    for uri in paths:
        directory, name = uri.rsplit("/", 1)
        match = FILE_NAME_RE.match(name)
        assert match, name
        rows = pq.read_table(uri.removeprefix("file://")).to_pandas()
        assert list(rows.columns[:5]) == [
            "_commit_time",
            "_commit_seqno",
            "_record_key",
            "_partition_path",
            "_bucket",
        ]
        assert set(rows["_bucket"]) == {int(match["bucket"])}
        assert len(set(rows["_partition_path"])) == 1
        partition = rows["_partition_path"].iloc[0]
        assert directory.endswith("/" + partition)
        assert partition == f"country={rows['country'].iloc[0]}/day={rows['day'].iloc[0]}"
        for row in rows.itertuples():
            assert row._3 == f"id:{row.id},kind:{row.kind}"  # _record_key, COMPLEX encoding
            assert row._5 == bucket_of((str(row.id),), BUCKETS)
        assert list(rows["_record_key"]) == sorted(rows["_record_key"])


def test_a_batch_touching_k_buckets_replaces_exactly_those(spark, loaded, tmp_path):
    ids = [3, 17, 40]  # only in partition nl
    touched = {bucket_of((str(i),), BUCKETS) for i in ids}
    before = live_paths(tmp_path / "table")
    write_batch(tmp_path, _batch(ids, ts=2))
    summary = run_pipeline(load_spec(loaded), spark=spark)
    assert summary.buckets_touched == len(touched) and summary.updated == 3

    actions = log_actions(tmp_path / "table", summary.version)
    added = [a["add"]["path"] for a in actions if "add" in a]
    removed = [a["remove"]["path"] for a in actions if "remove" in a]
    assert len(added) == len(removed) == len(touched)
    for path in added + removed:
        assert path.startswith("country=nl/day=2026-01-01/")
        assert int(path.rsplit("/", 1)[1][:8]) in touched
    # a bucket keeps its file group id across versions, with a new instant
    assert sorted(p.rsplit("/", 1)[1][:38] for p in added) == sorted(
        p.rsplit("/", 1)[1][:38] for p in removed
    )
    assert set(removed) <= before
    assert live_paths(tmp_path / "table") == (before - set(removed)) | set(added)


def test_a_run_failing_before_its_commit_changes_nothing(spark, loaded, tmp_path, monkeypatch):
    table_dir = tmp_path / "table"
    version = DeltaTable(str(table_dir)).version()
    content = read_table(table_dir).sort_values(["country", "id"]).reset_index(drop=True)
    files_on_disk = set(table_dir.rglob("*.parquet"))
    write_batch(tmp_path, _batch(range(50), ts=9))
    monkeypatch.setenv("RUNNER_FAULT", "before_commit")
    with pytest.raises(InjectedFault):
        run_pipeline(load_spec(loaded), spark=spark)
    assert DeltaTable(str(table_dir)).version() == version
    after = read_table(table_dir).sort_values(["country", "id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(after, content)
    assert set(table_dir.rglob("*.parquet")) == files_on_disk  # its own files were removed


def test_a_failure_after_the_commit_keeps_the_committed_files(spark, loaded, tmp_path, monkeypatch):
    table_dir = tmp_path / "table"
    version = DeltaTable(str(table_dir)).version()
    write_batch(tmp_path, _batch(range(50), ts=9))
    monkeypatch.setenv("RUNNER_FAULT", "after_commit")
    with pytest.raises(InjectedFault):
        run_pipeline(load_spec(loaded), spark=spark)
    assert DeltaTable(str(table_dir)).version() == version + 1
    on_disk = {str(p.relative_to(table_dir)) for p in table_dir.rglob("*.parquet")}
    assert live_paths(table_dir) <= on_disk, "the cleanup left the committed files alone"
    assert (read_table(table_dir)["ts"] == 9).sum() == 50


def test_a_spec_that_disagrees_with_the_table_is_refused(spark, loaded, tmp_path):
    spec = write_spec(
        tmp_path, _target(index={"buckets": 16, "hash_fields": ["id", "kind"]}), name="other"
    )
    with pytest.raises(TableMismatchError) as err:
        run_pipeline(load_spec(spec), spark=spark)
    message = str(err.value)
    assert "index.buckets: table has '8'" in message and "'16'" in message
    assert "index.hash.fields: table has 'id'" in message
    assert "runner expand SPEC --buckets 16" in message


def test_null_record_keys_stop_the_run_with_samples(spark, tmp_path):
    spec = write_spec(
        tmp_path,
        {
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"partition_fields": "country"},
            "index": {"buckets": 2},
        },
    )
    frame = pd.DataFrame({"id": ["a", None, "", "b"], "country": ["nl"] * 4, "ts": [1] * 4})
    write_batch(tmp_path, frame)
    with pytest.raises(BadRecordsError) as err:
        run_pipeline(load_spec(spec), spark=spark)
    message = str(err.value)
    assert message.startswith("2 record(s) cannot be keyed; nothing was written")
    assert 'recordKey value: "null" for field: "id" cannot be null or empty.' in message
    assert 'recordKey value: "" for field: "id"' in message
    assert not (tmp_path / "table").exists()


def test_bulk_insert_refuses_partitions_that_hold_data(spark, loaded, tmp_path):
    spec = write_spec(tmp_path, {**_target(operation="bulk_insert")}, name="bulk")
    write_batch(tmp_path, _batch([1000], country="us"))
    with pytest.raises(UserError, match="use operation insert or upsert"):
        run_pipeline(load_spec(spec), spark=spark)
    write_batch(tmp_path, _batch([1000], country="de"))  # a new partition is fine
    assert run_pipeline(load_spec(spec), spark=spark).inserted == 1


def test_schema_new_column_added_dropped_or_changed_refused(spark, loaded, tmp_path):
    write_batch(tmp_path, _batch([1, 500], ts=5).assign(note=["x", "y"]))
    summary = run_pipeline(load_spec(loaded), spark=spark)
    assert summary.columns_added == ["note"]
    table = read_table(tmp_path / "table").set_index(["country", "id"])
    assert table.loc[("nl", 1), "note"] == "x" and table.loc[("nl", 500), "note"] == "y"
    assert pd.isna(table.loc[("nl", 2), "note"]) and pd.isna(table.loc[("us", 1), "note"])

    write_batch(tmp_path, _batch([1], ts=6).drop(columns="v").assign(note="z"))
    with pytest.raises(SchemaChangeError, match="lacks column"):
        run_pipeline(load_spec(loaded), spark=spark)
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("kind", pa.string()),
            ("country", pa.string()),
            ("day", pa.string()),
            ("ts", pa.int64()),
            ("v", pa.string()),
            ("note", pa.string()),
        ]
    )
    write_batch(tmp_path, _batch([1], ts=6).assign(v="1", note="z"), schema=schema)
    with pytest.raises(
        SchemaChangeError, match="column v: the table stores double, the input has string"
    ):
        run_pipeline(load_spec(loaded), spark=spark)


@pytest.mark.parametrize("url_encode", [False, True])
def test_awkward_partition_values_round_trip(spark, tmp_path, url_encode):
    """Spaces, %, #, globs and non-ASCII in partition paths: written, re-read, updated."""
    cities = ["new york", "a%b", "é ü", "x=y", "a:b", "q#1", "[x]", "{a,b}", "s*?", "b\\s"]
    if url_encode:
        cities.append("a/b")
    target = {
        "operation": "upsert",
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"partition_fields": "city", "url_encode": url_encode},
        "index": {"buckets": 2},
    }
    spec = write_spec(tmp_path, target)
    for ts in (1, 2):
        write_batch(tmp_path, pd.DataFrame({"id": range(len(cities)), "city": cities, "ts": ts}))
        summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.updated == len(cities) and summary.inserted == 0
    table = read_table(tmp_path / "table").sort_values("id")
    assert list(table["city"]) == cities and set(table["ts"]) == {2}
    if url_encode:
        assert "a%2Fb" in set(table["_partition_path"]) and "x%3Dy" in set(table["_partition_path"])
    via_spark = spark_read_table(spark, str(tmp_path / "table")).toPandas().sort_values("id")
    assert list(via_spark["city"]) == cities


def test_a_partition_path_cannot_leave_the_table_directory(spark, tmp_path):
    target = {
        "operation": "upsert",
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"partition_fields": "city"},
        "index": {"buckets": 2},
    }
    spec = write_spec(tmp_path, target)
    write_batch(tmp_path, pd.DataFrame({"id": [1, 2], "city": ["../../etc", "ok"], "ts": 1}))
    with pytest.raises(BadRecordsError, match=r"leaves the table directory"):
        run_pipeline(load_spec(spec), spark=spark)


def test_a_run_failing_while_writing_leaves_no_files(spark, loaded, tmp_path, monkeypatch):
    table_dir = tmp_path / "table"
    version = DeltaTable(str(table_dir)).version()
    files_on_disk = set(table_dir.rglob("*.parquet"))
    write_batch(tmp_path, _batch(range(50), ts=9))
    monkeypatch.setenv("RUNNER_FAULT", "after_bucket_file")
    with pytest.raises(Exception, match="injected fault at after_bucket_file"):
        run_pipeline(load_spec(loaded), spark=spark)
    assert DeltaTable(str(table_dir)).version() == version
    assert set(table_dir.rglob("*.parquet")) == files_on_disk


def test_partition_values_that_are_no_directory_name_are_refused_with_the_reason(spark, tmp_path):
    """Every value that would give a path a file system spells another way, that leaves the
    table, lands in its log, or that no file system takes, is a key error with its reason."""
    values = {
        "https://example.com": "has an empty directory name",
        "a/": "has an empty directory name",
        "/a": "starts with '/'",
        ".": "has a '.' or '..' directory",
        "a/../b": "has a '.' or '..' directory",
        "_delta_log": "names a directory the table reserves",
        "a/_delta_log": "names a directory the table reserves",
        "_deletion_vectors": "names a directory the table reserves",
        "_runner": "names a directory the table reserves",
        "a\x00b": "holds a NUL character",
        "é" * 128: "has a directory name over 255 bytes",
        "a/b": None,  # two directories, as Hudi writes it
        "b/_runner": None,  # reserved only at the root
        "é" * 127: None,  # 254 bytes
    }
    lines = tmp_path / "records.jsonl"
    lines.write_text("".join(json.dumps({"id": i, "c": v}) + "\n" for i, v in enumerate(values)))
    target = keys_target(tmp_path, {"type": "SIMPLE", "partition_fields": "c"}, "id")
    out = list(preview_keys(spark, target, lines, "id long, c string"))
    for (value, reason), got in zip(values.items(), out, strict=True):
        if reason is None:
            assert got["partition_path"] == value, got
        else:
            assert reason in got["error"], (value, got)

    hive = {"type": "SIMPLE", "partition_fields": "c", "hive_style_partitioning": True}
    out = list(preview_keys(spark, keys_target(tmp_path, hive, "id"), lines, "id long, c string"))
    assert out[3]["partition_path"] == "c=." and out[5]["partition_path"] == "c=_delta_log"
    assert "has an empty directory name" in out[0]["error"]


def test_a_url_as_partition_value_is_quarantined_or_escaped(spark, tmp_path):
    """The issue's case: a hive-style partition `city=https://example.com`. Without
    url_encode the record goes to quarantine with its reason and clean then finds every
    live file; with url_encode it is escaped as Hive escapes it."""
    target = {
        "operation": "upsert",
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"partition_fields": "city", "hive_style_partitioning": True},
        "index": {"buckets": 2},
        "quarantine": {"path": "quarantine", "max_fraction": 0.5},
    }
    spec = write_spec(tmp_path, target)
    write_batch(
        tmp_path, pd.DataFrame({"id": [1, 2], "city": ["https://example.com", "ok"]}).assign(ts=1)
    )
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.rows_quarantined == 1 and summary.inserted == 1
    (reason,) = read_table(tmp_path / "quarantine")["_reason"]
    assert "partition path 'city=https://example.com' has an empty directory name" in reason
    assert "url_encode: true" in reason
    assert len(DeltaTable(str(tmp_path / "table")).scan().read_all()) == 1

    encoded = write_spec(
        tmp_path,
        {
            **target,
            "path": "encoded",
            "key_generator": {**target["key_generator"], "url_encode": True},
        },
        name="encoded",
    )
    run_pipeline(load_spec(encoded), spark=spark)
    paths = set(read_table(tmp_path / "encoded")["_partition_path"])
    assert paths == {"city=https%3A%2F%2Fexample.com", "city=ok"}


def test_the_python_bucket_hash_is_sparks(spark):
    """`runner read --key` computes buckets without a JVM: its hash equals Spark's `hash`
    on strings of every tail length, multi-byte characters, empty strings and nulls."""
    from pyspark.sql import functions as F

    from runner.index.string_hash import spark_string_hash

    values = ["", "a", "ab", "abc", "abcd", "abcde", "é", "漢字", "id:5,city:x", "x" * 33, None]
    rows = [(a, b) for a in values for b in ("k", None, "ünï")]
    frame = spark.createDataFrame(rows, "a string, b string")
    got = frame.select("a", "b", F.hash("a", "b").alias("h")).collect()
    assert {(r.a, r.b): r.h for r in got} == {(a, b): spark_string_hash((a, b)) for a, b in rows}
