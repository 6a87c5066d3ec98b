"""Debezium change events (kafka.value_format debezium) as the source's view: one row per
event, the row's columns, then the event's metadata (runner/spec/debezium.py names them),
then Kafka's.

An event is Kafka Connect's JsonConverter output of Debezium's envelope: `{"schema": ...,
"payload": {"before", "after", "source", "op", "ts_ms"}}` with schemas enabled, the payload
alone without. The row is `after` (c: create, r: snapshot read, u: update) or, for a delete
(d), `before`, which holds at least the key. With schemas, the batch's distinct schemas
give the columns and their types (runner/sources/debezium_types.py); a column a later
schema adds is in the view, null in events written before it (schema_evolution decides
what the table does with it). Without, the source's declared `schema:` gives them.

The order is the database's log: `_debezium_position` is PostgreSQL's `source.lsn`, or
MySQL's binlog file number, position and row (file * 10^25 + pos * 10^6 + row), so a key's
events apply in the order the database made them, and an event delivered again (a connector
restarted from an earlier offset) is older than, or as old as, what the table holds and
changes nothing. Another connector is ordered by `source.ts_ms` (milliseconds: events of a
key within one are applied in their Kafka order), and the run says so.

A tombstone (no value: Kafka's compaction marker after a delete) is consumed. A truncate (t)
stops the run unless kafka.debezium.on_truncate is skip. So does an event holding Debezium's
placeholder for a value PostgreSQL did not send (an unchanged TOASTed value of an update,
without REPLICA IDENTITY FULL): storing it would overwrite the value the table holds. An
event that does not parse, has another op, or has no row meets the source's on_bad_record
with its topic, partition and offset.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from runner.errors import UserError
from runner.sources.debezium_types import (
    ColumnType,
    avro_row_columns,
    decimal_of,
    row_columns,
)
from runner.sources.kafka_values import KAFKA_NAMES, origin, registry_values
from runner.sources.text_records import (
    CORRUPT,
    MALFORMED_FILE,
    permissive_options,
    with_corrupt_column,
)
from runner.spec.debezium import CHANGED_AT, OP, POSITION, SOURCE
from runner.spec.model import Source

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = structlog.get_logger(__name__)

OPS = ("c", "r", "u", "d")
# what Debezium's PostgreSQL connector sends for a value it does not have (its default
# unavailable.value.placeholder)
UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_BYTES = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ"  # base64, without its padding
ORDERED_BY_LOG = ("postgresql", "mysql")
_WHOLE = DecimalType(38, 0)
_EVENT = "__runner_debezium_event"


@dataclass(frozen=True)
class BatchFacts:
    """What one pass over the batch's values tells before they are parsed."""

    schemas: tuple[dict[str, Any], ...]  # the distinct envelope schemas, oldest first
    connectors: frozenset[str]
    truncate: tuple[str, int, int] | None  # the first truncate event's topic, partition, offset
    truncates: int
    unavailable: tuple[str, int, int] | None  # the first event holding UNAVAILABLE


@dataclass(frozen=True)
class Envelope:
    """The parts of a decoded event (columns of a frame with _EVENT), and the value as the
    quarantine keeps it."""

    op: Column
    before: Column
    after: Column
    source: Column  # map<string,string>
    undecoded: Column  # true for a value that did not decode
    raw: Column


def decode_debezium(records: DataFrame, source: Source) -> DataFrame:
    """The source's view of Debezium change events (see the module's docstring)."""
    kafka = source.kafka
    assert kafka is not None
    events = records.where(F.col("value").isNotNull())  # tombstones: consumed
    if kafka.schema_registry_url:
        return _avro_events(events, source)
    text = F.col("value").cast("string")
    facts = batch_facts(events, text)
    _refuse_unavailable(facts, source)
    if facts.truncates:
        events = _without_truncates(events, _json_op(text), facts, source)
    columns = _columns(facts, source)
    _say_order(facts, source)
    parsed = F.from_json(text, _envelope_type(columns), permissive_options())
    frame = events.select(parsed.alias(_EVENT), "value", *KAFKA_NAMES)

    def part(name: str) -> Column:
        return F.coalesce(F.col(f"{_EVENT}.payload.{name}"), F.col(f"{_EVENT}.{name}"))

    undecoded = F.col(f"{_EVENT}.{CORRUPT}").isNotNull()
    parts = Envelope(part("op"), part("before"), part("after"), part("source"), undecoded, text)
    return event_rows(frame, columns, parts)


