"""The data file schema: meta columns first, then the table's columns, then new ones.

A new nullable column in the input is added to the table; a missing column or a changed type
is refused, with the fix spelled out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
from deltalake import Schema as DeltaSchema

from runner.errors import SchemaChangeError
from runner.storage.meta_columns import META_COLUMNS, META_FIELDS


@dataclass(frozen=True)
class SchemaPlan:
    file_schema: pa.Schema  # what every data file of this commit holds
    new_columns: tuple[pa.Field, ...]  # columns the table gains with this commit

    @property
    def data_columns(self) -> list[str]:
        return [n for n in self.file_schema.names if n not in META_COLUMNS]


def _delta_type(field: pa.Field) -> str:
    """The Delta type of an Arrow field: the level at which two schemas must agree."""
    delta = json.loads(DeltaSchema.from_arrow(pa.schema([field])).to_json())
    return json.dumps(delta["fields"][0]["type"], sort_keys=True)


def _nullable(field: pa.Field) -> pa.Field:
    return field.with_nullable(True)


def _renamed(name: str, incoming: dict[str, pa.Field]) -> str:
    """A pointer to the input column whose name differs from the table's only in case (a
    source that changed `Amount` to `amount`), or nothing."""
    other = next((n for n in incoming if n.lower() == name.lower()), None)
    if other is None:
        return ""
    return f" (did you mean '{other}'? names differ only in case: select {other} AS {name})"


def plan_schema(incoming: pa.Schema, table: pa.Schema | None, table_path: str) -> SchemaPlan:
    """Decide the file schema of this write from the input's data columns and the table's."""
    data = [_nullable(f) for f in incoming if f.name not in META_COLUMNS]
    if table is None:
        return SchemaPlan(pa.schema([*META_FIELDS, *data]), ())
    stored = [f for f in table if f.name not in META_COLUMNS]
    by_name = {f.name: f for f in data}
    missing = [f for f in stored if f.name not in by_name]
    if missing:
        cols = ", ".join(f"{f.name} ({_delta_type(f)}){_renamed(f.name, by_name)}" for f in missing)
        raise SchemaChangeError(
            f"the input lacks column(s) the table at {table_path} has: {cols}. Dropping a "
            "column is not supported; select it in the transform (NULL AS name, cast to its type)"
        )
    changed = [
        f"{f.name}: table {_delta_type(f)}, input {_delta_type(by_name[f.name])}"
        for f in stored
        if _delta_type(f) != _delta_type(by_name[f.name])
    ]
    if changed:
        raise SchemaChangeError(
            "column types differ from the table at "
            f"{table_path}: {'; '.join(changed)}. Cast them in the transform to the table's types"
        )
    stored_names = {f.name for f in stored}
    new = tuple(f for f in data if f.name not in stored_names)
    # Keep the table's own types (and order) for existing columns.
    return SchemaPlan(pa.schema([*META_FIELDS, *map(_nullable, stored), *new]), new)
