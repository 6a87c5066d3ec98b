"""A table on S3 (moto's S3 API on 127.0.0.1): written, upserted, read, inspected, cleaned.

The settings are put into the environment only after the shared SparkSession started, so
Spark's Python workers never see them: the writes work only because the driver ships the
settings inside the job.
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from runner.actions.clean import clean_table
from runner.actions.compact import compact_table
from runner.actions.expand import ExpansionRequest, expand_table, run_expansion
from runner.actions.expansion_plan import plan_expansion
from runner.cli import cli
from runner.delta.log_entry import publish
from runner.delta.snapshot import open_table
from runner.errors import CommitConflictError, EnvironmentProblem, UserError
from runner.index.naming import parse_data_file_name
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from runner.storage.location import locate
from tests.helpers import assert_stale_writer_refused, read_table, write_batch, write_spec
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
    """Storage options for delta-rs written out here, independent of runner.storage.location."""
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


def _upsert_target(path: str, buckets: int = 2, **extra) -> dict:
    return {
        "path": path,
        "operation": "upsert",
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
        "index": {"buckets": buckets},
        **extra,
    }


@pytest.fixture(scope="module")
def written(s3, spark, tmp_path_factory):
    """The table after an upsert creating it and a second upsert, with its pandas reference."""
    work = tmp_path_factory.mktemp("s3")
    spec_file = write_spec(work, _upsert_target(TABLE, buckets=4))
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


def _put_parquet(uri: str, frame: pd.DataFrame) -> None:
    fs, path = locate(uri).filesystem()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, filesystem=fs)


def _table_rows(s3, uri: str) -> pd.DataFrame:
    table = DeltaTable(uri, storage_options=_options(s3))
    return pd.DataFrame(pa.table(table.scan().read_all()).to_pandas())


def test_new_files_on_s3_are_read_once(s3, needs_s3_connector, tmp_path):
    """A file source on S3 (Spark reads it through the S3 connector, with the settings of
    the environment) is listed incrementally: each file is ingested once."""
    spark = needs_s3_connector
    landing = f"s3://{BUCKET}/landing/trips"
    source = {"name": "src", "format": "parquet", "path": landing, "incremental": "new_files"}
    target = _upsert_target(f"s3://{BUCKET}/warehouse/from_s3")
    spec = load_spec(write_spec(tmp_path, target, name="from_s3", sources=[source]))
    first, second = _batch(range(0, 30), ts=5), _batch(range(20, 50), ts=7)
    _put_parquet(f"{landing}/a.parquet", first)
    created = run_pipeline(spec, spark=spark)
    assert (created.inserted, created.sources["src"]["files"]) == (30, 1)
    _put_parquet(f"{landing}/day=2/b.parquet", second)
    upserted = run_pipeline(spec, spark=spark)
    assert (upserted.rows_read, upserted.updated, upserted.inserted) == (30, 10, 20)
    assert run_pipeline(spec, spark=spark).nothing_new
    expected = _reference(first, second)
    pd.testing.assert_frame_equal(_normalized(_table_rows(s3, target["path"])), expected)


def test_csv_and_delta_sources_on_s3(s3, needs_s3_connector, written, tmp_path):
    """A csv source read whole (a record that does not parse is reported, not lost) and the
    S3 table of this module as a Delta source, joined by a transform."""
    spark = needs_s3_connector
    fs, root = locate(f"s3://{BUCKET}/landing/cities").filesystem()
    with fs.open_output_stream(f"{root}/cities.csv") as out:
        out.write(b"city,country\nams,NL\nsf,US\nnyc,US\nnot,a,record,at,all\n")
    sources = [
        {"name": "trips", "format": "delta", "path": TABLE},
        {
            "name": "cities",
            "format": "csv",
            "path": f"s3://{BUCKET}/landing/cities",
            "options": {"header": "true"},
            "schema": "city string, country string",
            "on_bad_record": "drop",
        },
    ]
    target = _upsert_target(str(tmp_path / "joined"))
    spec = load_spec(
        write_spec(
            tmp_path,
            target,
            name="joined",
            sources=sources,
            transform={
                "sql": "SELECT t.id, t.city, t.ts, t.amount, c.country "
                "FROM trips t JOIN cities c USING (city)"
            },
        )
    )
    summary = run_pipeline(spec, spark=spark)
    expected = written[3].assign(country=lambda f: f["city"].map({"ams": "NL"}).fillna("US"))
    rows = read_table(tmp_path / "joined")
    assert summary.rejected_by_rule == {"malformed_record": 1}
    pd.testing.assert_frame_equal(
        _normalized(rows).assign(country=rows.sort_values(["city", "id"])["country"].values),
        expected,
    )


def _expandable(s3, spark, tmp_path, name: str, table_type: str = "COPY_ON_WRITE"):
    """A table on S3 after a load and an upsert (with deletion vectors when merge-on-read),
    and its pandas reference."""
    target = _upsert_target(
        f"s3://{BUCKET}/warehouse/{name}", table_type=table_type, delete_marker="gone"
    )
    spec = load_spec(write_spec(tmp_path, target, name=name))
    first = _batch(range(0, 120), ts=5).assign(gone=False)
    second = _batch(range(100, 140), ts=7).assign(gone=[i % 10 == 0 for i in range(100, 140)])
    write_batch(tmp_path, first)
    run_pipeline(spec, spark=spark)
    write_batch(tmp_path, second)
    run_pipeline(spec, spark=spark)
    kept = second[~second["gone"]]
    return spec, _normalized(pd.concat([first[~first["id"].isin(second["id"])], kept]))


def _buckets_on_s3(s3, uri: str) -> dict[str, set[int]]:
    """Each partition's bucket ids, from the names of the table's live files."""
    table = DeltaTable(uri, storage_options=_options(s3))
    found: dict[str, set[int]] = {}
    for path in table.get_add_actions(flatten=True)["path"].to_pylist():
        partition, name = path.rsplit("/", 1)
        found.setdefault(partition, set()).add(parse_data_file_name(name).bucket)
    return found


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_bucket_expansion_on_s3(s3, needs_s3_connector, tmp_path, table_type):
    """multiple_rehash 2 -> 4, then overwrite 4 -> 6, on S3: the same rows, every file in
    its new bucket, each expansion one commit published with S3's conditional put."""
    spark = needs_s3_connector
    spec, expected = _expandable(s3, spark, tmp_path, f"grow_{table_type.lower()}", table_type)
    uri = spec.target.path
    version = DeltaTable(uri, storage_options=_options(s3)).version()
    _, done = expand_table(spec, ExpansionRequest(4, "multiple_rehash"), spark=spark)
    assert done is not None and done.version == version + 1 and not done.shuffle
    assert set(map(frozenset, _buckets_on_s3(s3, uri).values())) == {frozenset(range(4))}
    pd.testing.assert_frame_equal(_normalized(_table_rows(s3, uri)), expected)
    _, done = expand_table(spec, ExpansionRequest(6, "overwrite"), spark=spark)
    assert done is not None and done.version == version + 2
    assert set(map(frozenset, _buckets_on_s3(s3, uri).values())) == {frozenset(range(6))}
    pd.testing.assert_frame_equal(_normalized(_table_rows(s3, uri)), expected)