def _avro_events(events: DataFrame, source: Source) -> DataFrame:
    """Events in Avro through a schema registry (Confluent's AvroConverter)."""
    where = f"source '{source.name}'"
    decoded, reader = registry_values(events, source)
    frame = events.select(decoded.alias(_EVENT), "value", *KAFKA_NAMES)
    event = F.col(_EVENT)
    parts = Envelope(
        event["op"],
        event["before"],
        event["after"],
        F.from_json(F.to_json(event["source"]), "map<string,string>"),
        event.isNull(),
        F.base64("value"),
    )
    facts = _avro_facts(frame, parts)
    _refuse_unavailable(facts, source)
    if facts.truncates:
        frame = _without_truncates(frame, parts.op, facts, source)
    _say_order(facts, source)
    row_type = frame.schema[_EVENT].dataType["after"].dataType  # type: ignore[index]
    row_schema = _row_schema(_avro_as_connect(json.loads(reader)), where)
    return event_rows(frame, avro_row_columns(row_schema, row_type, where), parts)


def _avro_facts(frame: DataFrame, parts: Envelope) -> BatchFacts:
    place = F.struct("_kafka_topic", "_kafka_partition", "_kafka_offset")
    connector = parts.source["connector"].alias("connector")
    rows = (
        frame.select(
            connector,
            parts.op.alias("op"),
            place.alias("place"),
            _unavailable(F.col("value").cast("string")),
        )
        .groupBy("connector")
        .agg(*_tallies())
        .collect()
    )
    return _facts((), rows)


def batch_facts(events: DataFrame, text: Column) -> BatchFacts:
    """The distinct schemas and connectors of the batch, and its truncates, in one pass
    that parses no schema: JsonConverter writes `{"schema":{...},"payload":{...}}`, so an
    event's schema is its text before `,"payload":`, grouped as text and parsed once per
    distinct one on the driver; the op and the connector come from one parse of the event
    that keeps only them."""
    small = F.from_json(text, _FACTS)
    op = F.coalesce(small["payload"]["op"], small["op"])
    connector = F.coalesce(small["payload"]["source"]["connector"], small["source"]["connector"])
    place = F.struct("_kafka_topic", "_kafka_partition", "_kafka_offset")
    schema = F.when(text.startswith(_SCHEMA_HEAD), F.substring_index(text, _PAYLOAD_HEAD, 1))
    rows = (
        events.select(
            schema.alias("schema"),
            connector.alias("connector"),
            op.alias("op"),
            place.alias("place"),
            _unavailable(text),
        )
        .groupBy("schema", "connector")
        .agg(F.max("place._kafka_offset").alias("newest"), *_tallies())
        .collect()
    )
    schemas: dict[str, int] = {}
    for row in rows:
        if row["schema"] is not None:
            schemas[row["schema"]] = max(schemas.get(row["schema"], -1), row["newest"])
    newest_last = sorted(schemas, key=lambda s: schemas[s])
    return _facts(tuple(_schema(head, events, text) for head in newest_last), rows)


_FACTS = (
    "payload struct<op: string, source: struct<connector: string>>, op string, "
    "source struct<connector: string>"
)
_SCHEMA_HEAD = '{"schema":'
_PAYLOAD_HEAD = ',"payload":'


def _schema(head: str, events: DataFrame, text: Column) -> dict[str, Any]:
    """The schema of the events whose text starts with `head`; parsed as JSON from the
    events themselves in the rare case the text before `,"payload":` is not all of it (a
    schema whose default value holds those characters)."""
    try:
        found = json.loads(head.removeprefix(_SCHEMA_HEAD))
    except json.JSONDecodeError:
        found = None
    if isinstance(found, dict):
        return found
    whole = events.where(text.startswith(head)).select(F.get_json_object(text, "$.schema"))
    row = whole.first()
    assert row is not None, "the group has events"
    return dict(json.loads(row[0]))


def _unavailable(text: Column) -> Column:
    """The placeholder as text, or as the base64 of a bytea column's bytes."""
    return (text.contains(UNAVAILABLE) | text.contains(_UNAVAILABLE_BYTES)).alias("unavailable")


