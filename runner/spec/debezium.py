"""Debezium change events (kafka.value_format debezium) as the spec sees them: the columns a
Debezium source's view adds beside the row's, and the settings a target fed by one takes
unless it says otherwise.

A Debezium topic is a change feed whose order is the database's log: the target applies it
as `target.cdc` does (docs/cdc.md), by default ordered by the event's log position
(POSITION, stored: it orders later runs' events against the rows the table holds) with the
event's op (OP, not stored) deciding upsert or delete. Its record key defaults to the message
key's fields, which only the topic's records tell: such a spec loads with an open key
(Target.key_from_message), which a run fills from the table it writes, or from the topic
(runner/sources/message_key.py), before anything else reads the spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from runner.hudi.properties import RECORD_KEY
from runner.spec.model import PipelineSpec

OP = "_debezium_op"  # c (create), r (snapshot read), u (update), d (delete)
POSITION = "_debezium_position"  # the event's place in the database's log, a number
CHANGED_AT = "_debezium_ts"  # source.ts_ms: when the change was made in the database
SOURCE = "_debezium_source"  # the envelope's source block (connector, db, table, lsn...)
# not stored unless the transform keeps them under another name: the position is, as the
# change feed's sequence_by
NOT_STORED = (OP, CHANGED_AT, SOURCE)
# what an open record key holds while the spec's checks run (never read as a column)
OPEN_KEY = "_debezium_message_key"
IMPLIED_CDC = {"sequence_by": POSITION, "operation_column": OP, "delete_values": ["d"]}


def debezium_sources(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The sources of a spec mapping that read Debezium change events."""
    return [
        s
        for s in data.get("sources", [])
        if s.get("format") == "kafka" and s.get("kafka", {}).get("value_format") == "debezium"
    ]


def imply_settings(data: dict[str, Any], record_key: Sequence[str] | None = None) -> bool:
    """Give a target fed by Debezium events what it leaves out, in place: the change feed's
    settings (IMPLIED_CDC) and, as `record_key` says or else open, its record key. True when
    the key is left open (the message key's fields, known once a run reads the topic)."""
    if not debezium_sources(data):
        return False
    target = data["target"]
    if "cdc" not in target and target.get("operation", "upsert") == "upsert":
        target["cdc"] = dict(IMPLIED_CDC)
    if record_key:
        target["record_key"] = list(record_key)
        return False
    properties = (target.get("key_generator") or {}).get("properties") or {}
    if (
        "record_key" in target
        or RECORD_KEY in properties
        or RECORD_KEY in target.get("properties", {})
    ):
        return False
    target["record_key"] = OPEN_KEY
    return True


def finished(spec: PipelineSpec, open_key: bool) -> PipelineSpec:
    """The built spec, marked as fed by Debezium events when it is, its key open when
    `open_key`."""
    if not any(s.kafka and s.kafka.value_format == "debezium" for s in spec.sources):
        return spec
    target = replace(spec.target, fed_by_debezium=True)
    if open_key:
        target = replace(
            target,
            key_generator=replace(target.key_generator, record_key=()),
            index=replace(target.index, hash_fields=()),
            key_from_message=True,
        )
    return replace(spec, target=target)


def unstored(columns: Sequence[str]) -> list[str]:
    """The columns of a batch fed by Debezium events that the table does not store: the
    events' metadata but the position, and Kafka's own (`_kafka_*`)."""
    return [c for c in columns if c in NOT_STORED or c.startswith("_kafka_")]
