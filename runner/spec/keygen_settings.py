"""Resolve target.key_generator into a KeyGenSpec: the structured form, Hudi's properties, or both.

Both forms may be given; a setting given both ways must agree. Problems are reported through a
callback with a path relative to the target mapping, so the loader can place them in the file
and `runner keys -p` can name the property. No pyspark here: `runner validate` starts no JVM.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from runner.hudi import properties as hudi_props
from runner.hudi.keygen_types import KEY_GENERATORS
from runner.spec.model import KeyGenSpec, TimestampSpec
from runner.spec.timebased import (
    STRING_TYPES,
    TIME_UNITS,
    TIMESTAMP_TYPES,
    resolve_zone,
    spark_format_pattern,
    spark_parse_patterns,
    split_formats,
)

Path_ = tuple[str | int, ...]
Report = Callable[[Path_, str], None]

KG: Path_ = ("key_generator",)
PROPS: Path_ = (*KG, "properties")
TS: Path_ = (*KG, "timestamp")
USER_CLASS = "CLASS"
CUSTOM_PART_TYPES = ("SIMPLE", "TIMESTAMP")


def field_list(value: str | list[str] | None) -> tuple[str, ...]:
    """Hudi's rule for field lists: split on ',', trim, drop empty entries."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    return tuple(s.strip() for s in items if s.strip())


def infer_keygen_type(record_key: tuple[str, ...], partition_fields: tuple[str, ...]) -> str:
    """Hudi's inference when no type is given (KeyGenUtils.inferKeyGeneratorType)."""
    if not partition_fields:
        return "NON_PARTITIONED"
    if ":" in partition_fields[0]:
        return "CUSTOM"
    if len(partition_fields) == 1 and len(record_key) <= 1:
        return "SIMPLE"
    return "COMPLEX"


def _show(path: Path_) -> str:
    return ".".join(str(p) for p in path)


class _Merger:
    """Picks each setting from the structured form or the properties, checking they agree."""

    def __init__(self, target: Mapping[str, Any], report: Report):
        self.report = report
        keygen = target.get("key_generator") or {}
        self.structured: dict[str, tuple[Any, Path_]] = {}
        if "record_key" in target:
            self.structured["record_key"] = (target["record_key"], ("record_key",))
        for key in (
            "partition_fields",
            "hive_style_partitioning",
            "url_encode",
            "complex_encoding",
        ):
            if key in keygen:
                self.structured[key] = (keygen[key], (*KG, key))
        if "type" in keygen and "class" in keygen:
            report((*KG, "class"), "give either class (your own generator) or type, not both")
        if "class" in keygen:
            self.structured["kind"] = (("class", keygen["class"]), (*KG, "class"))
        elif "type" in keygen:
            self.structured["kind"] = (("type", keygen["type"]), (*KG, "type"))
        for key, value in (keygen.get("timestamp") or {}).items():
            self.structured[f"timestamp.{key}"] = (value, (*TS, key))
        self.has_timestamp = "timestamp" in keygen
        self.props, problems = hudi_props.from_properties(keygen.get("properties") or {})
        for prop, message in problems:
            report((*PROPS, prop), message)

    def has_timestamp_settings(self) -> bool:
        return self.has_timestamp or any(k.startswith("timestamp.") for k in self.props)

    def pick(
        self, key: str, normalize: Callable[[Any], Any] = lambda v: v
    ) -> tuple[Any, Path_ | None]:
        """The value for `key` and where to report about it; (None, None) when unset."""
        mine = self.structured.get(key)
        theirs = self.props.get(key)
        if mine and theirs:
            try:
                same = normalize(mine[0]) == normalize(theirs.value)
            except ValueError:
                same = False
            if not same:
                self.report(
                    (*PROPS, theirs.prop),
                    f"{theirs.value!r} contradicts {_show(mine[1])}: {mine[0]!r}; "
                    "give each setting once, in either form",
                )
        if mine:
            return mine[0], mine[1]
        if theirs:
            return theirs.value, (*PROPS, theirs.prop)
        return None, None


def _zone(value: str) -> str:
    zone = resolve_zone(value)
    if zone is None:
        raise ValueError(value)
    return zone


def _formats_of(value: Any, delimiter: str | None) -> tuple[str, ...]:
    return split_formats(value, delimiter) if isinstance(value, str) else tuple(value)


