"""TimestampBasedKeyGenerator: the partition field read as an instant and formatted (Joda).

Everything is a Spark expression. Instants travel as TIMESTAMP_NTZ values holding UTC wall
time, so no step depends on the session time zone: numbers are added to the epoch, strings
are parsed as wall time and moved from the input zone with convert_timezone (or, when the
text carries an offset, read as an instant through unix_micros), and the result is moved to
the output zone with convert_timezone before date_format prints it.

Hudi's rules kept (docs/keygen.md): a null value reads as 1 unit of the type (for strings,
the epoch + 1 ms printed with the first input format); numbers are truncated toward zero and
converted to milliseconds as java.util.concurrent.TimeUnit does (finer units truncate,
coarser ones saturate); several input formats are tried in order and the first that reads
the whole string wins; an unparseable value is an error, never a made-up partition. A
`timestamp` column is its epoch microseconds in the type's unit, as Hudi's insert and upsert
read it, unless consistent_logical_timestamp makes it the instant it is; under DATE_STRING
and MIXED a value of another type than string is an error, and its null Hudi's stand-in.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from runner.errors import UserError
from runner.fields import epoch_micros_ntz, field_type, field_value
from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.common import (
    DEFAULT_PARTITION,
    escape_path_name,
    simple_record_key,
)
from runner.spec.model import TimestampSpec
from runner.spec.timebased import (
    STRING_TYPES,
    has_offset,
    spark_format_pattern,
    spark_parse_patterns,
)

_MS_PER_UNIT = {
    "SECONDS": 1000,
    "MINUTES": 60_000,
    "HOURS": 3_600_000,
    "DAYS": 86_400_000,
}
_UNITS_PER_MS = {"NANOSECONDS": 1_000_000, "MICROSECONDS": 1000, "MILLISECONDS": 1}
_TYPE_UNIT = {
    "UNIX_TIMESTAMP": "SECONDS",
    "EPOCHMILLISECONDS": "MILLISECONDS",
    "EPOCHMICROSECONDS": "MICROSECONDS",
}
_LONG_MAX = 2**63 - 1
# Instants Spark can hold and print with 4-digit years: 0001-01-01 .. 9999-12-31 (in ms).
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999
_NUMBERS = (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType)


def _epoch() -> Column:
    """1970-01-01 00:00 as TIMESTAMP_NTZ (a function: no Column before a session exists)."""
    return F.expr("TIMESTAMP_NTZ'1970-01-01 00:00:00'")


def _to_millis(value: Column, unit: str) -> Column:
    """TimeUnit.MILLISECONDS.convert(value, unit) on a long column."""
    if unit == "MILLISECONDS":
        return value
    if unit in _UNITS_PER_MS:
        # Exact decimal division, then a cast that truncates toward zero as Java's `/` does
        # (-1 µs is 0 ms, not -1 as floor division would give).
        quotient = value.cast("decimal(20,0)") / F.lit(_UNITS_PER_MS[unit])
        return quotient.cast("long")
    factor = _MS_PER_UNIT[unit]
    limit = _LONG_MAX // factor
    return (
        F.when(value > limit, F.lit(_LONG_MAX))
        .when(value < -limit, F.lit(-_LONG_MAX - 1))
        .otherwise(value * F.lit(factor))
    )


def _from_millis(ms: Column) -> Column:
    """UTC wall time (TIMESTAMP_NTZ) of epoch milliseconds; null when Spark cannot print it."""
    in_range = (ms >= F.lit(_MIN_MS)) & (ms <= F.lit(_MAX_MS))
    return F.timestamp_add("MILLISECOND", F.when(in_range, ms), _epoch())


def _utc_of_instant(ts: Column) -> Column:
    """UTC wall time of a TIMESTAMP (an instant), without the session time zone."""
    return F.timestamp_add("MICROSECOND", F.unix_micros(ts), _epoch())


def _convert(zone_from: str, zone_to: str, wall: Column) -> Column:
    if zone_from == zone_to:
        return wall
    return F.convert_timezone(F.lit(zone_from), F.lit(zone_to), wall)


class TimestampPart:
    """One timestamp-formatted partition path part (used by TIMESTAMP and CUSTOM).

    `logical_timestamps` is Hudi's consistent.logical.timestamp.enabled: a `timestamp`
    column is then read as the instant it is; without it (Hudi's default) as its epoch
    microseconds in the type's unit, as Hudi's insert and upsert read it."""

    def __init__(self, name: str, settings: TimestampSpec, logical_timestamps: bool = False):
        self.name = name
        self.ts = settings
        self.logical_timestamps = logical_timestamps
        self.output_pattern = spark_format_pattern(settings.output_format)

    def columns(self, schema: StructType) -> tuple[Column, Column]:
        """(formatted value, error): the value before url-encoding and the hive prefix."""
        data_type = field_type(schema, self.name)
        value = field_value(self.name)
        instant = isinstance(data_type, TimestampType) and self.logical_timestamps
        if instant:
            # Hudi's Timestamp case: the epoch milliseconds, whatever the unit; a null reads
            # as for any other type (1 unit, or the stand-in text)
            wall, utc = None, F.when(value.isNull(), self._null_instant())
            utc = utc.otherwise(_utc_of_instant(value))
        elif self.ts.type in STRING_TYPES:
            wall, utc = self._from_string(self._text(value, data_type))
        else:
            wall, utc = None, self._from_number(value, data_type)
        out_zone = self.ts.output_timezone or self.ts.input_timezone
        if out_zone is not None or wall is None:
            wall = _convert("UTC", out_zone or "UTC", utc)
        formatted = F.date_format(wall, self.output_pattern)
        error = F.when(
            formatted.isNull(),
            F.concat(
                F.lit("Unable to parse input partition field: "),
                F.coalesce(value.cast("string"), F.lit("null")),
                F.lit("" if instant else self._why(data_type)),
            ),
        )
        return formatted, error

    def _why(self, data_type: DataType) -> str:
        """What an error adds about a value of this type, where Hudi's reading surprises."""
        flag = "set key_generator.consistent_logical_timestamp: true to read it as the instant"
        if self.ts.type in STRING_TYPES and not isinstance(data_type, StringType):
            why = f"; {self.ts.type} reads strings, not {data_type.simpleString()} (a null reads"
            why += " as Hudi's stand-in text)"
            return f"{why}; {flag}" if isinstance(data_type, TimestampType) else why
        if isinstance(data_type, TimestampType | TimestampNTZType):
            why = f"; a {data_type.simpleString()} is read as its epoch microseconds in the unit"
            why += f" of {self.ts.type}, as Hudi does"
            return f"{why}: {flag}" if isinstance(data_type, TimestampType) else why
        return ""

    def _text(self, value: Column, data_type: DataType) -> Column:
        """The text a DATE_STRING/MIXED part parses: Hudi's stand-in for a null (or the
        literal default partition); a value of another type than string is none (Hudi
        fails such a record), and only its null reads as the stand-in."""
        if isinstance(data_type, StringType):
            missing = value.isNull() | (value == F.lit(DEFAULT_PARTITION))
            return F.when(missing, self._null_text()).otherwise(value)
        if isinstance(data_type, (*_NUMBERS, DateType, TimestampType, TimestampNTZType)):
            return F.when(value.isNull(), self._null_text())
        raise UserError(
            f"timestamp partition field '{self.name}' is {data_type.simpleString()}, "
            f"but timestamp type {self.ts.type} reads strings; use EPOCHMILLISECONDS, "
            "UNIX_TIMESTAMP, ... for numbers"
        )

    def _unit(self) -> str:
        return self.ts.scalar_time_unit if self.ts.type == "SCALAR" else _TYPE_UNIT[self.ts.type]

    def _null_instant(self) -> Column:
        """The UTC wall time Hudi reads a null as: 1 unit of the type, or the stand-in text."""
        if self.ts.type in STRING_TYPES:
            return self._from_string(self._null_text())[1]
        return _from_millis(_to_millis(F.lit(1).cast("long"), self._unit()))

    def _from_number(self, value: Column, data_type: DataType) -> Column:
        if isinstance(data_type, TimestampType):
            number = F.unix_micros(value)  # Hudi's Avro form of a timestamp, in the unit
        elif isinstance(data_type, TimestampNTZType):
            number = epoch_micros_ntz(value)  # always the Avro form, whatever the flag
        elif isinstance(data_type, DateType):
            number = F.datediff(value, F.lit("1970-01-01").cast("date")).cast("long")
        elif isinstance(data_type, _NUMBERS):
            # Doubles and decimals truncate toward zero (Java's longValue()).
            number = value.try_cast("long")
        else:
            raise UserError(
                f"timestamp partition field '{self.name}' is {data_type.simpleString()}; "
                f"timestamp type {self.ts.type} reads numbers (use DATE_STRING for strings)"
            )
        # Hudi reads a null value as 1 unit of the type.
        number = F.when(value.isNull(), F.lit(1).cast("long")).otherwise(number)
        return _from_millis(_to_millis(number, self._unit()))

    def _null_text(self) -> Column:
        """Hudi's stand-in for a null string: epoch + 1 ms printed with the first format, in
        the input zone (else the output zone, else GMT)."""
        zone = self.ts.input_timezone or self.ts.output_timezone or "UTC"
        wall = _convert("UTC", zone, F.timestamp_add("MILLISECOND", F.lit(1), _epoch()))
        return F.date_format(wall, spark_format_pattern(self.ts.input_formats[0], zone))

    def _from_string(self, text: Column) -> tuple[Column, Column]:
        """(wall time as written, UTC wall time) of the first format that reads the text."""
        in_zone = self.ts.input_timezone or "UTC"
        candidates = []
        for joda in self.ts.input_formats:
            for pattern in spark_parse_patterns(joda):
                instant = F.try_to_timestamp(text, F.lit(pattern))
                # Only parsed when try_to_timestamp succeeded: to_timestamp_ntz throws on bad
                # input under ANSI mode. It keeps the wall time and drops any offset.
                written = F.when(instant.isNotNull(), F.to_timestamp_ntz(text, F.lit(pattern)))
                utc = (
                    _utc_of_instant(instant)
                    if has_offset(joda)
                    else _convert(in_zone, "UTC", written)
                )
                candidates.append(
                    F.when(instant.isNotNull(), F.struct(written.alias("w"), utc.alias("u")))
                )
        chosen = F.coalesce(*candidates) if len(candidates) > 1 else candidates[0]
        return chosen.getField("w"), chosen.getField("u")


def timestamp_partition_part(
    part: TimestampPart, schema: StructType, hive_style: bool, url_encode: bool
) -> tuple[Column, Column]:
    """The partition path part and its error: formatted, escaped, then hive-prefixed."""
    formatted, error = part.columns(schema)
    encoded = escape_path_name(formatted) if url_encode else formatted
    path = F.concat(F.lit(f"{part.name}="), encoded) if hive_style else encoded
    return path, error


class TimestampBasedKeyGenerator(KeyGenerator):
    """Simple record key; the one partition field formatted as a date."""

    def columns(self, schema: StructType) -> KeyColumns:
        spec = self.spec
        assert spec.timestamp is not None, "validated: TIMESTAMP has timestamp settings"
        key, key_error = simple_record_key(spec.record_key[0], self.strings(schema))
        part = TimestampPart(
            spec.partition_fields[0], spec.timestamp, spec.consistent_logical_timestamp
        )
        path, path_error = timestamp_partition_part(
            part, schema, spec.hive_style_partitioning, spec.url_encode
        )
        return KeyColumns(key, path, F.coalesce(key_error, path_error))
