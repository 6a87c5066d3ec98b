"""A Debezium source's spec (runner/spec/debezium.py) through `runner validate`: what a target
fed by one takes unless it says otherwise, what it refuses; and the record key fields a
message key tells (runner/sources/message_key.py). No JVM, no broker."""

from __future__ import annotations

import json

import pytest

from runner.errors import UserError
from runner.sources.message_key import key_fields
from runner.spec.loader import load_spec
from tests.unit.test_validate import _validate

DEBEZIUM = """\
name: customers
sources:
  - name: customers
    format: kafka
    incremental: {since: last}
    kafka:
      bootstrap_servers: "broker:9092"
      topics: [dbz.public.customers]
      value_format: debezium
target:
  path: warehouse/customers
  index: {buckets: 4}
"""


def test_a_debezium_target_is_a_change_feed_keyed_by_the_message_key(tmp_path):
    assert _validate(tmp_path, DEBEZIUM) == (0, ["p.yaml: ok"])
    target = load_spec(tmp_path / "p.yaml").target
    assert target.operation == "upsert"
    assert target.cdc is not None
    assert target.cdc.sequence_by == "_debezium_position"
    assert target.cdc.operation_column == "_debezium_op"
    assert target.cdc.delete_values == ("d",)
    assert target.key_from_message and target.key_generator.record_key == ()


def test_a_named_record_key_and_change_feed_are_kept(tmp_path):
    text = DEBEZIUM.replace(
        "  index: {buckets: 4}",
        "  record_key: [id]\n  index: {buckets: 4, hash_fields: id}\n"
        "  cdc: {sequence_by: _debezium_ts, operation_column: _debezium_op, "
        "delete_values: [d, t]}",
    )
    assert _validate(tmp_path, text) == (0, ["p.yaml: ok"])
    target = load_spec(tmp_path / "p.yaml").target
    assert not target.key_from_message
    assert target.key_generator.record_key == ("id",)
    assert target.cdc is not None and target.cdc.sequence_by == "_debezium_ts"
    assert target.cdc.delete_values == ("d", "t")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "  index: {buckets: 4}",
            "  operation: insert\n  index: {buckets: 4}",
            "p.yaml:12:14: target.operation: a Debezium source's events are applied as a change "
            "feed, with upsert, not insert: drop target.operation",
        ),
        (
            "  index: {buckets: 4}",
            "  index: {buckets: 4, hash_fields: id}",
            "p.yaml:12:36: target.index.hash_fields: names record key fields, and "
            "target.record_key is left to the message key: name the record key too "
            "(target.record_key), or drop hash_fields",
        ),
        (
            "      value_format: debezium",
            "      value_format: debezium\n      avro_schema: customers.avsc",
            "p.yaml:10:20: sources[0].kafka.avro_schema: value_format debezium reads Avro "
            "through schema_registry_url (the envelope's schema changes with the table); "
            "drop avro_schema",
        ),
    ],
)
def test_what_a_debezium_spec_refuses_is_one_line_each(tmp_path, old, new, expected):
    assert old in DEBEZIUM
    assert _validate(tmp_path, DEBEZIUM.replace(old, new)) == (2, [expected])


@pytest.mark.parametrize(
    ("key", "fields"),
    [
        # Kafka Connect's JsonConverter with schemas: the schema's fields, in its order
        (
            {
                "schema": {
                    "type": "struct",
                    "fields": [
                        {"type": "int32", "optional": False, "field": "tenant"},
                        {"type": "string", "optional": False, "field": "id"},
                    ],
                    "optional": False,
                    "name": "dbz.public.orders.Key",
                },
                "payload": {"id": "a", "tenant": 7},
            },
            ("tenant", "id"),
        ),
        # without schemas: the object's keys, in their order
        ({"id": 1}, ("id",)),
        ({"tenant": 7, "id": "a"}, ("tenant", "id")),
    ],
)
def test_a_message_keys_fields(key, fields):
    assert key_fields(json.dumps(key).encode(), "source 's'") == fields


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"\x00\x00\x00\x00\x01\x02", "the message keys are not JSON (Avro or another converter?)"),
        (b"42", "a message key is b'42', not a struct of the table's key fields"),
        (b"{}", "a message key is b'{}', not a struct of the table's key fields"),
        (
            json.dumps({"schema": {"type": "int32"}, "payload": 4}).encode(),
            "not a struct of the table's key fields",
        ),
    ],
)
def test_a_key_that_is_not_a_struct_is_refused_saying_to_name_the_record_key(raw, says):
    with pytest.raises(UserError) as refused:
        key_fields(raw, "source 's'")
    message = str(refused.value)
    assert message.startswith("source 's': ") and says in message
    assert message.endswith("name the record key in target.record_key")
