"""Resolve target.key_generator into a KeyGenSpec: the structured form, Hudi's properties, or both.

Both forms may be given; a setting given both ways must agree (runner/spec/keygen_picker.py).
Problems are reported through a callback with a path relative to the target mapping, so the
loader can place them in the file and `runner keys -p` can name the property. The timestamp
settings are resolved in runner/spec/keygen_timestamp.py. No pyspark here: `runner validate`
starts no JVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.hudi import properties as hudi_props
from runner.hudi.keygen_types import KEY_GENERATORS, KeyGenType
from runner.spec.keygen_picker import KG, PROPS, TS, Path_, Report, SettingPicker
from runner.spec.keygen_timestamp import resolve_timestamp
from runner.spec.model import ComplexEncoding, KeyGenSpec, TimestampSpec

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


@dataclass(frozen=True)
class _Picked:
    """The settings as given, before the checks of the generator they are for."""

    record_key: tuple[str, ...]
    record_key_at: Path_
    parts: tuple[str, ...]
    parts_given_at: Path_ | None  # None: no partition fields given
    listed: bool  # partition fields given as a YAML list (a problem names the item)
    hive: Any
    url: Any
    logical_timestamps: Any
    encoding: Any
    encoding_at: Path_ | None
    kg_type: str
    class_path: str | None
    kind_at: Path_ | None  # where the type or class was given; None: inferred

    @property
    def parts_at(self) -> Path_:
        return self.parts_given_at or (*KG, "partition_fields")

    def part_at(self, i: int) -> Path_:
        return (*self.parts_at, i) if self.listed else self.parts_at


def resolve_key_generator(target: Mapping[str, Any], report: Report) -> KeyGenSpec | None:
    """The KeyGenSpec for a raw target mapping, or None after reporting every problem."""
    problems: list[str] = []

    def problem(path: Path_, message: str) -> None:
        problems.append(message)
        report(path, message)

    merge = SettingPicker(target, problem)
    picked = _pick(merge, problem)
    described = KEY_GENERATORS.get(picked.kg_type)
    names, part_types = _partition_parts(picked, described, problem)
    _check_field_counts(picked, described, problem)
    encoding = _complex_encoding(picked, described, problem)
    names = _partition_names(picked, described, names, problem)
    timestamp = _timestamp(merge, picked, described, part_types, problem)
    if problems:
        return None
    return KeyGenSpec(
        type=picked.kg_type,
        record_key=picked.record_key,
        partition_fields=names,
        hive_style_partitioning=bool(picked.hive),
        url_encode=bool(picked.url),
        complex_encoding=encoding,
        consistent_logical_timestamp=bool(picked.logical_timestamps),
        partition_types=part_types,
        timestamp=timestamp,
        class_path=picked.class_path,
    )


def _pick(merge: SettingPicker, problem: Report) -> _Picked:
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
    hive, _ = merge.pick("hive_style_partitioning")
    url, _ = merge.pick("url_encode")
    logical_timestamps, _ = merge.pick("consistent_logical_timestamp")
    encoding, encoding_at = merge.pick("complex_encoding", lambda v: str(v).upper())
    kind, kind_at = merge.pick("kind", lambda k: (k[0], str(k[1]).upper()))
    class_path = kind[1] if kind and kind[0] == "class" else None
    if kind and kind[0] == "type":
        kg_type = str(kind[1]).upper()
    elif class_path:
        kg_type = USER_CLASS
    else:
        kg_type = infer_keygen_type(record_key, parts)
    return _Picked(
        record_key=record_key,
        record_key_at=rk_at or ("record_key",),
        parts=parts,
        parts_given_at=pf_at,
        listed=isinstance(pf_value, list),
        hive=hive,
        url=url,
        logical_timestamps=logical_timestamps,
        encoding=encoding,
        encoding_at=encoding_at,
        kg_type=kg_type,
        class_path=class_path,
        kind_at=kind_at,
    )


def _partition_parts(
    picked: _Picked, described: KeyGenType | None, problem: Report
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The partition field names and, for CUSTOM, each one's part type (field:TYPE)."""
    if described and described.partition_fields == "typed":
        custom_names: list[str] = []
        types: list[str] = []
        for i, part in enumerate(picked.parts):
            pieces = part.split(":")
            if len(pieces) != 2 or not pieces[0].strip():
                problem(
                    picked.part_at(i),
                    f"{part!r} is not field:TYPE; CUSTOM partition fields are written as "
                    "field1:SIMPLE,field2:TIMESTAMP",
                )
                continue
            name, part_type = pieces[0].strip(), pieces[1].strip().upper()
            if part_type not in CUSTOM_PART_TYPES:
                problem(
                    picked.part_at(i),
                    f"{part!r}: part type {pieces[1]!r} is not SIMPLE or TIMESTAMP",
                )
            custom_names.append(name)
            types.append(part_type)
        return tuple(custom_names), tuple(types)
    if described:
        for i, part in enumerate(picked.parts):
            if ":" in part:
                problem(
                    picked.part_at(i),
                    f"{part!r}: field:TYPE parts are the CUSTOM key generator's syntax; "
                    "set type: CUSTOM, or name the field alone",
                )
    return picked.parts, ()