def _tallies() -> list[Column]:
    """Per group: the first truncate, the truncates, the first event holding Debezium's
    placeholder of a value PostgreSQL did not send."""
    place, truncate = F.col("place"), F.col("op") == "t"
    return [
        F.min(F.when(truncate, place)).alias("truncate"),
        F.count(F.when(truncate, 1)).alias("truncates"),
        F.min(F.when(F.col("unavailable"), place)).alias("unavailable"),
    ]


def _facts(schemas: tuple[dict[str, Any], ...], rows: list[Any]) -> BatchFacts:
    """The facts of the rows of a pass grouped by connector (and schema)."""
    return BatchFacts(
        schemas=schemas,
        connectors=frozenset(r["connector"] for r in rows if r["connector"]),
        truncate=_first(r["truncate"] for r in rows),
        truncates=sum(int(r["truncates"]) for r in rows),
        unavailable=_first(r["unavailable"] for r in rows),
    )


def _first(places: Iterable[Any]) -> tuple[str, int, int] | None:
    found = sorted((p[0], int(p[1]), int(p[2])) for p in places if p is not None)
    return found[0] if found else None


def _refuse_unavailable(facts: BatchFacts, source: Source) -> None:
    """An update that lacks a column's value (PostgreSQL sends an unchanged TOASTed value,
    a large text, bytea or jsonb, only with REPLICA IDENTITY FULL) would store Debezium's
    placeholder over the value the table holds."""
    if facts.unavailable is None:
        return
    topic, partition, offset = facts.unavailable
    raise UserError(
        f"source '{source.name}': the event at topic {topic}, partition {partition}, offset "
        f"{offset} holds {UNAVAILABLE} for a value PostgreSQL did not send (an unchanged large "
        "text, bytea or jsonb value: the table's REPLICA IDENTITY is not FULL); storing it "
        "would replace the value the table holds, so nothing was written and no offset moved. "
        "Run ALTER TABLE ... REPLICA IDENTITY FULL on the database table; the events already "
        "in the topic can be passed over with --checkpoint (docs/cdc-database.md)"
    )


def _without_truncates(
    events: DataFrame, op: Column, facts: BatchFacts, source: Source
) -> DataFrame:
    """The events but the truncates, when the spec says to pass over them."""
    assert source.kafka is not None and facts.truncate is not None
    if source.kafka.debezium.on_truncate == "fail":
        topic, partition, offset = facts.truncate
        raise UserError(
            f"source '{source.name}': a truncate of the database table (Debezium op t) at "
            f"topic {topic}, partition {partition}, offset {offset}; the runner cannot tell "
            "what it means for the table, so nothing was written and no offset moved. Set "
            "kafka.debezium.on_truncate: skip to pass over truncates and keep the table's rows"
        )
    log.warning("debezium_truncates_skipped", source=source.name, events=facts.truncates)
    return events.where(op.isNull() | (op != "t"))


def _json_op(text: Column) -> Column:
    return F.coalesce(F.get_json_object(text, "$.payload.op"), F.get_json_object(text, "$.op"))


def _columns(facts: BatchFacts, source: Source) -> list[ColumnType]:
    """The row's columns: from the batch's schemas (newest last: its types win, and the
    columns only older ones have stay at their place), or from the declared schema."""
    where = f"source '{source.name}'"
    if not facts.schemas:
        return declared_columns(source)
    merged: dict[str, ColumnType] = {}
    for envelope in facts.schemas:
        for column in row_columns(_row_schema(envelope, where), where):
            merged[column.name] = column
    return list(merged.values())


def _row_schema(envelope: dict[str, Any], where: str) -> dict[str, Any]:
    for field in envelope.get("fields", []):
        if field.get("field") in ("after", "before") and field.get("type") == "struct":
            return dict(field)
    raise UserError(
        f"{where}: a message's schema has no `after` struct: is the topic written by Debezium "
        "(value_format debezium reads Debezium's change events)?"
    )


