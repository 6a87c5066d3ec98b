"""The data file schema: meta columns first, then the table's columns, then new ones.

What the input may change follows target.schema_evolution (runner/delta/schema_evolution.py):
new columns and nested fields, widened types; a missing column or a change the mode does not
allow is refused, with the fix spelled out.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from runner.delta.schema_evolution import (
    Mode,
    SchemaChange,
    TypeMerge,
    ValueCast,
    delta_type,
    keeps_key_text,
)
from runner.errors import SchemaChangeError
from runner.spec.model import Target
from runner.storage.meta_columns import META_COLUMNS, META_FIELDS


@dataclass(frozen=True)
class SchemaPlan:
    file_schema: pa.Schema  # what every data file of this commit holds: the table's new schema
    changes: tuple[SchemaChange, ...]  # what this commit changes in the table's schema
    casts: tuple[ValueCast, ...] = ()  # columns whose values are cast to the table's type

    @property
    def data_columns(self) -> list[str]:
        return [n for n in self.file_schema.names if n not in META_COLUMNS]

    @property
    def widens(self) -> bool:
        """A column's type changes: the table needs Delta's type widening feature."""
        return any(c.kind == "widen" for c in self.changes)


def _nullable(field: pa.Field) -> pa.Field:
    return field.with_nullable(True)


def _renamed(name: str, incoming: dict[str, pa.Field]) -> str:
    """A pointer to the input column whose name differs from the table's only in case (a
    source that changed `Amount` to `amount`), or nothing."""
    other = next((n for n in incoming if n.lower() == name.lower()), None)
    if other is None:
        return ""
    return f" (did you mean '{other}'? names differ only in case: select {other} AS {name})"


def plan_schema(
    incoming: pa.Schema,
    table: pa.Schema | None,
    table_path: str,
    mode: Mode = "add",
    cast_values: bool = False,
) -> SchemaPlan:
    """Decide the file schema of this write from the input's data columns and the table's,
    under target.schema_evolution `mode` (runner/delta/schema_evolution.py); with
    `cast_values` (target.on_schema_mismatch fail or quarantine), a scalar column of another
    type is cast value by value instead of refused."""
    data = [_nullable(f) for f in incoming if f.name not in META_COLUMNS]
    if table is None:
        return SchemaPlan(pa.schema([*META_FIELDS, *data]), ())
    stored = [f for f in table if f.name not in META_COLUMNS]
    by_name = {f.name: f for f in data}
    missing = [f for f in stored if f.name not in by_name]
    if missing:
        cols = ", ".join(
            f"{f.name} ({delta_type(f.type)}){_renamed(f.name, by_name)}" for f in missing
        )
        raise SchemaChangeError(
            f"the input lacks column(s) the table at {table_path} has: {cols}. Select it in "
            "the transform (NULL AS name, cast to its type), or drop or rename it in the "
            "table: target.drop or target.rename under target.schema_evolution: full"
        )
    merge = TypeMerge(mode, cast_values)
    columns = [merge.column(f, by_name[f.name]) for f in stored]
    stored_names = {f.name for f in stored}
    new = [f for f in data if f.name not in stored_names]
    for f in new:
        merge.new_column(f)
    if merge.problems:
        # the first problem on the error's first line, the others one per line below it
        first, *others = merge.problems
        raise SchemaChangeError(
            f"{first} (the table at {table_path}, target.schema_evolution: {mode}; nothing "
            "was written)" + "".join(f"\n  {problem}" for problem in others)
        )
    # the table's own order and types for existing columns, widened where the input is wider
    schema = pa.schema([*META_FIELDS, *map(_nullable, columns), *new])
    return SchemaPlan(schema, tuple(merge.changes), tuple(merge.casts))


def refuse_key_widenings(plan: SchemaPlan, target: Target) -> None:
    """A column the record key, the partition path or the bucket hash reads may widen only
    where its values keep their text there (runner/fields.py): an upsert would otherwise
    key a stored row anew (`5` -> `5.0`), and write it a second time."""
    fields = (*target.record_key, *target.key_generator.partition_fields, *target.index.hash_fields)
    named = {f.split(".")[0] for f in fields}
    for change in plan.changes:
        column = change.steps[0][1]
        if change.kind != "widen" or column not in named or change.from_type is None:
            continue
        if not keeps_key_text(change.from_type, change.to_type):
            raise SchemaChangeError(
                f"column {column}: the record key, partition path or bucket hash reads it, and "
                f"widening it from {change.from_type} to {change.to_type} changes its values' "
                "text there, so stored rows would no longer match their keys; cast it back in "
                f"the transform (CAST({column} AS {change.from_type.upper()}) AS {column}), or "
                "load a new table"
            )
