"""Debezium change events of a real PostgreSQL, through a real Debezium connector and Kafka
broker (tests/debezium.py), into tables: the table after each run is the database's own
`SELECT` of the captured table.

Each test is one user's story with several runs against one connector (a connector, its
slot and its first sync cost about 2 s): a snapshot then changes on both table types, a
connector that delivers events again, and the key; the column types, a new column and a
truncate; events without schemas. MySQL's envelope, which no rig here makes, is recorded."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import structlog
import yaml
from deltalake import DeltaTable
from pyspark.sql import functions as F

from runner.errors import UserError
from runner.pipeline.run import run_pipeline
from runner.sources.debezium_types import _variable_decimal
from runner.spec import load_spec
from tests.helpers import log_actions, read_table

pytestmark = pytest.mark.slow


def _spec(
    tmp_path: Path,
    bootstrap: str,
    topic: str,
    name: str = "customers",
    source: dict[str, Any] | None = None,
    **target: Any,
) -> Any:
    """A spec reading `topic` into the table `name` (the spec file `name.yaml`)."""
    source = source or {}
    kafka = {
        "bootstrap_servers": bootstrap,
        "topics": [topic],
        "value_format": "debezium",
        **source.pop("kafka", {}),
    }
    spec = {
        "name": name,
        "sources": [
            {
                "name": "changes",
                "format": "kafka",
                "incremental": {"since": "last"},
                "kafka": kafka,
                **source,
            }
        ],
        "target": {"path": name, "index": {"buckets": 2}, **target},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_spec(path)


def _rows(table: Path, columns: list[str]) -> list[tuple[Any, ...]]:
    """The table's rows read back with delta-rs, as Python values, in key order."""
    frame = pa.Table.from_pandas(read_table(table)[columns], preserve_index=False)
    return sorted(tuple(r.values()) for r in frame.to_pylist())


def _same_as_database(debezium: Any, table: Path, select: str) -> None:
    """The table's rows equal the database's `SELECT columns FROM ... ORDER BY 1`."""
    columns = select.split(" FROM ")[0].removeprefix("SELECT ").split(", ")
    assert _meanings(columns, _rows(table, columns)) == _meanings(columns, debezium.query(select))


def test_a_snapshot_then_changes_end_as_the_database_on_both_table_types(spark, tmp_path, debezium):
    """Copy-on-write and merge-on-read tables of one topic: the existing rows (the snapshot,
    op r), then an insert, an update, a delete, a primary-key change, a key deleted and
    inserted again; then the connector delivers them again from an earlier offset."""
    debezium.execute(
        "CREATE TABLE customers (id int PRIMARY KEY, name text, balance numeric(10, 2));"
        "INSERT INTO customers VALUES (1, 'ann', 10.50), (2, 'bob', -3.25), (3, 'cy', 0);"
    )
    select = "SELECT id, name, balance FROM customers ORDER BY 1"
    with debezium.connector(["customers"]) as connector:
        after_snapshot = connector.offsets()
        topic = connector.topic("customers")
        # merge-on-read: a bucket is never rewritten whole, its deletes are deletion vectors
        never = {"max_deleted_fraction": 1, "max_delta_files": 100}
        specs = {
            "cow": _spec(tmp_path, debezium.kafka.bootstrap, topic, "cow"),
            "mor": _spec(
                tmp_path,
                debezium.kafka.bootstrap,
                topic,
                "mor",
                table_type="MERGE_ON_READ",
                compaction=never,
            ),
        }
        assert {e.op for e in connector.events("customers")} == {"r"}
        for table, spec in specs.items():
            assert spec.target.key_from_message
            with structlog.testing.capture_logs() as logs:
                assert run_pipeline(spec, spark).inserted == 3
            assert _key_taken(logs) == (["id"], "source 'changes''s message")
            _same_as_database(debezium, tmp_path / table, select)

        debezium.execute(
            "INSERT INTO customers VALUES (4, 'dee', 4);"
            "UPDATE customers SET balance = 11 WHERE id = 1;"
            "DELETE FROM customers WHERE id = 2;"
            "UPDATE customers SET id = 30 WHERE id = 3;"
            "DELETE FROM customers WHERE id = 4;"
            "INSERT INTO customers VALUES (4, 'dee again', 44);"
        )
        connector.sync()
        for table, spec in specs.items():
            with structlog.testing.capture_logs() as logs:
                summary = run_pipeline(spec, spark)
            assert _key_taken(logs) == (["id"], "the table's")
            assert (summary.inserted, summary.updated, summary.deleted) == (2, 1, 2), table
            _same_as_database(debezium, tmp_path / table, select)
        last = log_actions(tmp_path / "mor", DeltaTable(str(tmp_path / "mor")).version())
        assert any((a.get("add") or {}).get("deletionVector") for a in last)

        # the connector restarted from the offset after the snapshot: every change again,
        # after a newer one of key 1
        debezium.execute("UPDATE customers SET balance = 12 WHERE id = 1;")
        connector.restart(after_snapshot)
        connector.sync()
        updates = [e for e in connector.events("customers") if e.op == "u"]
        # 11 and 12, then again what the restart streams from the earlier offset (11 at
        # least: an update older than the table's row, delivered after it)
        assert len(updates) >= 3
        for table, spec in specs.items():
            summary = run_pipeline(spec, spark)
            assert summary.updated == 1, table  # key 1 to 12; the rest is older than the table
            _same_as_database(debezium, tmp_path / table, select)

    # a spec naming another record key than the table's is refused
    other = _spec(tmp_path, debezium.kafka.bootstrap, topic, "cow", record_key=["name"])
    version = DeltaTable(str(tmp_path / "cow")).version()
    with pytest.raises(UserError, match=r"keygen.record.key: table has 'id', spec .* has 'name'"):
        run_pipeline(other, spark)
    assert DeltaTable(str(tmp_path / "cow")).version() == version


