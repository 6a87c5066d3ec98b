"""How an input's schema may change a table's (target.schema_evolution): the type rules.

`add` adds new columns and new fields inside structs (a list's element struct, a map's
value struct included); `widen` also widens types losslessly, as Delta's type widening
table feature allows (PROTOCOL.md, "Type Widening"); `full` widens the same types (the run
rewrites the table's files in them: runner/actions/schema_rewrite.py); `none` accepts no
change. Narrowing, lossy changes and missing fields are refused in every mode: `TypeMerge`
collects one line per problem, naming the column, both types and the fix. Under
target.on_schema_mismatch fail or quarantine, a top-level scalar column of another type is
not refused: its values are cast to the table's type one by one (runner/pipeline/value_fit.py).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
from deltalake import Schema as DeltaSchema

Mode = Literal["add", "widen", "full", "none"]
WIDENING_MODES = ("widen", "full")  # the modes that widen a column's type
ChangeKind = Literal["add_column", "add_field", "widen"]

# A step of a path into a column: a struct field's name, or "element", "key", "value".
Step = tuple[Literal["field", "element", "key", "value"], str]

_INT_RANK = {pa.int8(): 1, pa.int16(): 2, pa.int32(): 3, pa.int64(): 4}
_SQL = {"byte": "TINYINT", "short": "SMALLINT", "integer": "INT", "long": "BIGINT"}


@functools.lru_cache(maxsize=256)
def delta_type(kind: pa.DataType) -> str:
    """The Delta name of an Arrow type ("long", "decimal(10,2)"), or its JSON when nested."""
    delta = json.loads(DeltaSchema.from_arrow(pa.schema([pa.field("c", kind)])).to_json())
    value = delta["fields"][0]["type"]
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def widens(stored: pa.DataType, incoming: pa.DataType) -> bool:
    """`incoming` holds every value of `stored`, and Delta's type widening allows the change."""
    if stored == incoming:
        return False
    if stored in _INT_RANK and incoming in _INT_RANK:
        return _INT_RANK[stored] < _INT_RANK[incoming]
    if incoming == pa.float64():
        return stored == pa.float32() or _INT_RANK.get(stored, 9) <= 3
    if stored == pa.date32():
        return pa.types.is_timestamp(incoming) and incoming.tz is None
    if not pa.types.is_decimal(incoming):
        return False
    if pa.types.is_decimal(stored):
        more_digits, more_scale = (
            incoming.precision - stored.precision,
            incoming.scale - stored.scale,
        )
    elif stored in _INT_RANK:
        # an integer needs 10 digits before the point (20 for a long), as Delta counts them
        more_digits = incoming.precision - (20 if stored == pa.int64() else 10)
        more_scale = incoming.scale
    else:
        return False
    return bool(more_digits >= more_scale >= 0)


@dataclass(frozen=True)
class SchemaChange:
    """One change a run makes to the table's schema."""

    kind: ChangeKind
    steps: tuple[Step, ...]  # from the top-level column down
    to_type: str  # Delta type after the change (of the new column or field)
    from_type: str | None = None  # a widening's stored type

    @property
    def path(self) -> str:
        return ".".join(name for _, name in self.steps)

    @property
    def holder(self) -> tuple[str, ...]:
        """The struct fields down to the nearest one above the change: where Delta records
        a widening (`delta.typeChanges`)."""
        return tuple(name for kind, name in self.steps[: self._last_field + 1] if kind == "field")

    @property
    def field_path(self) -> str | None:
        """The path below the holder (a list's element, a map's key or value), or None."""
        below = [name for _, name in self.steps[self._last_field + 1 :]]
        return ".".join(below) or None

    @property
    def _last_field(self) -> int:
        """Where the last struct field of the path is, in `steps`."""
        return max(i for i, (kind, _) in enumerate(self.steps) if kind == "field")

    def describe(self) -> str:
        """One line for the run's summary: `note`, `address.zip`, `amount: integer -> long`."""
        if self.kind == "widen":
            return f"{self.path}: {self.from_type} -> {self.to_type}"
        return self.path

    def to_dict(self) -> dict[str, str]:
        """For the commit's metadata."""
        out = {"change": self.kind, "column": self.path, "type": self.to_type}
        if self.from_type is not None:
            out["from_type"] = self.from_type
        return out


@dataclass(frozen=True)
class ValueCast:
    """A top-level column whose input values are cast to the table's type one by one."""

    column: str
    to_type: str  # the table's Delta type, which Spark SQL reads too ("long", "decimal(9,2)")
    from_type: str  # the input's

    def describe(self) -> str:
        return f"{self.column}: {self.from_type} values cast to {self.to_type}"


