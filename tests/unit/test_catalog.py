"""The catalog entry's parts that need no catalog: Hive type names, locations, the run
history's `catalog` column reaching a history written before it; a Hive Metastore that
accepts the connection and never answers."""

from __future__ import annotations

import datetime as dt
import socket

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from runner.catalog import hive
from runner.catalog.entry import catalog_location, table_entry
from runner.errors import CatalogError
from runner.observe import history
from runner.observe.record import RunRecord
from runner.spec.model import CatalogSpec


def test_columns_get_hive_type_names_and_the_delta_parameters(tmp_path):
    data = pa.table(
        {
            "id": pa.array([1], pa.int64()),
            "n": pa.array([1], pa.int32()),
            "small": pa.array([1], pa.int16()),
            "amount": pa.array([1], pa.decimal128(10, 2)),
            "at": pa.array([1], pa.timestamp("us", tz="UTC")),
            "local": pa.array([1], pa.timestamp("us")),
            "tags": pa.array([["a"]]),
            "attrs": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
            "address": pa.array([{"zip": "1", "lines": ["x"]}]),
        }
    )
    write_deltalake(tmp_path / "t", data, configuration={"delta.appendOnly": "false"})
    entry = table_entry(DeltaTable(tmp_path / "t"), str(tmp_path / "t"))
    assert dict(entry.columns) == {
        "id": "bigint",
        "n": "int",
        "small": "smallint",
        "amount": "decimal(10,2)",
        "at": "timestamp",
        "local": "timestamp",
        "tags": "array<string>",
        "attrs": "map<string,bigint>",
        "address": "struct<zip:string,lines:array<string>>",
    }
    assert [name for name, _ in entry.columns] == data.column_names
    assert dict(entry.parameters) == {
        "delta.appendOnly": "false",
        "spark.sql.sources.provider": "delta",
        "table_type": "DELTA",
        "EXTERNAL": "TRUE",
    }
    assert entry.location == (tmp_path / "t").as_uri()


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://lake/w/trips/", "s3://lake/w/trips"),
        ("s3a://lake/w/trips", "s3://lake/w/trips"),
        ("file:///data/trips", "file:///data/trips"),
        ("/data/trips", "file:///data/trips"),
    ],
)
def test_locations_are_uris_athena_and_glue_know(uri, expected):
    assert catalog_location(uri) == expected


def test_a_history_written_before_the_catalog_column_gets_it(tmp_path):
    path = str(tmp_path / "history")
    older = pa.schema([f for f in history.SCHEMA if f.name != "catalog"])
    DeltaTable.create(
        path, older, configuration={history.HISTORY_FORMAT: "1"}, raise_if_key_not_exists=False
    )
    moment = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
    record = RunRecord(
        run_id="r1",
        kind="run",
        pipeline="p",
        table="t",
        spec_hash="",
        operation="upsert",
        started_at=moment,
        ended_at=moment,
        outcome="committed",
        catalog="glue lake.t: not registered: no answer",
    )
    assert history.append(path, [record])
    assert [r["catalog"] for r in history.read(path)] == ["glue lake.t: not registered: no answer"]


def test_a_metastore_that_does_not_answer_fails_the_registration_instead_of_waiting(
    tmp_path, monkeypatch
):
    write_deltalake(tmp_path / "t", pa.table({"id": pa.array([1], pa.int64())}))
    entry = table_entry(DeltaTable(tmp_path / "t"), str(tmp_path / "t"))
    monkeypatch.setattr(hive, "READ_TIMEOUT_MS", 200)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        uri = f"thrift://127.0.0.1:{silent.getsockname()[1]}"
        catalog = CatalogSpec(type="hive", database="lake", table="t", uri=uri)
        with pytest.raises(CatalogError, match=f"^{uri}: no answer within 0.2 s$"):
            hive.sync_hive(catalog, entry)
