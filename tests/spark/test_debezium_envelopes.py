"""Debezium envelopes decoded as the source's view, without a broker: the recorded messages
of tests/data/debezium (PostgreSQL's from the rig, MySQL's from Debezium's own documentation
and tests), and Avro envelopes in Confluent's wire format through a schema registry."""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest

from runner.errors import UserError
from runner.sources.debezium_values import decode_debezium
from runner.sources.kafka import KAFKA_COLUMNS
from runner.spec.model import DebeziumSpec, KafkaSpec, Source

DATA = Path(__file__).parents[1] / "data" / "debezium"
RECORDS = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestamptype int, headers array<struct<key:string,value:binary>>"
)


def _compact(value: Any) -> bytes:
    """As Kafka Connect's JsonConverter writes it: no spaces (a spaced event, as the TOAST
    case below sends, takes the slower way to its schema)."""
    return json.dumps(value, separators=(",", ":")).encode()


def _records(spark: Any, values: list[bytes | None]) -> Any:
    rows = [(None, v, "t", 0, i, None, 0, []) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, RECORDS).withColumnsRenamed(KAFKA_COLUMNS)


def _recorded(spark: Any, path: str) -> Any:
    messages = json.loads((DATA / path).read_text())
    return _records(
        spark,
        [None if m["value"] is None else _compact(m["value"]) for m in messages],
    )


def _source(**kafka: Any) -> Source:
    schema = kafka.pop("schema", None)
    return Source(
        name="orders",
        format="kafka",
        schema=schema,
        kafka=KafkaSpec(bootstrap_servers="x", topics=("t",), value_format="debezium", **kafka),
    )


def _view(spark: Any, records: Any, **kafka: Any) -> list[dict[str, Any]]:
    frame = decode_debezium(records, _source(**kafka))
    return [r.asDict() for r in frame.orderBy("_kafka_offset").collect()]