def _key_taken(logs: list[dict[str, Any]]) -> tuple[list[str], str]:
    """Where the run took its record key from, as its log says first."""
    taken = next(e for e in logs if e["event"] == "record_key_from_message_key")
    return taken["fields"], taken["taken_from"]


KINDS = """
CREATE TYPE feeling AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE kinds (
    id int PRIMARY KEY, amount numeric(12, 3), whole numeric, day date, at3 timestamp(3),
    at timestamp, zoned timestamptz, clock time, doc jsonb, ident uuid, feeling feeling,
    wide numeric(50, 10)
);
INSERT INTO kinds VALUES
    (1, -1234.5, 3.14159265358979323846264338327950288419716939937511, '1969-07-20',
     '1969-12-31 23:59:59.123', '1900-01-01 00:00:00.000001', '2024-02-29 23:30:00+05:30',
     '23:59:59.999999', '{"a": [1, 2.5, null], "b": {"c": "d"}}',
     'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'happy',
     -1234567890123456789012345678901234.5678901234),
    (2, 0.001, -123456789012345678901234567890.5, '2038-01-19', '2100-01-01 00:00:00.5',
     '1970-01-01 00:00:00', '1960-05-01 12:00:00+00', '00:00:00', '[]',
     '00000000-0000-0000-0000-000000000000', 'sad', 0.0000000001),
    (3, 99999.999, 100, '0001-01-01', NULL, NULL, NULL, NULL, 'null', NULL, NULL, 0),
    (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
"""
# the Delta types of the Debezium types (runner/sources/debezium_types.py)
KIND_TYPES = {
    "id": "integer",
    "amount": "decimal(12,3)",  # Connect Decimal
    "whole": "string",  # VariableScaleDecimal, every digit
    "day": "date",  # io.debezium.time.Date
    "at3": "timestamp_ntz",  # io.debezium.time.Timestamp (ms)
    "at": "timestamp_ntz",  # io.debezium.time.MicroTimestamp
    "zoned": "timestamp",  # io.debezium.time.ZonedTimestamp
    "clock": "string",  # io.debezium.time.MicroTime, HH:MM:SS.ffffff
    "doc": "string",  # io.debezium.data.Json
    "ident": "string",  # io.debezium.data.Uuid
    "feeling": "string",  # io.debezium.data.Enum
    "wide": "string",  # Connect Decimal past 38 digits, every digit
}
# PostgreSQL's text of a value and the table's value, as one Python value each
_MEANING: dict[str, Any] = {
    "id": int,
    "amount": Decimal,
    "balance": Decimal,
    "whole": Decimal,  # Debezium drops a numeric's trailing zeros (its scale)
    "wide": Decimal,
    "day": dt.date.fromisoformat,
    "at3": dt.datetime.fromisoformat,
    "at": dt.datetime.fromisoformat,
    "zoned": dt.datetime.fromisoformat,
    "clock": dt.time.fromisoformat,
    "at_ms": int,
    "doc": json.loads,
}


