"""Hudi's own key generator property names, read as Hudi reads them.

Every Hudi property name runner understands is declared here, with the structured spec key it
becomes. `from_properties` turns `key_generator.properties` (or `runner keys -p`) into
structured values, each remembering the property it came from so problems point at it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.hudi.keygen_types import HUDI_CLASSES, HUDI_PACKAGE, HUDI_TYPES

RECORD_KEY = "hoodie.datasource.write.recordkey.field"
PARTITION_PATH = "hoodie.datasource.write.partitionpath.field"
KEYGEN_CLASS = "hoodie.datasource.write.keygenerator.class"
KEYGEN_TYPE = "hoodie.datasource.write.keygenerator.type"
HIVE_STYLE = "hoodie.datasource.write.hive_style_partitioning"
# HUDI-7001: how a one-field ComplexKeyGenerator key is written (docs/keygen.md)
COMPLEX_ENCODING = "hoodie.table.complex.keygen.encoding"
COMPLEX_NEW_ENCODING = "hoodie.write.complex.keygen.new.encoding"
TABLE_VERSION = "hoodie.write.table.version"
COMPLEX_ENCODINGS = ("FIELD_PREFIXED", "VALUE_ONLY")
CONSISTENT_TIMESTAMP = "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled"
URL_ENCODE = "hoodie.datasource.write.partitionpath.urlencode"
TIMEBASED_PREFIX = "hoodie.keygen.timebased."
TIMEBASED_OLD_PREFIX = "hoodie.deltastreamer.keygen.timebased."
DATETIME_PARSER = "hoodie.keygen.datetime.parser.class"
DATETIME_PARSER_OLD = "hoodie.deltastreamer.keygen.datetime.parser.class"
DEFAULT_DATETIME_PARSER = "org.apache.hudi.keygen.parser.HoodieDateTimeParser"
# Bucket index properties: `runner keys -p` reads them; a spec sets target.index instead.
NUM_BUCKETS = "hoodie.bucket.index.num.buckets"
HASH_FIELD = "hoodie.bucket.index.hash.field"
INDEX_PROPERTIES = (NUM_BUCKETS, HASH_FIELD)

# hoodie.keygen.timebased.<suffix> -> key under key_generator.timestamp
TIMEBASED_KEYS = {
    "timestamp.type": "type",
    "timestamp.scalar.time.unit": "scalar_time_unit",
    "input.dateformat": "input_formats",
    "input.dateformat.list.delimiter.regex": "input_formats_delimiter_regex",
    "input.timezone": "input_timezone",
    "output.dateformat": "output_format",
    "output.timezone": "output_timezone",
    "timezone": "timezone",
}

USER_CLASS_RE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
)

KNOWN = (
    RECORD_KEY,
    PARTITION_PATH,
    KEYGEN_CLASS,
    KEYGEN_TYPE,
    HIVE_STYLE,
    URL_ENCODE,
    COMPLEX_ENCODING,
    COMPLEX_NEW_ENCODING,
    TABLE_VERSION,
    CONSISTENT_TIMESTAMP,
    DATETIME_PARSER,
    DATETIME_PARSER_OLD,
    *(TIMEBASED_PREFIX + k for k in TIMEBASED_KEYS),
    *(TIMEBASED_OLD_PREFIX + k for k in TIMEBASED_KEYS),
)


@dataclass(frozen=True)
class Sourced:
    """A structured value and the Hudi property it was read from."""

    value: Any
    prop: str


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _bool(value: Any) -> bool | None:
    text = _text(value).strip().lower()
    return {"true": True, "false": False}.get(text)


def from_properties(
    props: Mapping[str, Any],
) -> tuple[dict[str, Sourced], list[tuple[str, str]]]:
    """Structured values ('type', 'class', 'record_key', 'timestamp.output_format', ...) and
    problems as (property, message). Empty values mean unset, as Hudi's defaults are "" --
    except the partition path field, where "" means no partition."""
    reading = _Reading(props, problems=_unknown_properties(props))
    _read_fields(reading)
    _read_kind(reading)
    _read_flags(reading)
    encoding = _complex_encoding(reading.text, reading.problems)
    if encoding is not None:
        reading.out["complex_encoding"] = encoding
    _check_parsers(reading)
    _read_timebased(reading)
    return reading.out, reading.problems


@dataclass
class _Reading:
    """The properties being read, the structured values found so far and the problems."""

    props: Mapping[str, Any]
    out: dict[str, Sourced] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def text(self, prop: str) -> str | None:
        """The property's value as text; None when unset or empty."""
        if prop not in self.props or self.props[prop] is None:
            return None
        value = _text(self.props[prop]).strip()
        return value or None