@dataclass
class TypeMerge:
    """Merges the input's columns into the table's under `mode`, collecting the changes it
    makes and the problems that refuse the input; with `cast_values`, the scalar columns it
    would refuse for their type are cast value by value instead."""

    mode: Mode
    cast_values: bool = False
    changes: list[SchemaChange] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    casts: list[ValueCast] = field(default_factory=list)

    def column(self, stored: pa.Field, incoming: pa.Field) -> pa.Field:
        """The table's column after this input: its type, widened or with new fields."""
        by_value = self.cast_values and castable(incoming.type, stored.type)
        if by_value and not self._accepts(stored.type, incoming.type):
            cast = ValueCast(stored.name, delta_type(stored.type), delta_type(incoming.type))
            self.casts.append(cast)
            return stored
        return stored.with_type(self._type(stored.type, incoming.type, (("field", stored.name),)))

    def _accepts(self, stored: pa.DataType, incoming: pa.DataType) -> bool:
        """The column's type is one the mode takes as it is (equal, or widened either way
        under widen); a nested type is merged field by field, never cast whole."""
        if _nested(stored) or _nested(incoming) or delta_type(stored) == delta_type(incoming):
            return True
        widening = self.mode in WIDENING_MODES
        return widening and (widens(stored, incoming) or widens(incoming, stored))

    def new_column(self, incoming: pa.Field) -> None:
        if self.mode == "none":
            self.problems.append(
                f"the input has column {incoming.name} ({delta_type(incoming.type)}) that the "
                "table lacks, and target.schema_evolution is none: drop it in the transform, "
                "or set target.schema_evolution: add"
            )
        else:
            step: Step = ("field", incoming.name)
            self.changes.append(SchemaChange("add_column", (step,), delta_type(incoming.type)))

    def _type(
        self, stored: pa.DataType, incoming: pa.DataType, at: tuple[Step, ...]
    ) -> pa.DataType:
        if pa.types.is_struct(stored) and pa.types.is_struct(incoming):
            return self._struct(stored, incoming, at)
        if _is_list(stored) and _is_list(incoming):
            element = self._type(
                stored.value_type, incoming.value_type, (*at, ("element", "element"))
            )
            return _list_like(stored, stored.value_field.with_type(element))
        if pa.types.is_map(stored) and pa.types.is_map(incoming):
            key = self._type(stored.key_type, incoming.key_type, (*at, ("key", "key")))
            value = self._type(stored.item_type, incoming.item_type, (*at, ("value", "value")))
            return pa.map_(stored.key_field.with_type(key), stored.item_field.with_type(value))
        if delta_type(stored) == delta_type(incoming):
            return stored
        if widens(stored, incoming) and self.mode in WIDENING_MODES:
            self.changes.append(
                SchemaChange("widen", at, delta_type(incoming), from_type=delta_type(stored))
            )
            return incoming
        if widens(incoming, stored) and self.mode in WIDENING_MODES:
            return stored  # the input's values are cast up to the table's type
        self.problems.append(_refusal(stored, incoming, at, self.mode))
        return stored

    def _struct(
        self, stored: pa.StructType, incoming: pa.StructType, at: tuple[Step, ...]
    ) -> pa.DataType:
        given = {f.name: f for f in incoming}
        fields = []
        for f in stored:
            where: tuple[Step, ...] = (*at, ("field", f.name))
            if f.name in given:
                fields.append(f.with_type(self._type(f.type, given[f.name].type, where)))
                continue
            fields.append(f)
            self.problems.append(
                f"the input lacks field {_path(where)} ({delta_type(f.type)}) that the table "
                "has; dropping a field is not supported: give it in the transform (a null of "
                "its type inside named_struct(...))"
            )
        for f in incoming:
            if any(s.name == f.name for s in stored):
                continue
            where = (*at, ("field", f.name))
            if self.mode == "none":
                self.problems.append(
                    f"the input has field {_path(where)} ({delta_type(f.type)}) that the table "
                    "lacks, and target.schema_evolution is none: leave it out in the "
                    "transform, or set target.schema_evolution: add"
                )
                continue
            self.changes.append(SchemaChange("add_field", where, delta_type(f.type)))
            fields.append(f.with_nullable(True))
        return pa.struct(fields)