def test_postgres_events_with_schemas_become_rows_of_delta_types(spark):
    rows = _view(spark, _recorded(spark, "postgres/orders.json"))
    assert [r["_debezium_op"] for r in rows] == ["r", "r", "c", "u", "d", "d", "c", "c"]
    first, update = rows[0], rows[3]
    assert first["amount"] == Decimal("12.34") and rows[1]["amount"] == Decimal("-0.50")
    assert first["ratio"] == "0.125"  # numeric without a scale: every digit, as text
    assert first["day"] == dt.date(2024, 1, 2) and rows[2]["day"] == dt.date(1969, 12, 31)
    assert first["at_ms"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678000)  # timestamp_ntz
    assert first["at_us"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678901)
    assert first["at_tz"] == dt.datetime(2024, 1, 2, 1, 4, 5, 678901)  # the UTC instant
    assert (first["t_ms"], first["t_us"]) == ("13:14:15.167000", "13:14:15.167891")
    assert first["doc"] == '{"a": [1, 2]}' and first["feel"] == "happy"
    assert first["ref"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert update["amount"] == Decimal("99.95") and update["id"] == 1
    # a delete's row is its `before`: the key; the key change is a delete and a create
    assert [(r["_debezium_op"], r["id"]) for r in rows[4:7]] == [("d", 2), ("d", 3), ("c", 30)]
    assert rows[-1]["note"] == "added" and first["note"] is None  # a column added later
    positions = [r["_debezium_position"] for r in rows]
    assert positions[0] == positions[1] < positions[2] < positions[3]  # the snapshot's, then
    assert rows[5]["_debezium_position"] == rows[6]["_debezium_position"]  # one key change
    assert all(r["__runner_malformed"] is None for r in rows)


def test_events_without_schemas_take_the_declared_columns(spark):
    records = _recorded(spark, "postgres/plain-schemaless.json")
    with pytest.raises(UserError, match=r"carry no schema .* declare them in the source's schema"):
        _view(spark, records)
    rows = _view(spark, records, schema="id int, amount decimal(10,2), day date, feel string")
    assert [(r["_debezium_op"], r["id"]) for r in rows] == [("c", 1), ("u", 1), ("d", 1)]
    assert rows[0]["amount"] is not None and rows[0]["day"] is not None


def test_mysql_events_are_ordered_by_binlog_file_position_and_row(spark):
    rows = _view(spark, _recorded(spark, "mysql/assembled-logical-types.json"))
    assert [r["_debezium_op"] for r in rows] == ["c", "c", "u", "u", "d"]
    positions = [r["_debezium_position"] for r in rows]
    assert positions == sorted(positions) and len(set(positions)) == 5  # row breaks the tie
    assert positions[0] == Decimal(3 * 10**25 + 1200 * 10**6)  # mysql-bin.000003, pos 1200
    assert rows[0]["price"] is not None and rows[1]["day"] == dt.date(1969, 12, 31)
    tutorial = _view(spark, _recorded(spark, "mysql/tutorial-customers.json"))
    assert [r["_debezium_op"] for r in tutorial] == ["r", "u", "d"]
    assert all(r["_debezium_position"] is not None for r in tutorial)


def _with_op(path: str, index: int, op: str) -> list[bytes | None]:
    messages = json.loads((DATA / path).read_text())
    messages[index]["value"]["payload"]["op"] = op
    return [None if m["value"] is None else _compact(m["value"]) for m in messages]


def test_a_truncate_stops_the_batch_unless_skipped_and_a_bad_event_is_malformed(spark):
    values = _with_op("postgres/orders.json", 2, "t")
    with pytest.raises(
        UserError, match=r"truncate .* topic t, partition 0, offset 2; .*on_truncate: skip"
    ):
        _view(spark, _records(spark, values))
    skipped = _view(spark, _records(spark, values), debezium=DebeziumSpec(on_truncate="skip"))
    assert [r["_kafka_offset"] for r in skipped] == [0, 1, 3, 4, 6, 8, 9]
    toasted = json.loads((DATA / "postgres/orders.json").read_text())[3]["value"]
    toasted["payload"]["after"]["doc"] = "__debezium_unavailable_value"
    with pytest.raises(UserError, match=r"offset 0 holds __debezium_unavailable_value .* REPLICA"):
        _view(spark, _records(spark, [json.dumps(toasted).encode()]))
    bad = _view(
        spark, _records(spark, [*_with_op("postgres/orders.json", 0, "x")[:1], b"{not json"])
    )
    assert [r["__runner_malformed_file"] for r in bad] == [
        "topic t, partition 0, offset 0",
        "topic t, partition 0, offset 1",
    ]


ROW = {
    "type": "record",
    "name": "Value",
    "namespace": "db.public.orders",
    "fields": [
        {"name": "id", "type": "int"},
        {
            "name": "amount",
            "type": [
                "null",
                {
                    "type": "bytes",
                    "logicalType": "decimal",
                    "precision": 10,
                    "scale": 2,
                    "connect.name": "org.apache.kafka.connect.data.Decimal",
                },
            ],
            "default": None,
        },
        {
            "name": "day",
            "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}],
            "default": None,
        },
        {
            "name": "at_us",
            "type": ["null", {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}],
            "default": None,
        },
    ],
}
ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "db.public.orders",
    "fields": [
        {"name": "before", "type": ["null", ROW], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.postgresql",
                "fields": [
                    {"name": "connector", "type": "string"},
                    {"name": "ts_ms", "type": "long"},
                    {"name": "lsn", "type": ["null", "long"], "default": None},
                ],
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}


def _framed(schema_id: int, record: dict[str, Any]) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(ENVELOPE), record)
    return b"\0" + struct.pack(">I", schema_id) + body.getvalue()


def test_avro_events_through_a_schema_registry(spark, schema_registry):
    schema_id = schema_registry.register("t-value", json.dumps(ENVELOPE))
    source = {"connector": "postgresql", "ts_ms": 1_700_000_000_000}
    row = {"id": 1, "amount": Decimal("-12.34"), "day": -1, "at_us": 1_000_001}
    values = [
        _framed(
            schema_id,
            {"before": None, "after": row, "source": {**source, "lsn": 10}, "op": "c", "ts_ms": 1},
        ),
        None,
        _framed(
            schema_id,
            {
                "before": {**row, "amount": None},
                "after": None,
                "source": {**source, "lsn": 20},
                "op": "d",
                "ts_ms": 2,
            },
        ),
        b"\0\0\0\0\x63junk",
    ]
    rows = _view(spark, _records(spark, values), schema_registry_url=schema_registry.url)
    assert [(r["_debezium_op"], r["id"], r["_debezium_position"]) for r in rows[:2]] == [
        ("c", 1, Decimal(10)),
        ("d", 1, Decimal(20)),
    ]
    assert rows[0]["amount"] == Decimal("-12.34") and rows[0]["day"] == dt.date(1969, 12, 31)
    assert rows[0]["at_us"] == dt.datetime(1970, 1, 1, 0, 0, 1, 1)
    assert rows[2]["__runner_malformed_file"] == "topic t, partition 0, offset 3"
