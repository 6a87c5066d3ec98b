"""Sources and the SQL transform: several sources joined, CSV options, clear errors."""

from __future__ import annotations

import pytest
import yaml

from runner.commands.run import run_pipeline
from runner.errors import UserError
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
    sources = [{**csv_and_json[0], "path": "missing"}]
    with pytest.raises(UserError, match=r"source 'orders' \(csv at .*missing\): .*PATH_NOT_FOUND"):
        run_pipeline(_spec(tmp_path, None, sources), spark=spark)


def test_a_key_field_missing_from_the_input_lists_the_columns(spark, tmp_path, csv_and_json):
    with pytest.raises(UserError, match="key generator field 'country' is not in the input"):
        run_pipeline(_spec(tmp_path, "SELECT * FROM orders", csv_and_json), spark=spark)
