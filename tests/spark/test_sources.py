"""Sources and the SQL transform: several sources joined, CSV options, clear errors."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import structlog
import structlog.testing
import yaml

from runner.errors import UserError
from runner.pipeline.run import run_pipeline
from runner.sources.checkpoint import starting_points
from runner.sources.plan import plan_sources, read_source
from runner.spec import load_spec
from tests.helpers import read_table

TARGET = {
    "path": "table",
    "operation": "upsert",
    "record_key": "order_id",
    "precombine_field": "ts",
    "key_generator": {"type": "SIMPLE", "partition_fields": "country"},
    "index": {"buckets": 2},
}


def _spec(tmp_path, sql: str | None, sources: list[dict]):
    spec = {"name": "orders", "sources": sources, "target": TARGET}
    if sql:
        spec["transform"] = {"sql": sql}
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_spec(path)


@pytest.fixture
def csv_and_json(tmp_path):
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders" / "o.csv").write_text(
        "order_id;customer_id;ts;total\n1;10;100;9.5\n2;11;100;3.0\n3;10;101;7.25\n"
    )
    (tmp_path / "customers").mkdir()
    (tmp_path / "customers" / "c.json").write_text(
        '{"customer_id": 10, "country": "nl"}\n{"customer_id": 11, "country": "br"}\n'
    )
    return [
        {
            "name": "orders",
            "format": "csv",
            "path": "orders",
            "schema": "order_id long, customer_id long, ts long, total double",
            "options": {"header": True, "sep": ";"},
        },
        {"name": "customers", "format": "json", "path": "customers"},
    ]


def test_two_sources_joined_by_the_transform(spark, tmp_path, csv_and_json):
    sql = (
        "SELECT o.order_id, o.ts, o.total, c.country FROM orders o "
        "JOIN customers c ON o.customer_id = c.customer_id"
    )
    summary = run_pipeline(_spec(tmp_path, sql, csv_and_json), spark=spark)
    assert summary.inserted == 3 and summary.partitions_touched == 2
    table = read_table(tmp_path / "table").set_index("order_id")
    assert table.loc[2, "country"] == "br" and table.loc[3, "total"] == 7.25
    assert set(table["_partition_path"]) == {"nl", "br"}


def test_a_transform_error_names_the_spec(spark, tmp_path, csv_and_json):
    spec = _spec(tmp_path, "SELECT nope FROM orders", csv_and_json)
    with pytest.raises(UserError, match=r"transform.sql in .*orders.yaml: .*nope"):
        run_pipeline(spec, spark=spark)


def test_a_missing_source_path_is_a_user_error(spark, tmp_path, csv_and_json):
    # the target's fields are in the declared schema, or `load_spec` refuses it first
    sources = [
        {**csv_and_json[0], "path": "missing", "schema": "order_id long, country string, ts long"}
    ]
    with pytest.raises(UserError, match=r"source 'orders': path .*/missing does not exist$"):
        run_pipeline(_spec(tmp_path, None, sources), spark=spark)


def test_a_key_field_missing_from_the_input_lists_the_columns(spark, tmp_path, csv_and_json):
    with pytest.raises(
        UserError,
        match=r"^the partition field 'country' is not among the transform's output columns: "
        r"order_id, customer_id, ts, total$",
    ):
        run_pipeline(_spec(tmp_path, "SELECT * FROM orders", csv_and_json), spark=spark)


def test_a_failed_run_logs_the_stage_it_failed_in(spark, tmp_path, csv_and_json):
    with structlog.testing.capture_logs() as events, pytest.raises(UserError):
        run_pipeline(_spec(tmp_path, "SELECT * FROM orders", csv_and_json), spark=spark)
    failed = [e for e in events if e["event"] == "stage_failed"]
    assert [(e["stage"], e["error"]) for e in failed] == [("plan", "UserError")]


def test_many_new_local_files_are_listed_without_a_spark_job(spark, tmp_path):
    """Spark lists more than 32 paths in a job of its own (about half a second); the runner
    reads 40 new local files without one, and leaves the session's setting as it was."""
    (tmp_path / "orders").mkdir()
    for i in range(40):
        row = {"order_id": [i], "country": ["nl"], "ts": [1], "total": [i + 0.5]}
        pq.write_table(pa.table(row), tmp_path / "orders" / f"o{i:02}.parquet")
    sources = [
        {
            "name": "orders",
            "format": "parquet",
            "path": str(tmp_path / "orders"),
            "incremental": "new_files",
            "schema": "order_id long, country string, ts long, total double",  # no inference job
        }
    ]
    spec = _spec(tmp_path, None, sources)
    setting = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(setting, None)
    plan = plan_sources(spec, starting_points(spec, None))[0]
    assert len(plan.paths) == 40
    spark.sparkContext.setJobGroup("listing", "a source's files listed")
    try:
        frame = read_source(spark, plan)  # the file index is built (and listed) here
        jobs = spark.sparkContext.statusTracker().getJobIdsForGroup("listing")
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert not jobs
    assert spark.conf.get(setting, None) == before
    assert frame.count() == 40