def test_automatic_expansion_on_s3(s3, needs_s3_connector, tmp_path):
    spark = needs_s3_connector
    target = _upsert_target(
        f"s3://{BUCKET}/warehouse/auto",
        index={"buckets": 2, "expansion": {"factor": 2, "max_bucket_bytes": 1500}},
    )
    spec = load_spec(write_spec(tmp_path, target, name="auto"))
    batch = _batch(range(0, 300), ts=1)
    write_batch(tmp_path, batch)
    summary = run_pipeline(spec, spark=spark)
    assert summary.expansion is not None and summary.expansion["version"] == summary.version + 1
    assert {len(b) for b in _buckets_on_s3(s3, target["path"]).values()} == {4}
    pd.testing.assert_frame_equal(_normalized(_table_rows(s3, target["path"])), _normalized(batch))


def test_expansion_races_on_s3(s3, needs_s3_connector, tmp_path):
    """The layout commit on S3: a writer that read the old layout cannot commit after it;
    an expansion whose version another writer took moves on top when that writer touched
    other partitions, and commits nothing when it touched the expanded ones."""
    spark = needs_s3_connector
    spec, _ = _expandable(s3, spark, tmp_path, "race")
    uri = spec.target.path

    stale = open_table(uri)
    expand_table(spec, ExpansionRequest(4, "multiple_rehash"), spark=spark)
    assert_stale_writer_refused(stale)

    def expansion_overtaken_by(rows: pd.DataFrame, partition: str):
        before = open_table(uri)
        plan = plan_expansion(before, spec.target, 8, "multiple_rehash", [partition])
        write_batch(tmp_path, rows)
        other = run_pipeline(spec, spark=spark)  # takes the version the expansion read
        assert other.version == before.version + 1
        return run_expansion(spark, before, spec.target, plan)

    nyc = _batch(range(2, 60, 3), ts=9).assign(gone=False)  # ids 2 mod 3: city nyc
    done = expansion_overtaken_by(nyc, "sf")
    assert done.version == open_table(uri).version  # moved on top of the upsert
    ams = _batch(range(0, 60, 3), ts=11).assign(gone=False)
    with pytest.raises(CommitConflictError, match="changed files of the partitions"):
        expansion_overtaken_by(ams, "ams")
    assert {p: len(b) for p, b in _buckets_on_s3(s3, uri).items()} == {
        "ams": 4,
        "sf": 8,
        "nyc": 4,
    }


