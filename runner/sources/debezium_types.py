"""Kafka Connect's schema of a Debezium row, as Spark columns: the type a value is parsed
with, and the expression that makes it the matching Delta type.

Kafka Connect names a value's meaning beside its wire type (`name`, with `parameters`):

| Connect schema (wire type)                             | column                      |
|--------------------------------------------------------|-----------------------------|
| int8/16/32/64, float32/64, boolean, string             | tinyint ... double, string  |
| bytes (base64 in JSON)                                 | binary                      |
| org.apache.kafka.connect.data.Decimal (bytes: base64   | decimal(precision, scale)   |
|   of the unscaled two's-complement integer)            |  (precision 38 when unset;  |
|                                                        |  past 38: string, every     |
|                                                        |  digit)                     |
| io.debezium.data.VariableScaleDecimal (struct)         | string, every digit kept    |
| io.debezium.time.Date, connect Date (int32 days)       | date                        |
| io.debezium.time.Timestamp / MicroTimestamp /          | timestamp_ntz (the database |
|   NanoTimestamp (int64 ms / us / ns, no zone)          |   value, no zone)           |
| io.debezium.time.ZonedTimestamp (ISO-8601 text),       | timestamp (an instant)      |
|   connect Timestamp (int64 ms)                         |                             |
| io.debezium.time.Time / MicroTime / NanoTime,          | string HH:MM:SS.ffffff      |
|   connect Time (ms / us / ns of the day)               |   (Delta has no time type)  |
| io.debezium.data.Json, Uuid, Enum, Xml, ... (string)   | string                      |
| array, map, struct                                     | array, map, struct          |

Only a struct's own columns are converted by meaning; a nested value keeps its wire type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from runner.errors import UserError

_WIRE: Mapping[str, DataType] = {
    "int8": ByteType(),
    "int16": ShortType(),
    "int32": IntegerType(),
    "int64": LongType(),
    "float32": FloatType(),
    "float64": DoubleType(),
    "boolean": BooleanType(),
    "string": StringType(),
    "bytes": StringType(),  # base64 text in JSON
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
# zoneless date-times: units per second
_LOCAL_TIMESTAMPS = {
    "io.debezium.time.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}
_TIMES = {
    "io.debezium.time.Time": 1_000,
    "org.apache.kafka.connect.data.Time": 1_000,
    "io.debezium.time.MicroTime": 1_000_000,
    "io.debezium.time.NanoTime": 1_000_000_000,
}
_DATES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
_MAX_PRECISION = 38  # Spark's and Delta's decimals
_WHOLE = DecimalType(38, 0)


@dataclass(frozen=True)
class ColumnType:
    """One row column: its name, the type its JSON value parses with, the type it is
    stored with, and the expression that turns the parsed value into that."""

    name: str
    parsed: DataType
    stored: DataType
    convert: Callable[[Column], Column]


def _same(column: Column) -> Column:
    return column


def row_columns(row_schema: Mapping[str, Any], where: str) -> list[ColumnType]:
    """The columns of a Debezium row (the envelope's `after` struct schema)."""
    fields = row_schema.get("fields")
    if row_schema.get("type") != "struct" or not isinstance(fields, list):
        raise UserError(f"{where}: the change event's row schema is not a struct: {row_schema}")
    return [column_type(f, where) for f in fields]


def column_type(field: Mapping[str, Any], where: str) -> ColumnType:
    """How one field of a row schema is parsed and converted."""
    name, meaning = str(field["field"]), str(field.get("name") or "")
    params = field.get("parameters") or {}
    if meaning == DECIMAL:
        scale = int(params.get("scale", 0))
        precision = max(int(params.get("connect.decimal.precision", 38)), scale, 1)
        if precision > _MAX_PRECISION:  # past Delta's decimals: every digit as text
            return ColumnType(
                name,
                StringType(),
                StringType(),
                lambda c: _scaled_text(F.unbase64(c), F.lit(scale)),
            )
        stored = DecimalType(precision, scale)
        return ColumnType(name, StringType(), stored, lambda c: _decimal(c, stored))
    if meaning == VARIABLE_DECIMAL:
        raw = StructType([StructField("scale", IntegerType()), StructField("value", StringType())])
        return ColumnType(name, raw, StringType(), _variable_decimal)
    if meaning in _DATES:
        return ColumnType(name, IntegerType(), DateType(), F.date_from_unix_date)
    if meaning in _LOCAL_TIMESTAMPS:
        per_second = _LOCAL_TIMESTAMPS[meaning]
        return ColumnType(
            name, LongType(), TimestampNTZType(), lambda c: _local_timestamp(c, per_second)
        )
    if meaning == "org.apache.kafka.connect.data.Timestamp":
        return ColumnType(name, LongType(), TimestampType(), F.timestamp_millis)
    if meaning == "io.debezium.time.ZonedTimestamp":
        return ColumnType(name, StringType(), TimestampType(), F.to_timestamp)
    if meaning in _TIMES:
        per_second = _TIMES[meaning]
        return ColumnType(name, LongType(), StringType(), lambda c: _time_of_day(c, per_second))
    if field.get("type") == "bytes":
        return ColumnType(name, StringType(), BinaryType(), F.unbase64)
    parsed = wire_type(field, where)
    return ColumnType(name, parsed, parsed, _same)


def wire_type(field: Mapping[str, Any], where: str) -> DataType:
    """The Spark type of a Connect schema by its wire type alone (nested values)."""
    kind = field.get("type")
    if kind in _WIRE:
        return _WIRE[str(kind)]
    if kind == "array":
        return ArrayType(wire_type(field["items"], where))
    if kind == "map":
        return MapType(wire_type(field["keys"], where), wire_type(field["values"], where))
    if kind == "struct":
        return StructType(
            [StructField(str(f["field"]), wire_type(f, where)) for f in field.get("fields", [])]
        )
    raise UserError(f"{where}: a change event's field has the Connect type {kind!r}, unknown")


_LIMB = 1_000_000_000  # the base of the digits an unscaled integer is folded into


def _unscaled_digits(raw: Column) -> Column:
    """The unscaled integer of a Connect Decimal (the bytes of a big-endian two's
    complement, any length) as struct(negative, digits): its sign and the decimal digits of
    its magnitude. Past 15 bytes the bytes are folded into base-10^9 digits (a negative one's
    through their complement), so that no step passes a long, however many digits the
    number has; up to 15 (under 10^36), the faster fold into one decimal(38,0) does."""
    hexed = F.hex(raw)
    negative = F.substr(hexed, F.lit(1), F.lit(1)).isin(*"89ABCDEF")

    def folded(flip: bool) -> Column:
        def step(limbs: Column, i: Column) -> Column:
            byte = F.conv(F.substr(hexed, i * 2 + 1, F.lit(2)), 16, 10).cast("long")
            return _times_plus(limbs, 256, 255 - byte if flip else byte)

        last = (F.length(hexed) / 2 - 1).cast("int")
        return F.aggregate(F.sequence(F.lit(0), last), F.array().cast("array<long>"), step)

    def text(limbs: Column) -> Column:
        digits = F.transform(
            F.reverse(limbs),
            lambda limb, i: F.when(i == 0, limb.cast("string")).otherwise(
                F.lpad(limb.cast("string"), 9, "0")
            ),
        )
        return F.when(F.size(limbs) == 0, F.lit("0")).otherwise(F.array_join(digits, ""))

    magnitude = F.when(negative, _times_plus(folded(True), 1, F.lit(1))).otherwise(folded(False))
    digits = F.when(F.length(hexed) <= 30, F.abs(_whole(hexed, negative)).cast("string")).otherwise(
        _let(magnitude, text)
    )
    return F.struct(negative.alias("negative"), digits.alias("digits"))


def _whole(hexed: Column, negative: Column) -> Column:
    """The integer of a two's complement's hex digits, as a decimal(38,0), when it fits:
    its bytes folded in, a negative one's through their complement."""

    def folded(flip: bool) -> Column:
        def step(acc: Column, i: Column) -> Column:
            byte = F.conv(F.substr(hexed, i * 2 + 1, F.lit(2)), 16, 10).cast("int")
            return (acc * 256 + (255 - byte if flip else byte)).cast(_WHOLE)

        last = F.length(hexed) / 2 - 1
        return F.aggregate(F.sequence(F.lit(0), last.cast("int")), F.lit(0).cast(_WHOLE), step)

    value = F.when(negative, -(folded(True) + 1)).otherwise(folded(False))
    return F.when(F.length(hexed) == 0, F.lit(0).cast(_WHOLE)).otherwise(value.cast(_WHOLE))


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """body(value), `value` computed once however often `body` uses it."""
    return F.transform(F.array(value), body)[0]


def _times_plus(limbs: Column, factor: int, add: Column) -> Column:
    """limbs * factor + add, for base-10^9 digits lowest first (factor and add < 10^9)."""

    def step(acc: Column, limb: Column) -> Column:
        value = limb * factor + acc["carry"]
        low = value % _LIMB
        return F.struct(
            F.concat(acc["out"], F.array(low)).alias("out"),
            ((value - low) / _LIMB).cast("long").alias("carry"),
        )

    start = F.struct(F.array().cast("array<long>").alias("out"), add.cast("long").alias("carry"))

    def carried(done: Column) -> Column:
        last = F.when(done["carry"] > 0, F.array(done["carry"])).otherwise(F.array())
        return F.concat(done["out"], last.cast("array<long>"))

    return _let(F.aggregate(limbs, start, step), carried)


def _scaled_text(raw: Column, scale: Column) -> Column:
    """The decimal text of a Connect Decimal's unscaled * 10^-scale, every digit kept."""

    def text(unscaled: Column) -> Column:
        digits = unscaled["digits"]
        padded = F.lpad(digits, F.greatest(F.length(digits), scale + 1), F.lit("0"))
        whole = F.substr(padded, F.lit(1), F.length(padded) - scale)
        fraction = F.substr(padded, F.length(padded) - scale + 1, scale)
        sign = F.when(unscaled["negative"], F.lit("-")).otherwise(F.lit(""))
        scaled = F.when(scale <= 0, F.concat(digits, F.repeat(F.lit("0"), -scale))).otherwise(
            F.concat(whole, F.lit("."), fraction)
        )
        return F.concat(sign, scaled)

    return F.when(raw.isNotNull(), _let(_unscaled_digits(raw), text))


def _decimal(base64_text: Column, stored: DecimalType) -> Column:
    return _scaled_text(F.unbase64(base64_text), F.lit(stored.scale)).cast(stored)


def _variable_decimal(value: Column, base64: bool = True) -> Column:
    """io.debezium.data.VariableScaleDecimal: a scale and a Decimal's bytes, as text."""
    raw = F.unbase64(value["value"]) if base64 else value["value"]
    return F.when(value.isNotNull(), _scaled_text(raw, value["scale"]))


def _local_timestamp(count: Column, per_second: int) -> Column:
    """A zoneless date-time counted from 1970-01-01 00:00 (the session's zone is UTC)."""
    return F.timestamp_micros(_micros(count, per_second)).cast(TimestampNTZType())


def _time_of_day(count: Column, per_second: int) -> Column:
    """A time of day as HH:MM:SS.ffffff."""
    micros = _micros(count, per_second)
    text = F.format_string(
        "%02d:%02d:%02d.%06d",
        (micros / 3_600_000_000).cast("long"),
        (micros / 60_000_000).cast("long") % 60,
        (micros / 1_000_000).cast("long") % 60,
        micros % 1_000_000,
    )
    return F.when(count.isNotNull(), text)


def _micros(count: Column, per_second: int) -> Column:
    """A count of 1/per_second seconds in microseconds (nanoseconds rounded down)."""
    if per_second > 1_000_000:
        return F.floor(count / (per_second // 1_000_000))
    return count * (1_000_000 // per_second)


def decimal_of(text: Column, stored: DecimalType) -> Column:
    """A decimal of an event without schema: its text (Debezium's decimal.handling.mode
    string), or else a Connect Decimal's base64 bytes at the declared scale (precise)."""
    number = text.rlike(r"^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$")
    return F.when(number, text.cast(stored)).otherwise(_decimal(text, stored))


def avro_row_columns(row: Mapping[str, Any], decoded: StructType, where: str) -> list[ColumnType]:
    """The columns of a Debezium row in Avro (Confluent's AvroConverter keeps a field's
    Connect name in `connect.name`), from_avro having `decoded` them: a Decimal is a
    decimal already and bytes are binary; dates, times and timestamps convert as from JSON."""
    avro_fields = {str(f["name"]): _unwrapped(f["type"]) for f in row.get("fields", [])}
    columns = []
    for field in decoded.fields:
        avro = avro_fields.get(field.name)
        meaning = str(avro.get("connect.name", "")) if isinstance(avro, dict) else ""
        if meaning == VARIABLE_DECIMAL:
            columns.append(
                ColumnType(field.name, field.dataType, StringType(), _variable_binary_decimal)
            )
        elif meaning in _CONVERTED and field.dataType.typeName() in ("integer", "long", "string"):
            # (a Connect Date or Timestamp comes as Avro's own logical type: decoded already)
            as_json = column_type({"field": field.name, "name": meaning}, where)
            columns.append(ColumnType(field.name, field.dataType, as_json.stored, as_json.convert))
        else:
            columns.append(ColumnType(field.name, field.dataType, field.dataType, _same))
    return columns


_CONVERTED = (
    *_DATES,
    *_LOCAL_TIMESTAMPS,
    *_TIMES,
    "org.apache.kafka.connect.data.Timestamp",
    "io.debezium.time.ZonedTimestamp",
)


def _variable_binary_decimal(value: Column) -> Column:
    return _variable_decimal(value, base64=False)


def _unwrapped(avro_type: Any) -> Any:
    """An optional field's type without its null branch."""
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        return branches[0] if len(branches) == 1 else avro_type
    return avro_type