def _check_field_counts(picked: _Picked, described: KeyGenType | None, problem: Report) -> None:
    """The number of record key and partition fields the generator takes (COMPLEX: any,
    none giving the empty path)."""
    kg_type, parts = picked.kg_type, picked.parts
    if described and described.one_key_field and len(picked.record_key) > 1:
        problem(
            picked.record_key_at,
            f"key generator {kg_type} takes one record key field, got "
            f"{len(picked.record_key)}; use type: COMPLEX for several",
        )
    if described and described.partition_fields == "one" and len(parts) != 1:
        problem(
            picked.parts_at,
            f"key generator {kg_type} takes exactly one partition field, got "
            f"{len(parts)}; use COMPLEX or CUSTOM for several, NON_PARTITIONED for none",
        )
    # Hudi's ComplexKeyGenerator takes "" (the empty path) but refuses a missing property;
    # the spec's own `type: COMPLEX` without partition_fields means the empty path
    named_in_props = bool(picked.kind_at and picked.kind_at[:2] == PROPS)
    several = bool(described and described.partition_fields == "several")
    if several and named_in_props and picked.parts_given_at is None:
        problem(
            picked.kind_at or PROPS,
            f"{hudi_props.PARTITION_PATH} is not set, and Hudi's {kg_type} key generator "
            "refuses to start without it: name at least one partition field, or set it "
            'to "" for the empty partition path of a table without partitions',
        )


def _complex_encoding(
    picked: _Picked, described: KeyGenType | None, problem: Report
) -> ComplexEncoding:
    """How a one-field COMPLEX key is written; a structured setting for another generator
    is refused."""
    encoding = picked.encoding
    prefixes = bool(described and described.field_prefixed_keys)
    if encoding is not None and not prefixes:
        if picked.encoding_at and picked.encoding_at[:2] != PROPS:
            problem(picked.encoding_at, f"applies to COMPLEX keys, not {picked.kg_type}: remove it")
        encoding = None  # Hudi's write properties apply to every table; only COMPLEX reads it
    return "VALUE_ONLY" if str(encoding).upper() == "VALUE_ONLY" else "FIELD_PREFIXED"


def _partition_names(
    picked: _Picked, described: KeyGenType | None, names: tuple[str, ...], problem: Report
) -> tuple[str, ...]:
    """A generator that writes no partition path refuses structured partition fields, and
    ignores the property (as Hudi does)."""
    if not (described and described.partition_fields == "none" and picked.parts):
        return names
    if picked.parts_given_at and picked.parts_given_at[:2] == PROPS:
        return ()
    problem(
        picked.parts_at,
        f"{picked.kg_type} writes no partition path; "
        "remove partition_fields or use SIMPLE, COMPLEX or CUSTOM",
    )
    return names


def _timestamp(
    merge: SettingPicker,
    picked: _Picked,
    described: KeyGenType | None,
    part_types: tuple[str, ...],
    problem: Report,
) -> TimestampSpec | None:
    """The timestamp settings where the generator uses them; refused where it does not."""
    uses_timestamp = bool(described and described.timestamp) or "TIMESTAMP" in part_types
    has_timestamp = merge.has_timestamp_settings()
    if uses_timestamp or (picked.kg_type == USER_CLASS and has_timestamp):
        return resolve_timestamp(merge, problem)
    if has_timestamp:
        problem(
            TS if merge.has_timestamp else PROPS,
            "timestamp settings are unused: no partition field is field:TIMESTAMP"
            if described and described.partition_fields == "typed"
            else "timestamp settings apply to TIMESTAMP, to CUSTOM with a field:TIMESTAMP "
            f"part, or to a user class; this key generator is {picked.kg_type}: remove them "
            "or change the type",
        )
    return None
