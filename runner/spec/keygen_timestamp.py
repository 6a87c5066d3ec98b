"""key_generator.timestamp (or Hudi's hoodie.keygen.timebased.* properties) as a TimestampSpec.

Used by the TIMESTAMP generator, by CUSTOM's field:TIMESTAMP parts and by a user class. Each
setting is checked as Hudi would use it: the type, the time zones (an unknown one is refused,
where Hudi silently falls back to GMT), the Joda input and output patterns, the scalar unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from runner.hudi import properties as hudi_props
from runner.spec.keygen_picker import TS, Path_, Report, SettingPicker
from runner.spec.model import TimestampSpec
from runner.spec.timebased import (
    STRING_TYPES,
    TIME_UNITS,
    TIMESTAMP_TYPES,
    resolve_zone,
    spark_format_pattern,
    spark_parse_patterns,
    split_formats,
)


@dataclass
class _Failures:
    """Reports a problem and remembers that there was one."""

    report: Report
    any: bool = False

    def __call__(self, path: Path_, message: str) -> None:
        self.any = True
        self.report(path, message)


def resolve_timestamp(merge: SettingPicker, problem: Report) -> TimestampSpec | None:
    """The timestamp settings, or None after reporting each problem."""
    fail = _Failures(problem)
    ts_type = _timestamp_type(merge, fail)
    # The legacy single zone, when present, is used for both input and output (as Hudi does).
    input_zone, output_zone = _zones(merge, fail)
    formats = _input_formats(merge, ts_type, input_zone or output_zone or "UTC", fail)
    output_format = _output_format(merge, fail)
    unit = _scalar_time_unit(merge, fail)
    if fail.any or ts_type is None or output_format is None:
        return None
    return TimestampSpec(
        type=ts_type,
        output_format=str(output_format),
        input_formats=formats if ts_type in STRING_TYPES else (),
        input_timezone=input_zone,
        output_timezone=output_zone,
        scalar_time_unit=unit if ts_type == "SCALAR" else "SECONDS",
    )


def _timestamp_type(merge: SettingPicker, fail: _Failures) -> str | None:
    ts_type, at = merge.pick("timestamp.type", lambda v: str(v).upper())
    ts_type = str(ts_type).upper() if ts_type is not None else None
    if ts_type is None:
        fail(
            (*TS, "type"),
            f"required: the timestamp type, one of {', '.join(TIMESTAMP_TYPES)} "
            f"(property {hudi_props.TIMEBASED_PREFIX}timestamp.type)",
        )
    elif ts_type not in TIMESTAMP_TYPES:
        fail(at or (*TS, "type"), f"{ts_type!r} is not one of: {', '.join(TIMESTAMP_TYPES)}")
    return ts_type


def _zones(merge: SettingPicker, fail: _Failures) -> tuple[str | None, str | None]:
    """The input and the output time zone."""
    zones: dict[str, str | None] = {}
    for key in ("timezone", "input_timezone", "output_timezone"):
        value, where = merge.pick(f"timestamp.{key}", _zone)
        zones[key] = None
        if value is None:
            continue
        zone = resolve_zone(str(value))
        if zone is None:
            fail(
                where or (*TS, key),
                f"unknown time zone {value!r} (Hudi would silently use GMT): give a region "
                "such as Europe/Paris, an offset such as GMT+8:00, or UTC",
            )
        zones[key] = zone
    return (
        zones["timezone"] or zones["input_timezone"],
        zones["timezone"] or zones["output_timezone"],
    )


def _input_formats(
    merge: SettingPicker, ts_type: str | None, zone: str, fail: _Failures
) -> tuple[str, ...]:
    """The Joda patterns a string field is parsed with; `zone` formats Hudi's placeholder."""
    delimiter, delim_at = merge.pick("timestamp.input_formats_delimiter_regex")
    if delimiter is not None:
        try:
            re.compile(str(delimiter))
        except re.error as exc:
            fail(delim_at or (*TS, "input_formats_delimiter_regex"), f"not a regex: {exc}")
            delimiter = None
    raw_formats, formats_at = merge.pick(
        "timestamp.input_formats", lambda v: _formats_of(v, delimiter)
    )
    formats = _formats_of(raw_formats, delimiter) if raw_formats is not None else ()
    if ts_type in STRING_TYPES and not formats:
        fail(
            (*TS, "input_formats"),
            f"required for {ts_type}: the Joda pattern(s) the field's strings are written in, "
            "e.g. yyyy-MM-dd'T'HH:mm:ssZ",
        )
    for i, fmt in enumerate(formats):
        try:
            spark_parse_patterns(fmt)
            if i == 0:  # Hudi prints the null placeholder instant with the first format
                spark_format_pattern(fmt, zone)
        except ValueError as exc:
            fail(formats_at or (*TS, "input_formats"), f"input format {fmt!r}: {exc}")
    return formats


def _output_format(merge: SettingPicker, fail: _Failures) -> Any:
    output_format, out_at = merge.pick("timestamp.output_format")
    if output_format is None:
        fail(
            (*TS, "output_format"),
            "required: the Joda pattern partition paths are written with, e.g. yyyy/MM/dd "
            f"(property {hudi_props.TIMEBASED_PREFIX}output.dateformat)",
        )
    else:
        try:
            spark_format_pattern(str(output_format))
        except ValueError as exc:
            fail(out_at or (*TS, "output_format"), f"output format {output_format!r}: {exc}")
    return output_format


def _scalar_time_unit(merge: SettingPicker, fail: _Failures) -> str:
    unit, unit_at = merge.pick("timestamp.scalar_time_unit", lambda v: str(v).upper())
    unit = str(unit).upper() if unit is not None else "SECONDS"
    if unit not in TIME_UNITS:
        fail(
            unit_at or (*TS, "scalar_time_unit"),
            f"{unit!r} is not one of: {', '.join(TIME_UNITS)}",
        )
    return str(unit)


def _zone(value: str) -> str:
    zone = resolve_zone(value)
    if zone is None:
        raise ValueError(value)
    return zone


def _formats_of(value: Any, delimiter: str | None) -> tuple[str, ...]:
    return split_formats(value, delimiter) if isinstance(value, str) else tuple(value)