def _kind(kind: pa.DataType) -> str:
    """A scalar type's family, as Spark's casts between them go."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "text"
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "number"
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        return "time"
    return "other"  # binary, nested, ...: cast only to itself


# What a value of one family may be cast to, value by value (target.on_schema_mismatch):
# the casts Spark's try_cast makes whose result can be checked against the input (a
# number to a time is seconds since the epoch in Spark: a guess, not a fit).
_CASTS = {
    "text": {"text", "number", "boolean", "time"},
    "number": {"text", "number", "boolean"},
    "boolean": {"text", "number", "boolean"},
    "time": {"text", "time"},
}


def castable(incoming: pa.DataType, stored: pa.DataType) -> bool:
    """A value of type `incoming` may be cast to `stored` one by one, and checked."""
    return _kind(stored) in _CASTS.get(_kind(incoming), set())


def keeps_key_text(from_type: str, to_type: str) -> bool:
    """A widening from Delta type `from_type` to `to_type` keeps every value's text in a
    record key, partition path and bucket hash (runner/fields.py): an integer to a wider
    integer, a decimal to more digits before the point."""
    integers = ("byte", "short", "integer", "long")
    if from_type in integers and to_type in integers:
        return True
    decimals = [re.fullmatch(r"decimal\((\d+),(\d+)\)", t) for t in (from_type, to_type)]
    if decimals[0] and decimals[1]:
        return decimals[0].group(2) == decimals[1].group(2)
    return False


def _nested(kind: pa.DataType) -> bool:
    return bool(pa.types.is_struct(kind) or _is_list(kind) or pa.types.is_map(kind))


def _is_list(kind: pa.DataType) -> bool:
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind))


def _list_like(stored: pa.DataType, element: pa.Field) -> pa.DataType:
    return pa.large_list(element) if pa.types.is_large_list(stored) else pa.list_(element)


def _path(steps: tuple[Step, ...]) -> str:
    return ".".join(name for _, name in steps)


def _refusal(stored: pa.DataType, incoming: pa.DataType, at: tuple[Step, ...], mode: Mode) -> str:
    """The line that refuses one type change: the column, both types, the fix."""
    column, was, now = _path(at), delta_type(stored), delta_type(incoming)
    sql = "the table's type" if was.startswith("{") else _SQL.get(was, was.upper())
    cast = f"CAST({column} AS {sql}) AS {column}"
    if widens(stored, incoming):
        return (
            f"column {column}: the table stores {was}, the input has the wider {now}; "
            f"target.schema_evolution is {mode}: set it to widen to widen the column (Delta "
            f"type widening), cast it back in the transform ({cast}), or set "
            "target.on_schema_mismatch (fail or quarantine) to cast its values one by one"
        )
    if widens(incoming, stored):
        return (
            f"column {column}: the table stores {was}, the input has the narrower {now}; "
            f"cast it in the transform ({cast}), or set target.schema_evolution: widen"
        )
    return (
        f"column {column}: the table stores {was}, the input has {now}, which is not a "
        "lossless widening of it (a narrowing or another type); Delta cannot change a "
        f"column to it in place: cast it in the transform ({cast}), set "
        "target.on_schema_mismatch (fail or quarantine) to cast its values one by one, or "
        "write to a new table"
    )


TYPE_CHANGES = "delta.typeChanges"  # a field's widenings, in its Delta metadata


def evolved_schema(
    stored: dict[str, Any], merged: dict[str, Any], changes: list[SchemaChange]
) -> dict[str, Any]:
    """The table's new Delta schema (JSON): `merged` (the new schema, from Arrow) with the
    stored fields' metadata kept and each widening recorded in its nearest struct field's
    `delta.typeChanges`, as the protocol's type widening asks."""
    _keep_metadata(stored, merged)
    for change in changes:
        if change.kind != "widen":
            continue
        holder = _struct_field(merged, change.holder)
        entry = {"fromType": change.from_type, "toType": change.to_type}
        if change.field_path:
            entry["fieldPath"] = change.field_path
        metadata = holder.setdefault("metadata", {})
        metadata[TYPE_CHANGES] = [*metadata.get(TYPE_CHANGES, []), entry]
    return merged


def _struct_of(kind: Any) -> dict[str, Any] | None:
    """The struct a Delta type holds at its top or under lists and maps (their element or
    value), or None."""
    while isinstance(kind, dict):
        if kind.get("type") == "struct":
            return kind
        kind = kind.get("elementType", kind.get("valueType"))
    return None


def _keep_metadata(stored: dict[str, Any], merged: dict[str, Any]) -> None:
    old = {f["name"]: f for f in stored["fields"]}
    for f in merged["fields"]:
        before = old.get(f["name"])
        if before is None:
            continue
        f["metadata"] = dict(before.get("metadata") or {})
        inner_old, inner_new = _struct_of(before["type"]), _struct_of(f["type"])
        if inner_old is not None and inner_new is not None:
            _keep_metadata(inner_old, inner_new)


def _struct_field(schema: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The struct field at `names`, through structs, list elements and map values."""
    struct: dict[str, Any] | None = schema
    found: dict[str, Any] = {}
    for name in names:
        assert struct is not None, f"no struct above {name}"
        found = next(f for f in struct["fields"] if f["name"] == name)
        struct = _struct_of(found["type"])
    return found