def declared_columns(source: Source) -> list[ColumnType]:
    """The row's columns as the source's `schema:` declares them, for events without a
    schema (JsonConverter schemas.enable=false): a date is Debezium's day number, a decimal
    its base64 bytes (or its text, decimal.handling.mode string); the rest parse as
    declared."""
    if source.schema is None:
        raise UserError(
            f"source '{source.name}': the Debezium events carry no schema (Kafka Connect's "
            "JsonConverter with schemas.enable=false), so their columns are unknown: declare "
            'them in the source\'s schema (Spark DDL, e.g. "id int, name string"), or enable '
            "schemas in the connector's value converter"
        )
    try:
        declared = StructType.fromDDL(source.schema)
    except (ParseException, AnalysisException) as exc:
        raise UserError(f"source '{source.name}': schema is not valid DDL: {exc}") from None
    assert isinstance(declared, StructType)
    return [_declared(f) for f in declared.fields]


def _declared(field: StructField) -> ColumnType:
    kind = field.dataType
    if isinstance(kind, DateType):
        return ColumnType(field.name, IntegerType(), kind, F.date_from_unix_date)
    if isinstance(kind, DecimalType):
        return ColumnType(field.name, StringType(), kind, lambda c: decimal_of(c, kind))
    return ColumnType(field.name, kind, kind, lambda c: c)


def _envelope_type(columns: list[ColumnType]) -> StructType:
    """The JSON of an event, with or without its schema beside the payload."""
    row = StructType([StructField(c.name, c.parsed) for c in columns])
    body = [
        StructField("before", row),
        StructField("after", row),
        StructField("source", MapType(StringType(), StringType())),
        StructField("op", StringType()),
        StructField("ts_ms", LongType()),
    ]
    return with_corrupt_column(StructType([StructField("payload", StructType(body)), *body]))


def event_rows(frame: DataFrame, columns: list[ColumnType], event: Envelope) -> DataFrame:
    """Decoded events as the view's rows, the malformed ones marked."""
    op, source = event.op, event.source
    row = F.when(op == "d", event.before).otherwise(event.after)
    bad = event.undecoded | op.isNull() | ~op.isin(*OPS) | row.isNull()
    return frame.select(
        *[c.convert(row[c.name]).cast(c.stored).alias(c.name) for c in columns],
        op.alias(OP),
        position(source).alias(POSITION),
        F.timestamp_millis(source["ts_ms"].cast("long")).alias(CHANGED_AT),
        source.alias(SOURCE),
        *KAFKA_NAMES,
        F.when(bad, event.raw).alias(CORRUPT),
        F.when(bad, origin()).alias(MALFORMED_FILE),
    )


def position(source: Column) -> Column:
    """The event's place in the database's log, as one number (see the module's docstring)."""
    connector = source["connector"]
    binlog = F.regexp_extract(source["file"], r"(\d+)$", 1)
    mysql = (
        F.when(binlog == "", None).otherwise(binlog).cast(_WHOLE) * _power(25)
        + source["pos"].cast(_WHOLE) * _power(6)
        + F.coalesce(source["row"].cast(_WHOLE), F.lit(0).cast(_WHOLE))
    )
    return (
        F.when(connector == "postgresql", source["lsn"].cast(_WHOLE))
        .when((connector == "mysql") | source["file"].isNotNull(), mysql)
        .otherwise(source["ts_ms"].cast(_WHOLE))
        .cast(_WHOLE)
    )


def _power(exponent: int) -> Column:
    return F.lit("1" + "0" * exponent).cast(_WHOLE)


def _say_order(facts: BatchFacts, source: Source) -> None:
    """A connector whose log position the runner does not read is ordered by time: say so."""
    for connector in sorted(facts.connectors - set(ORDERED_BY_LOG)):
        log.warning(
            "debezium_ordered_by_time",
            source=source.name,
            connector=connector,
            reason="its events carry no log position the runner reads (PostgreSQL's lsn, "
            "MySQL's binlog file and position): a key's events are ordered by source.ts_ms, "
            "milliseconds, and within one by their Kafka order",
        )


def _avro_as_connect(envelope: dict[str, Any]) -> dict[str, Any]:
    """An Avro envelope schema in the shape _row_schema reads: its row record (the record
    branch of `before` or `after`, whichever defines it: the other names it) as a struct."""
    for field in envelope.get("fields", []):
        if field.get("name") in ("before", "after"):
            branches = field["type"] if isinstance(field["type"], list) else [field["type"]]
            for branch in branches:
                if isinstance(branch, dict) and branch.get("type") == "record":
                    return {"fields": [{**branch, "field": "after", "type": "struct"}]}
    return {"fields": []}