def _unknown_properties(props: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems = []
    for prop in props:
        if prop in KNOWN:
            continue
        hint = difflib.get_close_matches(prop, KNOWN, n=1, cutoff=0.8)
        if prop in INDEX_PROPERTIES:
            message = "is a bucket index property: set target.index instead"
        elif hint:
            message = f"unknown key generator property (did you mean '{hint[0]}'?)"
        else:
            message = (
                "not a key generator property runner reads; remove it (the docs list the "
                "supported hoodie.* properties)"
            )
        problems.append((prop, message))
    return problems


def _read_fields(reading: _Reading) -> None:
    """The record key and partition path fields."""
    rk = reading.text(RECORD_KEY)
    if RECORD_KEY in reading.props and rk is None:
        reading.problems.append(
            (
                RECORD_KEY,
                "is empty: runner needs a record key "
                "(Hudi's auto-generated keys are not supported)",
            )
        )
    if rk is not None:
        reading.out["record_key"] = Sourced(rk, RECORD_KEY)
    if PARTITION_PATH in reading.props:
        reading.out["partition_fields"] = Sourced(
            reading.text(PARTITION_PATH) or "", PARTITION_PATH
        )


def _read_kind(reading: _Reading) -> None:
    """The generator: a Hudi class or type, or the user's own class; class and type agree."""
    kind: Sourced | None = None
    cls = reading.text(KEYGEN_CLASS)
    if cls is not None:
        if cls in HUDI_CLASSES:
            kind = Sourced(("type", HUDI_CLASSES[cls]), KEYGEN_CLASS)
        elif USER_CLASS_RE.match(cls):
            kind = Sourced(("class", cls), KEYGEN_CLASS)
        else:
            reading.problems.append(
                (
                    KEYGEN_CLASS,
                    f"unknown key generator class {cls!r}: runner implements Hudi's "
                    f"{', '.join(sorted({c.removeprefix(HUDI_PACKAGE) for c in HUDI_CLASSES}))}; "
                    "name your own as package.module:ClassName",
                )
            )
    typ = reading.text(KEYGEN_TYPE)
    if typ is not None:
        mapped = HUDI_TYPES.get(typ.upper())
        if mapped is None:
            reading.problems.append(
                (KEYGEN_TYPE, f"{typ!r} is not one of: {', '.join(HUDI_TYPES)}")
            )
        elif kind is not None and kind.value != ("type", mapped):
            reading.problems.append(
                (KEYGEN_TYPE, f"{typ} contradicts {KEYGEN_CLASS}={cls}; give one of them")
            )
        elif kind is None:
            kind = Sourced(("type", mapped), KEYGEN_TYPE)
    if kind is not None:
        reading.out["kind"] = kind


def _read_flags(reading: _Reading) -> None:
    """Hive-style and URL-encoded partition paths; how timestamp fields become text."""
    for prop, key in (
        (HIVE_STYLE, "hive_style_partitioning"),
        (URL_ENCODE, "url_encode"),
        (CONSISTENT_TIMESTAMP, "consistent_logical_timestamp"),
    ):
        value = reading.text(prop)
        if value is None:
            continue
        flag = _bool(value)
        if flag is None:
            reading.problems.append((prop, f"expected true or false, got {value!r}"))
        else:
            reading.out[key] = Sourced(flag, prop)


def _check_parsers(reading: _Reading) -> None:
    for prop in (DATETIME_PARSER, DATETIME_PARSER_OLD):
        value = reading.text(prop)
        if value is not None and value != DEFAULT_DATETIME_PARSER:
            reading.problems.append(
                (prop, f"only {DEFAULT_DATETIME_PARSER} (Joda patterns) is supported")
            )


def _read_timebased(reading: _Reading) -> None:
    """hoodie.keygen.timebased.*, else its old hoodie.deltastreamer.keygen.timebased.* name;
    both given must agree."""
    for suffix, key in TIMEBASED_KEYS.items():
        new, old = TIMEBASED_PREFIX + suffix, TIMEBASED_OLD_PREFIX + suffix
        new_value, old_value = reading.text(new), reading.text(old)
        if new_value is not None and old_value is not None and new_value != old_value:
            reading.problems.append(
                (old, f"{old_value!r} contradicts {new}={new_value!r}; give one")
            )
        elif new_value is not None:
            reading.out[f"timestamp.{key}"] = Sourced(new_value, new)
        elif old_value is not None:
            reading.out[f"timestamp.{key}"] = Sourced(old_value, old)


def _complex_encoding(
    text: Callable[[str], str | None], problems: list[tuple[str, str]]
) -> Sourced | None:
    """Hudi 1.1's rule (KeyGenUtils.encodeSingleKeyFieldNameForComplexKeyGen): the table's
    own encoding wins; else a table of version 9 or more prefixes the field name; else the
    new-encoding flag asks for the bare value. None when no property says anything."""
    stated = text(COMPLEX_ENCODING)
    if stated is not None:
        if stated.upper() not in COMPLEX_ENCODINGS:
            problems.append(
                (COMPLEX_ENCODING, f"{stated!r} is not one of: {', '.join(COMPLEX_ENCODINGS)}")
            )
            return None
        return Sourced(stated.upper(), COMPLEX_ENCODING)
    version = text(TABLE_VERSION)
    if version is not None and not version.isdigit():
        problems.append((TABLE_VERSION, f"expected a table version number, got {version!r}"))
        return None
    flag_text = text(COMPLEX_NEW_ENCODING)
    flag = _bool(flag_text) if flag_text is not None else None
    if flag_text is not None and flag is None:
        problems.append((COMPLEX_NEW_ENCODING, f"expected true or false, got {flag_text!r}"))
        return None
    if version is not None and int(version) >= 9:
        return Sourced("FIELD_PREFIXED", TABLE_VERSION)
    if flag is not None:
        return Sourced("VALUE_ONLY" if flag else "FIELD_PREFIXED", COMPLEX_NEW_ENCODING)
    return None