def test_without_the_connector_spark_reads_of_s3_say_how_to_get_it(
    s3, written, tmp_path, monkeypatch
):
    """No connector in the jar cache (and none among pyspark's jars): an expansion of an
    S3 table and a run with an S3 source stop before Spark starts, naming the command that
    fetches it; the plan, which reads only the log, still works."""
    monkeypatch.setenv("RUNNER_JAR_CACHE", str(tmp_path / "empty-cache"))
    spec_file = str(written[0].file)
    version = DeltaTable(TABLE, storage_options=_options(s3)).version()
    planned = CliRunner().invoke(cli, ["plan", spec_file, "--buckets", "8"])
    assert planned.exit_code == 0, planned.output
    expanded = CliRunner().invoke(cli, ["expand", spec_file, "--buckets", "8"])
    said = str(expanded.exception)  # main() prints it: `failed: ...`, exit 1
    assert isinstance(expanded.exception, EnvironmentProblem)
    assert "hadoop-aws 3.5.0" in said and "`runner fetch-jars`" in said
    assert f"bucket expansion of {TABLE}" in said
    source = {"name": "src", "format": "parquet", "path": f"s3://{BUCKET}/landing/none"}
    other = write_spec(tmp_path, _upsert_target(str(tmp_path / "t")), sources=[source])
    ran = CliRunner().invoke(cli, ["run", str(other)])
    assert isinstance(ran.exception, EnvironmentProblem)
    assert f"source 'src' (s3://{BUCKET}/landing/none): Spark reads S3" in str(ran.exception)
    assert DeltaTable(TABLE, storage_options=_options(s3)).version() == version
    assert not (tmp_path / "t").exists()


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
            _upsert_target(
                f"s3://{BUCKET}/warehouse/{name}",
                table_type="MERGE_ON_READ",
                delete_marker="gone",
                compaction={"max_delta_files": 10, "max_deleted_fraction": 0.9},
            ),
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