def _meaning(column: str, value: Any) -> Any:
    if value is None or value == "":  # psql -At: NULL is ''
        return None
    if isinstance(value, str):
        return _MEANING.get(column, str)(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def _meanings(columns: list[str], rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(_meaning(c, v) for c, v in zip(columns, row, strict=True)) for row in rows]


def _kinds_as_database(debezium: Any, table: Path, columns: list[str]) -> None:
    """The table's values mean what the database's do."""
    wanted = debezium.query(f"SELECT {', '.join(columns)} FROM kinds ORDER BY 1")
    assert _meanings(columns, _rows(table, columns)) == _meanings(columns, wanted)


def test_decimal_bytes_of_any_length_keep_every_digit(spark):
    """Connect Decimals' bytes (two's complement, big-endian, base64 in JSON) as text, past
    38 digits too."""
    cases = [(0, 2), (-1, 0), (5, 3), (-5, 3), (255, 1), (-256, 1), (12345, -2), (2**127, 0)]
    cases += [(-(10**60) - 1, 20), (10**45 + 7, 45), (-(2**200), 7)]
    rows = []
    for unscaled, scale in cases:
        size = (unscaled.bit_length() + 8) // 8
        encoded = unscaled.to_bytes(size, "big", signed=True)
        rows.append((base64.b64encode(encoded).decode(), scale))
    frame = spark.createDataFrame(rows, "value string, scale int")
    got = [r[0] for r in frame.select(_variable_decimal(F.struct("scale", "value"))).collect()]
    exact = decimal.Context(prec=100)
    assert got == [f"{Decimal(u).scaleb(-s, exact):f}" for u, s in cases]


def test_column_types_a_new_column_and_a_truncate(spark, tmp_path, debezium):
    """Debezium's types as the documented Delta types with the database's values; a column
    added to the database table, refused under schema_evolution none, added under add; a
    truncate refused by default, passed over with on_truncate skip."""
    debezium.execute(KINDS)
    columns = list(KIND_TYPES)
    # Debezium skips truncates unless told otherwise
    with debezium.connector(["kinds"], config={"skipped.operations": "none"}) as connector:
        topic = connector.topic("kinds")
        spec = _spec(tmp_path, debezium.kafka.bootstrap, topic, "kinds", schema_evolution="none")
        assert run_pipeline(spec, spark).inserted == 4
        _kinds_as_database(debezium, tmp_path / "kinds", columns)
        stored = json.loads(DeltaTable(str(tmp_path / "kinds")).schema().to_json())["fields"]
        types = {f["name"]: f["type"] for f in stored if not f["name"].startswith("_")}
        assert types == KIND_TYPES
        # of the events' metadata and Kafka's columns, only the position is stored
        metadata = {f["name"] for f in stored if f["name"].startswith(("_debezium", "_kafka"))}
        assert metadata == {"_debezium_position"}

        debezium.execute(
            "ALTER TABLE kinds ADD COLUMN note text;"
            "UPDATE kinds SET note = 'hello', amount = amount + 1 WHERE id = 1;"
            "INSERT INTO kinds (id, note) VALUES (5, 'new');"
        )
        connector.sync()
        version = DeltaTable(str(tmp_path / "kinds")).version()
        lacks = r"column note \(string\) that the table lacks, and target.schema_evolution is none"
        with pytest.raises(UserError, match=lacks):
            run_pipeline(spec, spark)
        assert DeltaTable(str(tmp_path / "kinds")).version() == version
        spec = _spec(tmp_path, debezium.kafka.bootstrap, topic, "kinds")
        summary = run_pipeline(spec, spark)
        assert summary.columns_added == ["note"]
        _kinds_as_database(debezium, tmp_path / "kinds", [*columns, "note"])

        kept = debezium.query("SELECT id, note FROM kinds ORDER BY 1")
        debezium.execute("TRUNCATE kinds; INSERT INTO kinds (id, note) VALUES (6, 'after');")
        connector.sync()
        [truncate] = [e for e in connector.events("kinds") if e.op == "t"]
        version = DeltaTable(str(tmp_path / "kinds")).version()
        with pytest.raises(UserError) as refused:
            run_pipeline(spec, spark)
        assert f"topic {topic}, partition 0, offset {truncate.offset}" in str(refused.value)
        assert "kafka.debezium.on_truncate: skip" in str(refused.value)
        assert DeltaTable(str(tmp_path / "kinds")).version() == version  # offsets unmoved
        skip = {"kafka": {"debezium": {"on_truncate": "skip"}}}
        spec = _spec(tmp_path, debezium.kafka.bootstrap, topic, "kinds", source=skip)
        assert run_pipeline(spec, spark).inserted == 1
        after = debezium.query("SELECT id, note FROM kinds ORDER BY 1")
        assert _meanings(["id", "note"], _rows(tmp_path / "kinds", ["id", "note"])) == (
            _meanings(["id", "note"], sorted([*kept, *after], key=lambda r: int(r[0])))
        )


def test_events_without_schemas_take_the_declared_schema(spark, tmp_path, debezium):
    """JsonConverter with schemas.enable=false: the source's schema gives the columns (a
    decimal from its base64 bytes, a date from its day number; a timestamp is the number
    Debezium writes, its unit told by the schema only)."""
    debezium.execute(
        "CREATE TABLE schemaless (id int PRIMARY KEY, amount numeric(12, 3), day date, "
        "at_ms timestamp(3), doc jsonb);"
        "INSERT INTO schemaless VALUES (1, -1234.5, '1969-07-20', '1969-12-31 23:59:59.123', "
        "'{\"a\": 1}'), (2, 7, '2038-01-19', '2100-01-01 00:00:00.5', '[]');"
    )
    declared = {"schema": "id int, amount decimal(12,3), day date, at_ms bigint, doc string"}
    columns = ["id", "amount", "day", "at_ms", "doc"]
    select = (
        "SELECT id, amount, day, (extract(epoch FROM at_ms) * 1000)::bigint, doc "
        "FROM schemaless ORDER BY 1"
    )
    with debezium.connector(["schemaless"], schemas=False) as connector:
        topic = connector.topic("schemaless")
        spec = _spec(tmp_path, debezium.kafka.bootstrap, topic, "schemaless", source=declared)
        assert run_pipeline(spec, spark).inserted == 2
        assert _meanings(columns, _rows(tmp_path / "schemaless", columns)) == (
            _meanings(columns, debezium.query(select))
        )
        debezium.execute(
            "UPDATE schemaless SET amount = 0.001 WHERE id = 1;DELETE FROM schemaless WHERE id = 2;"
        )
        connector.sync()
        run_pipeline(spec, spark)
        assert _meanings(columns, _rows(tmp_path / "schemaless", columns)) == (
            _meanings(columns, debezium.query(select))
        )


MYSQL = Path(__file__).parents[1] / "data" / "debezium" / "mysql"


def test_mysql_events_apply_in_binlog_order(spark, tmp_path, kafka_broker):
    """MySQL's envelope (recorded, tests/data/debezium/mysql): its logical types, and its
    order by binlog file, position and row, not by Kafka's: the creates delivered again
    after the update and the delete change nothing."""
    records = json.loads((MYSQL / "assembled-logical-types.json").read_text())
    records += records[:2]  # the two creates again, older than what follows them
    topic = kafka_broker.unique_topic("mysql")
    kafka_broker.create_topic(topic)
    kafka_broker.produce(
        topic,
        [None if r["value"] is None else json.dumps(r["value"]) for r in records],
        keys=[json.dumps(r["key"]) for r in records],
    )
    spec = _spec(tmp_path, kafka_broker.bootstrap, topic, "typed")
    with structlog.testing.capture_logs() as logs:
        summary = run_pipeline(spec, spark)
    assert not [e for e in logs if e["event"] == "debezium_ordered_by_time"]
    assert (summary.inserted, summary.deleted) == (1, 0)  # 2 was created and deleted
    [row] = pa.Table.from_pandas(read_table(tmp_path / "typed")).to_pylist()
    assert {k: v for k, v in row.items() if not k.startswith("_")} == {
        "id": 1,
        "price": Decimal("100.49"),  # the update's
        "day": dt.date(2024, 1, 2),
        "at_time": "13:14:15.167891",
        "at_dt3": dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
        "at_dt6": dt.datetime(2024, 1, 2, 3, 4, 5, 678901),
        "at_ts": dt.datetime(2024, 1, 2, 1, 4, 5, 678901, tzinfo=dt.UTC),
        "doc": '{"a":[1,2]}',
        "feel": "happy",
    }
    # mysql-bin.000003, position 1570, row 0
    assert row["_debezium_position"] == 3 * 10**25 + 1570 * 10**6
