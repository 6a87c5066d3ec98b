"""The fields of a Kafka message key, for a target fed by Debezium events that names no
record key (runner/spec/debezium.py): Debezium keys each table's topic by its primary key.

A run learns them from the table it writes (its stored record key, runner.keygen.record.key),
or, for a table not created yet, from the first keyed record of the source's topics, read
by a consumer on the driver (the Kafka client Spark's connector brings) from each
partition's earliest offset. A key is Kafka Connect's JsonConverter output: with schemas
`{"schema": {"type": "struct", "fields": [...]}, "payload": {...}}`, the schema's fields in
order; without, the object's keys in order.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from runner.delta.snapshot import open_table
from runner.errors import UserError
from runner.sources.kafka import driver_consumer, java_partitions, topic_partitions
from runner.spec.model import Source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STORED_KEY = "runner.keygen.record.key"


def stored_record_key(table_path: str) -> tuple[str, ...] | None:
    """The record key fields the table at `table_path` was created with; None when there is
    no table yet."""
    snapshot = open_table(table_path)
    if snapshot is None:
        return None
    stored = snapshot.configuration.get(STORED_KEY, "")
    return tuple(f for f in stored.split(",") if f) or None


def topic_key_fields(spark: SparkSession, source: Source) -> tuple[str, ...] | None:
    """The fields of the first keyed record of the source's topics; None when they hold
    no record at all."""
    raw = _first_key(spark, source)
    return None if raw is None else key_fields(raw, f"source '{source.name}'")


def key_fields(raw: bytes, where: str) -> tuple[str, ...]:
    """The field names of one message key (JSON, with or without its schema)."""
    try:
        key: Any = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserError(
            f"{where}: the message keys are not JSON (Avro or another converter?): name the "
            "record key in target.record_key"
        ) from None
    if isinstance(key, dict) and isinstance(key.get("schema"), dict) and "payload" in key:
        fields = [str(f.get("field")) for f in key["schema"].get("fields") or []]
    elif isinstance(key, dict):
        fields = [str(k) for k in key]
    else:
        fields = []
    if not fields:
        raise UserError(
            f"{where}: a message key is {raw[:200]!r}, not a struct of the table's key fields: "
            "name the record key in target.record_key"
        )
    return tuple(fields)


def _first_key(spark: SparkSession, source: Source) -> bytes | None:
    kafka = source.kafka
    assert kafka is not None
    where = f"source '{source.name}'"
    with driver_consumer(spark, kafka, where, {"max.poll.records": "50"}) as found:
        jvm, consumer, wait, timeout_ms = found
        listed = java_partitions(jvm, topic_partitions(jvm, consumer, kafka, wait, where))
        if listed.isEmpty():
            return None
        consumer.assign(listed)
        consumer.seekToBeginning(listed)
        return _keyed_record(jvm, consumer, listed, timeout_ms)


def _keyed_record(jvm: Any, consumer: Any, listed: Any, timeout_ms: int) -> bytes | None:
    """The first record key polled, until every partition is read to its end."""
    ends = consumer.endOffsets(listed, jvm.java.time.Duration.ofMillis(timeout_ms))
    deadline = time.monotonic() + timeout_ms / 1000
    while time.monotonic() < deadline:
        records = consumer.poll(jvm.java.time.Duration.ofMillis(200)).iterator()
        while records.hasNext():
            key = records.next().key()
            if key is not None:
                return bytes(key)
        if all(consumer.position(tp) >= ends.get(tp) for tp in listed):
            return None
    raise UserError(
        f"no answer from the Kafka brokers within {timeout_ms / 1000:g} s while reading a "
        "message key (for the record key): check kafka.bootstrap_servers, or name the record "
        "key in target.record_key"
    )
