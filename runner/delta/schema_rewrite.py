"""What a schema rewrite changes (schema_evolution full): the spec's pending renames and
drops, a run's widenings, as a table's top-level columns. Decided from the Delta log and the
spec, without Spark: `runner validate --against` applies them too; the rewrite itself is
runner/actions/schema_rewrite.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa

from runner.delta.schema import SchemaPlan, plan_schema, refuse_key_widenings
from runner.delta.schema_evolution import delta_type
from runner.delta.snapshot import TableSnapshot
from runner.errors import UserError
from runner.spec.model import Target
from runner.storage.meta_columns import META_COLUMNS


@dataclass(frozen=True)
class SchemaRewrite:
    """What a rewrite changes in the table's top-level columns."""

    renames: Mapping[str, str] = field(default_factory=dict)  # old name -> new
    drops: tuple[str, ...] = ()
    # a column (by its name in the table before the rewrite) -> its wider type
    widened: Mapping[str, pa.DataType] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.renames or self.drops or self.widened)

    def describe(self) -> list[str]:
        return [
            *(f"{old} renamed {new}" for old, new in self.renames.items()),
            *(f"{name} dropped" for name in self.drops),
            *(
                f"{self.renames.get(name, name)} widened to {delta_type(kind)}"
                for name, kind in self.widened.items()
            ),
        ]

    def with_widenings(self, plan: SchemaPlan, stored: pa.Schema) -> SchemaRewrite:
        """This rewrite and the widenings of `plan`, a batch's schema plan made against
        the table as this rewrite leaves it (`stored`: the table's schema before it)."""
        old_name = {new: old for old, new in self.renames.items()}
        after = self.apply(stored)
        widened = {
            old_name.get(c.steps[0][1], c.steps[0][1]): _widened_only(
                after.field(c.steps[0][1]).type, plan.file_schema.field(c.steps[0][1]).type
            )
            for c in plan.changes
            if c.kind == "widen"
        }
        return replace(self, widened={**self.widened, **widened})

    def apply(self, schema: pa.Schema) -> pa.Schema:
        """`schema` (the table's files') after the rewrite."""
        fields = [
            pa.field(self.renames.get(f.name, f.name), self.widened.get(f.name, f.type))
            for f in schema
            if f.name not in self.drops
        ]
        return pa.schema(fields)


def pending_renames_and_drops(snapshot: TableSnapshot, target: Target) -> SchemaRewrite:
    """The renames and drops of the spec the table has not had yet. A rename is done once
    the table has its new name; a drop once the table lacks the column."""
    names = set(snapshot.arrow_schema().names)
    renames = {}
    for old, new in target.rename.items():
        taken = [n for n in names if n.lower() == new.lower() and n != old]
        if old in names and taken:
            raise UserError(
                f"target.rename {old} -> {new}: the table at {target.path} has both {old} and "
                f"{taken[0]} (names match regardless of case); drop one of them first "
                "(target.drop), or remove the entry"
            )
        if old in names:
            renames[old] = new
        elif not any(n.lower() == new.lower() for n in names):
            raise UserError(
                f"target.rename {old} -> {new}: the table at {target.path} has neither column "
                f"(its columns: {', '.join(n for n in sorted(names) if n not in META_COLUMNS)})"
            )
    rewrite = SchemaRewrite(renames, tuple(c for c in target.drop if c in names))
    _refuse_own_columns(rewrite, target)
    return rewrite


def _refuse_own_columns(rewrite: SchemaRewrite, target: Target) -> None:
    """The runner's meta columns, and an SCD type 2 table's history columns, stay."""
    own = set(META_COLUMNS)
    if target.keeps_history:
        scd = target.scd
        own |= {scd.start_column, scd.end_column, scd.current_column}
    touched = sorted(own & {*rewrite.renames, *rewrite.drops})
    if touched:
        raise UserError(
            f"target.rename and target.drop cannot change {', '.join(touched)}: the runner "
            "keeps these columns itself"
        )


def _widened_only(stored: pa.DataType, wider: pa.DataType) -> pa.DataType:
    """`stored` with the types `wider` gives its fields, and no field of `wider` it lacks."""
    if pa.types.is_struct(stored):
        given = {f.name: f for f in wider}
        return pa.struct([f.with_type(_widened_only(f.type, given[f.name].type)) for f in stored])
    if pa.types.is_list(stored) or pa.types.is_large_list(stored):
        element = _widened_only(stored.value_type, wider.value_type)
        return pa.list_(stored.value_field.with_type(element))
    if pa.types.is_map(stored):
        key = _widened_only(stored.key_type, wider.key_type)
        value = _widened_only(stored.item_type, wider.item_type)
        return pa.map_(stored.key_field.with_type(key), stored.item_field.with_type(value))
    return wider


def _refuse_stale_input(names: list[str], target: Target) -> None:
    """Under `full`, the batch must not bring back a column target.drop drops or a name
    target.rename renames away: each run would drop (or rename) it again, and add it anew
    with only that batch's values."""
    if target.schema_evolution != "full":
        return
    stale = [n for n in names if n in target.drop or n in target.rename]
    if stale:
        raise UserError(
            f"the input has column(s) {', '.join(stale)}, which target.drop drops or "
            "target.rename renames away: leave them out in the transform (select the new "
            "name), or take them out of target.drop and target.rename; nothing was written"
        )


def plan_for_target(
    incoming: pa.Schema, stored: pa.Schema | None, target: Target, table_path: str
) -> SchemaPlan:
    """The schema plan of a batch's stored columns against the table's (as a pending rewrite
    leaves it), under the target's rules: no column full drops or renames away, values cast
    where target.on_schema_mismatch says, no widening that changes a key column's text.
    The run's plan stage and `runner validate --against` both decide here."""
    _refuse_stale_input(incoming.names, target)
    cast_values = target.on_schema_mismatch != "refuse"
    plan = plan_schema(incoming, stored, table_path, target.schema_evolution, cast_values)
    refuse_key_widenings(plan, target)
    return plan