def resolve_key_generator(target: Mapping[str, Any], report: Report) -> KeyGenSpec | None:
    """The KeyGenSpec for a raw target mapping, or None after reporting every problem."""
    problems: list[str] = []

    def problem(path: Path_, message: str) -> None:
        problems.append(message)
        report(path, message)

    merge = _Merger(target, problem)
    rk_value, rk_at = merge.pick("record_key", field_list)
    record_key = field_list(rk_value)
    if not record_key:
        problem(
            rk_at or ("record_key",),
            "required: name the record key field(s) in target.record_key (or in the property "
            f"{hudi_props.RECORD_KEY})",
        )
    pf_value, pf_at = merge.pick("partition_fields", field_list)
    parts = field_list(pf_value)
    listed = isinstance(pf_value, list)
    hive, _ = merge.pick("hive_style_partitioning")
    url, _ = merge.pick("url_encode")
    encoding, encoding_at = merge.pick("complex_encoding", lambda v: str(v).upper())

    kind, _ = merge.pick("kind", lambda k: (k[0], str(k[1]).upper()))
    class_path = kind[1] if kind and kind[0] == "class" else None
    if kind and kind[0] == "type":
        kg_type = str(kind[1]).upper()
    elif class_path:
        kg_type = USER_CLASS
    else:
        kg_type = infer_keygen_type(record_key, parts)

    def part_at(i: int) -> Path_:
        at = pf_at or (*KG, "partition_fields")
        return (*at, i) if listed else at

    described = KEY_GENERATORS.get(kg_type)
    names: tuple[str, ...] = parts
    part_types: tuple[str, ...] = ()
    if described and described.partition_fields == "typed":
        custom_names: list[str] = []
        types: list[str] = []
        for i, part in enumerate(parts):
            pieces = part.split(":")
            if len(pieces) != 2 or not pieces[0].strip():
                problem(
                    part_at(i),
                    f"{part!r} is not field:TYPE; CUSTOM partition fields are written as "
                    "field1:SIMPLE,field2:TIMESTAMP",
                )
                continue
            name, part_type = pieces[0].strip(), pieces[1].strip().upper()
            if part_type not in CUSTOM_PART_TYPES:
                problem(
                    part_at(i),
                    f"{part!r}: part type {pieces[1]!r} is not SIMPLE or TIMESTAMP",
                )
            custom_names.append(name)
            types.append(part_type)
        names, part_types = tuple(custom_names), tuple(types)
    elif described:
        for i, part in enumerate(parts):
            if ":" in part:
                problem(
                    part_at(i),
                    f"{part!r}: field:TYPE parts are the CUSTOM key generator's syntax; "
                    "set type: CUSTOM, or name the field alone",
                )

    rk_path = rk_at or ("record_key",)
    pf_path = pf_at or (*KG, "partition_fields")
    if described and described.one_key_field and len(record_key) > 1:
        problem(
            rk_path,
            f"key generator {kg_type} takes one record key field, got {len(record_key)}; "
            "use type: COMPLEX for several",
        )
    if described and described.partition_fields == "one" and len(parts) != 1:
        problem(
            pf_path,
            f"key generator {kg_type} takes exactly one partition field, got "
            f"{len(parts)}; use COMPLEX or CUSTOM for several, NON_PARTITIONED for none",
        )
    if described and described.partition_fields == "several" and not parts:
        problem(
            pf_path,
            f"key generator {kg_type} needs at least one partition field (Hudi refuses it "
            "without); use NON_PARTITIONED or GLOBAL_DELETE for a table without partitions",
        )
    prefixes = bool(described and described.field_prefixed_keys)
    if encoding is not None and not prefixes:
        if encoding_at and encoding_at[:2] != PROPS:
            problem(encoding_at, f"applies to COMPLEX keys, not {kg_type}: remove it")
        encoding = None  # Hudi's write properties apply to every table; only COMPLEX reads it
    if described and described.partition_fields == "none" and parts:
        if pf_at and pf_at[:2] == PROPS:
            names = ()  # Hudi ignores the partition path property for these generators
        else:
            problem(
                pf_path,
                f"{kg_type} writes no partition path; "
                "remove partition_fields or use SIMPLE, COMPLEX or CUSTOM",
            )

    uses_timestamp = bool(described and described.timestamp) or "TIMESTAMP" in part_types
    has_timestamp = merge.has_timestamp_settings()
    timestamp = None
    if uses_timestamp or (kg_type == USER_CLASS and has_timestamp):
        timestamp = _timestamp(merge, problem)
    elif has_timestamp:
        problem(
            TS if merge.has_timestamp else PROPS,
            "timestamp settings are unused: no partition field is field:TIMESTAMP"
            if described and described.partition_fields == "typed"
            else "timestamp settings apply to TIMESTAMP, to CUSTOM with a field:TIMESTAMP "
            f"part, or to a user class; this key generator is {kg_type}: remove them or "
            "change the type",
        )

    if problems:
        return None
    return KeyGenSpec(
        type=kg_type,
        record_key=record_key,
        partition_fields=names,
        hive_style_partitioning=bool(hive),
        url_encode=bool(url),
        complex_encoding="VALUE_ONLY"
        if str(encoding).upper() == "VALUE_ONLY"
        else "FIELD_PREFIXED",
        partition_types=part_types,
        timestamp=timestamp,
        class_path=class_path,
    )


def _timestamp(merge: _Merger, problem: Report) -> TimestampSpec | None:
    bad = False

    def fail(path: Path_, message: str) -> None:
        nonlocal bad
        bad = True
        problem(path, message)

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

    zone_at: dict[str, Path_ | None] = {}
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
        zones[key], zone_at[key] = zone, where
    # The legacy single zone, when present, is used for both input and output (as Hudi does).
    input_zone = zones["timezone"] or zones["input_timezone"]
    output_zone = zones["timezone"] or zones["output_timezone"]

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
                spark_format_pattern(fmt, input_zone or output_zone or "UTC")
        except ValueError as exc:
            fail(formats_at or (*TS, "input_formats"), f"input format {fmt!r}: {exc}")

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

    unit, unit_at = merge.pick("timestamp.scalar_time_unit", lambda v: str(v).upper())
    unit = str(unit).upper() if unit is not None else "SECONDS"
    if unit not in TIME_UNITS:
        fail(
            unit_at or (*TS, "scalar_time_unit"),
            f"{unit!r} is not one of: {', '.join(TIME_UNITS)}",
        )
    if bad or ts_type is None or output_format is None:
        return None
    return TimestampSpec(
        type=ts_type,
        output_format=str(output_format),
        input_formats=formats if ts_type in STRING_TYPES else (),
        input_timezone=input_zone,
        output_timezone=output_zone,
        scalar_time_unit=unit if ts_type == "SCALAR" else "SECONDS",
    )
