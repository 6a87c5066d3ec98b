"""A table on S3 (moto's S3 API on 127.0.0.1): written, upserted, read, inspected, cleaned.

The settings are put into the environment only after the shared SparkSession started, so
Spark's Python workers never see them: the writes work only because the driver ships the
settings inside the job.
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from runner.cli import cli
from runner.commands.clean import clean_table
from runner.commands.compact import compact_table
from runner.commands.expand import expand_table
from runner.commands.run import run_pipeline
from runner.errors import UserError
from runner.spec import load_spec
from runner.table.log_entry import publish
from runner.table.storage import locate
from tests.helpers import write_batch, write_spec
from tests.s3 import KEY, SECRET, moto_server, s3_environment

pytestmark = pytest.mark.spark

BUCKET = "runner-tests"
TABLE = f"s3://{BUCKET}/warehouse/t"
DATA_COLUMNS = ["id", "city", "ts", "amount"]


@pytest.fixture(scope="module")
def s3(spark):
    """An S3 endpoint with one bucket; the AWS_* variables set for this module only.

    Depends on `spark` so that the session (and its Python workers) started before them.
    """
    boto3 = pytest.importorskip("boto3")
    with moto_server() as endpoint, pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        for name, value in s3_environment(endpoint).items():
            mp.setenv(name, value)
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=BUCKET)
        yield client


def _options(client) -> dict[str, str]:
    """Storage options for delta-rs written out here, independent of runner.table.storage."""
    return {
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": client.meta.endpoint_url,
        "AWS_ALLOW_HTTP": "true",
    }


def _objects(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame[DATA_COLUMNS].astype({"id": "int64", "ts": "int64", "amount": "float64"})
    return out.sort_values(["city", "id"]).reset_index(drop=True)


def _batch(ids: range, ts: int, stale_ts: int | None = None) -> pd.DataFrame:
    """Rows of `ids` at time `ts`; with `stale_ts`, every 4th row at that (older) time."""
    return pd.DataFrame(
        {
            "id": list(ids),
            "city": [("ams", "sf", "nyc")[i % 3] for i in ids],
            "ts": [stale_ts if stale_ts is not None and i % 4 == 0 else ts for i in ids],
            "amount": [float(i * ts) for i in ids],
        }
    )


def _reference(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """Upsert with event_time in pandas: a stored row is replaced by an equal or newer one."""
    merged = first.merge(second, on=["city", "id"], how="outer", suffixes=("_old", ""))
    newer = merged["ts"].notna() & ~(merged["ts"] < merged["ts_old"])
    for col in ("ts", "amount"):
        merged[col] = merged[col].where(newer, merged[f"{col}_old"])
    return _normalized(merged)


@pytest.fixture(scope="module")
def written(s3, spark, tmp_path_factory):
    """The table after an upsert creating it and a second upsert, with its pandas reference."""
    work = tmp_path_factory.mktemp("s3")
    spec_file = write_spec(
        work,
        {
            "path": TABLE,
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
            "index": {"buckets": 4},
        },
    )
    spec = load_spec(spec_file)
    first, second = _batch(range(0, 60), ts=5), _batch(range(40, 100), ts=7, stale_ts=1)
    write_batch(work, first)
    created = run_pipeline(spec, spark=spark)
    write_batch(work, second)
    upserted = run_pipeline(spec, spark=spark)
    return spec, created, upserted, _reference(first, second)


def test_table_on_s3_reads_back_equal(s3, written):
    _, created, upserted, expected = written
    assert (created.version, upserted.version) == (1, 2)  # version 0 is the empty table
    assert upserted.updated == 15 and upserted.stale_skipped == 5 and upserted.inserted == 40
    table = DeltaTable(TABLE, storage_options=_options(s3))
    assert table.version() == 2
    pd.testing.assert_frame_equal(_normalized(table.to_pyarrow_table().to_pandas()), expected)
    keys = _objects(s3, "warehouse/t/")
    live = {f"warehouse/t/{p}" for p in table.get_add_actions(flatten=True)["path"].to_pylist()}
    assert live <= set(keys)
    assert not [k for k in keys if k.endswith("/")]  # no directory markers


def test_runner_read_and_inspect_on_s3(s3, written):
    _, created, upserted, expected = written
    result = CliRunner().invoke(cli, ["read", TABLE])
    assert result.exit_code == 0, result.output
    rows = pd.DataFrame([json.loads(line) for line in result.stdout.splitlines()])
    pd.testing.assert_frame_equal(_normalized(rows), expected)

    pulled = CliRunner().invoke(cli, ["read", TABLE, "--since", created.instant])
    assert pulled.exit_code == 0, pulled.output
    changed = [json.loads(line) for line in pulled.stdout.splitlines()]
    assert {r["_commit_time"] for r in changed} == {upserted.instant}
    assert len(changed) == upserted.inserted + upserted.updated

    inspected = CliRunner().invoke(cli, ["inspect", TABLE, "--json"])
    assert inspected.exit_code == 0, inspected.output
    report = json.loads(inspected.stdout)
    assert report["version"] == 2 and report["rows"] == len(expected)
    assert {p["partition"] for p in report["partitions"]} == set(expected["city"])
    table = DeltaTable(TABLE, storage_options=_options(s3))
    assert report["files"] == len(table.file_uris())


def test_clean_on_s3(s3, written):
    spec, _, upserted, expected = written
    before = set(_objects(s3, "warehouse/t/"))
    planned = clean_table(spec, retain_commits=1, min_age_hours=0, dry_run=True)
    assert len(planned.files) == upserted.files_removed > 0
    assert planned.bytes > 0  # sizes from the object store
    assert set(_objects(s3, "warehouse/t/")) == before

    done = clean_table(spec, retain_commits=1, min_age_hours=0)
    assert done.files == planned.files
    gone = before - set(_objects(s3, "warehouse/t/"))
    assert gone == {f"warehouse/t/{p}" for p in planned.files}
    table = DeltaTable(TABLE, storage_options=_options(s3))
    pd.testing.assert_frame_equal(_normalized(table.to_pyarrow_table().to_pandas()), expected)


def test_clean_on_s3_leaves_objects_the_runner_did_not_write(s3, written):
    spec = written[0]
    s3.put_object(Bucket=BUCKET, Key="warehouse/t/README.md", Body=b"about this table")

    done = clean_table(spec, retain_commits=1, min_age_hours=0)

    assert done.not_runners == ["README.md"]
    assert "warehouse/t/README.md" in _objects(s3, "warehouse/t/")


def test_an_s3_prefix_with_other_objects_is_not_taken_for_a_new_table(s3, spark, tmp_path):
    s3.put_object(Bucket=BUCKET, Key="warehouse/old/part-0.parquet", Body=b"an old dataset")
    spec = write_spec(
        tmp_path,
        {
            "path": f"s3://{BUCKET}/warehouse/old",
            "operation": "insert",
            "record_key": "id",
            "key_generator": {"type": "NON_PARTITIONED"},
            "index": {"buckets": 2},
        },
    )
    write_batch(tmp_path, _batch(range(3), ts=1))

    with pytest.raises(UserError, match=r"is not empty and holds no Delta table \(part-0"):
        run_pipeline(load_spec(spec), spark=spark)

    assert _objects(s3, "warehouse/old/") == ["warehouse/old/part-0.parquet"]


def test_expansion_on_s3_is_refused_clearly(spark, written, tmp_path):
    spec = written[0]
    with pytest.raises(UserError, match="hadoop-aws connector"):
        expand_table(spec, buckets=8, dry_run=True)
    automatic = write_spec(
        tmp_path,
        {
            "path": f"s3://{BUCKET}/warehouse/auto",
            "operation": "insert",
            "record_key": "id",
            "index": {"buckets": 2, "expansion": {"max_bucket_bytes": 1000}},
        },
    )
    write_batch(tmp_path, _batch(range(3), ts=1))
    with pytest.raises(UserError, match="automatic bucket expansion"):
        run_pipeline(load_spec(automatic), spark=spark)


def test_quarantine_on_s3(s3, spark, tmp_path):
    spec_file = write_spec(
        tmp_path,
        {
            "path": f"s3://{BUCKET}/warehouse/q",
            "record_key": "id",
            "precombine_field": "ts",
            "index": {"buckets": 2},
            "quarantine": {"path": f"s3://{BUCKET}/warehouse/q_quarantine", "max_fraction": 0.5},
        },
        expectations=[{"name": "positive", "sql": "amount > 0", "action": "quarantine"}],
    )
    write_batch(tmp_path, _batch(range(10), ts=1))  # amount 0 for id 0
    summary = run_pipeline(load_spec(spec_file), spark=spark)
    assert summary.rows_quarantined == 1 and summary.inserted == 9
    rejected = DeltaTable(f"s3://{BUCKET}/warehouse/q_quarantine", storage_options=_options(s3))
    rows = rejected.to_pyarrow_table().to_pylist()
    assert [(r["_rule"], json.loads(r["_record"])["id"]) for r in rows] == [("positive", 0)]


def test_a_commit_never_replaces_a_log_entry(s3):
    """delta-rs publishes a version with S3's put-if-absent (no lock, no unsafe rename): two
    writers that read the same version both commit, one on top of the other."""
    uri = f"s3://{BUCKET}/scratch"
    rows = pd.DataFrame({"x": [1]})
    write_deltalake(uri, rows, storage_options=_options(s3))
    a, b = (DeltaTable(uri, storage_options=_options(s3)) for _ in range(2))
    write_deltalake(a, rows, mode="append")
    write_deltalake(b, rows, mode="append")  # read version 0, 1 taken: lands as version 2
    table = DeltaTable(uri, storage_options=_options(s3))
    assert table.version() == 2 and len(table.to_pyarrow_table()) == 3


def _mor_spec(tmp_path, name: str):
    return load_spec(
        write_spec(
            tmp_path,
            {
                "path": f"s3://{BUCKET}/warehouse/{name}",
                "operation": "upsert",
                "table_type": "MERGE_ON_READ",
                "record_key": "id",
                "precombine_field": "ts",
                "delete_marker": "gone",
                "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
                "index": {"buckets": 2},
                "compaction": {"max_delta_files": 10, "max_deleted_fraction": 0.9},
            },
            name=name,
        )
    )


def test_merge_on_read_and_compaction_on_s3(s3, spark, tmp_path):
    """Deletion vectors and the runner's own log entries on S3, published with a
    conditional put; compaction folds them; every reader sees the pandas reference."""
    spec = _mor_spec(tmp_path, "mor")
    uri = spec.target.path
    first = _batch(range(0, 40), ts=5).assign(gone=False)
    second = _batch(range(30, 50), ts=7).assign(gone=[i % 5 == 0 for i in range(30, 50)])
    write_batch(tmp_path, first)
    run_pipeline(spec, spark=spark)
    write_batch(tmp_path, second)
    upserted = run_pipeline(spec, spark=spark)
    assert upserted.buckets_with_deletion_vectors > 0 and upserted.deleted == 2
    assert any(
        k.startswith("warehouse/mor/_deletion_vectors/") for k in _objects(s3, "warehouse/mor/")
    )
    kept = second[~second["gone"]]
    expected = _normalized(pd.concat([first[~first["id"].isin(second["id"])], kept])[DATA_COLUMNS])

    def rows() -> pd.DataFrame:  # delta-rs, which applies deletion vectors in scan()
        table = DeltaTable(uri, storage_options=_options(s3))
        return _normalized(pa.table(table.scan().read_all()).to_pandas())

    def runner_read() -> pd.DataFrame:
        result = CliRunner().invoke(cli, ["read", uri])
        assert result.exit_code == 0, result.output
        return _normalized(pd.DataFrame([json.loads(line) for line in result.stdout.splitlines()]))

    pd.testing.assert_frame_equal(rows(), expected, check_dtype=False)
    pd.testing.assert_frame_equal(runner_read(), expected, check_dtype=False)
    compacted = compact_table(spec, spark=spark)
    # the 10 stored rows of ids 30-39 the second batch replaced or deleted
    assert compacted.version == upserted.version + 1 and compacted.deleted_rows == 10
    pd.testing.assert_frame_equal(rows(), expected, check_dtype=False)
    pd.testing.assert_frame_equal(runner_read(), expected, check_dtype=False)
    assert DeltaTable(uri, storage_options=_options(s3)).version() == compacted.version


def test_a_log_entry_the_runner_publishes_never_replaces_another(s3):
    """S3's conditional put: the first writer of a version wins, the second is told."""
    location = locate(f"s3://{BUCKET}/race")
    entry = [{"commitInfo": {"operation": "TEST"}}]
    assert publish(location, 7, entry) is True
    assert publish(location, 7, [{"commitInfo": {"operation": "OTHER"}}]) is False
    body = s3.get_object(Bucket=BUCKET, Key="race/_delta_log/00000000000000000007.json")["Body"]
    assert json.loads(body.read()) == entry[0]


def test_a_store_without_conditional_writes_is_refused_before_any_work(s3, spark, tmp_path):
    spec = _mor_spec(tmp_path, "unsafe")
    write_batch(tmp_path, _batch(range(3), ts=1).assign(gone=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
        with pytest.raises(UserError, match="AWS_S3_ALLOW_UNSAFE_RENAME say this store"):
            run_pipeline(load_spec(spec.file), spark=spark)
    assert _objects(s3, "warehouse/unsafe/") == []
