"""A Kafka record's value as columns: JSON under the source's schema, Avro with a schema file
or from a schema registry (Confluent's wire format), or left binary (raw).

A value that does not decode keeps its record: the corrupt-record column (text_records.CORRUPT)
holds it as text (JSON) or base64 (Avro), and text_records.MALFORMED_FILE says where it was
(topic, partition, offset), so it meets the source's on_bad_record like a bad line of a file.
A record without a value (a tombstone) is malformed too: there is nothing to write.
"""

from __future__ import annotations

from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import functions as F

from runner.errors import UserError
from runner.sources.kafka import KAFKA_COLUMNS
from runner.sources.schema_registry import registry_for
from runner.sources.text_records import (
    CORRUPT,
    MALFORMED_FILE,
    permissive_options,
    with_corrupt_column,
)
from runner.spec.model import Source

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

KAFKA_NAMES = tuple(KAFKA_COLUMNS.values())
_VALUE = "__runner_kafka_value"


def decode_values(records: DataFrame, source: Source) -> DataFrame:
    """The source's view: the value's columns, then Kafka's (KAFKA_NAMES)."""
    kafka = source.kafka
    assert kafka is not None
    if kafka.value_format == "raw":
        return records.select("value", *KAFKA_NAMES)
    if kafka.value_format == "json":
        return _json(records, source)
    if kafka.avro_schema:
        return _avro(records, _schema_text(kafka.avro_schema, source))
    return _registry_avro(records, source)


def origin() -> Column:
    """Where a record is, for messages and the quarantine table."""
    return F.concat(
        F.lit("topic "),
        F.col("_kafka_topic"),
        F.lit(", partition "),
        F.col("_kafka_partition").cast("string"),
        F.lit(", offset "),
        F.col("_kafka_offset").cast("string"),
    )


def _json(records: DataFrame, source: Source) -> DataFrame:
    from pyspark.sql.types import StructType

    assert source.schema is not None  # the spec's checks ask for one
    try:
        declared = StructType.fromDDL(source.schema)
        assert isinstance(declared, StructType)
    except (ParseException, AnalysisException) as exc:
        raise UserError(f"source '{source.name}': schema is not valid DDL: {exc}") from None
    schema = with_corrupt_column(declared)
    parsed = F.from_json(F.col("value").cast("string"), schema, permissive_options())
    frame = records.select(parsed.alias(_VALUE), "value", *KAFKA_NAMES)
    columns = [F.col(f"{_VALUE}.`{f.name}`").alias(f.name) for f in declared.fields]
    bad = F.when(F.col("value").isNull(), F.lit(None)).otherwise(F.col(f"{_VALUE}.{CORRUPT}"))
    return _with_malformed(frame, columns, bad, F.col("value").isNull())


def _avro(records: DataFrame, schema_json: str) -> DataFrame:
    from pyspark.sql.avro.functions import from_avro

    decoded = from_avro(F.col("value"), schema_json, {"mode": "PERMISSIVE"})
    return _expanded(records, decoded, F.col("value"))


def _registry_avro(records: DataFrame, source: Source) -> DataFrame:
    decoded, _ = registry_values(records, source)
    # an unframed value, or one whose id the registry does not know, stays null: malformed
    return _expanded(records, decoded, F.col("value"))


def registry_values(records: DataFrame, source: Source) -> tuple[Column, str]:
    """The values framed as Confluent's serializers write them (a zero byte, the writer
    schema's id in 4 bytes, big-endian, then the Avro binary) decoded, and the schema they
    are read into. Each id's schema is fetched once; every value is read into the newest
    schema among them (Avro's schema resolution), so values written before a compatible
    schema change still decode. Finding the batch's ids costs one more read of its records
    (their first five bytes are what is kept). A value not framed so, or whose id the
    registry does not know, decodes to null."""
    from pyspark.sql.avro.functions import from_avro

    kafka = source.kafka
    assert kafka is not None and kafka.schema_registry_url
    framed = (F.length("value") > 5) & (F.substring("value", 1, 1) == F.unhex(F.lit("00")))
    schema_id = F.when(framed, F.conv(F.hex(F.substring("value", 2, 4)), 16, 10).cast("int"))
    body = F.expr("substring(value, 6)")
    ids = sorted(r[0] for r in records.select(schema_id).distinct().collect() if r[0] is not None)
    registry = registry_for(kafka.schema_registry_url, source.name)
    writers = registry.schemas(ids, kafka.topics[0] if kafka.topics else None)
    if not writers:
        raise UserError(registry.nothing_to_read_with(ids))
    reader = writers[max(writers)]
    options = {"mode": "PERMISSIVE", "avroSchema": reader}
    ids_known = sorted(writers)
    decoded = F.when(schema_id == ids_known[0], from_avro(body, writers[ids_known[0]], options))
    for i in ids_known[1:]:
        decoded = decoded.when(schema_id == i, from_avro(body, writers[i], options))
    return decoded, reader


def _expanded(records: DataFrame, decoded: Column, raw: Column) -> DataFrame:
    """The decoded struct's fields as columns, and a value that did not decode as base64.

    from_avro's PERMISSIVE mode gives a value it cannot decode a row of nulls, which a
    value can only decode to when every field is nullable; such a record has no key to
    write with anyway, so it is taken for what it almost surely is: malformed."""
    frame = records.select(decoded.alias(_VALUE), "value", *KAFKA_NAMES)
    fields = frame.schema[_VALUE].dataType.fieldNames()  # type: ignore[attr-defined]
    columns = [F.col(f"{_VALUE}.`{name}`").alias(name) for name in fields]
    every_field_null = F.col(_VALUE).isNull()
    if fields:
        every_field_null = every_field_null | reduce(
            lambda a, b: a & b, [F.col(f"{_VALUE}.`{name}`").isNull() for name in fields]
        )
    failed = every_field_null & raw.isNotNull()
    return _with_malformed(frame, columns, F.when(failed, F.base64(raw)), raw.isNull())


def _with_malformed(
    frame: DataFrame, columns: list[Column], bad: Column, tombstone: Column
) -> DataFrame:
    """The value's columns and Kafka's, with CORRUPT (the record as read) and MALFORMED_FILE
    (where it is) set for a record that did not decode or has no value."""
    malformed = bad.isNotNull() | tombstone
    raw = F.when(tombstone, F.lit("(no value: a tombstone)")).otherwise(bad)
    return frame.select(
        *columns,
        *KAFKA_NAMES,
        F.when(malformed, raw).alias(CORRUPT),
        F.when(malformed, origin()).alias(MALFORMED_FILE),
    )


def _schema_text(path: str, source: Source) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise UserError(
            f"source '{source.name}': kafka.avro_schema {path} cannot be read: {exc.strerror}"
        ) from None
